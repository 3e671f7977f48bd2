"""Benchmark: whole-clip key-frame extraction vs the literal reference baseline, same run.

Writes a synthetic 1280x720 30 fps clip (a repeating 60 s camera path of holds, slow pans,
fast turns and forward motion over a wrapping random texture) with the chosen codec, then
runs each implementation in its own fresh Python process (so peak RSS, VmHWM, is per
implementation), checks that the final key frames are identical, and prints time (total,
decoding, selection), peak RSS and the speed-up against the baseline.

    python -m bench.bench_keyframes --minutes 10 --codec h264   # H.264 with B-frames (PyAV)
    python -m bench.bench_keyframes --minutes 1 10 --codec mp4v # OpenCV's MPEG-4 writer
    python -m bench.bench_keyframes --quick                     # 20 s MJPEG clip, smoke check
    python -m bench.bench_keyframes --clips DIR ...             # keep / reuse clips in DIR
    python -m bench.bench_keyframes --cpus 1 2 ...              # one table per CPU count

Codecs: h264 (libx264 via PyAV, default preset, 3 B-frames with b-pyramid), hevc (libx265),
mp4v (cv2.VideoWriter, .mp4), MJPG (cv2.VideoWriter, .avi).
Rows: "reference" = bench/reference_keyframes.py (reads every frame with cap.read(), holds
the sampled frames, selects serially); "ours" = extract_keyframes_from_video with its
defaults (PyAV decoding that skips what sampling allows, ORB on all CPUs); "ours-opencv" =
the same with fast_decode=False (OpenCV grab()/retrieve()).
Decode / select columns: for the baseline, the wall time of its two stages (one after the
other); for ours, the CPU seconds of each stage summed over threads (decoding + BGR
conversion; grey + ORB + decisions), which run side by side and so add up to more than
the total.
CPU: user + system seconds of the process; on a machine shared with other work the wall
ratio falls toward the CPU ratio, so both are printed, with the load average.
With --repeat N each implementation runs N times, interleaved, and the median is shown,
followed by the speed-up within each round (reference and ours back to back) and its median.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMPLS = ("reference", "ours", "ours-opencv")
SUFFIX = {"MJPG": ".avi", "mp4v": ".mp4", "h264": ".mp4", "hevc": ".mp4"}


def _child(impl: str, video: str) -> int:
    """Run one implementation in this (fresh) process and print JSON with VmHWM."""
    sys.path.insert(0, str(REPO))
    if impl == "reference":
        from bench.reference_keyframes import reference_extract

        started = time.perf_counter()  # after the imports, as for ours
        cpu_before = _cpu_seconds()
        out = reference_extract(video)
        result = {key: out[key] for key in ("sampled_indices", "source_frames", "n_sampled",
                                            "decode_seconds", "select_seconds")}
        result["strategy"] = "read all"
    else:
        import av  # noqa: F401 - imported before the clock starts, like cv2 for the baseline

        from embodied_r_ros.core.keyframes.extraction import extract_keyframes_from_video

        started = time.perf_counter()
        cpu_before = _cpu_seconds()
        res = extract_keyframes_from_video(video, fast_decode=(impl == "ours"))
        result = {"sampled_indices": res.sampled_indices, "source_frames": res.source_frames,
                  "n_sampled": res.n_sampled, "strategy": res.decode_strategy,
                  "decode_seconds": res.decode_seconds, "select_seconds": res.select_seconds,
                  "fallbacks": res.fallbacks}
    result["seconds"] = time.perf_counter() - started
    result["cpus_seen"] = len(usable_cpus())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    result["cpu_seconds"] = usage.ru_utime + usage.ru_stime - cpu_before
    result["peak_rss_mb"] = _vm_hwm_mb()
    print(json.dumps(result))
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _vm_hwm_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _cycle_pose(t: float, width: int, tex_h: int):
    """Camera pose at time t (s): a 60 s cycle that drifts forward through the texture."""
    from embodied_r_ros.testing.keyframe_clips import Pose

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


def _frames(minutes: float, width: int, height: int, fps: int):
    from embodied_r_ros.testing.keyframe_clips import make_texture, render

    texture = make_texture(6 * width, int(1.5 * height), seed=7)
    for i in range(int(round(minutes * 60 * fps))):
        yield render(texture, _cycle_pose(i / fps, width, texture.shape[0]), width, height)


def write_clip(path: Path, minutes: float, width: int, height: int, fps: int, codec: str) -> Path:
    from embodied_r_ros.testing.keyframe_clips import write_video

    frames = _frames(minutes, width, height, fps)
    if codec in ("h264", "hevc"):
        import av

        encoder = {"h264": "libx264", "hevc": "libx265"}[codec]
        container = av.open(str(path), "w")
        stream = container.add_stream(encoder, rate=fps)
        if not isinstance(stream, av.VideoStream):  # libx264 and libx265 are video encoders
            raise TypeError(f"{encoder} did not make a video stream")
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"bf": "3"} if codec == "h264" else {"x265-params": "log-level=error"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
        container.close()
        return path
    return write_video(path, frames, fps, codec)


def ensure_clip(folder: Path, minutes: float, width: int, height: int, fps: int,
                codec: str) -> tuple[Path, float]:
    """The bench clip for these settings in `folder`, written first when it is not there
    yet; returns its path and the seconds spent writing it (0.0 when reused)."""
    video = folder / f"clip_{minutes:g}min_{codec}_{width}x{height}{SUFFIX[codec]}"
    if video.exists():
        return video, 0.0
    started = time.perf_counter()
    write_clip(video, minutes, width, height, fps, codec)
    return video, time.perf_counter() - started


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def run_impl(impl: str, video: Path, cpus: int | None = None) -> dict:
    """One implementation in a fresh process; with `cpus`, pinned to the first that many
    usable CPUs (both implementations then see only those: OpenCV, FFmpeg and our worker
    count all read the affinity mask)."""
    pinned = set(usable_cpus()[:cpus]) if cpus else None
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_keyframes", "--child", impl, str(video)],
        cwd=REPO, capture_output=True, text=True, check=False,
        preexec_fn=(lambda: os.sched_setaffinity(0, pinned)) if pinned else None,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{impl} failed:\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def pinning_warnings(cpus: int, runs: list[dict]) -> list[str]:
    """Why a table said to be pinned to `cpus` CPUs may not be: a child that saw another
    affinity mask, or one that used more CPU seconds than `cpus` CPUs give in its wall
    time (a sandbox that accepts the mask but does not enforce it)."""
    warnings = []
    seen = sorted({run["cpus_seen"] for run in runs})
    if seen != [cpus]:
        warnings.append(f"the runs saw {seen} usable CPUs, not {cpus}: pinning was not applied")
    busiest = max(run["cpu_seconds"] / max(run["seconds"], 1e-9) for run in runs)
    if busiest > cpus * 1.1 + 0.05:
        warnings.append(f"a run kept {busiest:.2f} CPUs busy on average while pinned to "
                        f"{cpus}: the pinning is not enforced here, so this table is not "
                        f"a {cpus}-CPU measurement")
    return warnings


def _median_row(runs: list[dict]) -> dict:
    row = dict(runs[0])
    for key in ("seconds", "cpu_seconds", "decode_seconds", "select_seconds", "peak_rss_mb",
                "wall_s"):
        row[key] = statistics.median(r[key] for r in runs)
    row["same_runs"] = all(r["sampled_indices"] == runs[0]["sampled_indices"] for r in runs)
    return row


def bench_one(minutes: float, args: argparse.Namespace, folder: Path) -> bool:
    video, gen_s = ensure_clip(folder, minutes, args.width, args.height, args.fps, args.codec)
    size_mb = video.stat().st_size / 1e6
    print(f"\n== {minutes:g} min, {args.width}x{args.height} @ {args.fps} fps, {args.codec} "
          f"({size_mb:.0f} MB{f', written in {gen_s:.0f} s' if gen_s else ', reused'}) ==",
          flush=True)
    ok = True
    for cpus in args.cpus or [None]:
        ok &= _bench_on(video, args, cpus)
    if not args.clips:
        video.unlink()
    return ok


def _bench_on(video: Path, args: argparse.Namespace, cpus: int | None) -> bool:
    """Runs and prints the table for one CPU count (None: all usable CPUs)."""
    load_before = os.getloadavg()[0]
    runs: dict[str, list[dict]] = {impl: [] for impl in args.impls}
    for _ in range(args.repeat):
        for impl in args.impls:
            runs[impl].append(run_impl(impl, video, cpus))
    rows = {impl: _median_row(r) for impl, r in runs.items()}
    ref = rows.get("reference")
    where = f"pinned to {cpus}" if cpus else f"on all {len(usable_cpus())}"
    print(f"(load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; each run "
          f"{where} CPUs; times are wall times, CPU is user + system of the process)")
    if cpus:
        for warning in pinning_warnings(cpus, [run for r in runs.values() for run in r]):
            print(f"WARNING: {warning}")
    print(f"{'implementation':<13} {'strategy':<10} {'total s':>8} {'decode s':>9} {'select s':>9} "
          f"{'CPU s':>7} {'peak RSS MB':>12} {'speed-up':>9} {'CPU ratio':>10} {'RSS ratio':>10}"
          "  same indices")
    for impl, row in rows.items():
        speed = ref["seconds"] / row["seconds"] if ref else float("nan")
        cpu = ref["cpu_seconds"] / row["cpu_seconds"] if ref else float("nan")
        mem = ref["peak_rss_mb"] / row["peak_rss_mb"] if ref else float("nan")
        same = row["same_runs"] and (ref is None or (
            row["sampled_indices"] == ref["sampled_indices"]
            and row["source_frames"] == ref["source_frames"]))
        print(f"{impl:<13} {row['strategy']:<10} {row['seconds']:>8.1f} "
              f"{row['decode_seconds']:>9.1f} {row['select_seconds']:>9.1f} "
              f"{row['cpu_seconds']:>7.1f} {row['peak_rss_mb']:>12.0f} {speed:>8.2f}x "
              f"{cpu:>9.2f}x {mem:>9.1f}x  {same}")
        for note in row.get("fallbacks", []):
            print(f"    fallback: {note}")
    if ref and args.repeat > 1:
        # Each round runs the implementations back to back, so the ratio within a round is
        # less affected by the machine getting busier or quieter between rounds.
        for impl in args.impls:
            if impl != "reference":
                paired = [r["seconds"] / o["seconds"] for r, o in zip(runs["reference"], runs[impl])]
                print(f"{impl}: speed-up within each round "
                      f"{', '.join(f'{x:.2f}x' for x in paired)} (median "
                      f"{statistics.median(paired):.2f}x)")
    first = next(iter(rows.values()))
    print(f"sampled frames: {first['n_sampled']}; key frames: {len(first['sampled_indices'])} "
          f"{first['sampled_indices']}", flush=True)
    return all(r["sampled_indices"] == first["sampled_indices"]
               and r["source_frames"] == first["source_frames"] and r["same_runs"]
               for r in rows.values())


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[1], argv[2])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--quick", action="store_true", help="one 20 s MJPEG clip")
    parser.add_argument("--codec", default="h264", choices=sorted(SUFFIX),
                        help="h264 (default), hevc, mp4v or MJPG")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--repeat", type=int, default=1, help="runs per implementation (median)")
    parser.add_argument("--clips", type=Path, default=None,
                        help="folder to keep clips in and reuse them from (default: temporary)")
    parser.add_argument("--cpus", type=int, nargs="+", default=None,
                        help="pin each run to the first N usable CPUs, one table per N "
                             "(e.g. --cpus 1 2: how the speed-up grows with cores); "
                             "default: all usable CPUs")
    args = parser.parse_args(argv)
    usable = len(usable_cpus())
    for n in args.cpus or []:
        if not 1 <= n <= usable:
            parser.error(f"--cpus {n}: this process may use 1 to {usable} CPUs")
    if args.quick:
        args.minutes, args.codec = [20 / 60], "MJPG"
    folder = args.clips or Path(tempfile.mkdtemp(prefix="bench_keyframes_"))
    folder.mkdir(parents=True, exist_ok=True)
    ok = True
    for m in args.minutes:
        ok &= bench_one(m, args, folder)
    if not args.clips:
        folder.rmdir()
    print("\nall implementations agree" if ok else "\nMISMATCH between implementations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
