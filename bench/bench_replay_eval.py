"""Benchmark: `replay-eval --mode fast` over a folder of bags, N processes vs one.

Writes synthetic clips (camera over a random texture: holds, pans, a turn, forward
motion), converts them with `embodied-r video2bag` (JPEG, all frames), writes one
question per bag, and runs the real command twice in this run, `--jobs 1` and
`--jobs N`, with the tiny local models (greedy). Prints bags per minute for both, the
ratio, and checks both gave the same key frames and answers.

The tiny models keep the VLM cheap (`perception.max_image_side` 160, 4 new tokens), so
most of the time is the per-bag key-frame stage: reading and decoding the bag, ORB
matching and homographies on the full-size frames.

    python -m bench.bench_replay_eval                 # 8 bags x 30 s, 640x360, every core
    python -m bench.bench_replay_eval --bags 4 --seconds 10 --jobs 2
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


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    from bench.bench_cache_perception import make_clips
    from embodied_r_ros.core.shards import available_cores

    p = argparse.ArgumentParser(prog="python -m bench.bench_replay_eval",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--bags", type=int, default=8)
    p.add_argument("--seconds", type=int, default=30)
    p.add_argument("--width", type=int, default=640)
    p.add_argument("--height", type=int, default=360)
    p.add_argument("--jobs", type=int, default=0, help="processes (default 0 = every core)")
    args = p.parse_args(argv)
    jobs = args.jobs or available_cores()
    with tempfile.TemporaryDirectory(prefix="bench_replay_") as tmp:
        root = Path(tmp)
        (root / "videos").mkdir()
        clips = make_clips(root / "videos", args.bags, args.seconds, args.width, args.height, "mp4v")
        cli = [sys.executable, "-m", "embodied_r_ros.cli"]
        subprocess.run([*cli, "video2bag", *map(str, clips), "--out", str(root / "bags"),
                        "--compressed"], check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        question = "Question: Which way did I turn?\nChoices:\nA. left\nB. right"
        qfile = root / "questions.jsonl"
        qfile.write_text("".join(json.dumps({"Question_id": c.stem, "video_id": c.name,
                                             "question": question, "answer": "A",
                                             "question_category": "route_planning"}) + "\n"
                                 for c in clips))
        rows = {}
        for n in (1, jobs):
            out = root / f"jobs{n}" / "eval.json"
            started = time.perf_counter()
            subprocess.run([*cli, "replay-eval", "--bag", str(root / "bags"), "--questions",
                            str(qfile), "--mode", "fast", "--jobs", str(n), "--tiny-models",
                            "--artifacts", str(root / "artifacts"),
                            "--set", "perception.max_new_tokens=4",
                            "--set", "perception.max_image_side=160", "--out", str(out)],
                           check=True, cwd=REPO, stdout=subprocess.DEVNULL)
            seconds = time.perf_counter() - started
            results = {r["question_id"]: (r["raw_output"], r["keyframes_used"]) for r in
                       map(json.loads, out.with_suffix(".results.jsonl").read_text().splitlines())}
            episodes = {e["bag"]: [k["source_index"] for k in e["keyframes"]] for e in
                        map(json.loads, out.with_suffix(".episodes.jsonl").read_text().splitlines())}
            rows[n] = {"jobs": n, "seconds": seconds, "bags_per_minute": 60.0 * args.bags / seconds,
                       "results": results, "keyframes": episodes}
    single, pooled = rows[1], rows[jobs]
    same = single["results"] == pooled["results"] and single["keyframes"] == pooled["keyframes"]
    ratio = pooled["bags_per_minute"] / single["bags_per_minute"]
    print("| run | processes | seconds (incl. model loading) | bags/min |\n|---|---|---|---|")
    for row in (single, pooled):
        print(f"| replay-eval --mode fast | {row['jobs']} | {row['seconds']:.1f} | "
              f"{row['bags_per_minute']:.1f} |")
    print(f"\nratio: {ratio:.2f}x on {available_cores()} cores ({args.bags} bags of "
          f"{args.seconds} s at {args.width}x{args.height}); identical key frames and answers: {same}")
    print(json.dumps({"ratio": ratio, "identical": same, "cores": available_cores(),
                      **{f"jobs{n}_seconds": r["seconds"] for n, r in rows.items()}}))
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
