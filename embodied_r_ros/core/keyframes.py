"""Key-frame selection: the reference algorithm in streaming form, with bounded state.

Pipeline (FACTS section 2):

1. `FrameRateSampler` thins the camera stream to `sample_fps` frames per second of stream
   time (1 Hz by default).
2. `StreamingKeyFrameSelector` compares each sampled frame with the last *kept* key frame:
   ORB features (OpenCV defaults) on the grey image, brute-force Hamming matching with
   cross-check, a RANSAC homography current -> previous, and the overlap of the current
   frame's projected corners with the previous frame. The frame is kept when the overlap
   is below the threshold, or when it cannot be measured (no descriptors, too few matches,
   no homography). Only the last key frame's key points, descriptors and size are stored.
3. `apply_count_rule` bounds the number of key frames for a finished clip.

`select_keyframes` runs 2+3 over frames already sampled; `extract_keyframes_from_video`
runs 1+2+3 over a video file without holding more than one decoded frame (plus, when
images are requested, at most `max_keyframes` key-frame images).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import cv2
import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.keyframe_overlap import overlap_fraction, project_corners
from embodied_r_ros.core.video_frames import SampledVideoReader

REASON_FIRST = "first"
REASON_LOW_OVERLAP = "low_overlap"
REASON_NO_FEATURES = "no_features"
REASON_FEW_MATCHES = "few_matches"
REASON_NO_HOMOGRAPHY = "no_homography"
REASON_HIGH_OVERLAP = "high_overlap"
REASONS = (
    REASON_FIRST,
    REASON_LOW_OVERLAP,
    REASON_NO_FEATURES,
    REASON_FEW_MATCHES,
    REASON_NO_HOMOGRAPHY,
    REASON_HIGH_OVERLAP,
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

    - sample_fps: frames per second of stream time to examine; <= 0 examines every frame.
    - overlap_threshold: keep a frame when its overlap with the last key frame is below it.
    - min_matches: keep a frame when there are this many cross-checked matches or fewer
      (at least 3, so a homography always has 4 point pairs).
    - ransac_reproj_threshold: RANSAC inlier distance in pixels.
    - min_keyframes / max_keyframes: count limits applied to a finished clip.
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
    if not _is_int(min_keyframes) or min_keyframes < 1:
        raise InvalidRequestError(f"min_keyframes must be an integer >= 1, got {min_keyframes!r}")
    if not _is_int(max_keyframes) or max_keyframes < max(2, min_keyframes):
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


def to_gray(image: np.ndarray) -> np.ndarray:
    """Grey uint8 view of an RGB (H, W, 3) or grey (H, W) / (H, W, 1) uint8 image."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise InvalidRequestError("key-frame image must be a uint8 numpy array")
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    if image.ndim == 2:
        gray = image
    elif image.ndim == 3 and image.shape[2] == 3:
        gray = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    else:
        raise InvalidRequestError(
            f"key-frame image must be RGB (H, W, 3) or grey (H, W), got shape {image.shape}"
        )
    if gray.shape[0] < 2 or gray.shape[1] < 2:
        raise InvalidRequestError(f"key-frame image too small: {image.shape}")
    return np.ascontiguousarray(gray)


class StreamingKeyFrameSelector:
    """Decides frame by frame whether a sampled frame is a new key frame.

    State is bounded: the key points (N x 2 float32), descriptors (N x 32 uint8) and size
    of the last kept key frame, plus two counters. ORB's default cap of 500 features keeps
    that under ~20 kB whatever the stream length.
    """

    def __init__(self, params: KeyFrameParams | None = None) -> None:
        self.params = params if params is not None else KeyFrameParams()
        self._orb = cv2.ORB_create()
        self._matcher = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)
        self.reset()

    def reset(self) -> None:
        """Start a new episode: the next frame pushed is a key frame."""
        self._key_points: np.ndarray | None = None
        self._key_descriptors: np.ndarray | None = None
        self._key_size: tuple[int, int] | None = None
        self.n_pushed = 0
        self.n_keyframes = 0

    def push(self, image: np.ndarray) -> KeyFrameDecision:
        """Examine one sampled frame (RGB or grey uint8) against the last key frame."""
        gray = to_gray(image)
        keypoints, descriptors = self._orb.detectAndCompute(gray, None)
        if keypoints:
            points = np.asarray(cv2.KeyPoint_convert(keypoints), np.float32).reshape(-1, 2)
        else:
            points = np.empty((0, 2), np.float32)
        height, width = gray.shape
        decision = self._decide(points, descriptors, width, height)
        self.n_pushed += 1
        if decision.is_keyframe:
            self._key_points = points
            self._key_descriptors = descriptors
            self._key_size = (width, height)
            self.n_keyframes += 1
        return decision

    def _decide(
        self, points: np.ndarray, descriptors: np.ndarray | None, width: int, height: int
    ) -> KeyFrameDecision:
        p = self.params
        if self._key_size is None:
            return KeyFrameDecision(True, -1.0, REASON_FIRST)
        if descriptors is None or self._key_descriptors is None:
            return KeyFrameDecision(True, -1.0, REASON_NO_FEATURES)
        matches = self._matcher.match(self._key_descriptors, descriptors)
        if len(matches) <= p.min_matches:
            return KeyFrameDecision(True, -1.0, REASON_FEW_MATCHES)
        previous = self._key_points[[m.queryIdx for m in matches]].reshape(-1, 1, 2)
        current = points[[m.trainIdx for m in matches]].reshape(-1, 1, 2)
        homography, _ = cv2.findHomography(
            current, previous, cv2.RANSAC, float(p.ransac_reproj_threshold)
        )
        if homography is None:
            return KeyFrameDecision(True, -1.0, REASON_NO_HOMOGRAPHY)
        quad = project_corners(homography, width, height)
        if quad is None:
            return KeyFrameDecision(True, -1.0, REASON_NO_HOMOGRAPHY)
        key_w, key_h = self._key_size
        overlap, _ = overlap_fraction(quad, key_w, key_h, p.overlap_threshold)
        if overlap < p.overlap_threshold:
            return KeyFrameDecision(True, overlap, REASON_LOW_OVERLAP)
        return KeyFrameDecision(False, overlap, REASON_HIGH_OVERLAP)


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
    """Final key frames of a finished clip, as sorted unique positions in the sampled frames.

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
    """Final key-frame positions of already-sampled frames (RGB or grey uint8)."""
    params = params if params is not None else KeyFrameParams()
    selector = StreamingKeyFrameSelector(params)
    kept: list[int] = []
    for position, image in enumerate(frames):
        if selector.push(image).is_keyframe:
            kept.append(position)
    return apply_count_rule(kept, selector.n_pushed, params.min_keyframes, params.max_keyframes)


@dataclass
class VideoKeyFrames:
    """Result of `extract_keyframes_from_video`.

    sampled_indices: final key frames as positions among the sampled frames.
    source_frames: the same key frames as frame numbers of the video.
    images: RGB images of the final key frames when requested, else empty.
    decode_strategy: "intra" (Motion-JPEG packets) or "sequential" (see video_frames).
    """

    sampled_indices: list[int]
    source_frames: list[int]
    n_sampled: int
    video_fps: float
    n_source_frames: int
    seconds: float
    images: list[np.ndarray] = field(default_factory=list)
    decode_strategy: str = ""


def extract_keyframes_from_video(
    path: str | Path,
    params: KeyFrameParams | None = None,
    *,
    return_images: bool = False,
    fast_decode: bool = True,
) -> VideoKeyFrames:
    """Run sampling, selection and the count rule over a video file in one pass.

    Only sampled frames are decoded (see `video_frames.SampledVideoReader`), and only the
    last key frame's features are held. With `return_images`, key-frame images are cached
    while there are at most `max_keyframes` of them (plus the latest sampled frame, which
    the count rule may add); any final frame not cached (count rule cases) is fetched by a
    second, targeted pass that stops at the last frame needed. Missing or unreadable
    files raise InvalidRequestError naming the path.
    """
    started = time.perf_counter()
    params = params if params is not None else KeyFrameParams()
    reader = SampledVideoReader(path, prefer_intra=fast_decode)
    sampler = FrameRateSampler(params.sample_fps)
    selector = StreamingKeyFrameSelector(params)
    kept: list[int] = []
    source_of: dict[int, int] = {}
    cache: dict[int, np.ndarray] | None = {} if return_images else None
    latest: tuple[int, np.ndarray] | None = None
    n_sampled = 0
    for frame_number, bgr in reader.iter_sampled(sampler.accept):
        position = n_sampled
        n_sampled += 1
        is_key = selector.push(cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)).is_keyframe
        if is_key:
            kept.append(position)
            source_of[position] = frame_number
        if return_images:
            rgb = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
            latest = (position, rgb)
            if cache is not None and len(kept) > params.max_keyframes:
                cache = None  # too many to hold; a targeted pass will fetch the final ones
            elif cache is not None and is_key:
                cache[position] = rgb
        del bgr
    final = apply_count_rule(kept, n_sampled, params.min_keyframes, params.max_keyframes)
    if any(pos not in source_of for pos in final):
        source_of.update(_replay_sampler(params.sample_fps, reader.info.fps, reader.n_source_frames, final))
    source_frames = [source_of[pos] for pos in final]
    images: list[np.ndarray] = []
    if return_images and final:
        have = dict(cache or {})
        if latest is not None:
            have[latest[0]] = latest[1]
        missing = [source_of[pos] for pos in final if pos not in have]
        fetched = reader.read_frames(missing) if missing else {}
        for pos in final:
            if pos in have:
                images.append(have[pos])
            else:
                images.append(cv2.cvtColor(fetched[source_of[pos]], cv2.COLOR_BGR2RGB))
    return VideoKeyFrames(
        sampled_indices=final,
        source_frames=source_frames,
        n_sampled=n_sampled,
        video_fps=reader.info.fps,
        n_source_frames=reader.n_source_frames,
        seconds=time.perf_counter() - started,
        images=images,
        decode_strategy=reader.strategy,
    )


def _replay_sampler(
    sample_fps: float, video_fps: float, n_source_frames: int, positions: Sequence[int]
) -> dict[int, int]:
    """Source frame numbers of the given sampled positions, by re-running the sampler
    over the frame stamps (arithmetic only, no decoding)."""
    wanted = set(positions)
    out: dict[int, int] = {}
    sampler = FrameRateSampler(sample_fps)
    position = 0
    for number in range(n_source_frames):
        if sampler.accept(number / video_fps):
            if position in wanted:
                out[position] = number
                if len(out) == len(wanted):
                    break
            position += 1
    return out
