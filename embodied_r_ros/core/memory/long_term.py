"""The glue both graphs use between their in-RAM episode view and the persistent store.

`LongTermMemory` owns a `MemoryStore` and:

* `record` writes each description (with the pose at its stamp and a JPEG thumbnail of
  its key frame when known) off the caller's thread;
* `restore` fills an `EpisodeMemory` + `ProcessedFrames` from the store when a node
  (re)opens an episode, so a restarted node continues where it was;
* `choose` picks the key frames a question is given (`selection.select_keyframes` over
  the whole store) and returns their descriptions in time order;
* `evidence` turns the chosen frames and the model's reply into `EvidenceItem`s;
* `health` says what the diagnostics should (a corrupt file moved aside, a full disk).

Parameters (`memory.*`, `episode.selection`) are in core/parameters.py.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_r_ros.core.memory.embeddings import EmbeddingIndex, make_embedder
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.memory.evidence import EvidenceItem, best_evidence, build_evidence
from embodied_r_ros.core.memory.selection import Ranker, Selection, select_keyframes
from embodied_r_ros.core.memory.store import (
    MEMORY,
    KeyFrameRecord,
    MemoryStore,
    QuestionRecord,
    StoredPose,
    default_store_path,
)
from embodied_r_ros.core.perception.progress import ProcessedFrames
from embodied_r_ros.core.qa.answerer import AnswerResult, QuestionAnswerer, select_for_prompt
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.core.types import FrameDescription

LOG = logging.getLogger("embodied_r_ros.memory")

PoseSource = Callable[[float], StoredPose | None]


@dataclass(frozen=True)
class MemorySettings:
    path: str = ""
    selection: str = "relevant"
    max_keyframes: int = 32
    recent: int = 4
    continue_episode: bool = True
    thumbnail_px: int = 320
    thumbnail_quality: int = 70
    max_age_s: float = 0.0
    max_mb: float = 0.0
    retention_period_s: float = 60.0
    embedding_model: str = ""
    embedding_device: str = "cpu"

    @classmethod
    def from_settings(cls, settings: Settings) -> MemorySettings:
        """The store's share of the parameters (`memory.*`, `episode.selection`,
        `keyframes.max_keyframes`)."""
        store = settings.memory
        return cls(path=store.path, selection=settings.episode.selection,
                   max_keyframes=settings.keyframes.max_keyframes,
                   recent=store.recent_keyframes, continue_episode=store.continue_episode,
                   thumbnail_px=store.thumbnail_px, thumbnail_quality=store.thumbnail_quality,
                   max_age_s=store.max_age_h * 3600.0, max_mb=store.max_mb,
                   retention_period_s=store.retention_period_s,
                   embedding_model=store.embedding_model,
                   embedding_device=store.embedding_device)

    def resolved_path(self, namespace: str = "/") -> str:
        return self.path or str(default_store_path(namespace))


def make_thumbnail(image: np.ndarray, max_side: int, quality: int = 70) -> bytes | None:
    """JPEG of `image` shrunk so its longer side is at most `max_side` (None when 0)."""
    if max_side <= 0 or image is None or image.ndim != 3:
        return None
    import cv2

    from embodied_r_ros.core.image_codec import encode_jpeg

    h, w = image.shape[:2]
    scale = max_side / max(h, w)
    if scale < 1.0:
        image = cv2.resize(image, (max(1, round(w * scale)), max(1, round(h * scale))),
                           interpolation=cv2.INTER_AREA)
    return encode_jpeg(image, quality)


def restore_episode(store: MemoryStore, episode_id: str, memory: EpisodeMemory,
                    progress: ProcessedFrames | None = None) -> int:
    """Fill `memory` (first + the newest its window keeps) and mark every stored key frame
    processed in `progress`; returns how many key frames the store has."""
    indices = store.indices(episode_id)
    if not indices:
        return 0
    keep = indices if not memory.max_items else (indices[:1] + indices[-memory.max_items:])
    for record in store.get(episode_id, keep):
        memory.put(record.to_description())
    if progress is not None:
        progress.mark_done_many(indices)
    return len(indices)


@dataclass
class Chosen:
    descriptions: list[FrameDescription]
    selection: Selection | None  # None: the store could not be used (RAM fallback)
    ages: list[str] | None = None


class LongTermMemory:
    """See the module docstring."""

    IMAGES_KEPT = 64  # key-frame images waiting for their description (for thumbnails)

    def __init__(self, settings: MemorySettings, *, namespace: str = "/",
                 pose_source: PoseSource | None = None, flush_timeout_s: float = 2.0) -> None:
        self.settings = settings
        self.path = settings.resolved_path(namespace)
        self.store = MemoryStore(self.path, max_age_s=settings.max_age_s,
                                 max_bytes=int(settings.max_mb * 1e6),
                                 retention_period_s=settings.retention_period_s)
        self.pose_source = pose_source
        self.flush_timeout_s = flush_timeout_s
        self.embedder = None
        self.index = EmbeddingIndex()
        if settings.embedding_model:
            try:
                self.embedder = make_embedder(settings.embedding_model, settings.embedding_device)
            except BaseException:
                self.store.close()
                raise
            self.store.set_embedder(self.embedder)
        self._images: OrderedDict[tuple[str, int], np.ndarray] = OrderedDict()
        # Key frames stored before their image arrived (the two come on separate topics).
        self._without_image: OrderedDict[tuple[str, int], None] = OrderedDict()
        self._images_lock = threading.Lock()

    @property
    def persistent(self) -> bool:
        return self.path != MEMORY

    # -- writing ---------------------------------------------------------------------------
    def keyframe_image(self, episode_id: str, index: int, image: np.ndarray) -> None:
        """Remember a key frame's image until its description arrives (no copy, no work:
        called on the camera path). An image that comes after its description (the two
        travel on separate topics) is made into the stored row's thumbnail here."""
        if self.settings.thumbnail_px <= 0:
            return
        key = (episode_id, index)
        with self._images_lock:
            late = key in self._without_image
            if late:
                del self._without_image[key]
            else:
                self._images[key] = image
                while len(self._images) > self.IMAGES_KEPT:
                    self._images.popitem(last=False)
        if late:
            thumb = self._thumbnail(image, index)
            if thumb is not None:
                self.store.set_thumbnail(episode_id, index, thumb)

    def _thumbnail(self, image: np.ndarray, index: int) -> bytes | None:
        try:
            return make_thumbnail(image, self.settings.thumbnail_px, self.settings.thumbnail_quality)
        except Exception:  # a thumbnail is optional
            LOG.warning("could not make a thumbnail of key frame %d", index, exc_info=True)
            return None

    def record(self, desc: FrameDescription, *, episode_id: str = "",
               pose: StoredPose | None = None) -> None:
        """Queue one description for the store (never raises, never blocks on the disk).
        A failed description is not a key frame's text: it is not stored (a retry that
        succeeds later is)."""
        if desc.mode == "failed":
            return
        episode = episode_id or desc.episode_id
        key = (episode, desc.keyframe_index)
        with self._images_lock:
            image = self._images.pop(key, None)
            if image is None and self.settings.thumbnail_px > 0:
                self._without_image[key] = None
                while len(self._without_image) > self.IMAGES_KEPT:
                    self._without_image.popitem(last=False)
        if pose is None and self.pose_source is not None:
            try:
                pose = self.pose_source(desc.stamp_s)
            except Exception:  # a pose is optional
                LOG.debug("no pose for key frame %d", desc.keyframe_index, exc_info=True)
        thumb = None if image is None else self._thumbnail(image, desc.keyframe_index)
        self.store.add(KeyFrameRecord.from_description(desc, episode_id=episode, pose=pose,
                                                       thumbnail=thumb))

    def begin_episode(self, episode_id: str) -> None:
        if episode_id and episode_id != self.store.current_episode_id:
            self.store.set_current_episode(episode_id)

    def record_question(self, episode_id: str, question: str, choices: Sequence[str],
                        answer: str, success: bool, evidence: Sequence[EvidenceItem]) -> None:
        self.store.add_question(QuestionRecord(episode_id, question, list(choices), answer,
                                               success, [e.to_json() for e in evidence]))

    # -- reopening ---------------------------------------------------------------------------
    def resume_point(self) -> tuple[str, int] | None:
        """(episode, next key-frame index) to continue, when memory.continue_episode."""
        if not self.settings.continue_episode:
            return None
        return self.store.resume_point()

    def restore(self, episode_id: str, memory: EpisodeMemory,
                progress: ProcessedFrames | None = None) -> int:
        """`restore_episode` from this memory's store."""
        n = restore_episode(self.store, episode_id, memory, progress)
        if n:
            LOG.info("memory store %s: continued episode %s with %d key frame(s)", self.path,
                     episode_id, n)
        return n

    # -- questions ---------------------------------------------------------------------------
    def choose(self, question: str, episode_id: str, last_index: int,
               collected: Sequence[FrameDescription]) -> Chosen:
        """The descriptions a question is given (see selection.py); falls back to the
        paper's even spread over the RAM descriptions when the store lags (disk full)."""
        if not self.store.flush(self.flush_timeout_s):
            LOG.warning("memory store %s is behind (%s); the question uses the descriptions "
                        "in RAM", self.path, self.store.last_error or "writes pending")
            return Chosen(select_for_prompt(collected, self.settings.max_keyframes), None)
        sel = select_keyframes(self.store, episode_id, question,
                               max_keyframes=self.settings.max_keyframes,
                               mode=self.settings.selection, last_index=last_index,
                               recent=self.settings.recent,
                               ranker=self.ranker(episode_id, last_index))
        in_ram = {d.keyframe_index: d for d in collected}
        descriptions = [in_ram.get(r.keyframe_index) or r.to_description() for r in sel.records]
        return Chosen(descriptions, sel, sel.ages())

    def ranker(self, episode_id: str, last_index: int | None = None) -> Ranker | None:
        """Embedding ranking of the episode's key frames for a question (None without
        memory.embedding_model)."""
        embedder = self.embedder
        if embedder is None:
            return None

        def rank(question: str, k: int) -> list[int]:
            vector = embedder.embed([question])[0]
            return self.index.rank(self.store, episode_id, vector, k, last_index)

        return rank

    @staticmethod
    def evidence(chosen: Chosen, reply_text: str) -> tuple[list[EvidenceItem], EvidenceItem | None]:
        if chosen.selection is None:
            records = [KeyFrameRecord.from_description(d) for d in chosen.descriptions]
            items = build_evidence(records, reply_text)
        else:
            items = build_evidence(chosen.selection.records, reply_text,
                                   chosen.selection.relevance)
        return items, best_evidence(items, reply_text)

    # -- state ---------------------------------------------------------------------------------
    def health(self) -> tuple[str, str]:
        """("ok"|"warn", message) for the diagnostics."""
        store = self.store
        if store.disk_full:
            return "warn", (f"memory store {self.path}: disk full ({store.last_error}); "
                            f"{store.pending()} description(s) wait in RAM and are written "
                            "when space returns; free disk space or lower memory.max_mb")
        if store.recovered_from:
            return "warn", (f"memory store {self.path} was unreadable and was moved aside to "
                            f"{store.recovered_from}; a fresh store was started")
        if store.last_error:
            return "warn", f"memory store {self.path}: {store.last_error}"
        return "ok", f"memory store {self.path}: {store.written} key frame(s) written"

    def close(self) -> None:
        self.store.close()


def answer_with_memory(memory: LongTermMemory, answerer: QuestionAnswerer, question_text: str,
                       question: str, choices: Sequence[str], *, episode_id: str,
                       last_index: int, collected: Sequence[FrameDescription],
                       **kwargs: Any) -> AnswerResult:
    """Choose the key frames (whole memory), answer, attach the evidence, store the
    question. Both graphs answer through this."""
    chosen = memory.choose(question_text, episode_id, last_index, collected)
    result = answerer.answer(question_text, chosen.descriptions, episode_id=episode_id,
                             selected=True, ages=chosen.ages, **kwargs)
    result.evidence, result.goal = memory.evidence(chosen, result.raw_output)
    memory.record_question(episode_id, question, choices, result.answer, result.success,
                           result.evidence)
    return result
