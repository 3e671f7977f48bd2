"""Whole-clip key-frame extraction from a video file (docs/method.md §2, rules 1-5).

`extract_keyframes_from_video` applies the reference's sampling and the selection rules of
`rules` to a video file and returns exactly the reference's final indices. It decodes only
what the sampled frames need (see `core.video.frames`); the ORB features of each sampled
frame are computed on the thread that decoded it (PyAV segment decoders side by side) or on
a pool beside a single decoder, and the decisions are taken in frame order on the calling
thread. This module imports the video decoders; the robot's live path (`rules`,
`tracker`) does not import it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import cv2
import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.keyframes.rules import (
    REASON_UNUSABLE_IMAGE,
    FrameFeatures,
    KeyFrameParams,
    StreamingKeyFrameSelector,
    detect_features_threadsafe,
    reference_count_rule,
    reference_sample_indices,
    sampling_step,
)
from embodied_r_ros.core.shards import available_cores
from embodied_r_ros.core.video.frames import (
    FastDecodeUnavailable,
    Frames,
    VideoInfo,
    make_reader,
    probe_video_and_first_frame,
    strategies_for,
)

LOG = logging.getLogger("embodied_r_ros.keyframes")


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
    n_expected_samples: frames the sampling wanted from the container's frame count.
    frames_decoded: frames of the video actually reached (the last sampled frame decoded,
      plus one): below n_source_frames when the file ends early.
    truncated: the file ended before the frames its header announces (a cut download or
      recording; more than the final sampled frame missing); the key frames come from the
      part that could be decoded.
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
    n_expected_samples: int = 0
    frames_decoded: int = 0
    truncated: bool = False
    # per sampled frame, in order: the selector's (overlap with the key frame before it,
    # -1.0 when none was measured; reason), for tuning the thresholds
    decisions: list[tuple[float, str]] = field(default_factory=list)
    sampled_frames: list[int] = field(default_factory=list)  # frame number of each sampled frame

    def truncation_note(self) -> str:
        """One line for users, or "" when the video was read to its announced end."""
        if not self.truncated:
            return ""
        return (f"the video ends early: {self.frames_decoded} of the {self.n_source_frames} "
                f"frames its header announces could be decoded ({self.n_sampled} of "
                f"{self.n_expected_samples} sampled frames); the file is probably truncated, "
                "and the key frames come from the part that was decoded")


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
    if n_sampled < len(wanted) - 1:
        LOG.info("%s: only %d of %d sampled frames could be decoded (the file ends early, "
                 "probably truncated)", info.path, n_sampled, len(wanted))
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
        n_expected_samples=len(wanted),
        frames_decoded=selection.sources[-1] + 1,
        truncated=n_sampled < len(wanted) - 1,
        decisions=selection.decisions,
        sampled_frames=list(selection.sources),
    )
