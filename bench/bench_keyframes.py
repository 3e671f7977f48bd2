"""Benchmark: streaming key-frame extraction vs the mask-based reference baseline.

Writes synthetic 1280x720 clips (30 fps, a repeating 60 s camera path of holds, slow pans,
fast turns and forward motion over a wrapping random texture) to a temporary folder, then
runs each implementation in its own fresh Python process, so peak RSS (VmHWM) is measured
per implementation, checks that the final key-frame indices are identical, and prints a
table of time, peak RSS and ratios.

    python -m bench.bench_keyframes                  # 1 and 10 minute clips, MJPG .avi
    python -m bench.bench_keyframes --minutes 1      # one clip
    python -m bench.bench_keyframes --quick          # 20 s clip, for a smoke check
    python -m bench.bench_keyframes --codec mp4v     # long-GOP codec (must decode all)

Rows: "reference" = bench/reference_keyframes.py; "streaming" = extract_keyframes_from_video
with its default (intra fast path where the codec allows); "streaming-seq" = the same
forced to the sequential grab()/retrieve() strategy, which is what any codec gets.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _child(impl: str, video: str) -> int:
    """Run one implementation in this (fresh) process and print JSON with VmHWM."""
    sys.path.insert(0, str(REPO))
    started = time.perf_counter()
    if impl == "reference":
        from bench.reference_keyframes import reference_extract

        out = reference_extract(video)
        result = {"sampled_indices": out["sampled_indices"], "source_frames": out["source_frames"],
                  "n_sampled": out["n_sampled"], "strategy": "decode all"}
    else:
        from embodied_r_ros.core.keyframes import extract_keyframes_from_video

        res = extract_keyframes_from_video(video, fast_decode=(impl == "streaming"))
        result = {"sampled_indices": res.sampled_indices, "source_frames": res.source_frames,
                  "n_sampled": res.n_sampled, "strategy": res.decode_strategy}
    result["seconds"] = time.perf_counter() - started
    result["peak_rss_mb"] = _vm_hwm_mb()
    print(json.dumps(result))
    return 0


def _vm_hwm_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _cycle_pose(t: float, width: int, tex_h: int):
    """Camera pose at time t (s): a 60 s cycle that drifts forward through the texture."""
    sys.path.insert(0, str(REPO / "test"))
    from keyframe_clips import Pose

    cycle, s = divmod(t, 60.0)
    x = width + cycle * 9.0 * width  # each cycle starts somewhere new
    zoom = 1.0
    if s < 8:  # hold
        pass
    elif s < 28:  # slow pan, 4% of the width per second
        x += (s - 8) * 0.04 * width
    elif s < 32:  # fast turn, 60% per second
        x += 20 * 0.04 * width + (s - 28) * 0.6 * width
    elif s < 44:  # forward: zoom in, restart every 6 s
        x += 20 * 0.04 * width + 4 * 0.6 * width
        zoom = 1.0 + 0.08 * ((s - 32) % 6)
    else:  # pan back slowly
        x += 20 * 0.04 * width + 4 * 0.6 * width - (s - 44) * 0.05 * width
    return Pose(x, tex_h / 2, zoom)


def write_clip(path: Path, minutes: float, width: int, height: int, fps: int, codec: str) -> Path:
    sys.path.insert(0, str(REPO / "test"))
    import cv2

    from keyframe_clips import make_texture, render

    texture = make_texture(6 * width, int(1.5 * height), seed=7)
    n = int(round(minutes * 60 * fps))
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*codec), fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"cannot write {codec} at {path}")
    for i in range(n):
        frame = render(texture, _cycle_pose(i / fps, width, texture.shape[0]), width, height)
        writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    writer.release()
    return path


def run_impl(impl: str, video: Path) -> dict:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_keyframes", "--child", impl, str(video)],
        cwd=REPO, capture_output=True, text=True, check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def bench_one(minutes: float, args: argparse.Namespace, tmp: Path) -> bool:
    ext = "avi" if args.codec.upper() == "MJPG" else "mp4"
    video = tmp / f"clip_{minutes:g}min.{ext}"
    t0 = time.perf_counter()
    write_clip(video, minutes, args.width, args.height, args.fps, args.codec)
    gen_s = time.perf_counter() - t0
    size_mb = video.stat().st_size / 1e6
    print(f"\n== {minutes:g} min, {args.width}x{args.height} @ {args.fps} fps, {args.codec} "
          f"({size_mb:.0f} MB, written in {gen_s:.0f} s) ==", flush=True)
    rows = {impl: run_impl(impl, video) for impl in args.impls}
    ref = rows.get("reference")
    print(f"{'implementation':<15} {'strategy':<11} {'time s':>8} {'wall s':>8} {'peak RSS MB':>12} "
          f"{'speed-up':>9} {'RSS ratio':>10}  same indices")
    for impl, row in rows.items():
        speed = ref["seconds"] / row["seconds"] if ref else float("nan")
        mem = ref["peak_rss_mb"] / row["peak_rss_mb"] if ref else float("nan")
        same = ref is None or (row["sampled_indices"] == ref["sampled_indices"]
                               and row["source_frames"] == ref["source_frames"])
        print(f"{impl:<15} {row['strategy']:<11} {row['seconds']:>8.1f} {row['wall_s']:>8.1f} "
              f"{row['peak_rss_mb']:>12.0f} {speed:>8.2f}x {mem:>9.1f}x  {same}")
    first = next(iter(rows.values()))
    print(f"sampled frames: {first['n_sampled']}; key frames: {len(first['sampled_indices'])} "
          f"{first['sampled_indices']}")
    if not args.keep:
        video.unlink()
    return all(r["sampled_indices"] == first["sampled_indices"] for r in rows.values())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--quick", action="store_true", help="one 20 s clip")
    parser.add_argument("--codec", default="MJPG", help="MJPG (.avi) or mp4v (.mp4)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--impls", nargs="+", default=["reference", "streaming", "streaming-seq"])
    parser.add_argument("--keep", action="store_true", help="keep the clips (prints the folder)")
    args = parser.parse_args(argv)
    minutes = [20 / 60] if args.quick else args.minutes
    tmp = Path(tempfile.mkdtemp(prefix="bench_keyframes_"))
    if args.keep:
        print(f"clips in {tmp}")
    ok = True
    for m in minutes:
        ok &= bench_one(m, args, tmp)
    if not args.keep:
        tmp.rmdir()
    print("\nall implementations agree" if ok else "\nMISMATCH between implementations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
