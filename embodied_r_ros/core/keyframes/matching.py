"""Cross-checked brute-force Hamming matching of binary descriptors (ORB), in numpy.

The reference matches ORB descriptors with `cv2.BFMatcher(cv2.NORM_HAMMING,
crossCheck=True).match(query, train)`. This module gives the same pairs, in the same order,
with the same distances:

- the distance of two descriptors is the number of bits in which they differ;
- a pair (i, j) is kept when train row j is the nearest to query row i **and** query row i
  is the nearest to train row j; on each side a tie goes to the lowest row index;
- pairs come out in increasing query index, each with its distance.

Why not OpenCV's matcher: on two sets of 500 ORB descriptors it computes the 250 000
distances one descriptor pair at a time and spreads them over OpenCV's thread pool, which
then competes with the decoder and ORB threads of the offline path: 4.8 ms of CPU (2.4 ms
wall on 2 threads) per match, against 1.4 ms of CPU on one thread for the XOR-ed 64-bit
words counted in numpy (`python -m bench.bench_matching`, 2-core machine). Equality with
OpenCV, ties included, is tested against `cv2.BFMatcher` itself
(test/unit/keyframes/test_matching.py).

Memory: the full distance matrix is built, 2 bytes per pair plus 9 bytes of scratch per
pair (ORB's default cap of 500 features per frame: under 3 MB).

numpy before 2.0 (the apt numpy a ROS robot install pins, 1.26 on Ubuntu 24.04) has no
`np.bitwise_count`; there the matches come from `cv2.BFMatcher` itself, converted to the
same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

HAS_BITWISE_COUNT = hasattr(np, "bitwise_count")  # numpy >= 2.0


@dataclass(frozen=True)
class Matches:
    """Matched rows: query_idx[k] and train_idx[k] with Hamming distance distance[k]
    (all int64 arrays of the same length, in increasing query_idx)."""

    query_idx: np.ndarray
    train_idx: np.ndarray
    distance: np.ndarray

    def __len__(self) -> int:
        return int(self.query_idx.shape[0])

    def by_distance(self) -> Matches:
        """The same pairs sorted by distance, ascending; equal distances keep their order
        (as Python's stable `sorted(matches, key=distance)` over OpenCV's list)."""
        order = np.argsort(self.distance, kind="stable")
        return Matches(self.query_idx[order], self.train_idx[order], self.distance[order])


def _no_matches() -> Matches:
    return Matches(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))


def _check(query: np.ndarray, train: np.ndarray) -> None:
    for descriptors in (query, train):
        if not isinstance(descriptors, np.ndarray) or descriptors.dtype != np.uint8 \
                or descriptors.ndim != 2:
            raise ValueError("binary descriptors must be a 2-D uint8 array (one row each)")
    if query.shape[1] != train.shape[1]:
        raise ValueError(f"descriptor widths differ: {query.shape[1]} and {train.shape[1]} bytes")


def _as_words(descriptors: np.ndarray) -> np.ndarray:
    """(N, B) uint8 descriptors as (W, N) uint64 words, one row per word (zero-padded to a
    multiple of 8 bytes: zero bytes never differ, so distances are unchanged)."""
    n, width = descriptors.shape
    padded_width = -(-width // 8) * 8
    if padded_width != width:
        padded = np.zeros((n, padded_width), np.uint8)
        padded[:, :width] = descriptors
        descriptors = padded
    return np.ascontiguousarray(descriptors).view(np.uint64).T.copy()


def hamming_distances(query: np.ndarray, train: np.ndarray) -> np.ndarray:
    """(len(query), len(train)) uint16 matrix of bit differences between (N, B) uint8
    descriptor rows (B bytes each, the same B for both). Needs numpy >= 2.0."""
    _check(query, train)
    return _distances(query, train)


def _distances(query: np.ndarray, train: np.ndarray) -> np.ndarray:
    """`hamming_distances` of descriptors already checked."""
    q_words, t_words = _as_words(query), _as_words(train)
    shape = (q_words.shape[1], t_words.shape[1])
    distances = np.zeros(shape, np.uint16)
    xor = np.empty(shape, np.uint64)
    bits = np.empty(shape, np.uint8)
    for q_word, t_word in zip(q_words, t_words):
        np.bitwise_xor(q_word[:, None], t_word[None, :], out=xor)
        np.bitwise_count(xor, out=bits)
        np.add(distances, bits, out=distances)
    return distances


def numpy_matches(query: np.ndarray, train: np.ndarray) -> Matches:
    """The cross-checked pairs computed from `hamming_distances` (numpy >= 2.0)."""
    _check(query, train)
    if len(query) == 0 or len(train) == 0:
        return _no_matches()
    distances = _distances(query, train)
    nearest_train = distances.argmin(axis=1)  # argmin: the first minimum, lowest index
    nearest_query = distances.argmin(axis=0)
    rows = np.arange(distances.shape[0])
    kept = np.flatnonzero(nearest_query[nearest_train] == rows)
    train_idx = nearest_train[kept]
    return Matches(kept.astype(np.int64), train_idx.astype(np.int64),
                   distances[kept, train_idx].astype(np.int64))


def opencv_matches(query: np.ndarray, train: np.ndarray) -> Matches:
    """The cross-checked pairs from `cv2.BFMatcher` (used where numpy is older than 2.0)."""
    _check(query, train)
    if len(query) == 0 or len(train) == 0:
        return _no_matches()
    found = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(query, train)
    return Matches(np.array([m.queryIdx for m in found], np.int64),
                   np.array([m.trainIdx for m in found], np.int64),
                   np.array([int(m.distance) for m in found], np.int64))


def cross_checked_matches(query: np.ndarray, train: np.ndarray) -> Matches:
    """What `cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(query, train)` returns,
    as arrays (see the module docstring for the rule). Either set may be empty; anything
    but two 2-D uint8 arrays of the same width raises ValueError."""
    if HAS_BITWISE_COUNT:
        return numpy_matches(query, train)
    return opencv_matches(query, train)
