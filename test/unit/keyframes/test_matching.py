"""The numpy matcher against the reference's own matcher, cv2.BFMatcher(NORM_HAMMING,
crossCheck=True): same pairs, same order, same distances, ties included."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from embodied_r_ros.core.keyframes import matching as descriptor_matching
from embodied_r_ros.core.keyframes.matching import (
    Matches,
    cross_checked_matches,
    hamming_distances,
    numpy_matches,
    opencv_matches,
)
from embodied_r_ros.testing.keyframe_clips import Pose, make_texture, render

W, H = 320, 240


def _opencv(query: np.ndarray, train: np.ndarray) -> list[tuple[int, int, float]]:
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)
    return [(m.queryIdx, m.trainIdx, m.distance) for m in matcher.match(query, train)]


def _ours(matches: Matches) -> list[tuple[int, int, float]]:
    return list(zip(matches.query_idx.tolist(), matches.train_idx.tolist(),
                    matches.distance.astype(float).tolist()))


NEEDS_NUMPY_2 = pytest.mark.skipif(not descriptor_matching.HAS_BITWISE_COUNT,
                                   reason="numpy < 2.0 has no bitwise_count (OpenCV is used)")
BOTH = pytest.mark.parametrize("matcher", [pytest.param(numpy_matches, marks=NEEDS_NUMPY_2),
                                           opencv_matches], ids=["numpy", "opencv"])


@NEEDS_NUMPY_2
def test_numpy_2_uses_the_numpy_matcher_and_older_numpy_opencv(monkeypatch) -> None:
    # The CI installs numpy 2; a ROS robot install pins the apt numpy (1.26: no bitwise_count).
    query = np.array([[0b0000], [0b0011], [0b1111]], np.uint8)
    train = np.array([[0b0001], [0b0010], [0b1111]], np.uint8)
    assert hamming_distances(query, train).tolist() == [[1, 1, 4], [1, 1, 2], [3, 3, 0]]
    calls = []
    monkeypatch.setattr(descriptor_matching, "opencv_matches",
                        lambda q, t: calls.append("opencv") or opencv_matches(q, t))
    assert _ours(cross_checked_matches(query, train)) == [(0, 0, 1.0), (2, 2, 0.0)]
    assert calls == []
    monkeypatch.setattr(descriptor_matching, "HAS_BITWISE_COUNT", False)
    assert _ours(cross_checked_matches(query, train)) == [(0, 0, 1.0), (2, 2, 0.0)]
    assert calls == ["opencv"]


@BOTH
def test_worked_example_with_ties(matcher) -> None:
    # One-byte descriptors (padded to 8 bytes inside). Distances query x train:
    #   q0=0b0000: t0=0b0001 -> 1, t1=0b0010 -> 1, t2=0b1111 -> 4
    #   q1=0b0011: t0 -> 1, t1 -> 1, t2 -> 2
    #   q2=0b1111: t0 -> 3, t1 -> 3, t2 -> 0
    # q0's nearest is t0 (tie with t1: lowest index); t0's nearest is q0 (tie with q1):
    # kept. q1's nearest is t0, whose nearest is q0: dropped. q2 <-> t2: kept.
    query = np.array([[0b0000], [0b0011], [0b1111]], np.uint8)
    train = np.array([[0b0001], [0b0010], [0b1111]], np.uint8)
    assert _ours(matcher(query, train)) == [(0, 0, 1.0), (2, 2, 0.0)]
    assert _opencv(query, train) == [(0, 0, 1.0), (2, 2, 0.0)]


@BOTH
def test_nearest_one_way_is_not_enough(matcher) -> None:
    # t0's nearest query is q0 (distance 2), but q0's nearest train is t1 (distance 1):
    # t0 gets no pair, q0 pairs with t1, as OpenCV's cross-check gives.
    query = np.array([[0b0000_0000]], np.uint8)
    train = np.array([[0b0000_0011], [0b0000_0001]], np.uint8)
    assert _ours(matcher(query, train)) == [(0, 1, 1.0)]
    assert _opencv(query, train) == [(0, 1, 1.0)]
    query = np.array([[0b0000_0000], [0b0000_0011]], np.uint8)
    train = np.array([[0b0000_0111]], np.uint8)
    assert _ours(matcher(query, train)) == _opencv(query, train) == [(1, 0, 1.0)]


@NEEDS_NUMPY_2
def test_same_as_opencv_on_tie_heavy_random_sets() -> None:
    rng = np.random.default_rng(7)
    for trial in range(400):
        nq, nt = (int(x) for x in rng.integers(1, 80, 2))
        width = int(rng.choice([8, 16, 32, 61]))
        query = np.zeros((nq, width), np.uint8)
        train = np.zeros((nt, width), np.uint8)
        bits = int(rng.integers(1, 7))  # few distinct values: many equal distances
        query[:, 0] = rng.integers(0, 2 ** bits, nq)
        train[:, 0] = rng.integers(0, 2 ** bits, nt)
        if trial % 3 == 0:
            query[:, -1] = rng.integers(0, 4, nq)
            train[:, width // 2] = rng.integers(0, 256, nt)
        assert _ours(cross_checked_matches(query, train)) == _opencv(query, train), trial


@NEEDS_NUMPY_2
def test_same_as_opencv_on_orb_descriptors_of_moving_views() -> None:
    orb = cv2.ORB.create()
    texture = make_texture(4 * W, 2 * H, seed=3)
    views = [render(texture, Pose(W + dx, H, zoom), W, H)
             for dx, zoom in [(0, 1.0), (12, 1.0), (40, 1.05), (160, 0.95), (400, 1.0)]]
    descriptors = []
    for view in views:
        _, found = orb.detectAndCompute(cv2.cvtColor(view, cv2.COLOR_RGB2GRAY), None)
        assert found is not None and len(found) > 100
        descriptors.append(found)
    for query in descriptors:
        for train in descriptors:
            ours = cross_checked_matches(query, train)
            assert _ours(ours) == _opencv(query, train)
            expected = sorted(_opencv(query, train), key=lambda m: m[2])  # stable, as the reference
            assert _ours(ours.by_distance()) == expected
    # The largest distance, all 256 bits different, needs more than 8 bits.
    full = np.full((1, 32), 255, np.uint8)
    zero = np.zeros((1, 32), np.uint8)
    assert hamming_distances(full, zero).tolist() == [[256]]
    assert _ours(cross_checked_matches(full, zero)) == _opencv(full, zero) == [(0, 0, 256.0)]


@BOTH
def test_empty_sets_and_bad_input(matcher) -> None:
    some = np.zeros((3, 32), np.uint8)
    assert len(matcher(some, np.zeros((0, 32), np.uint8))) == 0
    assert len(matcher(np.zeros((0, 32), np.uint8), some)) == 0
    with pytest.raises(ValueError, match="uint8"):
        matcher(some.astype(np.float32), some)
    with pytest.raises(ValueError, match="uint8"):
        matcher(some, some[0])
    with pytest.raises(ValueError, match="widths differ"):
        matcher(some, np.zeros((3, 16), np.uint8))
