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

from embodied_r_ros.core.keyframes import (
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
    """Feeds camera frames through sampler and selector; thread-safe."""

    def __init__(self, params: KeyFrameParams, *, ring_size: int = 120,
                 max_image_side: int = 0) -> None:
        self.params = params
        self.max_image_side = max_image_side
        self._sampler = FrameRateSampler(params.sample_fps)
        self._selector = StreamingKeyFrameSelector(params)
        self._ring: deque[tuple[int, Frame]] = deque(maxlen=max(1, ring_size))
        self._lock = threading.Lock()
        self._n_sampled = 0
        self._n_keyframes = 0
        self._last_keyframe_sampled = -1
        self._n_received = 0

    # -- feeding ------------------------------------------------------------------------
    def push(self, frame: Frame) -> KeyFrameEvent | None:
        """Offer one camera frame; returns an event when it became a key frame."""
        with self._lock:
            self._n_received += 1
            if not self._sampler.accept(frame.stamp_s):
                return None
            image = downscale(frame.image, self.max_image_side)
            if image is not frame.image:
                frame = Frame(image=image, stamp_s=frame.stamp_s, index=frame.index,
                              frame_id=frame.frame_id)
            sampled_index = self._n_sampled
            self._n_sampled += 1
            self._ring.append((sampled_index, frame))
            decision: KeyFrameDecision = self._selector.push(image)
            if not decision.is_keyframe:
                return None
            return self._emit(sampled_index, frame, decision.overlap, decision.reason)

    def force_current(self) -> KeyFrameEvent | None:
        """Make the newest sampled frame a key frame if it is not one yet.

        Called when a question arrives so the last frame of the episode (the current
        view) is always part of the answer, as the method requires. Later frames are
        compared against this frame.
        """
        with self._lock:
            if not self._ring:
                return None
            sampled_index, frame = self._ring[-1]
            if sampled_index == self._last_keyframe_sampled:
                return None
            self._selector.reset()
            self._selector.push(frame.image)  # becomes the selector's reference frame
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

    def reset(self) -> None:
        with self._lock:
            self._sampler.reset()
            self._selector.reset()
            self._ring.clear()
            self._n_sampled = 0
            self._n_keyframes = 0
            self._n_received = 0
            self._last_keyframe_sampled = -1
