"""Optional embedding similarity for question-time selection (`memory.embedding_model`).

`TransformersEmbedder` turns texts into L2-normalised vectors: any transformers text
model (a sentence-transformers folder too: its transformer loads the same way) through
AutoModel, with mean pooling over the last hidden state. The model is found with the same `locate_model` the perception
and reasoning backends use (local folder, or cached hub id; a missing model is a
ModelUnavailableError naming it) and runs on `resolve_device`'s device.

The store keeps one vector per key frame (table ``embeddings``, schema version 2),
computed by its writer thread (never on the camera path); `EmbeddingIndex` keeps an
episode's vectors in RAM for the ranking (a matrix product, k best).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from embodied_r_ros.core.errors import ModelUnavailableError

LOG = logging.getLogger("embodied_r_ros.memory")

__all__ = ["TextEmbedder", "TransformersEmbedder", "EmbeddingIndex", "make_embedder"]


class TextEmbedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, rows of unit length."""
        ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class TransformersEmbedder:
    """See the module docstring."""

    def __init__(self, model: str, device: str = "cpu", batch_size: int = 32) -> None:
        from embodied_r_ros.core.backends.model_spec import ModelSpec, locate_model
        from embodied_r_ros.core.backends.transformers_backend import resolve_device

        self.name = model
        self.source = locate_model(ModelSpec.from_dict({"backend": "transformers",
                                                        "model": model}))
        self.device = resolve_device(device)
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        try:
            from transformers import AutoModel, AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.source)
            if self._tokenizer.pad_token is None:
                self._tokenizer.pad_token = self._tokenizer.eos_token or self._tokenizer.unk_token
            self._model = AutoModel.from_pretrained(self.source).to(self.device).eval()
        except ModelUnavailableError:
            raise
        except Exception as exc:  # any loading failure is reported as one
            raise ModelUnavailableError(
                f"embedding model {model!r} ({self.source}) could not be loaded: {exc}; set "
                "memory.embedding_model to a text model folder or hub id, or leave it empty"
            ) from exc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [t or " " for t in texts]
        with self._lock:
            import torch

            out = []
            for start in range(0, len(texts), self.batch_size):
                batch = self._tokenizer(list(texts[start:start + self.batch_size]),
                                        padding=True, truncation=True, max_length=256,
                                        return_tensors="pt").to(self.device)
                with torch.no_grad():
                    hidden = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
                out.append(pooled.float().cpu().numpy())
            return _normalise(np.concatenate(out) if out else np.zeros((0, 1), np.float32))


def make_embedder(model: str, device: str = "cpu") -> TransformersEmbedder | None:
    """The embedder of `memory.embedding_model` ("" = none)."""
    return TransformersEmbedder(model, device) if model else None


class EmbeddingIndex:
    """An episode's key-frame vectors in RAM, refreshed from the store as it grows."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._episodes: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}

    def rank(self, store: Any, episode_id: str, query: np.ndarray, k: int,
             max_index: int | None = None) -> list[int]:
        """Key-frame indices by cosine similarity to `query`, best first."""
        with self._lock:
            last_id, indices, matrix = self._episodes.get(
                episode_id, (0, np.zeros(0, np.int64), np.zeros((0, query.shape[-1]), np.float32)))
            rows = store.embeddings_after(episode_id, last_id)
            if rows:
                new_idx = np.array([r[1] for r in rows], np.int64)
                new_vec = np.stack([np.frombuffer(r[2], np.float32) for r in rows])
                if matrix.shape[0] and matrix.shape[1] != new_vec.shape[1]:
                    matrix, indices = new_vec, new_idx  # the model changed: start over
                else:
                    matrix = np.concatenate([matrix, new_vec]) if matrix.shape[0] else new_vec
                    indices = np.concatenate([indices, new_idx])
                last_id = max(r[0] for r in rows)
                self._episodes[episode_id] = (last_id, indices, matrix)
        if not matrix.shape[0] or matrix.shape[1] != query.shape[-1]:
            return []
        scores = matrix @ query.astype(np.float32)
        if max_index is not None and max_index >= 0:
            scores = np.where(indices <= max_index, scores, -np.inf)
        k = min(k, len(scores))
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        return [int(indices[i]) for i in best if np.isfinite(scores[i])]
