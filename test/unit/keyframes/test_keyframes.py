"""Key-frame selection against the reference rules (docs/method.md §2).

Hard facts first (the worked examples of the method and clips whose answer follows from
the rules by reasoning), then agreement with the literal baseline in
bench/reference_keyframes.py on varied real video files, pixel equality of the fast
decoder with OpenCV, the overlap shortcut against the exact masks, the live selector, the
live count rule and sampler, and the `embodied-r keyframes` command."""

from __future__ import annotations

import fcntl
import itertools
import json
import math
import os
import struct
import subprocess
import termios
import threading
import time
import tracemalloc
from pathlib import Path

import cv2
import numpy as np
import pytest

from bench.reference_keyframes import reference_extract, reference_select
from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.keyframes.cli import main as cli_main
from embodied_r_ros.core.keyframes.extraction import extract_keyframes_from_video
from embodied_r_ros.core.keyframes.overlap import (
    PROVEN_COORD_LIMIT,
    estimate_overlap_pixels,
    mask_overlap_pixels,
    overlap_fraction,
    project_corners,
    reference_mask_overlap,
)
from embodied_r_ros.core.keyframes.rules import (
    REASONS,
    FrameRateSampler,
    KeyFrameDecision,
    KeyFrameParams,
    StreamingKeyFrameSelector,
    apply_count_rule,
    even_picks,
    reference_count_rule,
    reference_sample_indices,
    reference_subsample,
    sampling_step,
    select_keyframes,
)
from embodied_r_ros.core.video.frames import (
    PyAVReader,
    probe_video,
    read_first_frame,
)
from embodied_r_ros.testing.keyframe_clips import (
    Pose,
    clip_frames,
    flat_frame,
    make_texture,
    render,
    scenario_poses,
    textureless_frames,
    video_poses,
    write_video,
    write_video_pyav,
)

W, H = 200, 150


@pytest.fixture(scope="module")
def texture() -> np.ndarray:
    return make_texture(6 * W, 2 * H, seed=3)


def _bgr(frames: list[np.ndarray]) -> list[np.ndarray]:
    return [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in frames]


def _read_all_bgr(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, frame = cap.read()
        if not ok:
            return out
        out.append(frame)


def _same_as_baseline(path: Path, **kwargs) -> None:
    ref = reference_extract(str(path))
    got = extract_keyframes_from_video(path, **kwargs)
    assert got.sampled_indices == ref["sampled_indices"], got.decode_strategy
    assert got.source_frames == ref["source_frames"]
    assert got.selected_positions == ref["selected_positions"]
    assert (got.n_sampled, got.n_source_frames) == (ref["n_sampled"], ref["n_source_frames"])


# --- worked examples of the method (hard facts) ------------------------------------------


def test_count_rule_worked_examples() -> None:
    # 21 sampled frames with fewer than 4 key frames -> [0, 1, 11, 20]; 10 -> [0, 1, 5, 9].
    assert reference_subsample(list(range(21)), 4) == [0, 1, 11, 20]
    assert reference_subsample(list(range(10)), 4) == [0, 1, 5, 9]
    assert reference_count_rule([0], 21) == [0, 1, 11, 20]
    assert reference_count_rule([0, 20], 21) == [0, 1, 11, 20]
    assert reference_count_rule([0, 7], 10) == [0, 1, 5, 9]


def test_count_rule_rounds_halves_to_even_and_is_front_heavy() -> None:
    # n = 7, m = 4: step = 5 / 2 = 2.5, i = 1 -> round(2.5) = 2 (even) -> item 3, not 4.
    assert reference_subsample(list(range(7)), 4) == [0, 1, 3, 6]
    # n = 5, m = 4: step 1.5, round(1.5) = 2 -> item 3.
    assert reference_subsample(list(range(5)), 4) == [0, 1, 3, 4]
    # The first middle pick is always the second item (i = 0 -> 0 + 1).
    picks = reference_subsample(list(range(100, 1100, 10)), 32)
    assert len(picks) == 32 and picks[:2] == [100, 110] and picks[-1] == 1090
    assert reference_subsample([3, 9], 4) == [3, 9]  # n <= m: unchanged
    assert reference_subsample(list(range(9)), 2) == [0, 8]  # m = 2: ends only
    # more than max: the sampler runs over the key-frame list itself
    kept = list(range(0, 80, 2)) + [79]  # 41 key frames
    assert reference_count_rule(kept, 80) == reference_subsample(kept, 32)
    exactly_32 = list(range(0, 62, 2)) + [63]
    assert reference_count_rule(exactly_32, 64) == exactly_32


def test_count_rule_rejects_bad_positions() -> None:
    with pytest.raises(InvalidRequestError):
        reference_count_rule([0, 5], 5)
    with pytest.raises(InvalidRequestError):
        reference_count_rule([0, 3, 2], 5)
    with pytest.raises(InvalidRequestError):
        reference_count_rule([0], 5, 5, 4)
    assert reference_count_rule([], 0) == []


def test_sampling_worked_examples() -> None:
    # A 600-frame 30 fps clip samples 21 frames: 0, 30, ..., 570 and the last frame 599.
    indices = reference_sample_indices(600, sampling_step(30.0))
    assert indices == list(range(0, 600, 30)) + [599] and len(indices) == 21
    # 29.97 fps -> step int(29.97) = 29.
    assert sampling_step(29.97) == 29 and sampling_step(30000 / 1001) == 29
    assert reference_sample_indices(600, 29) == list(range(0, 600, 29)) + [599]
    # The last frame is not repeated when the grid reaches it: 601 frames -> 0..600.
    assert reference_sample_indices(601, 30) == list(range(0, 601, 30))
    assert reference_sample_indices(0, 30) == [] and reference_sample_indices(1, 30) == [0]
    assert sampling_step(30.0, 2.0) == 15 and sampling_step(25.0, 0) == 1


def test_sampling_step_below_one_is_a_typed_error() -> None:
    with pytest.raises(InvalidRequestError, match="step"):
        sampling_step(0.5)
    with pytest.raises(InvalidRequestError, match="frame rate"):
        sampling_step(0.0)
    with pytest.raises(InvalidRequestError, match="frame rate"):
        sampling_step(float("nan"))


# --- clips whose key frames follow from the rules -----------------------------------------


@pytest.fixture(scope="module")
def known_clips(tmp_path_factory: pytest.TempPathFactory, texture: np.ndarray) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("known_clips")
    view = render(texture, Pose(W, H), W, H)
    return {
        "static600": write_video(folder / "static600.avi", [view] * 600, 30, "MJPG"),
        "static271": write_video(folder / "static271.avi", [view] * 271, 30, "MJPG"),
        "ntsc": write_video(folder / "ntsc.avi", [view] * 100, 29.97, "MJPG"),
        "slow": write_video(folder / "slow.avi", [view] * 20, 0.5, "MJPG"),
    }


def test_static_600_frame_clip_gives_the_worked_example(known_clips: dict[str, Path],
                                                        capsys: pytest.CaptureFixture) -> None:
    # A static view: every sampled frame overlaps the first fully, so the selector keeps
    # frame 0 and the last (20) is appended: 2 < 4 key frames -> the sampler over all 21
    # sampled positions -> [0, 1, 11, 20] = frames 0, 30, 330, 599.
    assert cli_main([str(known_clips["static600"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n_sampled"] == 21 and data["n_source_frames"] == 600
    assert data["selected_positions"] == [0, 20]
    assert data["sampled_indices"] == [0, 1, 11, 20]
    assert data["source_frames"] == [0, 30, 330, 599]


def test_static_clips_ten_sampled_frames_and_29_97_fps(known_clips: dict[str, Path]) -> None:
    # 271 frames at 30 fps: 0, 30, ..., 270 (= the last frame) -> 10 sampled -> [0, 1, 5, 9].
    got = extract_keyframes_from_video(known_clips["static271"], return_images=True)
    assert got.n_sampled == 10 and got.sampled_indices == [0, 1, 5, 9]
    assert got.source_frames == [0, 30, 150, 270]
    decoded = _read_all_bgr(known_clips["static271"])
    for number, image in zip(got.source_frames, got.images):
        assert np.array_equal(image, cv2.cvtColor(decoded[number], cv2.COLOR_BGR2RGB))
    # 100 frames at 29.97 fps: step 29 -> 0, 29, 58, 87 and the last 99 -> 5 sampled;
    # sampler over 5 positions with m = 4: step 1.5 -> [0, 1, 3, 4].
    got = extract_keyframes_from_video(known_clips["ntsc"])
    assert got.video_fps == pytest.approx(29.97)
    assert got.n_sampled == 5 and got.sampled_indices == [0, 1, 3, 4]
    assert got.source_frames == [0, 29, 87, 99]


def test_clip_below_one_fps_is_rejected(known_clips: dict[str, Path],
                                        capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(InvalidRequestError, match="sampling step"):
        extract_keyframes_from_video(known_clips["slow"])
    assert cli_main([str(known_clips["slow"])]) == 2
    assert "sampling step" in capsys.readouterr().err


def test_last_sampled_frame_is_appended(tmp_path: Path) -> None:
    # Sampled frames (10 fps video, one sampled frame per second):
    # 0 textured A (first) | 1 flat (no descriptors: kept) | 2 textured B (the key frame
    # has no descriptors: kept) | 3 flat (kept) | 4 textured C (kept) | 5..8 C again
    # (overlap 1: not kept). Selector: [0, 1, 2, 3, 4]; the last sampled frame 8 is
    # appended -> [0, 1, 2, 3, 4, 8] (between 4 and 32: unchanged).
    tex = make_texture(8 * W, 2 * H, seed=11)
    a, b, c = (render(tex, Pose(W + k * 2.5 * W, H), W, H) for k in range(3))
    seconds = [a, flat_frame(W, H, 90), b, flat_frame(W, H, 150), c, c, c, c, c]
    frames = [img for img in seconds for _ in range(10)][:-9]  # 81 frames: last is frame 80
    path = write_video(tmp_path / "last.avi", frames, 10, "MJPG")
    got = extract_keyframes_from_video(path)
    assert got.n_sampled == 9
    assert got.selected_positions == [0, 1, 2, 3, 4, 8]
    assert got.sampled_indices == [0, 1, 2, 3, 4, 8]
    assert got.source_frames == [0, 10, 20, 30, 40, 80]
    _same_as_baseline(path)


def test_more_than_32_key_frames_are_cut_by_the_sampler(tmp_path: Path,
                                                         texture: np.ndarray) -> None:
    # Textured and flat frames alternate: a flat frame has no descriptors and the frame
    # after it is compared with a key frame without descriptors, so all 40 are kept.
    views = [render(texture, Pose(W + k * 0.1 * W, H), W, H) if k % 2 == 0
             else flat_frame(W, H, 60 + 3 * k) for k in range(40)]
    # 196 frames at 5 fps: 0, 5, ..., 195 = the last frame -> 40 sampled frames.
    frames = [v for v in views for _ in range(5)][:-4]
    path = write_video(tmp_path / "many.avi", frames, 5, "MJPG")
    got = extract_keyframes_from_video(path, return_images=True)
    assert got.selected_positions == list(range(40))
    expected = reference_subsample(list(range(40)), 32)
    assert got.sampled_indices == expected and len(expected) == 32
    assert got.sampled_indices[:2] == [0, 1] and got.sampled_indices[-1] == 39
    decoded = _read_all_bgr(path)
    for number, image in zip(got.source_frames, got.images):  # fetched by a second pass
        assert np.array_equal(image, cv2.cvtColor(decoded[number], cv2.COLOR_BGR2RGB))
    _same_as_baseline(path)


def test_sorting_matches_by_distance_changes_the_decision() -> None:
    # Two views about half a frame apart with a small zoom. With the matches in the
    # matcher's order RANSAC finds another homography than with the matches sorted by
    # distance, on the other side of the 0.5 threshold; the selector follows the sorted
    # order, as the reference does.
    cases = [(0, 0.5411, 1.0809), (0, 0.5689, 1.0527), (5, 0.5457, 1.0704)]
    orb = cv2.ORB_create()
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)
    for seed, shift, zoom in cases:
        tex = make_texture(6 * W, 2 * H, seed=seed)
        first = render(tex, Pose(1.5 * W, H), W, H)
        second = render(tex, Pose(1.5 * W + shift * W, H, zoom), W, H)
        g1, g2 = (cv2.cvtColor(x, cv2.COLOR_RGB2GRAY) for x in (first, second))
        (k1, d1), (k2, d2) = orb.detectAndCompute(g1, None), orb.detectAndCompute(g2, None)
        raw = matcher.match(d1, d2)
        overlaps = {}
        by_distance = sorted(raw, key=lambda m: m.distance)
        for name, matches in (("raw", list(raw)), ("sorted", by_distance)):
            p1 = np.float32([k1[m.queryIdx].pt for m in matches]).reshape(-1, 1, 2)
            p2 = np.float32([k2[m.trainIdx].pt for m in matches]).reshape(-1, 1, 2)
            homography, _ = cv2.findHomography(p2, p1, cv2.RANSAC, 5.0)
            overlaps[name] = reference_mask_overlap(project_corners(homography, W, H), W, H)
        assert (overlaps["raw"] < 0.5) != (overlaps["sorted"] < 0.5), overlaps
        selector = StreamingKeyFrameSelector()
        selector.push(first)
        decision = selector.push(second)
        assert decision.is_keyframe == (overlaps["sorted"] < 0.5)
        assert decision.overlap == pytest.approx(overlaps["sorted"], abs=0.05)


def test_corner_convention_and_truncation() -> None:
    w, h = 160, 120
    # Identity: the quad is the frame rectangle with corners (w, h), all pixels shared.
    assert project_corners(np.eye(3), w, h).tolist() == [[0, 0], [w, 0], [w, h], [0, h]]
    assert reference_mask_overlap(project_corners(np.eye(3), w, h), w, h) == 1.0
    # Half scale: corners (0,0), (80,0), (80,60), (0,60); fillPoly fills 81 x 61 pixels
    # (boundary included). With w-1 / h-1 corners it would be (79.5 -> 79) + 1 = 80 x 60.
    half = np.diag([0.5, 0.5, 1.0])
    assert project_corners(half, w, h).tolist() == [[0, 0], [80, 0], [80, 60], [0, 60]]
    assert reference_mask_overlap(project_corners(half, w, h), w, h) == 81 * 61 / (w * h)
    # Truncation toward zero, no clamping: 3.9 -> 3, -3.9 -> -3, 2.5e9 -> INT32_MIN.
    shift = np.array([[1, 0, 3.9], [0, 1, -3.9], [0, 0, 1]])
    assert project_corners(shift, w, h)[0].tolist() == [3, -3]
    big = np.array([[2.5e9 / w, 0, 0], [0, 1, 0], [0, 0, 1]])
    assert project_corners(big, w, h)[1].tolist() == [np.iinfo(np.int32).min, 0]
    huge = np.diag([1e300, 1.0, 1.0])  # x overflows float32: +inf -> INT32_MIN
    assert project_corners(huge, w, h)[1:3, 0].tolist() == [np.iinfo(np.int32).min] * 2
    # A NaN matrix: perspectiveTransform writes (0, 0) for every corner (its |w| <= eps
    # branch), so the quad collapses to one pixel.
    nan = np.full((3, 3), np.nan)
    assert project_corners(nan, w, h).tolist() == [[0, 0]] * 4
    assert reference_mask_overlap(project_corners(nan, w, h), w, h) == 1 / (w * h)
    # The frame rectangle with corners (w, h) fills every pixel of its mask, at any size.
    for ww, hh in [(1, 1), (1, 7), (5, 1), (2, 3), (33, 17), (1280, 720)]:
        rect = np.array([[0, 0], [ww, 0], [ww, hh], [0, hh]], np.int32)
        assert mask_overlap_pixels(rect, ww, hh) == ww * hh


# --- agreement with the literal baseline on real video files -----------------------------


def _scenario_video(texture: np.ndarray, name: str, seconds: int, fps: int) -> list[np.ndarray]:
    """Per-source-frame RGB views: the scenario's pose per second, interpolated."""
    if name == "textureless":
        per_second = textureless_frames(seconds, W, H, texture)
        return [f for f in per_second for _ in range(fps)]
    if name == "mixed":
        poses = video_poses(seconds, fps, W, texture.shape[0])
    else:
        key = scenario_poses(name, seconds + 1, W, texture.shape[0])
        poses = [Pose(a.x + (b.x - a.x) * k / fps, a.y, a.zoom + (b.zoom - a.zoom) * k / fps)
                 for a, b in zip(key[:-1], key[1:]) for k in range(fps)]
    return list(clip_frames(texture, poses, W, H))


SCENARIOS = [("static", 12, "MJPG"), ("slow_pan", 40, "mp4v"), ("fast_turn", 12, "h264"),
             ("forward", 30, "hevc"), ("textureless", 24, "mpeg4"), ("mixed", 90, "h264")]


@pytest.mark.parametrize("name, seconds, codec", SCENARIOS)
def test_same_result_as_baseline_on_video_files(tmp_path: Path, texture: np.ndarray, name: str,
                                                seconds: int, codec: str) -> None:
    fps = 6
    frames = _scenario_video(texture, name, seconds, fps)[:-2]  # the last frame is off-grid
    if codec in ("MJPG", "mp4v"):
        path = write_video(tmp_path / f"{name}.{'avi' if codec == 'MJPG' else 'mp4'}",
                           frames, fps, codec)
    else:
        path = write_video_pyav(tmp_path / f"{name}.mp4", frames, fps, codec)
    got = extract_keyframes_from_video(path)
    assert got.decode_strategy == "pyav" and got.fallbacks == []
    assert got.n_sampled == seconds + 1  # the grid plus the clip's last frame
    assert got.source_frames[-1] == len(frames) - 1  # the appended last frame is kept
    _same_as_baseline(path)
    plain = extract_keyframes_from_video(path, fast_decode=False, workers=1)
    assert plain.decode_strategy == "sequential"
    assert (plain.sampled_indices, plain.source_frames) == (got.sampled_indices, got.source_frames)
    alone = extract_keyframes_from_video(path, workers=1)  # one thread does everything
    assert alone.decode_strategy == "pyav" and alone.fallbacks == []
    assert (alone.sampled_indices, alone.source_frames) == (got.sampled_indices, got.source_frames)
    if name == "static":
        assert got.selected_positions == [0, seconds] and got.sampled_indices == \
            reference_subsample(list(range(seconds + 1)), 4)
    if name == "fast_turn":  # 70% of the width per second: nearly every frame is new
        assert len(got.selected_positions) >= 8
    if name == "slow_pan":  # 3% per second: a new key frame about every 17 s
        assert 3 <= len(got.selected_positions) <= 5


def test_same_keyframes_as_baseline_on_sampled_frames(texture: np.ndarray) -> None:
    for name, n in [("slow_pan", 40), ("forward", 30), ("mixed", 30)]:
        frames = list(clip_frames(texture, scenario_poses(name, n, W, texture.shape[0]), W, H))
        assert select_keyframes(frames) == reference_select(_bgr(frames))
    frames = textureless_frames(24, W, H, texture)
    assert select_keyframes(frames) == reference_select(_bgr(frames))
    gray = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames]
    assert select_keyframes(gray) == select_keyframes(frames)
    # RGB -> grey of the live path equals BGR -> grey of the video path, pixel for pixel.
    for f in frames:
        assert np.array_equal(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY),
                              cv2.cvtColor(cv2.cvtColor(f, cv2.COLOR_RGB2BGR), cv2.COLOR_BGR2GRAY))


# --- the fast decoder gives OpenCV's pixels ----------------------------------------------


@pytest.fixture(scope="module")
def codec_clips(tmp_path_factory: pytest.TempPathFactory, texture: np.ndarray) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("codec_clips")
    frames = list(clip_frames(texture, video_poses(30, 10, W, texture.shape[0]), W, H))[:-3]
    clips = {codec: write_video_pyav(folder / f"{codec}.mp4", frames, 10, codec)
             for codec in ("h264", "hevc", "mpeg4")}
    clips["mp4v"] = write_video(folder / "mp4v.mp4", frames, 10, "mp4v")
    clips["mjpg"] = write_video(folder / "mjpg.avi", frames, 10, "MJPG")
    clips["h264-10bit"] = write_video_pyav(folder / "h264_10.mp4", frames, 10, "h264",
                                           pix_fmt="yuv420p10le")
    clips["hevc-bt709"] = write_video_pyav(folder / "hevc_709.mp4", frames, 10, "hevc",
                                           colorspace=1)
    for codec in ("h264-gop20", "h264-open-gop", "hevc-gop20"):
        clips[codec] = write_video_pyav(folder / f"{codec}.mp4", frames, 10, codec)
    return clips


# Closed segments (between clean random-access points) that hold a wanted frame.
SEGMENTS = {"h264": 2, "hevc": 1, "mpeg4": 1, "mp4v": 25, "mjpg": 31, "h264-10bit": 2,
            "hevc-bt709": 1, "h264-gop20": 15, "h264-open-gop": 1, "hevc-gop20": 15}


@pytest.mark.parametrize("threads", [1, 3], ids=["one-decoder", "segments-side-by-side"])
@pytest.mark.parametrize("codec", sorted(SEGMENTS))
def test_fast_decoder_pixels_equal_opencv(codec_clips: dict[str, Path], codec: str,
                                          threads: int) -> None:
    path = codec_clips[codec]
    info = probe_video(path)
    wanted = reference_sample_indices(info.frame_count, sampling_step(info.fps))
    reader = PyAVReader(info, wanted, lambda: read_first_frame(path), threads=threads)
    got = dict(reader.frames())
    assert reader.stats.segments == SEGMENTS[codec]
    # threads=1: one decoder; otherwise one decoder per segment group, up to `threads`.
    assert reader.stats.segment_workers == (1 if threads == 1 else min(threads, SEGMENTS[codec]))
    decoded = _read_all_bgr(path)
    assert sorted(got) == wanted and len(decoded) == info.frame_count == 297
    for number, image in got.items():
        assert np.array_equal(image, decoded[number]), number
    stats = reader.stats
    assert stats.packets == 297 and stats.yielded == len(wanted)
    if codec in ("mp4v", "mjpg", "mpeg4"):
        # mp4v (GOP 12, no B-frames) and MJPEG: packets after the last wanted frame of a
        # segment are never sent; MPEG-4 with B-VOPs: unwanted B-VOPs skipped as non-reference
        assert stats.sent < stats.packets or stats.sent_nonref > 0
    if codec == "mjpg":  # every packet stands alone: only the wanted ones are decoded
        assert stats.sent == len(wanted)
    if codec == "mp4v":  # GOP of 12: the tail of a GOP after a wanted frame is not sent
        assert stats.sent < 0.7 * stats.packets
    if codec.startswith("h264") or codec == "mpeg4":
        assert stats.sent_nonref > 0
    # A targeted pass (no frame 0) gives the same pixels.
    some = wanted[3:6] + wanted[-4:-2]
    again = dict(PyAVReader(info, some, None, threads=threads).frames())
    assert sorted(again) == some and all(np.array_equal(again[n], decoded[n]) for n in some)


def test_segment_decoders_stop_when_the_reader_is_closed_early(codec_clips: dict[str, Path]) -> None:
    # A consumer that stops after two frames (an error downstream, a cancelled run) must not
    # leave decoder threads behind, blocked on their hand-over queues.
    path = codec_clips["h264-gop20"]
    info = probe_video(path)
    wanted = reference_sample_indices(info.frame_count, sampling_step(info.fps))
    before = {t.name for t in threading.enumerate()}
    frames = PyAVReader(info, wanted, None, threads=4).frames()
    assert [n for n, _ in itertools.islice(frames, 2)] == wanted[:2]
    frames.close()
    left = [t.name for t in threading.enumerate()
            if t.name.startswith("pyav-segments") and t.name not in before]
    assert left == []


def _pixel_digest(number: int, image: np.ndarray) -> tuple[str, int]:
    return threading.current_thread().name, hash(image.tobytes())


@pytest.mark.parametrize("codec,threads_prefix,decoders", [
    ("h264-gop20", "pyav-segments-", 3),  # 15 segments: the 3 decoders run the transform
    ("h264", "ordered-map", 2),  # 2 segments for 3 threads: a pool of 3 beside 2 decoders
    ("hevc", "ordered-map", 1),  # one segment: a pool beside one decoder
], ids=["segments", "fewer-segments-than-threads", "one-segment"])
def test_transform_runs_beside_decoding_and_sees_opencvs_pixels(
        codec_clips: dict[str, Path], codec: str, threads_prefix: str, decoders: int) -> None:
    # Key frames pass ORB as the transform: it must run on worker threads (the segment
    # decoders themselves, or a pool beside the decoders), receive exactly OpenCV's pixels,
    # and its results must come out in frame order.
    path = codec_clips[codec]
    info = probe_video(path)
    wanted = reference_sample_indices(info.frame_count, sampling_step(info.fps))
    reader = PyAVReader(info, wanted, lambda: read_first_frame(path), threads=3)
    got = list(reader.frames(_pixel_digest))
    decoded = _read_all_bgr(path)
    assert [n for n, _ in got] == wanted
    assert all(digest == hash(decoded[n].tobytes()) for n, (_, digest) in got)
    names = {name for _, (name, _) in got}
    assert all(name.startswith(threads_prefix) for name in names)
    assert reader.stats.segment_workers == decoders
    if codec == "h264-gop20":
        assert len(names) == 3
    assert reader.stats.decode_cpu_s > 0


def test_transform_errors_are_raised_as_they_are(codec_clips: dict[str, Path]) -> None:
    # An error of the transform is the caller's, not a decoding problem: it must not be
    # turned into a silent fallback to another decoder.
    path = codec_clips["h264-gop20"]
    info = probe_video(path)
    wanted = reference_sample_indices(info.frame_count, sampling_step(info.fps))

    def fail_on_the_sixth(number: int, image: np.ndarray) -> int:
        if number == wanted[5]:
            raise ArithmeticError("transform failed")
        return number

    got = []
    with pytest.raises(ArithmeticError, match="transform failed"):
        for item in PyAVReader(info, wanted, None, threads=3).frames(fail_on_the_sixth):
            got.append(item)
    assert len(got) <= 5
    assert [t for t in threading.enumerate() if t.name.startswith("pyav-segments")] == []


@pytest.mark.parametrize("codec,threads,per_segment", [
    ("h264-gop20", 3, 2),  # 15 short segments: decoders run ahead of the one being read
    ("h264", 2, 15),  # 2 long segments: the segment being read must not pile up either
])
def test_segment_decoders_run_a_bounded_way_ahead(codec_clips: dict[str, Path], codec: str,
                                                  threads: int, per_segment: int) -> None:
    # A slow consumer: decoders may run ahead, but the results waiting for it stay within
    # `buffer_frames` per thread ahead, as many in the segment being read, and one result
    # per decoder thread (made, waiting for room).
    path = codec_clips[codec]
    info = probe_video(path)
    wanted = reference_sample_indices(info.frame_count, sampling_step(info.fps))
    produced = itertools.count()
    made = [0]

    def count(number: int, image: np.ndarray) -> int:
        made[0] = next(produced) + 1
        return number

    reader = PyAVReader(info, wanted, None, threads=threads)
    ahead = []
    for consumed, _ in enumerate(reader.frames(count, buffer_frames=1), start=1):
        time.sleep(0.02)
        ahead.append(made[0] - consumed)
    assert reader.stats.segment_workers == threads
    hold = 1 * threads  # buffer_frames x decoder threads
    assert max(ahead) <= hold + min(hold, per_segment) + threads
    assert max(ahead) >= 2


def test_rotated_video_falls_back_to_opencv(tmp_path: Path, texture: np.ndarray) -> None:
    # Rotation metadata: OpenCV turns the frames, FFmpeg through PyAV does not. The first
    # frame check sees the difference and the extraction runs on OpenCV's frames.
    frames = list(clip_frames(texture, video_poses(8, 5, W, texture.shape[0]), W, H))[:-4]
    quarter_turn = [0, 65536, 0, -65536, 0, 0, 0, 0, 1 << 30]
    path = write_video_pyav(tmp_path / "rot.mp4", frames, 5, "h264", display_matrix=quarter_turn)
    assert read_first_frame(path).shape == (W, H, 3)  # OpenCV applies the rotation
    got = extract_keyframes_from_video(path, return_images=True)
    assert got.decode_strategy == "sequential"
    assert got.fallbacks[0].startswith("pyav: frame 0 differs")
    assert all(img.shape == (W, H, 3) for img in got.images)
    _same_as_baseline(path)


# --- live selector: same decisions, never raises on odd images ---------------------------


def test_live_selector_makes_the_offline_decisions(codec_clips: dict[str, Path]) -> None:
    # The live path receives RGB frames one by one; the offline path decodes the video
    # and computes features on a pool. Same sampled frames -> same key frames.
    path = codec_clips["h264"]
    offline = extract_keyframes_from_video(path, workers=3)
    decoded = _read_all_bgr(path)
    info = probe_video(path)
    numbers = reference_sample_indices(info.frame_count, sampling_step(info.fps))
    selector = StreamingKeyFrameSelector()
    decisions = [selector.push(cv2.cvtColor(decoded[n], cv2.COLOR_BGR2RGB)) for n in numbers]
    kept = [i for i, d in enumerate(decisions) if d.is_keyframe]
    assert kept + ([len(numbers) - 1] if kept[-1] != len(numbers) - 1 else []) == \
        offline.selected_positions
    assert decisions[0] == KeyFrameDecision(True, -1.0, "first")
    assert all(d.reason in REASONS for d in decisions)
    assert any(d.reason == "high_overlap" for d in decisions)
    assert any(d.reason == "low_overlap" for d in decisions)
    # The stamp-based live sampler picks the same frames on this integer-rate clip
    # (stamps n / 10 s at 1 Hz), except the clip's last frame, which only the offline rule adds.
    sampler = FrameRateSampler(1.0)
    live = [n for n in range(info.frame_count) if sampler.accept(n / info.fps)]
    assert live == numbers[:-1]


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (9, 1), (2, 2), (3, 5), (31, 31), (1, 1, 3),
                                   (1, 40, 3), (40, 1, 1), (64, 64), (2, 300, 3)])
def test_push_never_raises_on_small_images(shape: tuple[int, ...], texture: np.ndarray) -> None:
    selector = StreamingKeyFrameSelector()
    assert selector.push(render(texture, Pose(W, H), W, H)).reason == "first"
    image = np.random.default_rng(0).integers(0, 256, shape, dtype=np.uint8)
    decision = selector.push(image)
    assert decision.reason in REASONS
    if min(shape[:2]) == 1:  # ORB cannot process it: not a key frame, state unchanged
        assert decision == KeyFrameDecision(False, -1.0, "unusable_image")
        again = selector.push(render(texture, Pose(W, H), W, H))
        assert again.reason == "high_overlap" and not again.is_keyframe
    else:  # ORB runs but finds nothing (or little) to match: kept, as the reference does
        assert decision.is_keyframe
    fresh = StreamingKeyFrameSelector()
    assert fresh.push(np.zeros((1, 1), np.uint8)).reason == "unusable_image"
    assert fresh.push(np.zeros((8, 8), np.uint8)).reason == "first"


def test_push_rejects_wrong_dtype_and_shape() -> None:
    selector = StreamingKeyFrameSelector()
    for bad in (np.zeros((50, 50, 3), np.float32), np.zeros((50, 50, 4), np.uint8),
                np.zeros((0, 5), np.uint8), np.zeros((5, 0, 3), np.uint8),
                np.zeros((2, 2, 2, 3), np.uint8), np.zeros(7, np.uint8)):
        with pytest.raises(InvalidRequestError):
            selector.push(bad)
    with pytest.raises(InvalidRequestError):
        selector.push([[0, 1], [2, 3]])  # type: ignore[arg-type]
    assert selector.n_pushed == 0


# --- overlap shortcut against the exact masks --------------------------------------------


def _random_homographies(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    out = []
    for i in range(n):
        kind = i % 5
        if kind == 0:  # realistic: small rotation, scale, shift, mild perspective
            a = rng.normal(0, 0.1)
            s = rng.uniform(0.7, 1.4)
            hm = np.array([[s * np.cos(a), -s * np.sin(a), rng.uniform(-120, 120)],
                           [s * np.sin(a), s * np.cos(a), rng.uniform(-90, 90)],
                           [rng.normal(0, 1e-3), rng.normal(0, 1e-3), 1.0]])
        elif kind == 1:  # strong perspective: corners near or behind the horizon
            hm = np.eye(3) + rng.normal(0, 0.5, (3, 3))
            hm[2, :2] = rng.normal(0, 0.01, 2)
        elif kind == 2:  # arbitrary matrices
            hm = rng.normal(0, 1, (3, 3)) * rng.choice([1e-3, 1, 1e3])
        elif kind == 3:  # rank-deficient / collapsing
            hm = np.outer(rng.normal(0, 1, 3), rng.normal(0, 1, 3))
        else:  # huge coordinates, beyond the shortcut's proven range
            hm = np.diag([rng.uniform(2, 50) * PROVEN_COORD_LIMIT / 160, 1.0, 1.0])
            hm[1, 0] = rng.normal(0, 1)
        out.append(hm)
    out.append(np.full((3, 3), np.nan))
    out.append(np.array([[np.inf, 0, 0], [0, 1, 0], [0, 0, 1]]))
    out.append(np.zeros((3, 3)))
    return out


def test_overlap_shortcut_gives_the_mask_decision_on_random_homographies() -> None:
    rng = np.random.default_rng(1)
    w, h = 160, 120
    shortcut = 0
    for hm in _random_homographies(rng, 1000):
        quad = project_corners(hm, w, h)
        exact = reference_mask_overlap(quad, w, h)
        for threshold in (0.5, float(rng.uniform(0.05, 0.95))):
            value, used_mask = overlap_fraction(quad, w, h, threshold)
            assert (value < threshold) == (exact < threshold), (hm.tolist(), quad.tolist())
            if used_mask:
                assert value == exact
            shortcut += not used_mask
    assert shortcut > 1000  # the exact masks are the exception


def test_overlap_estimate_bound_on_random_quads() -> None:
    rng = np.random.default_rng(2)
    w, h = 160, 120
    rect = np.array([[0, 0], [w, 0], [w, h], [0, h]], float)
    for i in range(1500):
        kind = i % 3
        if kind == 0:
            quad = rng.uniform(-80, 240, (4, 2))  # arbitrary, often non-convex / bow-tie
        elif kind == 1:
            quad = rect + rng.normal(0, 30, (4, 2))  # near the frame, realistic
        else:
            quad = rng.uniform(-1, 1, (4, 2)) * PROVEN_COORD_LIMIT  # up to the proven range
            quad[0] = rng.uniform(0, 160, 2)
        quad = quad.astype(np.int32)
        exact = mask_overlap_pixels(quad, w, h)
        estimate, bound = estimate_overlap_pixels(quad, w, h)
        assert abs(exact - estimate) <= bound, (quad.tolist(), exact, estimate, bound)


def test_overlap_of_known_shapes() -> None:
    w, h = 160, 120
    full = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.int32)
    assert overlap_fraction(full, w, h)[0] == 1.0
    half = full.copy()
    half[:, 0] += w // 2  # shifted right by half the width: columns 80..159
    assert overlap_fraction(half, w, h) == (0.5, True)
    bowtie = np.array([[10, 10], [100, 100], [100, 10], [10, 100]], np.int32)
    exact = mask_overlap_pixels(bowtie, w, h)
    estimate, bound = estimate_overlap_pixels(bowtie, w, h)
    assert exact > 4000 and abs(exact - estimate) <= bound  # both lobes count
    assert overlap_fraction(full + 1000, w, h, 0.5)[0] == 0.0


# --- streaming state stays bounded --------------------------------------------------------


def test_streaming_memory_is_bounded_over_2000_pushes() -> None:
    # Cycle: a view, the same view panned 3% (high overlap: not kept), a flat frame (no
    # features: kept), so key frames keep being replaced.
    w, h = 128, 96
    tex = make_texture(8 * w, 2 * h, seed=9)
    views = []
    for x in range(5):
        pose = Pose(w + x * 1.5 * w, h)
        views += [render(tex, pose, w, h), render(tex, Pose(pose.x + 0.03 * w, h), w, h)]
        views.append(np.full((h, w, 3), 40 + 30 * x, np.uint8))
    selector = StreamingKeyFrameSelector()
    tracemalloc.start()
    try:
        for i in range(200):
            selector.push(views[i % len(views)])
        warm, _ = tracemalloc.get_traced_memory()
        for i in range(200, 2000):
            selector.push(views[i % len(views)])
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert selector.n_pushed == 2000 and 200 < selector.n_keyframes < 2000
    assert after - warm < 64 * 1024, f"selector state grew by {after - warm} bytes"
    key = selector._key  # the only per-frame state: the last key frame's features
    held = key.points.nbytes + (0 if key.descriptors is None else key.descriptors.nbytes)
    assert held <= 500 * (8 + 32)
    selector.reset()
    assert selector.n_pushed == 0 and selector.push(views[0]).reason == "first"


# --- live frame-rate sampler ---------------------------------------------------------------




def test_sampler_keeps_one_frame_per_second_of_a_30fps_stream() -> None:
    sampler = FrameRateSampler(1.0)
    kept = [i for i in range(301) if sampler.accept(i / 30.0)]
    assert kept == list(range(0, 301, 30))


def test_sampler_with_jitter_keeps_the_long_run_rate() -> None:
    rng = np.random.default_rng(0)
    sampler = FrameRateSampler(1.0)
    stamps = 1000.0 + np.arange(30 * 300) / 30.0 + rng.uniform(-0.008, 0.008, 30 * 300)
    stamps.sort()
    kept = [t for t in stamps if sampler.accept(t)]
    assert len(kept) in (300, 301)
    gaps = np.diff(kept)
    assert gaps.min() > 1.0 - 1 / 30 - 0.02 and gaps.max() < 1.0 + 1 / 30 + 0.02


def test_sampler_out_of_order_duplicates_gaps_and_clock_restarts() -> None:
    sampler = FrameRateSampler(2.0, max_backward_s=1.0)
    assert sampler.accept(10.0)  # first frame
    assert not sampler.accept(10.0)  # duplicate
    assert not sampler.accept(10.2)  # same half-second slot
    assert sampler.accept(10.5)
    assert not sampler.accept(10.3)  # late, out of order
    assert sampler.accept(20.01)  # after a gap: taken at once ...
    assert not sampler.accept(20.2)  # ... and no burst to make up missed slots
    assert sampler.accept(20.5)
    assert sampler.accept(3.0)  # clock jumped back > 1 s: start over
    assert not sampler.accept(3.1) and sampler.accept(3.5)
    sampler.reset()
    assert sampler.accept(0.0)


def test_sampler_fps_zero_keeps_everything_and_rejects_bad_input() -> None:
    sampler = FrameRateSampler(0.0)
    assert all(sampler.accept(t) for t in [0.0, 0.0, -5.0, 1.0])
    with pytest.raises(InvalidRequestError):
        FrameRateSampler(float("nan"))
    with pytest.raises(InvalidRequestError):
        FrameRateSampler(1.0).accept(float("inf"))


# --- live count rule (robot episodes) ------------------------------------------------------


@pytest.mark.parametrize(
    "kept, n, expected",
    [
        ([], 0, []),
        ([0], 1, [0]),
        ([0], 3, [0, 1, 2]),
        ([0, 1], 4, [0, 1, 2, 3]),
        ([0, 5], 10, [0, 3, 6, 9]),  # 3 after adding last: floor(i*9/3)
        ([0], 1000, [0, 333, 666, 999]),
        ([0, 10, 20, 30], 40, [0, 10, 20, 30, 39]),
        ([3, 1, 1, 0], 5, [0, 1, 3, 4]),  # unsorted, duplicates
    ],
)
def test_live_count_rule_cases(kept: list[int], n: int, expected: list[int]) -> None:
    assert apply_count_rule(kept, n) == expected


def test_live_count_rule_upper_limit_and_edges() -> None:
    many = apply_count_rule(list(range(1000)), 1000)
    assert len(many) == 32 and many[0] == 0 and many[-1] == 999 and many[-2] == 998
    steps = np.diff(many[1:-1])
    assert steps.max() - steps.min() <= 1  # evenly spread (unlike the reference's sampler)
    assert even_picks(10, 1) == [4] and even_picks(3, 5) == [0, 1, 2] and even_picks(5, 0) == []
    with pytest.raises(InvalidRequestError):
        apply_count_rule([5], 5)




@pytest.mark.parametrize(
    "kwargs",
    [
        {"overlap_threshold": -0.1},
        {"overlap_threshold": 1.5},
        {"overlap_threshold": float("nan")},
        {"min_matches": 2},
        {"min_matches": 10.5},
        {"min_matches": True},
        {"ransac_reproj_threshold": 0},
        {"min_keyframes": 0},
        {"min_keyframes": 8, "max_keyframes": 4},
        {"max_keyframes": 1, "min_keyframes": 1},
        {"sample_fps": float("inf")},
        {"sample_fps": "1"},
    ],
)
def test_invalid_params_are_rejected(kwargs: dict) -> None:
    with pytest.raises(InvalidRequestError):
        KeyFrameParams(**kwargs)


def test_default_params_are_the_reference_values() -> None:
    p = KeyFrameParams()
    assert (p.sample_fps, p.overlap_threshold, p.min_matches, p.ransac_reproj_threshold,
            p.min_keyframes, p.max_keyframes) == (1.0, 0.5, 10, 5.0, 4, 32)


# --- whole videos: errors and the command line -----------------------------------------------


def test_unreadable_video_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.avi"
    with pytest.raises(InvalidRequestError, match="missing.avi"):
        extract_keyframes_from_video(missing)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video at all" * 100)
    with pytest.raises(InvalidRequestError, match="garbage.mp4"):
        extract_keyframes_from_video(garbage)


def test_cli_prints_indices_and_times(known_clips: dict[str, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture) -> None:
    clip = str(known_clips["static271"])
    assert cli_main([clip]) == 0
    out = capsys.readouterr().out
    assert "sampled positions: 0 1 5 9" in out and "source frames:     0 30 150 270" in out
    assert "decoding" in out and "selection" in out
    assert cli_main([clip, "--json", "--min", "5", "--max", "6"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sampled_indices"] == reference_subsample(list(range(10)), 5) == [0, 1, 4, 6, 9]
    assert data["source_frames"] == [30 * i for i in data["sampled_indices"]]
    assert math.isfinite(data["seconds"]) and data["decode_strategy"] == "pyav"
    assert data["decode_seconds"] >= 0 and data["select_seconds"] >= 0
    # MJPEG through PyAV: only the ten wanted packets of 271 are decoded
    assert (data["packets_decoded"], data["packets_read"]) == (10, 271)
    # --fps 2: step int(30 / 2) = 15 -> 0, 15, ..., 270 = 19 sampled frames.
    assert cli_main([clip, "--json", "--fps", "2", "--decoder", "sequential"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["n_sampled"] == 19 and data["decode_strategy"] == "sequential"
    # OpenCV's raw Motion-JPEG packets: same key frames, only the wanted packets decoded.
    assert cli_main([clip, "--json", "--decoder", "intra"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decode_strategy"] == "intra" and data["sampled_indices"] == [0, 1, 5, 9]
    assert (data["packets_decoded"], data["packets_read"]) == (10, 271)
    # intra on a non-MJPEG file: not usable, plain OpenCV takes over (and says why)
    view = cv2.cvtColor(read_first_frame(clip), cv2.COLOR_BGR2RGB)
    mp4v = write_video(tmp_path / "mp4v.mp4", [view] * 40, 10, "mp4v")
    assert cli_main([str(mp4v), "--json", "--decoder", "intra"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["decode_strategy"] == "sequential" and data["sampled_indices"] == [0, 1, 3, 4]
    assert len(data["fallbacks"]) == 1 and data["fallbacks"][0].startswith("intra: not Motion-JPEG")


def test_cli_errors_exit_2(tmp_path: Path, known_clips: dict[str, Path],
                           capsys: pytest.CaptureFixture) -> None:
    assert cli_main([str(tmp_path / "nope.avi")]) == 2
    assert "nope.avi" in capsys.readouterr().err
    assert cli_main([str(known_clips["static271"]), "--threshold", "3"]) == 2
    assert "overlap_threshold" in capsys.readouterr().err
    assert cli_main([str(known_clips["static271"]), "--min", "x"]) == 2
    assert cli_main([str(known_clips["static271"]), "--decoder", "gpu"]) == 2
    with pytest.raises(InvalidRequestError, match="unknown decoder"):
        extract_keyframes_from_video(known_clips["static271"], decoder="gpu")


def test_progress_is_reported_for_every_sampled_frame(known_clips: dict[str, Path]) -> None:
    calls: list[tuple[int, int]] = []
    result = extract_keyframes_from_video(known_clips["static271"],
                                          on_progress=lambda done, total: calls.append((done, total)))
    assert result.n_sampled == 10
    assert calls == [(i, 10) for i in range(1, 11)]


def _keyframes_command_stderr_on_a_terminal(clip: Path, *extra: str) -> tuple[str, str]:
    """Runs the installed `embodied-r keyframes` with stderr on a pseudo-terminal; returns
    (stdout, what the terminal received)."""
    leader, follower = os.openpty()
    # A terminal of 24 x 100 characters (a new pseudo-terminal is 0 x 0, where tqdm draws
    # a bar of no width).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        proc = subprocess.run(["embodied-r", "keyframes", str(clip), *extra],
                              stdout=subprocess.PIPE, stderr=follower, text=True,
                              timeout=120, check=True)
        os.close(follower)
        follower = -1
        received = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal has no writer left
                break
            if not chunk:
                break
            received += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    return proc.stdout, received.decode(errors="replace")


def test_the_command_shows_a_progress_bar_on_a_terminal_only(known_clips: dict[str, Path]) -> None:
    clip = known_clips["static271"]
    out, terminal = _keyframes_command_stderr_on_a_terminal(clip)
    assert "sampled positions: 0 1 5 9" in out
    assert "sampled frames" in terminal and "10/10" in terminal
    out, terminal = _keyframes_command_stderr_on_a_terminal(clip, "--no-progress")
    assert "sampled positions: 0 1 5 9" in out and terminal == ""
    # Not a terminal (a pipe, as in scripts and these tests' other runs): no bar either.
    proc = subprocess.run(["embodied-r", "keyframes", str(clip), "--json"], capture_output=True,
                          text=True, timeout=120, check=True)
    assert proc.stderr == "" and json.loads(proc.stdout)["sampled_indices"] == [0, 1, 5, 9]
