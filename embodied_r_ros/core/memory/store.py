"""The robot's persistent key-frame memory: one SQLite file (WAL) per robot namespace.

`MemoryStore` keeps every described key frame (stamp, pose when odometry runs, action,
observation, raw text, optional JPEG thumbnail) and every question asked (with its
answer and evidence), over hours and across restarts. Design points:

* Writes never run on the caller's thread: `add` / `add_question` queue the record and a
  background writer commits each one in its own transaction (WAL, synchronous=NORMAL), so
  a kill -9 at any moment loses at most the record being written. `flush` waits for the
  queue to drain (a question calls it before selecting).
* A full disk (SQLITE_FULL, or the file's max_page_count) never raises into the caller:
  the record stays queued, `disk_full` is set (diagnostics say so) and the writer retries
  every `retry_period_s`; writing resumes by itself when space returns.
* A file that is not a readable SQLite store is moved aside to
  ``<name>.corrupt-<UTC time>`` (kept, never deleted), a fresh store is started and
  `recovered_from` / `warnings` say so (the nodes turn that into a diagnostics WARN).
* Retention by age (`max_age_s`) and by size (`max_bytes`) runs in the writer thread
  every `retention_period_s`; the first key frame of the current episode is never
  removed.
* ``path=":memory:"`` gives the same store in RAM (nothing survives the process); the
  pipeline uses it when persistence is off, so there is one selection logic.

Reads (`count`, `recent`, `search`, `near_stamp`, `get`, ...) take the same lock as the
writer; each is one indexed query (milliseconds at 100k key frames, see bench/).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from embodied_r_ros.core.errors import MemoryStoreError
from embodied_r_ros.core.memory.schema import SCHEMA_VERSION, migrate
from embodied_r_ros.core.types import FrameDescription

LOG = logging.getLogger("embodied_r_ros.memory")

MEMORY = ":memory:"

__all__ = ["MEMORY", "KeyFrameRecord", "MemoryStore", "StoredPose", "default_store_path",
           "fts_query"]


@dataclass(frozen=True)
class StoredPose:
    """Where the robot was when a key frame was taken (odometry frame)."""

    x: float
    y: float
    z: float = 0.0
    yaw: float = 0.0
    frame_id: str = ""


@dataclass
class KeyFrameRecord:
    """One described key frame as stored."""

    episode_id: str
    keyframe_index: int
    stamp_s: float
    observation: str = ""
    action: str | None = None
    action_source: str = ""
    raw_text: str = ""
    pose: StoredPose | None = None
    thumbnail: bytes | None = None
    wall_s: float = 0.0

    @classmethod
    def from_description(cls, desc: FrameDescription, *, episode_id: str = "",
                         pose: StoredPose | None = None,
                         thumbnail: bytes | None = None) -> KeyFrameRecord:
        return cls(episode_id=episode_id or desc.episode_id, keyframe_index=desc.keyframe_index,
                   stamp_s=desc.stamp_s, observation=desc.observation, action=desc.action,
                   action_source=desc.action_source, raw_text=desc.raw_text, pose=pose,
                   thumbnail=thumbnail)

    def to_description(self) -> FrameDescription:
        return FrameDescription(keyframe_index=self.keyframe_index, observation=self.observation,
                                action=self.action, raw_text=self.raw_text,
                                action_source=self.action_source, stamp_s=self.stamp_s,
                                episode_id=self.episode_id)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (the format `embodied-r memory import/export` reads and writes);
        the thumbnail is left out (only ``has_thumbnail``)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("thumbnail", "pose")}
        out["stamp_s"] = self.stamp_s
        out["pose"] = asdict(self.pose) if self.pose is not None else None
        out["has_thumbnail"] = self.thumbnail is not None
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KeyFrameRecord:
        """Read one import line; raises ValueError naming the missing/bad field."""
        for key in ("episode_id", "keyframe_index", "stamp_s"):
            if key not in obj:
                raise ValueError(f"missing field {key!r}")
        pose = obj.get("pose")
        stored = None
        if pose:
            if "x" not in pose or "y" not in pose:
                raise ValueError("pose needs at least x and y")
            stored = StoredPose(float(pose["x"]), float(pose["y"]), float(pose.get("z", 0.0)),
                                float(pose.get("yaw", 0.0)), str(pose.get("frame_id", "")))
        return cls(episode_id=str(obj["episode_id"]), keyframe_index=int(obj["keyframe_index"]),
                   stamp_s=float(obj["stamp_s"]), observation=str(obj.get("observation", "")),
                   action=obj.get("action") or None,
                   action_source=str(obj.get("action_source", "")),
                   raw_text=str(obj.get("raw_text", "")), pose=stored)


@dataclass
class QuestionRecord:
    episode_id: str
    question: str
    choices: list[str] = field(default_factory=list)
    answer: str = ""
    success: bool = False
    evidence: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


def default_store_path(namespace: str = "/") -> Path:
    """``$ROS_HOME/embodied_r/<namespace>.sqlite`` (``~/.ros`` when ROS_HOME is unset);
    the root namespace is ``root``, nested ones use ``__`` for ``/``."""
    home = Path(os.environ.get("ROS_HOME") or Path.home() / ".ros")
    name = namespace.strip("/").replace("/", "__") or "root"
    return home / "embodied_r" / f"{name}.sqlite"


_TOKEN = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset("""
a about above after again ago all am an and any are as at be been before being below
between both but by can could did do does doing down during each few for from further
get go got had has have having he her here hers him his how i if in into is it its just
me more most my no nor not now of off on once only or other our out over own same she
should so some such than that the their them then there these they this those through
to too under until up very was we were what when where which while who whom why will
with would you your see saw seen did back way last first find found look looked looking
robot view frame frames minute minutes min hour hours second seconds moment start started
beginning earlier recently currently there question choices options answer""".split())


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: its content words OR-ed, quoted (so no
    user text is read as FTS syntax); "" when no content word is left."""
    words: list[str] = []
    for word in _TOKEN.findall(text.lower()):
        if len(word) > 1 and word not in STOPWORDS and word not in words:
            words.append(word)
    return " OR ".join(f'"{w}"' for w in words)


def _is_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or "full" in str(exc).lower()


_KF_COLUMNS = ("episode_id, keyframe_index, stamp_s, x, y, z, yaw, frame_id, action, "
               "action_source, observation, raw_text, thumbnail, wall_s")


def _row_to_record(row: Sequence[Any]) -> KeyFrameRecord:
    (episode_id, index, stamp, x, y, z, yaw, frame_id, action, source, observation, raw,
     thumb, wall) = row
    pose = None if x is None else StoredPose(x, y, z or 0.0, yaw or 0.0, frame_id or "")
    return KeyFrameRecord(episode_id, int(index), float(stamp), observation or "", action,
                          source or "", raw or "", pose, thumb, float(wall))


class MemoryStore:
    """See the module docstring."""

    def __init__(self, path: str | Path = MEMORY, *, max_age_s: float = 0.0,
                 max_bytes: int = 0, retention_period_s: float = 60.0,
                 retry_period_s: float = 5.0, background: bool = True) -> None:
        self.path = str(path)
        self.max_age_s = float(max_age_s)
        self.max_bytes = int(max_bytes)
        self.retention_period_s = float(retention_period_s)
        self.retry_period_s = float(retry_period_s)
        self.recovered_from = ""  # the corrupt file moved aside at open, if any
        self.warnings: list[str] = []
        self.disk_full = False
        self.last_error = ""
        self.written = 0
        self.removed_by_retention = 0
        self._lock = threading.RLock()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._pending: deque[Any] = deque()  # taken from the queue, not yet committed
        self._idle = threading.Condition()
        self._busy = 0
        self._stop = threading.Event()
        self._current_episode = ""
        self._df_cache: dict[str, tuple[int, int]] = {}
        self._df_epoch = 0
        self._rows_cache = (0, -1)
        self.embedder: Any = None  # core/memory/embeddings.TextEmbedder, or None
        self._backfilled = False
        self.conn = self._open()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._writer, name="memory-store-writer",
                                            daemon=True)
            self._thread.start()

    # -- opening ----------------------------------------------------------------------------
    @property
    def in_memory(self) -> bool:
        return self.path == MEMORY

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                               timeout=5.0)
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # effective on a new file only
        if not self.in_memory:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise sqlite3.DatabaseError(f"journal mode is {mode}, WAL expected")
        conn.execute("PRAGMA synchronous=NORMAL")
        # INSERT OR REPLACE deletes the old row: its FTS entry and embedding go with it.
        conn.execute("PRAGMA recursive_triggers=ON")
        migrate(conn, self.path)
        conn.execute("SELECT COUNT(*) FROM keyframes WHERE id = (SELECT MAX(id) FROM keyframes)"
                     ).fetchone()
        return conn

    def _open(self) -> sqlite3.Connection:
        if not self.in_memory:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise MemoryStoreError(
                    f"cannot create the folder of the memory store {self.path}: {exc}; set "
                    "memory.path to a writable file", path=self.path) from exc
        try:
            conn = self._connect()
        except MemoryStoreError:
            raise
        except sqlite3.DatabaseError as exc:
            if self.in_memory:
                raise MemoryStoreError(f"cannot create the in-memory store: {exc}") from exc
            aside = self._move_aside(exc)
            try:
                conn = self._connect()
            except sqlite3.Error as exc2:
                raise MemoryStoreError(
                    f"the memory store {self.path} is unreadable ({exc}); it was moved to "
                    f"{aside}, but a fresh store could not be created there either ({exc2}); "
                    "check the disk or set memory.path", path=self.path) from exc2
        row = conn.execute("SELECT value FROM meta WHERE key='current_episode'").fetchone()
        self._current_episode = row[0] if row else ""
        return conn

    def _move_aside(self, exc: Exception) -> str:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        aside = f"{self.path}.corrupt-{stamp}"
        for suffix in ("", "-wal", "-shm"):
            src = Path(self.path + suffix)
            if src.exists():
                os.replace(src, aside + suffix)
        self.recovered_from = aside
        message = (f"the memory store {self.path} is not a readable SQLite store ({exc}); it "
                   f"was moved aside to {aside} (kept, not deleted) and a fresh store was "
                   "started. Inspect or delete the old file yourself")
        self.warnings.append(message)
        LOG.warning(message)
        return aside

    # -- writing ------------------------------------------------------------------------------
    def add(self, record: KeyFrameRecord) -> None:
        """Queue one key frame for writing (returns at once)."""
        if not record.wall_s:
            record.wall_s = time.time()
        self._enqueue(record)

    def add_question(self, record: QuestionRecord) -> None:
        if not record.wall_s:
            record.wall_s = time.time()
        self._enqueue(record)

    def set_thumbnail(self, episode_id: str, index: int, thumbnail: bytes) -> None:
        """Queue a thumbnail for a key frame already queued or stored without one (its
        image came after its description). A row that has one keeps it."""
        self._enqueue(("thumbnail", episode_id, int(index), thumbnail))

    def set_current_episode(self, episode_id: str) -> None:
        """The episode a restarted node continues (written through the queue too)."""
        self._current_episode = episode_id
        self._enqueue(("episode", episode_id, time.time()))

    def _enqueue(self, item: Any) -> None:
        with self._idle:
            self._busy += 1
        if self._thread is None:
            self._write_one(item)
            with self._idle:
                self._busy -= 1
                self._idle.notify_all()
        else:
            self._queue.put(item)

    def pending(self) -> int:
        """Records accepted but not yet committed."""
        with self._idle:
            return self._busy

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued record is committed; False on timeout (disk full)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._idle.wait(min(remaining, 0.1))
        return True

    def write_many(self, records: Iterable[KeyFrameRecord], *, batch: int = 2000) -> int:
        """Write records synchronously in large transactions (import, benchmarks)."""
        n = 0
        chunk: list[KeyFrameRecord] = []
        for record in records:
            chunk.append(record)
            if len(chunk) >= batch:
                n += self._insert(chunk)
                chunk = []
        if chunk:
            n += self._insert(chunk)
        return n

    def set_embedder(self, embedder: Any) -> None:
        """Compute an embedding per key frame from now on (and for stored key frames that
        have none, in the background: `backfill_embeddings`)."""
        self.embedder = embedder
        self._backfilled = False

    def _vectors(self, texts: Sequence[str]) -> list[bytes] | None:
        if self.embedder is None or not texts:
            return None
        try:
            return [v.astype("float32").tobytes() for v in self.embedder.embed(list(texts))]
        except Exception as exc:  # noqa: BLE001 - the key frame is stored without a vector
            LOG.warning("memory store: embedding failed (%s); stored without a vector", exc)
            return None

    def _insert(self, records: Sequence[KeyFrameRecord]) -> int:
        vectors = self._vectors([r.observation for r in records])
        now = time.time()
        rows = []
        last: dict[str, tuple[int, float]] = {}
        for r in records:
            p = r.pose
            rows.append((r.episode_id, r.keyframe_index, r.stamp_s,
                         None if p is None else p.x, None if p is None else p.y,
                         None if p is None else p.z, None if p is None else p.yaw,
                         None if p is None else p.frame_id, r.action, r.action_source,
                         r.observation, r.raw_text, r.thumbnail, r.wall_s or now))
            prev = last.get(r.episode_id)
            last[r.episode_id] = (max(r.keyframe_index, prev[0] if prev else -1),
                                  min(r.wall_s or now, prev[1] if prev else now))
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                # A key frame delivered twice (replayed to a restarted node) replaces the
                # first description, as EpisodeMemory.put does.
                # A description written again without an image keeps the stored thumbnail.
                self.conn.executemany(
                    f"INSERT OR REPLACE INTO keyframes ({_KF_COLUMNS}) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,COALESCE(?, (SELECT thumbnail FROM keyframes"
                    " WHERE episode_id=? AND keyframe_index=?)),?)",
                    [(*row[:13], row[0], row[1], row[13]) for row in rows])
                if vectors is not None:
                    self.conn.executemany(
                        "INSERT OR REPLACE INTO embeddings SELECT id, ?, ? FROM keyframes "
                        "WHERE episode_id=? AND keyframe_index=?",
                        [(self.embedder.name, v, r.episode_id, r.keyframe_index)
                         for r, v in zip(records, vectors, strict=True)])
                for episode_id, (index, wall) in last.items():
                    self.conn.execute(
                        "INSERT INTO episodes (episode_id, started_wall, last_index) "
                        "VALUES (?,?,?) ON CONFLICT(episode_id) DO UPDATE SET "
                        "last_index = MAX(last_index, excluded.last_index)",
                        (episode_id, wall, index))
                self.conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        self.written += len(rows)
        return len(rows)

    def _rollback(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # SQLite already rolled back (e.g. after SQLITE_FULL)

    def _write_one(self, item: Any) -> None:
        if isinstance(item, KeyFrameRecord):
            self._insert([item])
        elif isinstance(item, QuestionRecord):
            with self._lock:
                self.conn.execute(
                    "INSERT INTO questions (episode_id, wall_s, question, choices, answer, "
                    "success, evidence) VALUES (?,?,?,?,?,?,?)",
                    (item.episode_id, item.wall_s, item.question, json.dumps(item.choices),
                     item.answer, int(item.success), json.dumps(item.evidence)))
        elif item[0] == "thumbnail":
            _, episode_id, index, thumbnail = item
            with self._lock:
                self.conn.execute("UPDATE keyframes SET thumbnail=? WHERE episode_id=? AND "
                                  "keyframe_index=? AND thumbnail IS NULL",
                                  (thumbnail, episode_id, index))
        else:
            _, episode_id, wall = item
            with self._lock:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('current_episode', ?)",
                                      (episode_id,))
                    self.conn.execute("INSERT OR IGNORE INTO episodes (episode_id, started_wall)"
                                      " VALUES (?, ?)", (episode_id, wall))
                    self.conn.execute("COMMIT")
                except BaseException:
                    self._rollback()
                    raise

    def _writer(self) -> None:
        next_retention = time.monotonic() + min(5.0, self.retention_period_s)
        while not self._stop.is_set():
            if not self._pending:
                try:
                    self._pending.append(self._queue.get(timeout=0.2))
                except queue.Empty:
                    if self.embedder is not None and not self._backfilled and not self.disk_full:
                        try:
                            self._backfilled = self.backfill_embeddings() == 0
                        except sqlite3.Error as exc:
                            LOG.warning("memory store: embedding backfill failed: %s", exc)
            while self._pending and not self._stop.is_set():
                item = self._pending[0]
                try:
                    self._write_one(item)
                except sqlite3.Error as exc:
                    if _is_full(exc):
                        if not self.disk_full:
                            LOG.warning("memory store %s: the disk is full (%s); descriptions "
                                        "stay in RAM and are written when space returns",
                                        self.path, exc)
                        self.disk_full, self.last_error = True, str(exc)
                        self._stop.wait(self.retry_period_s)
                        break
                    self.last_error = f"a write to {self.path} failed: {exc}"
                    LOG.error("memory store: %s; the record is dropped", self.last_error)
                else:
                    if self.disk_full:
                        LOG.info("memory store %s: writing again (disk space returned)",
                                 self.path)
                        self.disk_full, self.last_error = False, ""
                self._pending.popleft()
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
                try:
                    self._pending.append(self._queue.get_nowait())
                except queue.Empty:
                    pass
            if time.monotonic() >= next_retention and not self.disk_full:
                next_retention = time.monotonic() + self.retention_period_s
                try:
                    self.enforce_retention()
                except sqlite3.Error as exc:
                    LOG.warning("memory store retention failed: %s", exc)

    def backfill_embeddings(self, batch: int = 64) -> int:
        """Compute vectors for up to `batch` stored key frames that have none; returns how
        many (0 when done or without an embedder)."""
        if self.embedder is None:
            return 0
        rows = self._query("SELECT k.id, k.observation FROM keyframes k LEFT JOIN embeddings e "
                           "ON e.keyframe_id = k.id WHERE e.keyframe_id IS NULL ORDER BY k.id "
                           "LIMIT ?", (batch,))
        vectors = self._vectors([r[1] for r in rows])
        if not rows or vectors is None:
            return 0
        with self._lock:
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                self.conn.executemany("INSERT OR REPLACE INTO embeddings VALUES (?, ?, ?)",
                                      [(r[0], self.embedder.name, v)
                                       for r, v in zip(rows, vectors, strict=True)])
                self.conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        return len(rows)

    def embeddings_after(self, episode_id: str, after_id: int) -> list[tuple[int, int, bytes]]:
        """(row id, key-frame index, float32 vector bytes) of the episode's key frames with
        row id > after_id, in row order (EmbeddingIndex reads them incrementally)."""
        return [(int(r[0]), int(r[1]), r[2]) for r in self._query(
            "SELECT k.id, k.keyframe_index, e.vector FROM embeddings e JOIN keyframes k ON "
            "k.id = e.keyframe_id WHERE k.episode_id=? AND k.id>? ORDER BY k.id",
            (episode_id, after_id))]

    def close(self) -> None:
        """Write what is queued (a few seconds at most), stop the writer, close the file."""
        if self._thread is not None:
            self.flush(5.0)
            self._stop.set()
            self._thread.join(timeout=5.0)
        with self._lock:
            try:
                self.conn.close()
            except sqlite3.Error:
                pass

    # -- retention ------------------------------------------------------------------------------
    def used_bytes(self) -> int:
        with self._lock:
            page = self.conn.execute("PRAGMA page_size").fetchone()[0]
            count = self.conn.execute("PRAGMA page_count").fetchone()[0]
            free = self.conn.execute("PRAGMA freelist_count").fetchone()[0]
        return int(page * (count - free))

    def enforce_retention(self, now_wall: float | None = None) -> int:
        """Delete key frames older than max_age_s, then the oldest until the store is under
        max_bytes; returns how many were removed."""
        removed = 0
        now_wall = time.time() if now_wall is None else now_wall
        keep = self._protected_rowid()
        with self._lock:
            if self.max_age_s > 0:
                cur = self.conn.execute("DELETE FROM keyframes WHERE wall_s < ? AND id != ?",
                                        (now_wall - self.max_age_s, keep))
                removed += cur.rowcount
            if self.max_bytes > 0:
                while self.used_bytes() > self.max_bytes:
                    total = self.conn.execute("SELECT COUNT(*) FROM keyframes").fetchone()[0]
                    if total <= 1:
                        break
                    step = max(1, total // 20)
                    cur = self.conn.execute(
                        "DELETE FROM keyframes WHERE id IN (SELECT id FROM keyframes WHERE id != ?"
                        " ORDER BY wall_s, id LIMIT ?)", (keep, step))
                    removed += cur.rowcount
                    if cur.rowcount == 0:
                        break
            if removed:
                self.conn.execute("PRAGMA incremental_vacuum")
                if not self.in_memory:
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        if removed:
            self.removed_by_retention += removed
            LOG.info("memory store %s: retention removed %d key frame(s)", self.path, removed)
        return removed

    def _protected_rowid(self) -> int:
        with self._lock:
            row = self.conn.execute(
                "SELECT id FROM keyframes WHERE episode_id=? ORDER BY keyframe_index LIMIT 1",
                (self._current_episode,)).fetchone()
        return int(row[0]) if row else -1

    # -- reading --------------------------------------------------------------------------------
    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self.conn.execute(sql, args).fetchall()

    @property
    def current_episode_id(self) -> str:
        return self._current_episode

    def resume_point(self) -> tuple[str, int] | None:
        """(current episode, next key-frame index) a restarted node continues; None when
        the store has no current episode."""
        if not self._current_episode:
            return None
        rows = self._query("SELECT MAX(keyframe_index) FROM keyframes WHERE episode_id=?",
                           (self._current_episode,))
        last = rows[0][0]
        return self._current_episode, (int(last) + 1 if last is not None else 0)

    def _max(self, max_index: int | None) -> int:
        return (1 << 62) if max_index is None or max_index < 0 else int(max_index)

    def count(self, episode_id: str, max_index: int | None = None, *,
              at_most: int | None = None) -> int:
        """Key frames of the episode up to max_index; with `at_most`, counting stops there
        (cheap on a large store: "does the episode fit in the prompt?")."""
        cap = "" if at_most is None else f" LIMIT {int(at_most)}"
        return int(self._query(
            "SELECT COUNT(*) FROM (SELECT 1 FROM keyframes WHERE episode_id=? AND "
            f"keyframe_index<=?{cap})", (episode_id, self._max(max_index)))[0][0])

    def indices(self, episode_id: str, max_index: int | None = None) -> list[int]:
        return [r[0] for r in self._query(
            "SELECT keyframe_index FROM keyframes WHERE episode_id=? AND keyframe_index<=? "
            "ORDER BY keyframe_index", (episode_id, self._max(max_index)))]

    def first(self, episode_id: str, n: int = 1) -> list[int]:
        return [r[0] for r in self._query(
            "SELECT keyframe_index FROM keyframes WHERE episode_id=? ORDER BY keyframe_index "
            "LIMIT ?", (episode_id, n))]

    def recent(self, episode_id: str, n: int, max_index: int | None = None) -> list[int]:
        return [r[0] for r in self._query(
            "SELECT keyframe_index FROM keyframes WHERE episode_id=? AND keyframe_index<=? "
            "ORDER BY keyframe_index DESC LIMIT ?", (episode_id, self._max(max_index), n))]

    def at_or_after(self, episode_id: str, targets: Sequence[int],
                    max_index: int | None = None) -> list[int]:
        """For each target index, the first stored key frame at or after it (gaps left by
        failed descriptions or retention are skipped)."""
        out: list[int] = []
        limit = self._max(max_index)
        with self._lock:
            for t in targets:
                row = self.conn.execute(
                    "SELECT keyframe_index FROM keyframes WHERE episode_id=? AND keyframe_index "
                    "BETWEEN ? AND ? ORDER BY keyframe_index LIMIT 1",
                    (episode_id, int(t), limit)).fetchone()
                if row is not None:
                    out.append(int(row[0]))
        return out

    def stamp_of(self, episode_id: str, index: int) -> float | None:
        rows = self._query("SELECT stamp_s FROM keyframes WHERE episode_id=? AND keyframe_index=?",
                           (episode_id, index))
        return float(rows[0][0]) if rows else None

    def near_stamp(self, episode_id: str, stamp_s: float, n: int,
                   max_index: int | None = None) -> list[int]:
        """The n key frames whose stamps are nearest to stamp_s."""
        limit = self._max(max_index)
        before = self._query(
            "SELECT keyframe_index, stamp_s FROM keyframes WHERE episode_id=? AND stamp_s<=? "
            "AND keyframe_index<=? ORDER BY stamp_s DESC LIMIT ?", (episode_id, stamp_s, limit, n))
        after = self._query(
            "SELECT keyframe_index, stamp_s FROM keyframes WHERE episode_id=? AND stamp_s>? "
            "AND keyframe_index<=? ORDER BY stamp_s LIMIT ?", (episode_id, stamp_s, limit, n))
        both = sorted(before + after, key=lambda r: abs(r[1] - stamp_s))
        return [int(r[0]) for r in both[:n]]

    # A query word in more than this fraction of the stored observations does not select
    # candidates when rarer words are there (scoring every key frame it matches is what
    # makes a query slow on a large store); it still adds to the candidates' BM25 score.
    COMMON_FRACTION = 0.02

    def _document_frequency(self, word: str) -> int:
        cached = self._df_cache.get(word)
        if cached is not None and cached[1] == self._df_epoch:
            return cached[0]
        n = int(self._query("SELECT COUNT(*) FROM keyframes_fts WHERE keyframes_fts MATCH ?",
                            (f'"{word}"',))[0][0])
        self._df_cache[word] = (n, self._df_epoch)
        return n

    def _rows_total(self) -> int:
        if self._rows_cache[1] != self._df_epoch:
            n = int(self._query("SELECT COUNT(*) FROM keyframes")[0][0])
            self._rows_cache = (n, self._df_epoch)
        return self._rows_cache[0]

    def search_terms(self, text: str) -> tuple[list[str], list[str]]:
        """(words that select candidates, words that score them): the content words of
        `text` that occur in the store; common ones (COMMON_FRACTION) only score when
        rarer ones are there."""
        self._df_epoch = self.written // 500 + self.removed_by_retention
        words = [w for w in fts_query(text).replace('"', "").split(" OR ") if w]
        found = [(w, self._document_frequency(w)) for w in words]
        found = [(w, df) for w, df in found if df > 0]
        limit = max(1.0, self.COMMON_FRACTION * self._rows_total())
        rare = [w for w, df in found if df <= limit]
        every = [w for w, _ in found]
        return (rare or every), every

    def search(self, text: str, k: int = 10, *, episode_id: str | None = None,
               max_index: int | None = None) -> list[tuple[str, int, float]]:
        """Key frames whose observations match `text` best (FTS5 BM25), best first, as
        (episode id, key-frame index, score; higher is better)."""
        if k <= 0:
            return []
        select, score = self.search_terms(text)
        if not select:
            return []
        match = " OR ".join(f'"{w}"' for w in select)
        if len(score) > len(select):  # the common words add to the score of the candidates
            match = f"({match}) AND (" + " OR ".join(f'"{w}"' for w in score) + ")"
        limit = self._max(max_index)
        fetch = 4 * k
        while True:
            hits = self._query("SELECT rowid, -bm25(keyframes_fts) FROM keyframes_fts WHERE "
                               "keyframes_fts MATCH ? ORDER BY bm25(keyframes_fts) LIMIT ?",
                               (match, fetch))
            if not hits:
                return []
            marks = ",".join("?" * len(hits))
            where = {int(r[0]): (r[1], int(r[2])) for r in self._query(
                f"SELECT id, episode_id, keyframe_index FROM keyframes WHERE id IN ({marks})",
                [h[0] for h in hits])}
            out = []
            for rowid, score in hits:
                found = where.get(int(rowid))
                if found is None:
                    continue
                if episode_id is not None and (found[0] != episode_id or found[1] > limit):
                    continue
                out.append((found[0], found[1], float(score)))
                if len(out) >= k:
                    return out
            if len(hits) < fetch:  # every match was seen
                return out
            fetch *= 8

    def get(self, episode_id: str, indices: Iterable[int]) -> list[KeyFrameRecord]:
        """The records of these key frames (those stored), in key-frame order."""
        wanted = sorted({int(i) for i in indices})
        out: list[KeyFrameRecord] = []
        for start in range(0, len(wanted), 500):
            part = wanted[start:start + 500]
            marks = ",".join("?" * len(part))
            out += [_row_to_record(r) for r in self._query(
                f"SELECT {_KF_COLUMNS} FROM keyframes WHERE episode_id=? AND keyframe_index IN "
                f"({marks}) ORDER BY keyframe_index", [episode_id, *part])]
        return out

    def records(self, episode_id: str) -> list[KeyFrameRecord]:
        return [_row_to_record(r) for r in self._query(
            f"SELECT {_KF_COLUMNS} FROM keyframes WHERE episode_id=? ORDER BY keyframe_index",
            (episode_id,))]

    def questions(self, episode_id: str) -> list[QuestionRecord]:
        rows = self._query("SELECT episode_id, question, choices, answer, success, evidence, "
                           "wall_s FROM questions WHERE episode_id=? ORDER BY id", (episode_id,))
        return [QuestionRecord(r[0], r[1], json.loads(r[2]), r[3], bool(r[4]), json.loads(r[5]),
                               r[6]) for r in rows]

    def episodes(self) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT e.episode_id, e.started_wall, COUNT(k.id), MIN(k.stamp_s), MAX(k.stamp_s) "
            "FROM episodes e LEFT JOIN keyframes k ON k.episode_id = e.episode_id "
            "GROUP BY e.episode_id ORDER BY e.started_wall")
        return [{"episode_id": r[0], "started_wall": r[1], "keyframes": r[2],
                 "first_stamp_s": r[3], "last_stamp_s": r[4],
                 "current": r[0] == self._current_episode} for r in rows]

    def stats(self) -> dict[str, Any]:
        size = 0
        if not self.in_memory:
            size = sum(Path(self.path + s).stat().st_size for s in ("", "-wal")
                       if Path(self.path + s).exists())
        rows = self._query("SELECT COUNT(*), COUNT(thumbnail), COALESCE(SUM(LENGTH(thumbnail)),0),"
                           " COUNT(x) FROM keyframes")[0]
        questions = self._query("SELECT COUNT(*) FROM questions")[0][0]
        return {"path": self.path, "schema_version": SCHEMA_VERSION, "file_bytes": size,
                "keyframes": rows[0], "with_thumbnail": rows[1], "thumbnail_bytes": rows[2],
                "with_pose": rows[3], "questions": questions,
                "current_episode": self._current_episode, "episodes": self.episodes(),
                "disk_full": self.disk_full, "pending": self.pending()}
