"""Time to answer a question: streaming perception (this project's robot default) versus
on_query perception (the paper's reference behaviour), in one run, same clip, same models.

In streaming mode key frames are described while the clip plays, so a question waits only
for the reasoning model; in on_query mode every key frame is described after the question
arrives. The ratio is what matters (absolute times depend on the models and machine).

    python -m bench.bench_query_latency              # tiny local models, CPU
    python -m bench.bench_query_latency --perception-model /models/qwen2.5-vl-7b \
        --reasoning-model /models/embodied-r --device cuda --dtype bfloat16

Output: a table with median seconds per question for each mode, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from embodied_r_ros.core.backends.base import Perceiver, Reasoner
from embodied_r_ros.core.pipeline import EmbodiedRPipeline, load_models
from embodied_r_ros.core.settings import Settings, build_settings
from embodied_r_ros.sample_data.scene import SyntheticClip, render_clip

QUESTIONS = [("Which object did I see first?", ["red box", "blue pillar", "green door"]),
             ("Is the red box to my left or right now?", ["left", "right", "back"]),
             ("What did I do after seeing the yellow ball?", ["rotate left", "rotate right"])]


def run_mode(mode: str, settings: Settings, perceiver: Perceiver, reasoner: Reasoner,
             clip: SyntheticClip, repeats: int) -> dict[str, Any]:
    pipeline = EmbodiedRPipeline(settings.with_values({"perception.mode": mode}), perceiver, reasoner)
    try:
        start = time.monotonic()
        for i, (image, stamp) in enumerate(zip(clip.frames, clip.stamps_s)):
            pipeline.push_frame(image, stamp, i)
        feed_s = time.monotonic() - start
        # Streaming: the robot keeps moving between questions; give the worker the
        # clip's own duration to catch up, as a live stream would.
        if mode == "streaming":
            pipeline.worker.wait_for(pipeline.status().keyframes - 1, clip.duration_s + 60)
        times, keyframes = [], 0
        for _ in range(repeats):
            for question, choices in QUESTIONS:
                result = pipeline.ask(question, choices, timeout_s=600)
                if result.error_code not in (0, 9):  # 9: tiny models give no letter
                    raise RuntimeError(f"{mode}: {result.error_code} {result.message}")
                times.append(result.timing.total_s)
                keyframes = result.keyframes_used
        return {"mode": mode, "median_s": statistics.median(times), "max_s": max(times),
                "questions": len(times), "keyframes": keyframes, "feed_s": feed_s}
    finally:
        pipeline.worker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--perception-model", default="")
    parser.add_argument("--reasoning-model", default="")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--perception-tokens", type=int, default=64)
    parser.add_argument("--reasoning-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--fps", type=float, default=4.0, help="clip frame rate")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    perception_model, reasoning_model = args.perception_model, args.reasoning_model
    if not (perception_model and reasoning_model):
        from embodied_r_ros.testing.tiny_models import build_tiny_models

        paths = build_tiny_models(Path(tempfile.gettempdir()) / "embodied_r_bench_tiny")
        perception_model = perception_model or str(paths.vlm)
        reasoning_model = reasoning_model or str(paths.lm)
        print("tiny random models: timings show the pipeline's structure, not real models")
    settings = build_settings({
        "perception.model": perception_model, "reasoning.model": reasoning_model,
        "perception.device": args.device, "reasoning.device": args.device,
        "perception.dtype": args.dtype, "reasoning.dtype": args.dtype,
        "perception.temperature": 0.0, "reasoning.temperature": 0.0,
        "perception.max_new_tokens": args.perception_tokens,
        "reasoning.max_new_tokens": args.reasoning_tokens,
    })
    perceiver, reasoner = load_models(settings)
    clip = render_clip(fps=args.fps)
    rows = [run_mode(mode, settings, perceiver, reasoner, clip, args.repeats)
            for mode in ("on_query", "streaming")]
    ratio = rows[0]["median_s"] / max(rows[1]["median_s"], 1e-9)
    print(f"\n{'mode':10s} {'median s/question':>18s} {'max s':>8s} {'key frames':>11s}")
    for r in rows:
        print(f"{r['mode']:10s} {r['median_s']:18.3f} {r['max_s']:8.3f} {r['keyframes']:11d}")
    print(f"on_query / streaming time-to-answer ratio: {ratio:.1f}x")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ratio": ratio}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
