"""Benchmark: cross-checked Hamming matching of ORB descriptors, OpenCV vs numpy, same run.

Builds views of a random texture (1280x720, shifted and zoomed a little from view to view),
computes their ORB descriptors (OpenCV defaults: up to 500 per view) and matches each view
against the next, first with `cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)` as the
reference calls it, then with `embodied_r_ros.core.keyframes.matching`, in alternating
rounds. Checks that every list of matches is identical and prints wall and CPU
milliseconds per match (CPU = user + system of the whole process, so the work OpenCV hands
to its thread pool counts) and the ratios.

    python -m bench.bench_matching                 # 60 views, 5 rounds
    python -m bench.bench_matching --views 200 --rounds 9
"""

from __future__ import annotations

import argparse
import statistics
import time

import cv2
import numpy as np

from embodied_r_ros.core.keyframes.matching import cross_checked_matches


def _views(n: int, width: int = 1280, height: int = 720) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    texture = cv2.GaussianBlur(rng.integers(0, 256, (3 * height, 3 * width), np.uint8), (5, 5), 0)
    views = []
    for k in range(n):
        zoom = 1.0 + 0.05 * np.sin(k / 7)
        matrix = np.array([[zoom, 0, -width - 9.0 * k], [0, zoom, -height - 2.0 * k]])
        views.append(cv2.warpAffine(texture, matrix, (width, height)))
    return views


def _time(fn, pairs) -> tuple[float, float, list]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = [fn(a, b) for a, b in pairs]
    return (time.perf_counter() - wall) / len(pairs), (time.process_time() - cpu) / len(pairs), out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=60, help="views (matches = views - 1)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (median)")
    args = parser.parse_args(argv)
    if args.views < 2 or args.rounds < 1:
        parser.error("--views must be >= 2 and --rounds >= 1")
    orb = cv2.ORB.create()
    descriptors = [orb.detectAndCompute(view, None)[1] for view in _views(args.views)]
    pairs = list(zip(descriptors[:-1], descriptors[1:]))
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True)

    def opencv(a: np.ndarray, b: np.ndarray) -> list:
        return [(m.queryIdx, m.trainIdx, m.distance) for m in matcher.match(a, b)]

    def ours(a: np.ndarray, b: np.ndarray) -> list:
        found = cross_checked_matches(a, b)
        return list(zip(found.query_idx.tolist(), found.train_idx.tolist(),
                        found.distance.astype(float).tolist()))

    times: dict[str, list[tuple[float, float]]] = {"opencv": [], "ours": []}
    for _ in range(args.rounds):
        cv_wall, cv_cpu, cv_out = _time(opencv, pairs)
        np_wall, np_cpu, np_out = _time(ours, pairs)
        if cv_out != np_out:
            print("MISMATCH: the numpy matcher differs from cv2.BFMatcher")
            return 1
        times["opencv"].append((cv_wall, cv_cpu))
        times["ours"].append((np_wall, np_cpu))
    sizes = [len(d) for d in descriptors]
    print(f"{len(pairs)} matches of {min(sizes)}-{max(sizes)} descriptors each side, "
          f"{args.rounds} rounds (medians), OpenCV threads: {cv2.getNumThreads()}")
    print(f"{'matcher':10} {'wall ms':>8} {'CPU ms':>8}")
    med = {name: (statistics.median(w for w, _ in t) * 1e3, statistics.median(c for _, c in t) * 1e3)
           for name, t in times.items()}
    for name, (wall, cpu) in med.items():
        print(f"{name:10} {wall:8.2f} {cpu:8.2f}")
    print(f"ratio (OpenCV / ours): wall {med['opencv'][0] / med['ours'][0]:.2f}x, "
          f"CPU {med['opencv'][1] / med['ours'][1]:.2f}x; identical matches: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
