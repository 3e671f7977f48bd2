"""The key-frame store's SQLite schema and its migrations.

`SCHEMA_VERSION` is the version this code writes; `migrate` brings an older file up to
it, one step at a time, each step in its own transaction, recording the version in the
`schema_version` table. A file written by a NEWER version is refused (MemoryStoreError)
rather than changed.

Tables (version 1):

* ``episodes``: one row per episode (id, wall time it began, last key-frame index).
* ``keyframes``: one row per described key frame: episode, key-frame index, stamp, pose
  (x, y, z, yaw, frame id; NULL when no odometry), action and its source, observation,
  raw text, optional JPEG thumbnail, wall time written.
* ``keyframes_fts``: FTS5 index over the observations (BM25 relevance), kept in step with
  ``keyframes`` by triggers.
* ``questions``: question, choices (JSON), answer, evidence (JSON), wall time.
* ``meta``: key/value (``current_episode``).

Version 2 adds ``embeddings`` (one float32 vector per key frame, with the model's name).
"""

from __future__ import annotations

import sqlite3

from embodied_r_ros.core.errors import MemoryStoreError

SCHEMA_VERSION = 2

_V1 = """
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY,
    started_wall REAL NOT NULL,
    last_index INTEGER NOT NULL DEFAULT -1
);
CREATE TABLE IF NOT EXISTS keyframes (
    id INTEGER PRIMARY KEY,
    episode_id TEXT NOT NULL,
    keyframe_index INTEGER NOT NULL,
    stamp_s REAL NOT NULL,
    x REAL, y REAL, z REAL, yaw REAL, frame_id TEXT,
    action TEXT, action_source TEXT NOT NULL DEFAULT '',
    observation TEXT NOT NULL DEFAULT '',
    raw_text TEXT NOT NULL DEFAULT '',
    thumbnail BLOB,
    wall_s REAL NOT NULL,
    UNIQUE (episode_id, keyframe_index)
);
CREATE INDEX IF NOT EXISTS keyframes_by_stamp ON keyframes (episode_id, stamp_s);
CREATE INDEX IF NOT EXISTS keyframes_by_wall ON keyframes (wall_s);
CREATE VIRTUAL TABLE IF NOT EXISTS keyframes_fts USING fts5(
    observation, content='keyframes', content_rowid='id', tokenize='porter unicode61');
CREATE TRIGGER IF NOT EXISTS keyframes_ai AFTER INSERT ON keyframes BEGIN
    INSERT INTO keyframes_fts(rowid, observation) VALUES (new.id, new.observation);
END;
CREATE TRIGGER IF NOT EXISTS keyframes_ad AFTER DELETE ON keyframes BEGIN
    INSERT INTO keyframes_fts(keyframes_fts, rowid, observation)
        VALUES ('delete', old.id, old.observation);
END;
CREATE TRIGGER IF NOT EXISTS keyframes_au AFTER UPDATE OF observation ON keyframes BEGIN
    INSERT INTO keyframes_fts(keyframes_fts, rowid, observation)
        VALUES ('delete', old.id, old.observation);
    INSERT INTO keyframes_fts(rowid, observation) VALUES (new.id, new.observation);
END;
CREATE TABLE IF NOT EXISTS questions (
    id INTEGER PRIMARY KEY,
    episode_id TEXT NOT NULL,
    wall_s REAL NOT NULL,
    question TEXT NOT NULL,
    choices TEXT NOT NULL DEFAULT '[]',
    answer TEXT NOT NULL DEFAULT '',
    success INTEGER NOT NULL DEFAULT 0,
    evidence TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS questions_by_episode ON questions (episode_id);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

# Version 2: one embedding vector per key frame (memory.embedding_model), removed with it.
_V2 = """
CREATE TABLE IF NOT EXISTS embeddings (
    keyframe_id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE TRIGGER IF NOT EXISTS keyframes_ad_embedding AFTER DELETE ON keyframes BEGIN
    DELETE FROM embeddings WHERE keyframe_id = old.id;
END;
"""

# MIGRATIONS[v] is the SQL that turns a version-v file into version v + 1 (v = 0: an
# empty file). A later version appends e.g. ``1: "ALTER TABLE keyframes ADD COLUMN ..."``.
MIGRATIONS: dict[int, str] = {
    0: _V1,
    1: _V2,
}


def current_version(conn: sqlite3.Connection) -> int:
    """The version recorded in the file; 0 for a new (empty) file."""
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
                       ).fetchone()
    if not has:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection, path: str = "") -> int:
    """Bring the schema up to SCHEMA_VERSION; returns the version found before."""
    found = current_version(conn)
    if found > SCHEMA_VERSION:
        raise MemoryStoreError(
            f"the memory store {path or '(memory)'} has schema version {found}, newer than "
            f"this code's {SCHEMA_VERSION}; update embodied_r_ros or set memory.path to "
            "another file", path=path)
    for version in range(found, SCHEMA_VERSION):
        # One transaction per step: a crash mid-migration leaves the previous version.
        conn.executescript(
            "BEGIN IMMEDIATE;\n"
            "CREATE TABLE IF NOT EXISTS schema_version "
            "(version INTEGER PRIMARY KEY, applied_wall REAL NOT NULL);\n"
            + MIGRATIONS[version]
            + f"\nINSERT INTO schema_version VALUES ({version + 1}, strftime('%s','now'));\n"
            "COMMIT;")
    return found
