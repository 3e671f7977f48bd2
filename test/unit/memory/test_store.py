"""core/memory/store.py on real SQLite files: persistence across reopen, kill -9 of a
writing process, schema versions, a corrupt file moved aside, a full disk, retention."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from embodied_r_ros.core.errors import MemoryStoreError
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.memory.long_term import restore_episode
from embodied_r_ros.core.memory.schema import SCHEMA_VERSION
from embodied_r_ros.core.memory.store import (
    KeyFrameRecord,
    MemoryStore,
    QuestionRecord,
    StoredPose,
    default_store_path,
    fts_query,
)
from embodied_r_ros.core.perception.progress import ProcessedFrames

from helpers.env import REPO_ROOT

REPO = REPO_ROOT


def rec(i: int, episode: str = "ep", text: str = "", pose: bool = True) -> KeyFrameRecord:
    return KeyFrameRecord(episode, i, 100.0 + 3 * i, text or f"a corridor, step {i}",
                          "move forward" if i else None, "odometry" if i else "",
                          f"raw {i}", StoredPose(i * 1.0, 2.0, 0.0, 0.5, "odom") if pose else None)


def test_records_survive_reopen_and_the_episode_continues(tmp_path: Path) -> None:
    path = tmp_path / "robot.sqlite"
    store = MemoryStore(path)
    store.set_current_episode("ep")
    for i in range(40):
        store.add(rec(i, pose=i % 2 == 0))
    store.add_question(QuestionRecord("ep", "Where is the door?", ["left", "right"], "A", True,
                                      [{"keyframe_index": 3}]))
    assert store.flush(10)
    store.close()
    assert (tmp_path / "robot.sqlite").is_file()
    again = MemoryStore(path)
    assert again.resume_point() == ("ep", 40)
    got = again.get("ep", [0, 1, 2])
    assert [r.keyframe_index for r in got] == [0, 1, 2]
    assert got[0].pose == StoredPose(0.0, 2.0, 0.0, 0.5, "odom") and got[1].pose is None
    assert got[2].action == "move forward" and got[2].action_source == "odometry"
    assert got[2].raw_text == "raw 2" and got[2].stamp_s == 106.0
    q = again.questions("ep")
    assert q[0].choices == ["left", "right"] and q[0].evidence == [{"keyframe_index": 3}]
    memory, progress = EpisodeMemory("ep", max_items=8), ProcessedFrames()
    assert restore_episode(again, "ep", memory, progress) == 40
    kept = [d.keyframe_index for d in memory.descriptions()]
    assert kept[0] == 0 and kept[-1] == 39 and len(kept) == 8
    assert all(progress.is_processed(i) for i in range(40))
    assert again.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert again.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] \
        == SCHEMA_VERSION
    again.close()


def test_a_key_frame_delivered_twice_is_stored_once(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "m.sqlite", background=False)
    store.add(rec(5, text="first text about a chair"))
    store.add(rec(5, text="second text about a sofa"))
    assert store.count("ep") == 1
    assert store.get("ep", [5])[0].observation == "second text about a sofa"
    assert store.search("chair", 5) == [] and store.search("sofa", 5)[0][1] == 5
    store.close()


def test_kill_9_while_writing_loses_at_most_the_record_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "killed.sqlite"
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from embodied_r_ros.core.memory.store import MemoryStore, KeyFrameRecord
        store = MemoryStore({str(path)!r})
        store.set_current_episode("ep")
        i = 0
        while True:
            store.add(KeyFrameRecord("ep", i, float(i), "obs %d" % i, thumbnail=b"x" * 20000))
            store.flush(5)
            print(i, flush=True)
            i += 1
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    acknowledged = -1
    assert proc.stdout is not None
    for line in proc.stdout:
        acknowledged = int(line)
        if acknowledged >= 150:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    store = MemoryStore(path)
    indices = store.indices("ep")
    # Every acknowledged (committed) key frame is there, in order, without gaps.
    assert indices[: acknowledged + 1] == list(range(acknowledged + 1))
    assert indices == list(range(len(indices)))
    assert store.resume_point() == ("ep", len(indices))
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    store.close()


def test_a_corrupt_file_is_moved_aside_and_a_fresh_store_starts(tmp_path: Path) -> None:
    path = tmp_path / "robot.sqlite"
    path.write_bytes(b"this is not a database" * 200)
    store = MemoryStore(path)
    assert store.recovered_from.startswith(str(path) + ".corrupt-")
    assert Path(store.recovered_from).read_bytes().startswith(b"this is not a database")
    assert str(path) in store.warnings[0] and "moved aside" in store.warnings[0]
    store.add(rec(0))
    assert store.flush(5) and store.count("ep") == 1
    store.close()


def test_a_newer_schema_is_refused_with_the_file_named(tmp_path: Path) -> None:
    path = tmp_path / "future.sqlite"
    MemoryStore(path, background=False).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (?, 0)", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(MemoryStoreError, match="future.sqlite.*newer"):
        MemoryStore(path)
    assert path.is_file()  # refused, not moved or changed


def test_a_full_disk_keeps_records_queued_and_writing_resumes(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "full.sqlite", retry_period_s=0.2)
    store.add(rec(0))
    assert store.flush(5)
    pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
    with store._lock:  # the file may not grow: SQLite reports SQLITE_FULL
        store.conn.execute(f"PRAGMA max_page_count={pages}")
    start = time.monotonic()
    for i in range(1, 30):
        store.add(KeyFrameRecord("ep", i, float(i), "big " * 2000, thumbnail=b"y" * 50_000))
    assert time.monotonic() - start < 0.5  # the caller never waits for the disk
    assert not store.flush(1.0)
    assert store.disk_full and "full" in store.last_error
    assert store.pending() > 0
    with store._lock:
        store.conn.execute("PRAGMA max_page_count=1073741823")  # space returns
    assert store.flush(20)
    assert not store.disk_full and store.count("ep") == 30
    store.close()


def test_retention_by_age_and_by_size_keeps_the_current_first_key_frame(tmp_path: Path) -> None:
    store = MemoryStore(tmp_path / "r.sqlite", background=False, max_age_s=3600)
    store.set_current_episode("ep")
    now = time.time()
    for i in range(20):
        r = rec(i)
        r.wall_s = now - 7200 if i < 10 else now
        store.add(r)
    assert store.enforce_retention(now) == 9
    assert store.indices("ep") == [0, *range(10, 20)]
    store.max_age_s, store.max_bytes = 0, 200_000
    for i in range(20, 120):
        store.add(KeyFrameRecord("ep", i, float(i), "x", thumbnail=os.urandom(20_000)))
    assert store.used_bytes() > 200_000
    assert store.enforce_retention() > 0
    assert store.used_bytes() <= 200_000
    left = store.indices("ep")
    assert left[0] == 0 and left[-1] == 119 and len(left) < 100
    store.close()


def test_default_path_follows_ros_home_and_namespace(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("ROS_HOME", str(tmp_path))
    assert default_store_path("/") == tmp_path / "embodied_r" / "root.sqlite"
    assert default_store_path("/fleet/robot7") == tmp_path / "embodied_r" / "fleet__robot7.sqlite"


def test_search_text_is_never_read_as_fts_syntax(tmp_path: Path) -> None:
    assert fts_query('Where did I see the "red" car? NEAR(x) OR *') == '"red" OR "car" OR "near"'
    store = MemoryStore(tmp_path / "s.sqlite", background=False)
    store.write_many([rec(0, text="a red car in a parking area"), rec(1, text="a blue door")])
    assert [i for _, i, _ in store.search('red car" OR (', 5)] == [0]
    assert store.search("where did I see it?", 5) == []
    store.close()


def test_diagnostics_warn_about_a_moved_aside_file_and_a_full_disk(tmp_path: Path) -> None:
    from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings

    path = tmp_path / "robot.sqlite"
    path.write_bytes(b"garbage" * 100)
    memory = LongTermMemory(MemorySettings(path=str(path)))
    level, message = memory.health()
    assert level == "warn" and "moved aside" in message and str(path) in message
    memory.store.recovered_from = ""
    assert memory.health()[0] == "ok"
    memory.store.disk_full, memory.store.last_error = True, "database or disk is full"
    level, message = memory.health()
    assert level == "warn" and "disk full" in message and "wait in RAM" in message
    memory.store.disk_full = False
    memory.close()
