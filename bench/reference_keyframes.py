"""Parity baseline: a deliberately plain implementation of the reference key-frame method.

It does what the reference does, with no care for speed or memory: decode every frame of
the video, keep every sampled (1 fps) frame in a list, recompute ORB features for both
images of every comparison, and measure overlap by rasterising two full-resolution masks
with `cv2.fillPoly`. It shares no code with `embodied_r_ros.core.keyframes`, only its
documented conventions (sampling slots, int32 corner truncation after clamping to
+-1e6 px, even-spacing formula), so agreement between the two is a real cross-check.

Run as a script to print JSON for one video (used by bench/bench_keyframes.py):
    python -m bench.reference_keyframes VIDEO [--threshold T] [--fps F]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import cv2
import numpy as np


def read_sampled_frames(path: str, sample_fps: float = 1.0) -> tuple[list[np.ndarray], list[int], float, int]:
    """Decode every frame; keep the first frame of every 1/sample_fps slot of stream time."""
    cap = cv2.VideoCapture(path, cv2.CAP_FFMPEG)
    if not cap.isOpened():
        raise FileNotFoundError(path)
    fps = cap.get(cv2.CAP_PROP_FPS)
    frames: list[np.ndarray] = []
    numbers: list[int] = []
    last_slot = None
    index = 0
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        if sample_fps <= 0:
            slot = index
        else:
            slot = math.floor((index / fps) * sample_fps + 1e-6)
        if last_slot is None or slot > last_slot:
            frames.append(frame)
            numbers.append(index)
            last_slot = slot
        index += 1
    cap.release()
    return frames, numbers, fps, index


def compare(previous_bgr: np.ndarray, current_bgr: np.ndarray, min_matches: int = 10,
            reproj: float = 5.0) -> float | None:
    """Overlap of `current` with `previous`, or None when it cannot be measured."""
    orb = cv2.ORB_create()
    g1 = cv2.cvtColor(previous_bgr, cv2.COLOR_BGR2GRAY)
    g2 = cv2.cvtColor(current_bgr, cv2.COLOR_BGR2GRAY)
    kp1, des1 = orb.detectAndCompute(g1, None)
    kp2, des2 = orb.detectAndCompute(g2, None)
    if des1 is None or des2 is None:
        return None
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)
    matches = matcher.match(des1, des2)
    if len(matches) <= min_matches:
        return None
    src = np.float32([kp2[m.trainIdx].pt for m in matches]).reshape(-1, 1, 2)
    dst = np.float32([kp1[m.queryIdx].pt for m in matches]).reshape(-1, 1, 2)
    homography, _ = cv2.findHomography(src, dst, cv2.RANSAC, reproj)
    if homography is None:
        return None
    h, w = g1.shape
    ch, cw = g2.shape
    corners = np.float32([[0, 0], [cw - 1, 0], [cw - 1, ch - 1], [0, ch - 1]]).reshape(-1, 1, 2)
    projected = cv2.perspectiveTransform(corners, homography)
    if not np.all(np.isfinite(projected)):
        return None
    projected = np.clip(projected, -1_000_000, 1_000_000).astype(np.int32)
    frame_rect = np.int32([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]).reshape(-1, 1, 2)
    mask_prev = np.zeros((h, w), np.uint8)
    mask_cur = np.zeros((h, w), np.uint8)
    cv2.fillPoly(mask_prev, [frame_rect], 1)
    cv2.fillPoly(mask_cur, [projected], 1)
    return float(np.sum(np.logical_and(mask_prev, mask_cur))) / float(w * h)


def count_rule(kept: list[int], n: int, lo: int = 4, hi: int = 32) -> list[int]:
    """Last frame added; < lo: lo evenly over all frames; > hi: first, last, even middle."""
    if n == 0:
        return []
    kept = sorted(set(kept) | {n - 1})
    if len(kept) < lo:
        if n <= lo:
            return list(range(n))
        return [i * (n - 1) // (lo - 1) for i in range(lo)]
    if len(kept) > hi:
        middle = kept[1:-1]
        k = hi - 2
        if k >= len(middle):
            picks = list(range(len(middle)))
        elif k == 1:
            picks = [(len(middle) - 1) // 2]
        else:
            picks = [i * (len(middle) - 1) // (k - 1) for i in range(k)] if k > 0 else []
        return [kept[0]] + [middle[i] for i in picks] + [kept[-1]]
    return kept


def reference_select(frames_bgr: list[np.ndarray], threshold: float = 0.5, min_matches: int = 10,
                     reproj: float = 5.0, lo: int = 4, hi: int = 32) -> list[int]:
    """Final key-frame positions among already-sampled BGR frames."""
    if not frames_bgr:
        return []
    kept = [0]
    for i in range(1, len(frames_bgr)):
        overlap = compare(frames_bgr[kept[-1]], frames_bgr[i], min_matches, reproj)
        if overlap is None or overlap < threshold:
            kept.append(i)
    return count_rule(kept, len(frames_bgr), lo, hi)


def reference_extract(path: str, threshold: float = 0.5, sample_fps: float = 1.0) -> dict:
    """Whole-video baseline; returns indices, source frame numbers and counts."""
    started = time.perf_counter()
    frames, numbers, fps, n_source = read_sampled_frames(path, sample_fps)
    final = reference_select(frames, threshold)
    return {
        "sampled_indices": final,
        "source_frames": [numbers[i] for i in final],
        "n_sampled": len(frames),
        "n_source_frames": n_source,
        "video_fps": fps,
        "seconds": time.perf_counter() - started,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("video")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--fps", type=float, default=1.0)
    args = parser.parse_args(argv)
    print(json.dumps(reference_extract(args.video, args.threshold, args.fps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
