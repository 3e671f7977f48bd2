"""Streaming key-frame tracking for a live camera: rate sampling, key-frame selection,
a bounded ring of recent sampled frames, and forcing the current view to be a key frame.

This is the robot-side wrapper around `core.keyframes`; it owns no ROS and no models.
State is bounded: the selector keeps only the last key frame's features, the ring keeps
at most `ring_size` sampled frames.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

import cv2
import numpy as np

from embodied_r_ros.core.keyframes.rules import (
    FrameRateSampler,
    KeyFrameDecision,
    KeyFrameParams,
    StreamingKeyFrameSelector,
)
from embodied_r_ros.core.types import Frame


@dataclass(frozen=True)
class KeyFrameEvent:
    """A frame that became a key frame."""

    keyframe_index: int  # 0, 1, 2 ... within the episode
    sampled_index: int  # position among the sampled (1 fps) frames of the episode
    frame: Frame
    overlap: float
    reason: str


def downscale(image: np.ndarray, max_side: int) -> np.ndarray:
    """Shrink so the longer side is at most `max_side` pixels (0 = unchanged)."""
    height, width = image.shape[:2]
    longest = max(height, width)
    if max_side <= 0 or longest <= max_side:
        return image
    scale = max_side / float(longest)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return cv2.resize(image, size, interpolation=cv2.INTER_AREA)


class KeyFrameTracker:
    """Feeds camera frames through sampler and selector; thread-safe.

    Use `offer(stamp)` first (cheap: decides from the stamp alone whether the frame is
    sampled, so unsampled frames are never decoded), then `push_sampled(frame)` with the
    decoded frame; `push(frame)` does both. Key-frame detection always runs on the frame
    as given (full decoded resolution, docs/method.md §2); the image kept in the ring and
    handed on in events is then shrunk so its longer side is at most `image_max_side`
    (0 = full size), which bounds memory and is the size the VLM sees.

    The selector's decisions are exactly the offline extractor's on the same sampled
    frames: forcing the current view (`force_current`) adds a key frame for the question
    but does not change the frame later frames are compared with.
    """

    def __init__(self, params: KeyFrameParams, *, ring_size: int = 120,
                 image_max_side: int = 0) -> None:
        self.params = params
        self.image_max_side = image_max_side
        self._sampler = FrameRateSampler(params.sample_fps)
        self._selector = StreamingKeyFrameSelector(params)
        self._ring: deque[tuple[int, Frame]] = deque(maxlen=max(1, ring_size))
        self._lock = threading.Lock()
        self._n_sampled = 0
        self._n_keyframes = 0
        self._last_keyframe_sampled = -1
        self._n_received = 0

    # -- feeding ------------------------------------------------------------------------
    def offer(self, stamp_s: float) -> bool:
        """Count one received frame; True when the sampler keeps it (then call
        `push_sampled`). Raises InvalidRequestError for a non-finite stamp."""
        with self._lock:
            self._n_received += 1
            return self._sampler.accept(stamp_s)

    def push_sampled(self, frame: Frame) -> KeyFrameEvent | None:
        """Examine a frame the sampler kept; returns an event when it became a key frame."""
        with self._lock:
            decision: KeyFrameDecision = self._selector.push(frame.image)
            image = downscale(frame.image, self.image_max_side)
            if image is not frame.image:
                frame = Frame(image=image, stamp_s=frame.stamp_s, index=frame.index,
                              frame_id=frame.frame_id)
            sampled_index = self._n_sampled
            self._n_sampled += 1
            self._ring.append((sampled_index, frame))
            if not decision.is_keyframe:
                return None
            return self._emit(sampled_index, frame, decision.overlap, decision.reason)

    def push(self, frame: Frame) -> KeyFrameEvent | None:
        """`offer` + `push_sampled` for a frame that is already decoded."""
        if not self.offer(frame.stamp_s):
            return None
        return self.push_sampled(frame)

    def force_current(self) -> KeyFrameEvent | None:
        """Make the newest sampled frame a key frame if it is not one yet.

        Called when a question arrives so the last frame of the episode (the current
        view) is always part of the answer, as the method keeps a clip's last frame.
        Like that appended last frame, it does not become the selector's reference.
        """
        with self._lock:
            if not self._ring:
                return None
            sampled_index, frame = self._ring[-1]
            if sampled_index == self._last_keyframe_sampled:
                return None
            return self._emit(sampled_index, frame, -1.0, "forced")

    def _emit(self, sampled_index: int, frame: Frame, overlap: float, reason: str) -> KeyFrameEvent:
        event = KeyFrameEvent(self._n_keyframes, sampled_index, frame, float(overlap), reason)
        self._n_keyframes += 1
        self._last_keyframe_sampled = sampled_index
        return event

    # -- queries ----------------------------------------------------------------------------
    def sampled_frames(self) -> list[tuple[int, Frame]]:
        """The remembered sampled frames (oldest first), as (sampled_index, frame)."""
        with self._lock:
            return list(self._ring)

    @property
    def n_sampled(self) -> int:
        return self._n_sampled

    @property
    def n_keyframes(self) -> int:
        return self._n_keyframes

    @property
    def n_received(self) -> int:
        return self._n_received

    @property
    def last_keyframe_index(self) -> int:
        """Index of the newest key frame of the episode, -1 when none."""
        return self._n_keyframes - 1

    def continue_from(self, next_keyframe_index: int) -> None:
        """Number the next key frame `next_keyframe_index` (a restarted node continuing
        the stored episode, docs/memory.md)."""
        with self._lock:
            self._n_keyframes = max(0, int(next_keyframe_index))

    def reset(self) -> None:
        with self._lock:
            self._sampler.reset()
            self._selector.reset()
            self._ring.clear()
            self._n_sampled = 0
            self._n_keyframes = 0
            self._n_received = 0
            self._last_keyframe_sampled = -1
