"""Key-frame selection (docs/method.md §2): the reference rules, shared by whole-clip
extraction and the live stream, with bounded state.

Exact rules, as the reference runs them on a video file:

1. Sampling (`reference_sample_indices`): step = int(fps) where fps is OpenCV's
   CAP_PROP_FPS (29.97 fps gives 29); keep the frames with index 0, step, 2*step, ... below
   the frame count the container reports (int(CAP_PROP_FRAME_COUNT), even if inaccurate),
   and also frame count - 1 when not already kept. Frames are numbered in the order
   `cv2.VideoCapture.read()` returns them; reading stops at the first failed read. A step
   below 1 (fps < 1) is an InvalidRequestError (the reference crashes there). With
   `KeyFrameParams.sample_fps` other than 1 the step is int(fps / sample_fps); <= 0 keeps
   every frame.
2. Features (`detect_features`): ORB with OpenCV defaults on the grey image of the full
   decoded frame (BGR -> grey for video frames; RGB -> grey for live frames gives the same
   grey values).
3. Comparison (`StreamingKeyFrameSelector.push_features`), always against the last KEPT key
   frame: no descriptors in either frame -> keep; brute-force Hamming matching with
   cross-check, query = key frame, train = current frame; matches sorted by distance
   (stable, ties keep the matcher's order) BEFORE the point arrays are built; 10 matches or
   fewer (`min_matches`) -> keep; homography current -> key frame points, RANSAC with
   reprojection threshold 5.0; none found -> keep; otherwise overlap (see
   `keyframe_overlap`: corners (0,0),(w,0),(w,h),(0,h) of the key frame, int32 truncation,
   fillPoly masks) and keep when overlap < 0.5. The key frame's features change only when
   a frame is kept.
4. The first sampled frame is always a key frame; the last sampled frame is appended when
   it is not one.
5. Count rule (`reference_count_rule`): fewer than min_keyframes (4) key frames -> the
   sampler below applied to ALL sampled positions with m = 4; more than max_keyframes (32)
   -> the sampler applied to the key-frame list with m = 32; otherwise unchanged. Sampler
   (`reference_subsample`): a list of n <= m items is returned as it is; otherwise first,
   last and, for i = 0 .. m-3, the item at int(round(i * step)) + 1 with
   step = (n - 2) / (m - 2) computed first as a float (Python's round: halves to even).
   21 sampled frames -> [0, 1, 11, 20]; 10 -> [0, 1, 5, 9].

`select_keyframes` applies 2-5 to frames already sampled; `extract_keyframes_from_video`
applies 1-5 to a video file and returns exactly the reference's final indices. It decodes
only what the sampled frames need (see `video_frames`); the ORB features of each sampled
frame are computed on the thread that decoded it (PyAV segment decoders side by side) or on
a pool beside a single decoder, and the decisions are taken in frame order on the calling
thread. What waits between the stages is bounded: where the decoder threads compute the
features, at most 2 x 16 features (about 20 kB each) per thread wait for the decisions,
or 2 x 4 frames per thread when key-frame images are returned; where a pool computes them,
at most 2 * workers + 1 frames wait for or are in the pool.

Live stream differences (robot): frames are thinned by `FrameRateSampler`, which uses the
frames' header stamps (1 Hz of stream time) instead of frame numbers, since a live stream
has no frame count and may drop frames; the "last frame" is the frame current when a
question arrives (forced by the tracker), and `apply_count_rule` spreads its picks evenly.
The per-frame decision is the same code as the offline path (`StreamingKeyFrameSelector`),
so the same sampled frames give the same decisions. `push()` never raises on a uint8
(H, W) / (H, W, 1) / (H, W, 3) image of any size >= 1 x 1: an image ORB cannot process
(a one-pixel-wide or -high image) gives a decision with reason "unusable_image", is not a
key frame and leaves the selector's state unchanged.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import cv2
import numpy as np

from embodied_r_ros.core.descriptor_matching import cross_checked_matches
from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.keyframe_overlap import overlap_fraction, project_corners
from embodied_r_ros.core.shards import available_cores
from embodied_r_ros.core.video_frames import (
    FastDecodeUnavailable,
    Frames,
    VideoInfo,
    make_reader,
    probe_video_and_first_frame,
    strategies_for,
)

LOG = logging.getLogger("embodied_r_ros.keyframes")

REASON_FIRST = "first"
REASON_LOW_OVERLAP = "low_overlap"
REASON_NO_FEATURES = "no_features"
REASON_FEW_MATCHES = "few_matches"
REASON_NO_HOMOGRAPHY = "no_homography"
REASON_HIGH_OVERLAP = "high_overlap"
REASON_UNUSABLE_IMAGE = "unusable_image"
REASONS = (
    REASON_FIRST,
    REASON_LOW_OVERLAP,
    REASON_NO_FEATURES,
    REASON_FEW_MATCHES,
    REASON_NO_HOMOGRAPHY,
    REASON_HIGH_OVERLAP,
    REASON_UNUSABLE_IMAGE,
)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, bool
    )


@dataclass
class KeyFrameParams:
    """Settings of the key-frame selector; defaults are the reference values.

    - sample_fps: frames examined per second. Live streams: per second of stream time (the
      stamp-based `FrameRateSampler`). Video files: every ``int(video_fps / sample_fps)``-th
      frame plus the last one (the reference rule; 1.0 gives step ``int(video_fps)``).
      <= 0 examines every frame.
    - overlap_threshold: keep a frame when its overlap with the last key frame is below it.
    - min_matches: keep a frame when there are this many cross-checked matches or fewer
      (at least 3, so a homography always has 4 point pairs).
    - ransac_reproj_threshold: RANSAC inlier distance in pixels.
    - min_keyframes / max_keyframes: count limits applied to a finished clip (the
      reference count rule for video files, `apply_count_rule` for the live stream).
    """

    sample_fps: float = 1.0
    overlap_threshold: float = 0.5
    min_matches: int = 10
    ransac_reproj_threshold: float = 5.0
    min_keyframes: int = 4
    max_keyframes: int = 32

    def __post_init__(self) -> None:
        if not _is_real(self.sample_fps) or not math.isfinite(self.sample_fps):
            raise InvalidRequestError(f"sample_fps must be a finite number, got {self.sample_fps!r}")
        if (
            not _is_real(self.overlap_threshold)
            or not math.isfinite(self.overlap_threshold)
            or not 0.0 <= self.overlap_threshold <= 1.0
        ):
            raise InvalidRequestError(
                f"overlap_threshold must be in [0, 1], got {self.overlap_threshold!r}"
            )
        if not _is_int(self.min_matches) or self.min_matches < 3:
            raise InvalidRequestError(f"min_matches must be an integer >= 3, got {self.min_matches!r}")
        if (
            not _is_real(self.ransac_reproj_threshold)
            or not math.isfinite(self.ransac_reproj_threshold)
            or self.ransac_reproj_threshold <= 0
        ):
            raise InvalidRequestError(
                "ransac_reproj_threshold must be a positive number, got "
                f"{self.ransac_reproj_threshold!r}"
            )
        _check_counts(self.min_keyframes, self.max_keyframes)


def _check_counts(min_keyframes: object, max_keyframes: object) -> None:
    if not isinstance(min_keyframes, (int, np.integer)) or not _is_int(min_keyframes) or min_keyframes < 1:
        raise InvalidRequestError(f"min_keyframes must be an integer >= 1, got {min_keyframes!r}")
    if (not isinstance(max_keyframes, (int, np.integer)) or not _is_int(max_keyframes)
            or max_keyframes < max(2, int(min_keyframes))):
        raise InvalidRequestError(
            f"max_keyframes must be an integer >= max(2, min_keyframes), got {max_keyframes!r}"
        )


@dataclass(frozen=True)
class KeyFrameDecision:
    """Outcome of one push: kept or not, the measured overlap (-1.0 if none) and why."""

    is_keyframe: bool
    overlap: float
    reason: str


class FrameRateSampler:
    """Thins a stream to `fps` frames per second of *stream* time (header stamps).

    Behaviour, stamp by stamp:

    - The first stamp is accepted and fixes the origin of a grid of slots of length
      ``1 / fps``. A later stamp is accepted when it falls in a slot after the slot of the
      last accepted stamp (slot = floor((stamp - origin) * fps + 1e-6)); so at most one
      frame per slot, the first one to arrive. The grid does not drift: jitter moves
      individual picks by at most one source frame but the long-run rate stays exactly
      `fps`. After a gap (dropped frames, paused stream) the next frame is taken at once
      and missed slots are not made up with a burst.
    - A stamp earlier than the last accepted one is a late (out-of-order) frame and is
      rejected, as is a duplicate stamp; but a jump back of more than `max_backward_s`
      seconds is taken as a restarted clock (bag loop, sim reset): the sampler starts over
      from that stamp and accepts it.
    - ``fps <= 0`` accepts every frame. Non-finite stamps raise InvalidRequestError.
    """

    SLOT_EPS = 1e-6

    def __init__(self, fps: float, *, max_backward_s: float = 1.0) -> None:
        if not _is_real(fps) or not math.isfinite(fps):
            raise InvalidRequestError(f"sampler fps must be a finite number, got {fps!r}")
        if not _is_real(max_backward_s) or not max_backward_s >= 0:
            raise InvalidRequestError(f"max_backward_s must be >= 0, got {max_backward_s!r}")
        self.fps = float(fps)
        self.max_backward_s = float(max_backward_s)
        self.reset()

    def reset(self) -> None:
        """Forget the stream; the next stamp is accepted."""
        self._origin: float | None = None
        self._last: float = 0.0
        self._next_slot = 1

    def accept(self, stamp_s: float) -> bool:
        """Whether the frame with this stream stamp (seconds) is kept."""
        stamp = float(stamp_s)
        if not math.isfinite(stamp):
            raise InvalidRequestError(f"frame stamp must be finite, got {stamp_s!r}")
        if self.fps <= 0:
            return True
        if self._origin is None or self._last - stamp > self.max_backward_s:
            self._origin, self._last, self._next_slot = stamp, stamp, 1
            return True
        if stamp <= self._last:
            return False
        slot = math.floor((stamp - self._origin) * self.fps + self.SLOT_EPS)
        if slot < self._next_slot:
            return False
        self._next_slot = slot + 1
        self._last = stamp
        return True


# -- reference sampling of a video file ------------------------------------------------------


def sampling_step(video_fps: float, sample_fps: float = 1.0) -> int:
    """Frames between sampled frames of a video file: int(video_fps / sample_fps).

    With the default sample_fps = 1.0 this is int(video_fps), the reference's step (29.97 fps
    -> 29). sample_fps <= 0 gives 1 (every frame). A step below 1 raises InvalidRequestError.
    """
    if not _is_real(video_fps) or not math.isfinite(video_fps) or video_fps <= 0:
        raise InvalidRequestError(
            f"video frame rate must be a positive number, got {video_fps!r}; the file's "
            "header has no usable frame rate - re-mux it with a frame rate set"
        )
    if not _is_real(sample_fps) or not math.isfinite(sample_fps):
        raise InvalidRequestError(f"sample_fps must be a finite number, got {sample_fps!r}")
    if sample_fps <= 0:
        return 1
    step = int(video_fps / sample_fps)
    if step < 1:
        raise InvalidRequestError(
            f"a {video_fps:g} fps video sampled at {sample_fps:g} fps gives a sampling step of "
            f"{step} frames (step = int(fps / sample_fps)); the reference cannot sample it - "
            "use a lower sample_fps (--fps) so that the step is at least 1"
        )
    return step


def reference_sample_indices(frame_count: int, step: int) -> list[int]:
    """Frame numbers the reference keeps: 0, step, 2*step, ... below `frame_count`, then
    `frame_count - 1` when missing. `frame_count` is the container's count (may be wrong:
    numbers the video does not reach are simply never decoded). Empty for a count <= 0."""
    if not _is_int(step) or step < 1:
        raise InvalidRequestError(f"sampling step must be an integer >= 1, got {step!r}")
    if not _is_int(frame_count):
        raise InvalidRequestError(f"frame count must be an integer, got {frame_count!r}")
    if frame_count <= 0:
        return []
    indices = list(range(0, frame_count, step))
    if indices[-1] != frame_count - 1:
        indices.append(frame_count - 1)
    return indices


# -- features and the per-frame decision ------------------------------------------------------


def to_gray(image: np.ndarray) -> np.ndarray:
    """Grey uint8 (H, W) of an RGB (H, W, 3) or grey (H, W) / (H, W, 1) uint8 image, H, W >= 1.

    Raises InvalidRequestError for anything else (wrong type, dtype, channel count or an
    empty image)."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise InvalidRequestError("key-frame image must be a uint8 numpy array")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[2] != 3):
        raise InvalidRequestError(
            f"key-frame image must be RGB (H, W, 3) or grey (H, W), got shape {image.shape}"
        )
    if image.shape[0] < 1 or image.shape[1] < 1:
        raise InvalidRequestError(f"key-frame image is empty: shape {image.shape}")
    if image.ndim == 3:
        return cv2.cvtColor(np.ascontiguousarray(image), cv2.COLOR_RGB2GRAY)
    return np.ascontiguousarray(image)


@dataclass(frozen=True)
class FrameFeatures:
    """ORB features of one grey frame: key-point positions (N, 2) float32, descriptors
    (N, 32) uint8 or None when ORB found none, and the frame size. `usable` is False when
    ORB could not process the image at all (e.g. a frame one pixel wide)."""

    points: np.ndarray
    descriptors: np.ndarray | None
    width: int
    height: int
    usable: bool = True


_EMPTY_POINTS = np.empty((0, 2), np.float32)


def detect_features(gray: np.ndarray, orb: cv2.ORB) -> FrameFeatures:
    """ORB (OpenCV defaults) on a grey uint8 frame; never raises for a 2-D uint8 array."""
    height, width = gray.shape[:2]
    try:
        keypoints, descriptors = orb.detectAndCompute(gray, None)
    except cv2.error:
        return FrameFeatures(_EMPTY_POINTS, None, width, height, usable=False)
    if keypoints:
        points = np.asarray(cv2.KeyPoint.convert(keypoints), np.float32).reshape(-1, 2)
    else:
        points = _EMPTY_POINTS
    return FrameFeatures(points, descriptors, width, height)


_THREAD_ORB = threading.local()


def detect_features_threadsafe(gray: np.ndarray) -> FrameFeatures:
    """`detect_features` with one ORB detector per thread (for worker pools)."""
    orb = getattr(_THREAD_ORB, "orb", None)
    if orb is None:
        orb = _THREAD_ORB.orb = cv2.ORB.create()
    return detect_features(gray, orb)


class StreamingKeyFrameSelector:
    """Decides frame by frame whether a sampled frame is a new key frame (rules 2-4 of the
    module docstring, minus appending the last frame, which needs the end of the clip).

    State is bounded: the key points (N x 2 float32), descriptors (N x 32 uint8) and size
    of the last kept key frame, plus two counters. ORB's default cap of 500 features keeps
    that under ~20 kB whatever the stream length.
    """

    def __init__(self, params: KeyFrameParams | None = None) -> None:
        self.params = params if params is not None else KeyFrameParams()
        self._orb = cv2.ORB.create()
        self.reset()

    def reset(self) -> None:
        """Start a new episode: the next usable frame pushed is a key frame."""
        self._key: FrameFeatures | None = None
        self.n_pushed = 0
        self.n_keyframes = 0

    def features(self, image: np.ndarray) -> FrameFeatures:
        """ORB features of an RGB or grey uint8 image (InvalidRequestError for a bad array)."""
        return detect_features(to_gray(image), self._orb)

    def push(self, image: np.ndarray) -> KeyFrameDecision:
        """Examine one sampled frame (RGB or grey uint8, any size >= 1 x 1) against the last
        key frame. Raises InvalidRequestError only for a wrong dtype or shape."""
        return self.push_features(self.features(image))

    def push_features(self, current: FrameFeatures) -> KeyFrameDecision:
        """The decision for a frame whose features were computed already (the offline path
        computes them on a worker pool); updates the key frame when the frame is kept."""
        self.n_pushed += 1
        if not current.usable:
            return KeyFrameDecision(False, -1.0, REASON_UNUSABLE_IMAGE)
        decision = self._decide(current)
        if decision.is_keyframe:
            self._key = current
            self.n_keyframes += 1
        return decision

    def _decide(self, current: FrameFeatures) -> KeyFrameDecision:
        key = self._key
        if key is None:
            return KeyFrameDecision(True, -1.0, REASON_FIRST)
        if key.descriptors is None or current.descriptors is None:
            return KeyFrameDecision(True, -1.0, REASON_NO_FEATURES)
        # The reference's BFMatcher(NORM_HAMMING, crossCheck=True) pairs, sorted by distance.
        matches = cross_checked_matches(key.descriptors, current.descriptors).by_distance()
        if len(matches) <= self.params.min_matches:
            return KeyFrameDecision(True, -1.0, REASON_FEW_MATCHES)
        key_points = key.points[matches.query_idx].reshape(-1, 1, 2)
        current_points = current.points[matches.train_idx].reshape(-1, 1, 2)
        try:
            homography, _ = cv2.findHomography(
                current_points, key_points, cv2.RANSAC,
                float(self.params.ransac_reproj_threshold),
            )
        except cv2.error:
            homography = None
        if homography is None:
            return KeyFrameDecision(True, -1.0, REASON_NO_HOMOGRAPHY)
        quad = project_corners(homography, key.width, key.height)
        threshold = self.params.overlap_threshold
        overlap, _ = overlap_fraction(quad, key.width, key.height, threshold)
        if overlap < threshold:
            return KeyFrameDecision(True, overlap, REASON_LOW_OVERLAP)
        return KeyFrameDecision(False, overlap, REASON_HIGH_OVERLAP)


# -- count rules ----------------------------------------------------------------------------


def reference_subsample(items: Sequence[int], m: int) -> list[int]:
    """The reference's sampler: `items` unchanged when len <= m; otherwise first, last and,
    for i = 0 .. m-3, items[int(round(i * step)) + 1] with step = (n - 2) / (m - 2).

    m = 2 gives [first, last] (the reference divides by zero there). Front-heavy by design:
    reproduced exactly, including Python's round-half-to-even of i * step.
    """
    if not _is_int(m) or m < 2:
        raise InvalidRequestError(f"sample size m must be an integer >= 2, got {m!r}")
    items = list(items)
    n = len(items)
    if n <= m:
        return items
    n_middle = m - 2
    if n_middle == 0:
        return [items[0], items[-1]]
    step = (n - 2) / n_middle
    middle = [items[int(round(i * step)) + 1] for i in range(n_middle)]
    return [items[0], *middle, items[-1]]


def reference_count_rule(
    keyframe_positions: Sequence[int],
    n_sampled: int,
    min_keyframes: int = 4,
    max_keyframes: int = 32,
) -> list[int]:
    """Final key frames of a finished clip by the reference's rule (rules 4-5 above).

    `keyframe_positions`: the selector's picks as strictly increasing positions among the
    `n_sampled` sampled frames, first position 0. The last position is appended when
    missing; then fewer than `min_keyframes` -> `reference_subsample(range(n_sampled),
    min_keyframes)`, more than `max_keyframes` -> `reference_subsample(keyframes,
    max_keyframes)`.
    """
    _check_counts(min_keyframes, max_keyframes)
    if not _is_int(n_sampled) or n_sampled < 0:
        raise InvalidRequestError(f"n_sampled must be an integer >= 0, got {n_sampled!r}")
    kept: list[int] = []
    for pos in keyframe_positions:
        if not _is_int(pos) or not 0 <= pos < n_sampled or (kept and pos <= kept[-1]):
            raise InvalidRequestError(
                f"key-frame positions must increase strictly within 0..{n_sampled - 1}; "
                f"got {list(keyframe_positions)!r}"
            )
        kept.append(int(pos))
    if n_sampled == 0:
        return []
    if not kept or kept[-1] != n_sampled - 1:
        kept.append(n_sampled - 1)
    if len(kept) < min_keyframes:
        return reference_subsample(range(n_sampled), max(2, min_keyframes))
    if len(kept) > max_keyframes:
        return reference_subsample(kept, max_keyframes)
    return kept


def even_picks(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n), both ends included, strictly increasing.

    Formula: ``floor(i * (n - 1) / (k - 1))`` for i = 0..k-1 (exact integer arithmetic;
    the same as ``np.linspace(0, n - 1, k).astype(int)`` without float rounding). k >= n
    gives all of range(n); k == 1 gives the middle index ``(n - 1) // 2``; k <= 0 none.
    """
    if k <= 0 or n <= 0:
        return []
    if k >= n:
        return list(range(n))
    if k == 1:
        return [(n - 1) // 2]
    return [(i * (n - 1)) // (k - 1) for i in range(k)]


def apply_count_rule(
    keyframe_positions: Sequence[int],
    n_sampled: int,
    min_keyframes: int = 4,
    max_keyframes: int = 32,
) -> list[int]:
    """Live-stream count rule: final key frames as sorted unique positions among sampled frames.

    Used by the robot pipeline (episodes of a live stream), not for video files: those use
    `reference_count_rule`, the reference's rule. Steps:

    1. The last sampled frame (n_sampled - 1) is added if missing.
    2. Fewer than `min_keyframes`: the kept set is replaced by `even_picks(n_sampled,
       min_keyframes)`, i.e. min_keyframes positions spread evenly over all sampled frames
       (all of them if there are fewer).
    3. More than `max_keyframes`: the first and last kept positions stay, and
       ``max_keyframes - 2`` of the ones in between are chosen with `even_picks` over that
       middle list (so its first and last members are among them when room allows).
    """
    _check_counts(min_keyframes, max_keyframes)
    if not _is_int(n_sampled) or n_sampled < 0:
        raise InvalidRequestError(f"n_sampled must be an integer >= 0, got {n_sampled!r}")
    kept = set()
    for pos in keyframe_positions:
        if not _is_int(pos) or not 0 <= pos < n_sampled:
            raise InvalidRequestError(f"key-frame position {pos!r} outside 0..{n_sampled - 1}")
        kept.add(int(pos))
    if n_sampled == 0:
        return []
    kept.add(n_sampled - 1)
    ordered = sorted(kept)
    if len(ordered) < min_keyframes:
        return even_picks(n_sampled, min_keyframes)
    if len(ordered) > max_keyframes:
        middle = ordered[1:-1]
        chosen = [middle[i] for i in even_picks(len(middle), max_keyframes - 2)]
        return [ordered[0], *chosen, ordered[-1]]
    return ordered


def select_keyframes(
    frames: Iterable[np.ndarray], params: KeyFrameParams | None = None
) -> list[int]:
    """Final key-frame positions of already-sampled frames (RGB or grey uint8), by the
    reference rules 2-5 (the frames are the sampled frames, in order)."""
    params = params if params is not None else KeyFrameParams()
    selector = StreamingKeyFrameSelector(params)
    kept: list[int] = []
    for position, image in enumerate(frames):
        decision = selector.push(image)
        if decision.reason == REASON_UNUSABLE_IMAGE:
            raise InvalidRequestError(
                f"sampled frame {position} ({np.asarray(image).shape}) is too small for ORB "
                "feature detection; frames must be at least 2 x 2 pixels"
            )
        if decision.is_keyframe:
            kept.append(position)
    return reference_count_rule(kept, selector.n_pushed, params.min_keyframes,
                                params.max_keyframes)


@dataclass
class VideoKeyFrames:
    """Result of `extract_keyframes_from_video`.

    sampled_indices: final key frames as positions among the sampled frames.
    source_frames: the same key frames as frame numbers of the video (cap.read() order).
    selected_positions: the selector's key frames before the count rule (last frame
      appended), as positions among the sampled frames.
    n_sampled: sampled frames decoded; n_source_frames: the container's frame count (the
      count sampling used); video_fps: the container's frame rate (OpenCV's CAP_PROP_FPS).
    seconds: wall time. decode_seconds: CPU seconds spent decoding and converting frames to
      BGR; select_seconds: CPU seconds spent on grey conversion, ORB, matching, homography
      and overlap; both summed over all threads (the stages run side by side, so together
      they can exceed the wall time).
    images: RGB images of the final key frames when requested, else empty.
    decode_strategy: "pyav", "intra" or "sequential" (see video_frames); fallbacks: why
      faster strategies were not used for this file.
    packets_read / packets_decoded: packets (frames) the decoding pass read from the file
      and sent to the decoder (PyAV skips some; OpenCV's grab() decodes all it reads).
    """

    sampled_indices: list[int]
    source_frames: list[int]
    n_sampled: int
    video_fps: float
    n_source_frames: int
    seconds: float
    images: list[np.ndarray] = field(default_factory=list)
    decode_strategy: str = ""
    selected_positions: list[int] = field(default_factory=list)
    decode_seconds: float = 0.0
    select_seconds: float = 0.0
    fallbacks: list[str] = field(default_factory=list)
    packets_read: int = 0
    packets_decoded: int = 0
    # per sampled frame, in order: the selector's (overlap with the key frame before it,
    # -1.0 when none was measured; reason), for tuning the thresholds
    decisions: list[tuple[float, str]] = field(default_factory=list)
    sampled_frames: list[int] = field(default_factory=list)  # frame number of each sampled frame


@dataclass
class _Selection:
    kept: list[int]
    sources: list[int]
    cache: dict[int, np.ndarray] | None
    latest: tuple[int, np.ndarray] | None
    decide_cpu_s: float
    decisions: list[tuple[float, str]] = field(default_factory=list)


class _FeatureTransform:
    """What each decoder (or pool) thread does with a sampled BGR frame: grey, ORB features
    (one detector per thread), and the image itself only when key-frame images are wanted.
    Adds up the CPU time it takes over all threads."""

    def __init__(self, keep_images: bool) -> None:
        self.keep_images = keep_images
        self.cpu_s = 0.0
        self._lock = threading.Lock()

    def __call__(self, number: int, bgr: np.ndarray) -> tuple[FrameFeatures, np.ndarray | None]:
        t0 = time.thread_time()
        features = detect_features_threadsafe(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY))
        spent = time.thread_time() - t0
        with self._lock:
            self.cpu_s += spent
        return features, (bgr if self.keep_images else None)


def _select_stream(
    frames: Frames,
    params: KeyFrameParams,
    *,
    keep_images: bool,
    on_frame: Callable[[int], None] | None = None,
) -> _Selection:
    """Rules 2-3 over the sampled frames' features, in frame order, on the calling thread;
    `on_frame(n)` after the n-th frame."""
    selector = StreamingKeyFrameSelector(params)
    out = _Selection([], [], {} if keep_images else None, None, 0.0)
    try:
        for number, (feats, bgr) in frames:
            t0 = time.thread_time()
            decision = selector.push_features(feats)
            out.decide_cpu_s += time.thread_time() - t0
            if decision.reason == REASON_UNUSABLE_IMAGE:
                raise InvalidRequestError(
                    f"frame {number} ({feats.width} x {feats.height}) is too small for ORB "
                    "feature detection (the reference cannot process it either)"
                )
            position = len(out.sources)
            out.sources.append(number)
            out.decisions.append((float(decision.overlap), decision.reason))
            if decision.is_keyframe:
                out.kept.append(position)
            if on_frame is not None:
                on_frame(position + 1)
            if bgr is not None:
                rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
                out.latest = (position, rgb)
                if out.cache is not None and len(out.kept) > params.max_keyframes:
                    out.cache = None  # too many to hold; a targeted pass fetches the final ones
                elif out.cache is not None and decision.is_keyframe:
                    out.cache[position] = rgb
            del bgr
    finally:
        frames.close()  # stops the decoders now, also when selection stopped early
    return out


def _fetch_frames(strategy: str, info: VideoInfo, numbers: list[int]) -> dict[int, np.ndarray]:
    """Second, targeted pass: BGR images of the given frame numbers (plain OpenCV if the
    strategy of the first pass fails this time)."""
    try:
        fetched = dict(make_reader(strategy, info, numbers, None, threads=0).frames())
    except FastDecodeUnavailable as exc:
        LOG.debug("targeted pass over %s: %s decoding not used: %s", info.path, strategy, exc)
        fetched = {}
    if any(n not in fetched for n in numbers):
        fetched = dict(make_reader("sequential", info, numbers, None).frames())
    if any(n not in fetched for n in numbers):
        raise InvalidRequestError(f"video changed while it was read (frames {numbers} "
                                  f"no longer decode): {info.path}")
    return fetched


def extract_keyframes_from_video(
    path: str | Path,
    params: KeyFrameParams | None = None,
    *,
    return_images: bool = False,
    fast_decode: bool = True,
    workers: int | None = None,
    decoder: str = "auto",
    on_progress: Callable[[int, int], None] | None = None,
) -> VideoKeyFrames:
    """The reference's final key frames of a video file (rules 1-5), in one streaming pass.

    - fast_decode: try the PyAV decoder (skips the decoding sampling allows), then
      OpenCV's raw Motion-JPEG packets, then plain OpenCV grab()/retrieve(); a strategy
      that cannot guarantee OpenCV's exact frames for this file hands over to the next (the
      pass restarts; `fallbacks` says why). False: plain OpenCV only.
    - decoder: "auto" (the order above) or one strategy ("pyav", "intra", "sequential") to
      try first, with plain OpenCV behind it.
    - workers: threads (default: all usable CPUs; 1 = everything on the calling thread).
      The PyAV decoder runs up to that many single-threaded decoders on closed segments
      side by side, each computing the ORB features of its own frames when there are at
      least as many segments as workers; otherwise the frames go to that many ORB threads
      beside the decoding. Decisions are taken in frame order on the calling thread.
    - return_images: also return the final key frames as RGB arrays. Key-frame images are
      cached while there are at most `max_keyframes` of them (plus the latest sampled
      frame); frames the count rule picks that were not cached are fetched by a second,
      targeted pass that decodes only what they need.
    - on_progress: called as on_progress(done, total) after each sampled frame is decided
      (total = frames the sampling keeps); `done` starts again from 1 when a decoding
      strategy hands over to the next one.

    Missing or unreadable files, a frame rate below the sampling rate and videos with no
    decodable sampled frame raise InvalidRequestError naming the path.
    """
    started = time.perf_counter()
    params = params if params is not None else KeyFrameParams()
    n_workers = available_cores() if workers is None else int(workers)
    if n_workers < 1:
        raise InvalidRequestError(f"workers must be >= 1, got {workers!r}")
    strategies = strategies_for(fast_decode, decoder)
    info, frame0 = probe_video_and_first_frame(path, read_first=strategies[0] != "sequential")
    step = sampling_step(info.fps, params.sample_fps)
    wanted = reference_sample_indices(info.frame_count, step)
    if not wanted:
        raise InvalidRequestError(
            f"video reports {info.frame_count} frames, so the reference sampling keeps none: "
            f"{info.path} (re-mux the file so its header carries a frame count)"
        )
    def first_frame() -> np.ndarray | None:  # OpenCV's frame 0, for the fast paths' check
        return frame0

    def on_frame(done: int) -> None:
        if on_progress is not None:
            on_progress(done, len(wanted))

    fallbacks: list[str] = []
    selection: _Selection | None = None
    strategy = ""
    transform = _FeatureTransform(return_images)
    decode_cpu_s = 0.0
    for strategy in strategies:
        reader = make_reader(strategy, info, wanted, first_frame, threads=n_workers)
        try:
            # Results are features (~20 kB) unless images are kept (a frame each).
            frames = reader.frames(transform, buffer_frames=4 if return_images else 16)
            selection = _select_stream(frames, params, keep_images=return_images,
                                       on_frame=on_frame)
            break
        except FastDecodeUnavailable as exc:
            fallbacks.append(f"{strategy}: {exc}")
            LOG.debug("key frames of %s: %s decoding not used: %s", info.path, strategy, exc)
        finally:
            decode_cpu_s += reader.stats.decode_cpu_s
    assert selection is not None  # the last strategy never raises FastDecodeUnavailable
    n_sampled = len(selection.sources)
    if n_sampled == 0:
        raise InvalidRequestError(f"no sampled frame could be decoded from video: {info.path}")
    selected = list(selection.kept)
    if selected[-1] != n_sampled - 1:
        selected.append(n_sampled - 1)
    final = reference_count_rule(selected, n_sampled, params.min_keyframes,
                                 params.max_keyframes)
    source_frames = [selection.sources[pos] for pos in final]
    images: list[np.ndarray] = []
    if return_images:
        have = dict(selection.cache or {})
        if selection.latest is not None:
            have[selection.latest[0]] = selection.latest[1]
        missing = sorted({selection.sources[pos] for pos in final if pos not in have})
        fetched = _fetch_frames(strategy, info, missing) if missing else {}
        for pos in final:
            if pos in have:
                images.append(have[pos])
            else:
                images.append(cv2.cvtColor(fetched[selection.sources[pos]], cv2.COLOR_BGR2RGB))
    return VideoKeyFrames(
        sampled_indices=final,
        source_frames=source_frames,
        n_sampled=n_sampled,
        video_fps=info.fps,
        n_source_frames=info.frame_count,
        seconds=time.perf_counter() - started,
        images=images,
        decode_strategy=strategy,
        selected_positions=selected,
        decode_seconds=decode_cpu_s,
        select_seconds=transform.cpu_s + selection.decide_cpu_s,
        fallbacks=fallbacks,
        packets_read=reader.stats.packets,
        packets_decoded=reader.stats.sent,
        decisions=selection.decisions,
        sampled_frames=list(selection.sources),
    )
