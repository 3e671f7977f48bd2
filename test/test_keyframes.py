"""Key-frame selection: parity with the mask-based reference, streaming bounds, sampler,
count rule, overlap geometry, video extraction and the `embodied-r keyframes` command."""

from __future__ import annotations

import json
import math
import sys
import tracemalloc
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.reference_keyframes import reference_extract, reference_select  # noqa: E402
from embodied_r_ros.core.errors import InvalidRequestError  # noqa: E402
from embodied_r_ros.core.keyframe_overlap import (  # noqa: E402
    estimate_overlap_pixels,
    mask_overlap_pixels,
    overlap_fraction,
)
from embodied_r_ros.core.keyframes import (  # noqa: E402
    REASONS,
    FrameRateSampler,
    KeyFrameDecision,
    KeyFrameParams,
    StreamingKeyFrameSelector,
    apply_count_rule,
    even_picks,
    extract_keyframes_from_video,
    select_keyframes,
)
from embodied_r_ros.core.keyframes_cli import main as cli_main  # noqa: E402
from keyframe_clips import (  # noqa: E402
    Pose,
    clip_frames,
    make_texture,
    render,
    scenario_poses,
    textureless_frames,
    video_poses,
    write_video,
)

W, H = 200, 150


@pytest.fixture(scope="module")
def texture() -> np.ndarray:
    return make_texture(6 * W, 2 * H, seed=3)


def _bgr(frames: list[np.ndarray]) -> list[np.ndarray]:
    return [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in frames]


def _kept_positions(frames: list[np.ndarray]) -> tuple[list[int], list[KeyFrameDecision]]:
    selector = StreamingKeyFrameSelector()
    decisions = [selector.push(f) for f in frames]
    return [i for i, d in enumerate(decisions) if d.is_keyframe], decisions


# --- parity with the reference on synthetic clips ----------------------------------------


@pytest.mark.parametrize("scenario", ["static", "slow_pan", "fast_turn", "forward", "mixed"])
def test_same_keyframes_as_reference(texture: np.ndarray, scenario: str) -> None:
    n = 12 if scenario == "fast_turn" else 30  # low-overlap comparisons cost full RANSAC
    frames = list(clip_frames(texture, scenario_poses(scenario, n, W, texture.shape[0]), W, H))
    ours = select_keyframes(frames)
    assert ours == reference_select(_bgr(frames))
    kept, decisions = _kept_positions(frames)
    assert decisions[0] == KeyFrameDecision(True, -1.0, "first")
    assert all(d.reason in REASONS for d in decisions)
    if scenario == "static":
        assert kept == [0] and ours == even_picks(30, 4) == [0, 9, 19, 29]
        assert all(d.overlap > 0.99 for d in decisions[1:])
    if scenario == "fast_turn":  # 70% of the width per frame: nearly every frame is new
        assert len(kept) >= 8
    if scenario == "forward":  # zoom of 1.06^k: overlap 1/zoom^2 falls below 0.5 in a cycle
        assert any(d.reason == "low_overlap" for d in decisions)


def test_slow_pan_keeps_a_frame_when_half_the_view_is_new(texture: np.ndarray) -> None:
    # 3% of the width per frame: overlap with the key frame is 1 - 0.03 k < 0.5 at k = 17.
    frames = list(clip_frames(texture, scenario_poses("slow_pan", 40, W, texture.shape[0]), W, H))
    kept, decisions = _kept_positions(frames)
    assert len(kept) == 3 and kept[0] == 0
    assert abs(kept[1] - 17) <= 1 and abs(kept[2] - kept[1] - 17) <= 1
    assert decisions[kept[1]].reason == "low_overlap" and decisions[kept[1]].overlap < 0.5
    assert decisions[5].overlap == pytest.approx(0.85, abs=0.03)
    assert select_keyframes(frames) == reference_select(_bgr(frames))


def test_textureless_frames_are_kept_as_no_features(texture: np.ndarray) -> None:
    frames = textureless_frames(24, W, H, texture)
    kept, decisions = _kept_positions(frames)
    assert decisions[1].reason == "no_features" and decisions[1].is_keyframe
    assert decisions[2].reason == "no_features"  # previous key frame had no descriptors
    assert select_keyframes(frames) == reference_select(_bgr(frames))
    gray = [cv2.cvtColor(f, cv2.COLOR_RGB2GRAY) for f in frames]
    assert select_keyframes(gray) == select_keyframes(frames)


def test_count_rule_on_a_long_clip_matches_reference() -> None:
    # 640 sampled frames at 160x120: a textured view, a slightly panned view, two flat
    # frames, repeated. Flat frames have no features, so 3 of every 4 frames are kept:
    # 480 key frames, cut to 32 by the count rule.
    w, h = 160, 120
    tex = make_texture(8 * w, 2 * h, seed=5)
    frames = []
    for i in range(160):
        pose = Pose(w + i * 0.9 * w, h)
        frames.append(render(tex, pose, w, h))
        frames.append(render(tex, Pose(pose.x + 0.1 * w, pose.y), w, h))
        frames.append(np.full((h, w, 3), 60, np.uint8))
        frames.append(np.full((h, w, 3), 200, np.uint8))
    ours = select_keyframes(frames)
    assert ours == reference_select(_bgr(frames))
    assert len(ours) == 32 and ours[0] == 0 and ours[-1] == 639
    assert ours == sorted(set(ours))


# --- streaming state stays bounded ------------------------------------------------------


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
    state = [v for v in vars(selector).values() if isinstance(v, np.ndarray)]
    assert sum(a.nbytes for a in state) <= 500 * (8 + 32)
    selector.reset()
    assert selector.n_pushed == 0 and selector.push(views[0]).reason == "first"


def test_push_rejects_bad_images() -> None:
    selector = StreamingKeyFrameSelector()
    with pytest.raises(InvalidRequestError):
        selector.push(np.zeros((50, 50, 3), np.float32))
    with pytest.raises(InvalidRequestError):
        selector.push(np.zeros((50, 50, 4), np.uint8))
    with pytest.raises(InvalidRequestError):
        selector.push([[0, 1], [2, 3]])  # type: ignore[arg-type]
    assert selector.n_pushed == 0


# --- frame-rate sampler -----------------------------------------------------------------


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


# --- count rule -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kept, n, expected",
    [
        ([], 0, []),
        ([0], 1, [0]),
        ([0], 3, [0, 1, 2]),
        ([0], 4, [0, 1, 2, 3]),
        ([0, 1], 4, [0, 1, 2, 3]),  # last added -> 3 frames < 4 -> all four
        ([0, 5], 10, [0, 3, 6, 9]),  # 3 after adding last: floor(i*9/3)
        ([0], 1000, [0, 333, 666, 999]),
        ([0, 400, 999], 1000, [0, 333, 666, 999]),
        ([0, 10, 20, 30], 40, [0, 10, 20, 30, 39]),
        ([3, 1, 1, 0], 5, [0, 1, 3, 4]),  # unsorted, duplicates
    ],
)
def test_count_rule_cases(kept: list[int], n: int, expected: list[int]) -> None:
    assert apply_count_rule(kept, n) == expected


def test_count_rule_upper_limit() -> None:
    assert apply_count_rule(list(range(32)), 32) == list(range(32))
    got = apply_count_rule(list(range(33)), 33)
    # middle 1..31 (31 items), 30 picked with floor(i*30/29) = i for i < 29, then 30:
    # only the 30th middle item (position 30) is dropped
    assert got == [p for p in range(33) if p != 30]
    many = apply_count_rule(list(range(1000)), 1000)
    assert len(many) == 32 and many[0] == 0 and many[-1] == 999 and many[1] == 1 and many[-2] == 998
    assert many == sorted(set(many))
    steps = np.diff(many[1:-1])
    assert steps.max() - steps.min() <= 1  # evenly spread
    assert apply_count_rule(list(range(0, 1000, 2)), 1000, 4, 10)[-1] == 999


def test_count_rule_and_even_picks_edge_cases() -> None:
    assert even_picks(10, 1) == [4] and even_picks(3, 5) == [0, 1, 2] and even_picks(5, 0) == []
    for n in range(2, 60):
        for k in range(2, n + 1):
            picks = even_picks(n, k)
            assert picks[0] == 0 and picks[-1] == n - 1 and len(set(picks)) == k
    assert apply_count_rule(list(range(10)), 10, 2, 3) == [0, 4, 9]
    with pytest.raises(InvalidRequestError):
        apply_count_rule([5], 5)
    with pytest.raises(InvalidRequestError):
        apply_count_rule([-1], 5)
    with pytest.raises(InvalidRequestError):
        apply_count_rule([0], 5, 5, 4)


# --- parameters -------------------------------------------------------------------------


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


# --- overlap geometry vs the rasterised mask ---------------------------------------------


def test_geometric_overlap_agrees_with_mask_on_random_quads() -> None:
    rng = np.random.default_rng(1)
    w, h = 160, 120
    rect = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], float)
    used_mask = 0
    for i in range(1500):
        kind = i % 3
        if kind == 0:
            quad = rng.uniform(-80, 240, (4, 2))  # arbitrary, often non-convex / bow-tie
        elif kind == 1:
            quad = rect + rng.normal(0, 30, (4, 2))  # near the frame, realistic
        else:
            quad = rng.uniform(-5000, 5000, (4, 2))
        quad = quad.astype(np.int32)
        exact = mask_overlap_pixels(quad, w, h)
        estimate, bound = estimate_overlap_pixels(quad, w, h)
        assert abs(exact - estimate) <= bound, (quad.tolist(), exact, estimate, bound)
        thr = float(rng.uniform(0.2, 0.8))
        value, mask_used = overlap_fraction(quad, w, h, thr)
        used_mask += mask_used
        assert (value < thr) == (exact / (w * h) < thr)
    assert used_mask < 1500 * 0.2  # the raster fallback is the exception


def test_overlap_of_known_shapes() -> None:
    w, h = 160, 120
    full = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.int32)
    assert overlap_fraction(full, w, h)[0] == pytest.approx(1.0, abs=0.02)
    half = full.copy()
    half[:, 0] += w // 2  # shifted right by half the width
    assert overlap_fraction(half, w, h)[0] == pytest.approx(0.5, abs=0.02)
    bowtie = np.array([[10, 10], [100, 100], [100, 10], [10, 100]], np.int32)
    exact = mask_overlap_pixels(bowtie, w, h)
    estimate, bound = estimate_overlap_pixels(bowtie, w, h)
    assert exact > 4000 and abs(exact - estimate) <= bound  # both lobes count
    outside = full + 1000
    assert overlap_fraction(outside, w, h)[0] == 0.0


# --- whole videos -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory, texture: np.ndarray) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keyframe_clips")
    poses = video_poses(24, 10, W, texture.shape[0])
    return {
        "mjpg": write_video(folder / "mixed.avi", clip_frames(texture, poses, W, H), 10, "MJPG"),
        "mp4v": write_video(folder / "mixed.mp4", clip_frames(texture, poses, W, H), 10, "mp4v"),
        "static": write_video(
            folder / "static.avi", clip_frames(texture, [Pose(W, H)] * 95, W, H), 10, "MJPG"
        ),
    }


def _read_all_rgb(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    out = []
    while True:
        ok, frame = cap.read()
        if not ok:
            return out
        out.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))


@pytest.mark.parametrize("clip, fast", [("mjpg", True), ("mjpg", False), ("mp4v", True)])
def test_video_extraction_matches_reference(clips: dict[str, Path], clip: str, fast: bool) -> None:
    ref = reference_extract(str(clips[clip]))
    got = extract_keyframes_from_video(clips[clip], fast_decode=fast, return_images=True)
    assert got.decode_strategy == ("intra" if clip == "mjpg" and fast else "sequential")
    assert got.sampled_indices == ref["sampled_indices"]
    assert got.source_frames == ref["source_frames"]
    assert (got.n_sampled, got.n_source_frames) == (24, 240) == (ref["n_sampled"], 240)
    assert got.video_fps == pytest.approx(10.0) and got.seconds > 0
    assert all(s == 10 * i for i, s in zip(got.sampled_indices, got.source_frames))
    decoded = _read_all_rgb(clips[clip])
    assert len(got.images) == len(got.source_frames)
    for number, image in zip(got.source_frames, got.images):
        assert np.array_equal(image, decoded[number])  # pixel-identical to cap.read()
    assert 4 <= len(got.sampled_indices) <= 32


def test_video_count_rule_fetches_frames_that_were_not_kept(clips: dict[str, Path]) -> None:
    # 95 frames at 10 fps -> 10 sampled (0, 10, ..., 90); a static view keeps only the
    # first, so the four final frames come from a second, targeted pass.
    for fast in (True, False):
        got = extract_keyframes_from_video(clips["static"], fast_decode=fast, return_images=True)
        assert got.n_sampled == 10 and got.sampled_indices == [0, 3, 6, 9]
        assert got.source_frames == [0, 30, 60, 90]
        decoded = _read_all_rgb(clips["static"])
        for number, image in zip(got.source_frames, got.images):
            assert np.array_equal(image, decoded[number])
    assert reference_extract(str(clips["static"]))["source_frames"] == [0, 30, 60, 90]
    plain = extract_keyframes_from_video(clips["static"])
    assert plain.images == [] and plain.sampled_indices == [0, 3, 6, 9]


def test_unreadable_video_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.avi"
    with pytest.raises(InvalidRequestError, match="missing.avi"):
        extract_keyframes_from_video(missing)
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video at all" * 100)
    with pytest.raises(InvalidRequestError, match="garbage.mp4"):
        extract_keyframes_from_video(garbage)


# --- command line -----------------------------------------------------------------------


def test_cli_prints_indices_and_time(clips: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert cli_main([str(clips["static"])]) == 0
    out = capsys.readouterr().out
    assert "sampled positions: 0 3 6 9" in out and "source frames:     0 30 60 90" in out
    assert "time:" in out
    assert cli_main([str(clips["static"]), "--json", "--min", "5", "--max", "6"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sampled_indices"] == even_picks(10, 5) and data["n_sampled"] == 10
    assert data["source_frames"] == [10 * i for i in data["sampled_indices"]]
    assert math.isfinite(data["seconds"])
    assert cli_main([str(clips["static"]), "--json", "--fps", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["n_sampled"] == 19


def test_cli_errors_exit_2(tmp_path: Path, clips: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert cli_main([str(tmp_path / "nope.avi")]) == 2
    assert "nope.avi" in capsys.readouterr().err
    assert cli_main([str(clips["static"]), "--threshold", "3"]) == 2
    assert "overlap_threshold" in capsys.readouterr().err
    assert cli_main([str(clips["static"]), "--min", "x"]) == 2
