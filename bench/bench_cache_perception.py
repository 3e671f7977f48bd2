"""Benchmark: perception caching's key-frame stage on N worker processes vs one process.

Writes synthetic clips (a camera moving over a random texture: holds, pans, a turn,
forward motion) as real video files, lays them out as prepared records, and runs
`embodied_r_training.perception_cache.cache_split` twice in this run on the same files:
``workers=1`` (everything in this process) and ``workers=N`` (key frames on a pool of N
processes, ahead of the VLM calls). Prints videos per minute for both, the ratio, and
checks that both wrote identical key frames and records.

"one process" is the extractor as it runs alone (its own ORB and decoder threads over
every core); in the pool each worker gets its share of the cores. The table shows the CPU
seconds used, so "cores busy" says how much of the machine each run kept working.

The VLM is replaced by a perceiver that returns a fixed three-part reply at once, so the
numbers measure the stage the pool parallelises (decoding + key-frame selection); with a
real VLM the pool's extraction runs while the VLM describes the previous video.

    python -m bench.bench_cache_perception                     # 12 clips x 30 s, 640x360, all cores
    python -m bench.bench_cache_perception --clips 16 --seconds 30 --workers 2 --codec mp4v
    python -m bench.bench_cache_perception --quick             # 4 clips x 6 s
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the project's modules are imported where used
    from embodied_r_ros.core.backends.base import PerceptionRequest
    from embodied_r_ros.core.types import GenerationSettings

REPO = Path(__file__).resolve().parents[1]


class FixedReplyPerceiver:
    """Answers every request at once with the same well-formed description."""

    def describe_batch(self, requests: Sequence[PerceptionRequest],
                       settings: GenerationSettings | None = None) -> list[str]:
        return ["1. move forward\n2. A grey wall ahead.\n3. Nothing else in view."] * len(requests)

    def close(self) -> None:
        pass


def make_clips(folder: Path, clips: int, seconds: int, width: int, height: int, codec: str) -> list[Path]:
    from embodied_r_ros.testing.keyframe_clips import make_texture, render, video_poses, write_video, write_video_pyav

    suffix = ".avi" if codec == "MJPG" else ".mp4"
    paths = []
    for i in range(clips):
        texture = make_texture(8 * width, 2 * height, seed=100 + i)
        poses = video_poses(seconds, 30, width, texture.shape[0])
        path = folder / f"clip_{i:03d}{suffix}"
        frames = (render(texture, p, width, height) for p in poses)
        if codec == "h264":  # libx264 with B-frames, through PyAV
            write_video_pyav(path, frames, 30, codec="h264")
        else:
            write_video(path, frames, 30.0, codec=codec)
        paths.append(path)
    return paths


def records_for(paths: list[Path]) -> list[dict]:
    return [{"Question_id": f"q{i}", "video_path": p.name, "video": {"file": str(p)},
             "question_category": "route_planning", "answer": "A",
             "question": "Question: Which way?\nChoices:\nA. left\nB. right"}
            for i, p in enumerate(paths)]


def _cpu_s() -> float:
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def run_once(records: list[dict], out: Path, workers: int) -> dict:
    from embodied_r_training.perception_cache import cache_split

    cpu0, started = _cpu_s(), time.perf_counter()
    stats = cache_split(records, perceiver=FixedReplyPerceiver(), out=out, split="bench",
                        mode="streaming", workers=workers, progress=False)
    seconds = time.perf_counter() - started
    assert stats.complete and stats.videos == len(records), stats
    return {"workers": workers, "seconds": seconds, "cpu_seconds": _cpu_s() - cpu0,
            "videos": stats.videos, "videos_per_minute": 60.0 * stats.videos / seconds}


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from embodied_r_ros.core.shards import available_cores
    from embodied_r_training.data import read_jsonl
    from embodied_r_training.perception_cache import load_keyframes

    p = argparse.ArgumentParser(prog="python -m bench.bench_cache_perception",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--clips", type=int, default=12)
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=360)
    p.add_argument("--codec", default="mp4v",
                   help="mp4v (long GOP, .mp4), h264 (libx264 with B-frames via PyAV) or MJPG (.avi)")
    p.add_argument("--workers", type=int, default=0,
                   help="pool size (default 0 = every core, one extractor thread each)")
    p.add_argument("--quick", action="store_true", help="4 clips x 6 s")
    args = p.parse_args(argv)
    if args.quick:
        args.clips, args.seconds = 4, 6
    workers = args.workers or available_cores()
    with tempfile.TemporaryDirectory(prefix="bench_cache_") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        paths = make_clips(root, args.clips, args.seconds, args.width, args.height, args.codec)
        print(f"wrote {len(paths)} {args.codec} clips of {args.seconds} s at "
              f"{args.width}x{args.height}, 30 fps, in {time.perf_counter() - t0:.1f}s")
        records = records_for(paths)
        single = run_once(records, root / "one", 1)
        pooled = run_once(records, root / "pool", workers)
        same_kf = ({k: v["source_frames"] for k, v in load_keyframes(root / "one").items()}
                   == {k: v["source_frames"] for k, v in load_keyframes(root / "pool").items()})
        same_records = (read_jsonl(root / "one" / "bench.streaming.jsonl")
                        == read_jsonl(root / "pool" / "bench.streaming.jsonl"))
    ratio = pooled["videos_per_minute"] / single["videos_per_minute"]
    print("\n| run | processes | seconds | CPU s (cores busy) | videos/min |\n|---|---|---|---|---|")
    for row, name in ((single, "one process"), (pooled, "process pool")):
        print(f"| {name} | {row['workers']} | {row['seconds']:.1f} | {row['cpu_seconds']:.1f} "
              f"({row['cpu_seconds'] / row['seconds']:.2f}) | {row['videos_per_minute']:.1f} |")
    print(f"\nratio (pool / one process): {ratio:.2f}x on {available_cores()} cores; "
          f"identical key frames: {same_kf}; identical records: {same_records}")
    print(json.dumps({"single": single, "pool": pooled, "ratio": ratio,
                      "identical_keyframes": same_kf, "identical_records": same_records,
                      "cores": available_cores(), "clips": args.clips, "seconds": args.seconds,
                      "size": [args.width, args.height], "codec": args.codec}))
    return 0 if same_kf and same_records else 1


if __name__ == "__main__":
    raise SystemExit(main())
