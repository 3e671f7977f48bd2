"""Background perception: describes key frames in arrival order while the robot moves.

The first key frame of an episode is described alone; every later one as a pair with
the previous key frame. Descriptions are parsed into action + observation and appended
to the episode memory. One worker thread, a bounded queue, and a way to wait until a
given key frame is described (used when a question arrives).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.backends.base import Perceiver
from embodied_r_ros.core.memory import EpisodeMemory
from embodied_r_ros.core.perception_parser import parse_frame_description
from embodied_r_ros.core.perception_prompts import first_frame_prompt, pair_prompt
from embodied_r_ros.core.progress import ProcessedFrames
from embodied_r_ros.core.types import FrameDescription, GenerationSettings

LOG = logging.getLogger("embodied_r_ros.perception")

# Given (previous stamp, current stamp), return an action label measured from odometry,
# or None when no measurement is available.
MotionSource = Callable[[float, float], "str | None"]


@dataclass(frozen=True)
class PerceptionJob:
    episode_id: str
    keyframe_index: int
    image: np.ndarray
    stamp_s: float


def describe_keyframe(perceiver: Perceiver, image: np.ndarray, previous: np.ndarray | None,
                      keyframe_index: int, settings: GenerationSettings | None = None,
                      question: str | None = None, stamp_s: float = 0.0) -> FrameDescription:
    """One perception call for one key frame (alone, or paired with the previous one)."""
    start = time.monotonic()
    if previous is None:
        text = perceiver.describe([image], first_frame_prompt(question), settings)
    else:
        text = perceiver.describe([previous, image], pair_prompt(question), settings)
    parsed = parse_frame_description(text, first=previous is None)
    return FrameDescription(
        keyframe_index=keyframe_index,
        observation=parsed.observation,
        action=parsed.action,
        raw_text=parsed.raw_text,
        action_source="vlm" if parsed.action else "",
        mode="on_query" if question else "streaming",
        latency_s=time.monotonic() - start,
        stamp_s=stamp_s,
    )


class PerceptionWorker:
    """Describes queued key frames on a worker thread and fills an EpisodeMemory.

    `on_description` receives every result, including failures (mode "failed", the
    error in raw_text), which are not added to the memory.
    """

    def __init__(self, perceiver: Perceiver, memory: EpisodeMemory, *,
                 settings: GenerationSettings | None = None,
                 motion_source: MotionSource | None = None,
                 on_description: Callable[[FrameDescription], None] | None = None,
                 max_queue: int = 256) -> None:
        self.perceiver = perceiver
        self.memory = memory
        self.settings = settings
        self.motion_source = motion_source
        self.on_description = on_description
        self._queue: queue.Queue[PerceptionJob | None] = queue.Queue(maxsize=max_queue)
        self._lock = threading.Lock()
        self.progress = ProcessedFrames()
        self._previous: tuple[np.ndarray, float] | None = None
        self._episode_id = memory.episode_id
        self._thread = threading.Thread(target=self._run, name="perception", daemon=True)
        self._thread.start()

    # -- input --------------------------------------------------------------------------------
    def submit(self, job: PerceptionJob) -> None:
        """Queue a key frame; blocks if the queue is full (back-pressure, nothing dropped)."""
        self._queue.put(job)

    def reset(self, episode_id: str) -> None:
        """Start a new episode: queued frames of the old one are discarded when reached."""
        with self._lock:
            self._episode_id = episode_id
            self._previous = None
            self.progress.reset()
            self.memory.clear(episode_id)

    # -- waiting --------------------------------------------------------------------------------
    def wait_for(self, keyframe_index: int, timeout_s: float,
                 should_stop: Callable[[], bool] | None = None) -> bool:
        """Wait until key frame `keyframe_index` (and so all before it) is processed."""
        return self.progress.wait_for(keyframe_index, timeout_s, should_stop)

    @property
    def failures(self) -> dict[int, str]:
        return self.progress.failures

    def pending(self) -> int:
        return self._queue.qsize()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout=timeout_s)

    # -- worker -------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                if job.episode_id != self._episode_id:
                    continue  # frame of an episode that was reset meanwhile
                previous = self._previous
            try:
                description = describe_keyframe(
                    self.perceiver, job.image, previous[0] if previous else None,
                    job.keyframe_index, self.settings, stamp_s=job.stamp_s)
                if previous is not None and self.motion_source is not None:
                    measured = self.motion_source(previous[1], job.stamp_s)
                    if measured:
                        description.action = measured
                        description.action_source = "odometry"
            except Exception as exc:  # noqa: BLE001 - any backend failure is recorded
                LOG.error("key frame %d could not be described: %s. The answer will be "
                          "based on the other key frames; check the perception model/server.",
                          job.keyframe_index, exc)
                description = FrameDescription(keyframe_index=job.keyframe_index,
                                               observation="", raw_text=str(exc),
                                               mode="failed", stamp_s=job.stamp_s)
            with self._lock:
                if job.episode_id != self._episode_id:
                    continue
                self._previous = (job.image, job.stamp_s)
                if description.mode == "failed":
                    self.progress.mark_failed(job.keyframe_index, description.raw_text)
                else:
                    self.memory.put(description)
                    self.progress.mark_done(job.keyframe_index)
            if self.on_description is not None:
                try:
                    self.on_description(description)
                except Exception:  # noqa: BLE001
                    LOG.exception("description callback failed")
