"""Parity baseline: a plain, slow, literal rendering of the reference key-frame rules.

It follows the reference's steps one by one with nothing shared with
`embodied_r_ros.core` (only OpenCV and numpy are imported), so that agreement between the two
is a cross-check of the rules rather than of one implementation with itself:

1. open the file with `cv2.VideoCapture(path)`; step = int(CAP_PROP_FPS); wanted frame
   numbers = range(0, int(CAP_PROP_FRAME_COUNT), step) plus count - 1 when missing;
   `read()` every frame until a read fails and keep the frames whose number is wanted
   (all of them held in memory, as the reference does);
2. ORB (OpenCV defaults) on the grey image of each kept frame; compare each frame with the
   last kept one: no descriptors -> keep; cross-checked Hamming matches, sorted by
   distance; <= 10 matches -> keep; RANSAC homography (current -> previous, 5.0 px);
   none -> keep; else project the previous frame's (0,0),(w,0),(w,h),(0,h) corners, cast
   both polygons with np.int32, fill each on an h x w mask, AND them, count / (w*h) and
   keep when below the threshold;
3. the first frame is kept; the last is appended when it is not;
4. count rule: < 4 -> the sampler over all positions with m = 4; > 32 -> the sampler over
   the key frames with m = 32. Sampler: n <= m unchanged; else first, last and the items
   at int(round(i * ((n - 2) / (m - 2)))) + 1 for i < m - 2.

Run as a script to print JSON for one video (used by bench/bench_keyframes.py):
    python -m bench.reference_keyframes VIDEO [--threshold T]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import cv2
import numpy as np


def downsample(path: str) -> tuple[list[np.ndarray], list[int], float, int]:
    """All sampled BGR frames, their frame numbers, the fps and the container frame count."""
    cap = cv2.VideoCapture(path)
    if not cap.isOpened():
        raise FileNotFoundError(path)
    frame_count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    fps = cap.get(cv2.CAP_PROP_FPS)
    step = int(fps)
    if step < 1:
        raise ValueError(f"frame rate {fps} gives a sampling step of {step}")
    wanted = list(range(0, frame_count, step))
    if (frame_count - 1) not in wanted:
        wanted.append(frame_count - 1)
    frames: list[np.ndarray] = []
    numbers: list[int] = []
    number = 0
    ok, frame = cap.read()
    while ok:
        if number in wanted:  # a list, as in the reference (a linear scan per frame)
            frames.append(frame)
            numbers.append(number)
        ok, frame = cap.read()
        number += 1
    cap.release()
    return frames, numbers, fps, frame_count


def overlap_ratio(previous_shape: tuple[int, int], homography: np.ndarray) -> float:
    """Shared pixels of the frame rectangle and the projected quad, over w * h."""
    h, w = previous_shape
    corners = np.array([[0, 0], [w, 0], [w, h], [0, h]], dtype=np.float32).reshape(-1, 1, 2)
    projected = cv2.perspectiveTransform(corners, homography)
    rect = np.array([c[0] for c in corners], dtype=np.float32)
    quad = np.array([c[0] for c in projected], dtype=np.float32)
    with np.errstate(invalid="ignore"):
        rect_i = [rect.astype(np.int32)]  # one polygon each
        quad_i = [quad.astype(np.int32)]
    mask_a = np.zeros((h, w), dtype=np.uint8)
    mask_b = np.zeros((h, w), dtype=np.uint8)
    cv2.fillPoly(mask_a, rect_i, 1)
    cv2.fillPoly(mask_b, quad_i, 1)
    shared = np.sum(cv2.bitwise_and(mask_a, mask_b))
    return float(shared / (w * h))


def select(frames: list[np.ndarray], threshold: float = 0.5) -> list[int]:
    """Key-frame positions among BGR frames (first kept, last appended), before the count rule."""
    orb = cv2.ORB.create()
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)
    kept = [0]
    prev_gray = cv2.cvtColor(frames[0], cv2.COLOR_BGR2GRAY)
    prev_kp, prev_des = orb.detectAndCompute(prev_gray, None)
    for t in range(1, len(frames)):
        gray = cv2.cvtColor(frames[t], cv2.COLOR_BGR2GRAY)
        kp, des = orb.detectAndCompute(gray, None)
        keep = False
        if prev_des is None or des is None:
            keep = True
        else:
            matches = matcher.match(prev_des, des)
            matches = sorted(matches, key=lambda m: m.distance)
            if len(matches) > 10:
                prev_pts = np.array([prev_kp[m.queryIdx].pt for m in matches], dtype=np.float32).reshape(-1, 1, 2)
                cur_pts = np.array([kp[m.trainIdx].pt for m in matches], dtype=np.float32).reshape(-1, 1, 2)
                homography, _ = cv2.findHomography(cur_pts, prev_pts, cv2.RANSAC, 5.0)
                if homography is None:
                    keep = True
                elif overlap_ratio(prev_gray.shape, homography) < threshold:
                    keep = True
            else:
                keep = True
        if keep:
            kept.append(t)
            prev_gray, prev_kp, prev_des = gray, kp, des
    if kept[-1] != len(frames) - 1:
        kept.append(len(frames) - 1)
    return kept


def subsample(items: list[int], m: int) -> list[int]:
    """First, last and m - 2 items in between, front-heavy, as the reference picks them."""
    n = len(items)
    if n <= m:
        return items
    k = m - 2
    step = (n - 2) / k
    chosen = [items[int(round(i * step)) + 1] for i in range(k)]
    return [items[0]] + chosen + [items[-1]]


def count_rule(kept: list[int], n_sampled: int, lo: int = 4, hi: int = 32) -> list[int]:
    if len(kept) < lo:
        return subsample(list(range(n_sampled)), lo)
    if len(kept) > hi:
        return subsample(kept, hi)
    return kept


def reference_select(frames_bgr: list[np.ndarray], threshold: float = 0.5,
                     lo: int = 4, hi: int = 32) -> list[int]:
    """Final key-frame positions among already-sampled BGR frames."""
    if not frames_bgr:
        return []
    return count_rule(select(frames_bgr, threshold), len(frames_bgr), lo, hi)


def reference_extract(path: str, threshold: float = 0.5, lo: int = 4, hi: int = 32) -> dict:
    """Whole-video baseline; indices, frame numbers, counts and the time of each stage."""
    started = time.perf_counter()
    frames, numbers, fps, frame_count = downsample(path)
    decoded = time.perf_counter()
    if not frames:
        raise ValueError(f"no frame sampled from {path}")
    kept = select(frames, threshold)
    final = count_rule(kept, len(frames), lo, hi)
    done = time.perf_counter()
    return {
        "sampled_indices": final,
        "source_frames": [numbers[i] for i in final],
        "selected_positions": kept,
        "n_sampled": len(frames),
        "n_source_frames": frame_count,
        "video_fps": fps,
        "seconds": done - started,
        "decode_seconds": decoded - started,
        "select_seconds": done - decoded,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("video")
    parser.add_argument("--threshold", type=float, default=0.5)
    args = parser.parse_args(argv)
    print(json.dumps(reference_extract(args.video, args.threshold)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
