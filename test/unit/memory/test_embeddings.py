"""Embedding similarity (memory.embedding_model) with a tiny text model built locally and
loaded through the backends' model lookup; the schema migration that added its table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from embodied_r_ros.core.errors import ModelUnavailableError
from embodied_r_ros.core.memory import schema
from embodied_r_ros.core.memory.embeddings import EmbeddingIndex, TransformersEmbedder
from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings
from embodied_r_ros.core.memory.selection import select_keyframes
from embodied_r_ros.core.memory.store import MEMORY, KeyFrameRecord, MemoryStore
from embodied_r_ros.core.types import FrameDescription

TEXTS = [f"scene {i}: " + w for i, w in enumerate(
    ["a kitchen with a kettle", "a garage with a motorbike", "a lobby with a fountain",
     "a library with tall shelves", "a gym with a rowing machine", "a garden with roses"] * 5)]


def test_a_version_1_file_is_migrated_and_keeps_its_key_frames(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                       "applied_wall REAL NOT NULL);" + schema.MIGRATIONS[0]
                       + "INSERT INTO schema_version VALUES (1, 0);")
    conn.execute("INSERT INTO keyframes (episode_id, keyframe_index, stamp_s, observation, "
                 "wall_s) VALUES ('ep', 0, 1.0, 'a red door', 0)")
    conn.commit()
    conn.close()
    store = MemoryStore(path, background=False)
    assert store.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 2
    assert schema.SCHEMA_VERSION == 2
    assert store.get("ep", [0])[0].observation == "a red door"
    assert store.search("red door", 3)[0][1] == 0
    assert store.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == 0
    store.close()


def test_a_missing_embedding_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailableError, match="nope"):
        TransformersEmbedder(str(tmp_path / "nope"))


def test_tiny_text_model_embeds_and_ranks_the_key_frames(tiny_models, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    embedder = TransformersEmbedder(str(tiny_models.lm), "cpu")
    vectors = embedder.embed(TEXTS[:6] + [TEXTS[0]])
    assert vectors.shape[0] == 7 and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.allclose(vectors[0], vectors[6], atol=1e-5)

    settings = MemorySettings(path=str(tmp_path / "m.sqlite"), max_keyframes=6,
                              embedding_model=str(tiny_models.lm))
    memory = LongTermMemory(settings)
    for i, text in enumerate(TEXTS):
        memory.record(FrameDescription(i, text, stamp_s=float(i), episode_id="ep"))
    assert memory.store.flush(60)
    n = memory.store.conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
    assert n == len(TEXTS)
    ranker = memory.ranker("ep")
    assert ranker is not None
    assert ranker(TEXTS[13], 3)[0] == 13  # its own text is the nearest vector
    chosen = memory.choose("question about " + TEXTS[13], "ep", len(TEXTS) - 1, [])
    assert 13 in [d.keyframe_index for d in chosen.descriptions]
    memory.close()

    # Key frames stored before the model was set get vectors in the background.
    store = MemoryStore(tmp_path / "m.sqlite")
    store.add(KeyFrameRecord("ep", 99, 99.0, "a roof with solar panels"))
    assert store.flush(10)
    store.set_embedder(embedder)
    assert store.backfill_embeddings() == 1 and store.backfill_embeddings() == 0
    index = EmbeddingIndex()
    query = embedder.embed(["a roof with solar panels"])[0]
    assert index.rank(store, "ep", query, 1) == [99]
    assert 99 not in index.rank(store, "ep", query, 5, max_index=50)
    store.close()


def test_the_embedding_ranking_is_fused_with_bm25() -> None:
    store = MemoryStore(MEMORY, background=False)
    store.write_many(KeyFrameRecord("ep", i, float(i), TEXTS[i % len(TEXTS)])
                     for i in range(100))
    # No word of this question is stored: only the embedding ranking can bring 77 in.
    sel = select_keyframes(store, "ep", "zzqx vortex?", max_keyframes=8,
                           ranker=lambda q, k: [77, 12])
    assert {77, 12} <= set(sel.indices) and sel.reasons[77] == "relevant"
    lexical_only = select_keyframes(store, "ep", "zzqx vortex?", max_keyframes=8)
    assert 77 not in lexical_only.indices
    store.close()
