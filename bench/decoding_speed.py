"""Decoding speed of each transformers decoding option, and batched perception throughput.

Through the project's real backends (bench/random_models.py: published shapes with
random weights on a GPU, or the tiny models on a CPU), this measures:

* reasoning model (Qwen2.5-3B shapes): tokens per second of one answer for each decoding
  option (plain; static KV cache + torch.compile; prompt lookup; both), with the load-time
  warm-up, so compilation is not in the timed calls;
* perception model (Qwen2.5-VL-7B shapes): tokens per second of one key-frame pair,
  plain and static + compile;
* batched perception: key frames described per second at batch 1, 4 and 8 (pairs of
  frames, one `describe_batch` call per batch), and whether the batched texts equal the
  one-at-a-time texts (greedy).

Prompt lookup proposes tokens copied from the prompt; random weights never copy, so on
the full-size run it shows only its overhead: its gain needs the real reasoning model.

    python -m bench.decoding_speed --tiny          # CPU, tiny models, about a minute
    python -m bench.decoding_speed                 # GPU, full size (bf16)
    python -m bench.decoding_speed --json out.json --skip-perception

The table is printed last.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench import random_models
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.memory.episode import render_video_text
from embodied_r_ros.core.perception.worker import keyframe_request
from embodied_r_ros.core.prompts.reasoning import build_reasoning_messages, format_question
from embodied_r_ros.core.types import FrameDescription

# Decoding options compared, as model spec keys (docs/gpu.md).
REASONING_OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "static+compile": {"kv_cache": "static", "compile": True},
    "lookup": {"prompt_lookup_tokens": 10},
    "static+compile+lookup": {"kv_cache": "static", "compile": True, "prompt_lookup_tokens": 10},
}
PERCEPTION_OPTIONS: dict[str, dict[str, Any]] = {
    "plain": {},
    "static+compile": {"kv_cache": "static", "compile": True},
}


@dataclass
class SpeedRow:
    model: str  # "reasoning" or "perception"
    option: str
    batch: int
    new_tokens: int  # per request
    prompt_tokens: int
    seconds: float  # median of the timed calls
    tokens_per_s: float  # generated tokens (all requests) per second
    keyframes_per_s: float | None = None  # perception only
    warmup_s: float = 0.0
    identical: bool | None = None  # greedy text equal to the plain / one-at-a-time text
    samples_s: list[float] = field(default_factory=list)


@dataclass
class SpeedReport:
    settings: dict[str, Any]
    rows: list[SpeedRow] = field(default_factory=list)
    build_s: dict[str, float] = field(default_factory=dict)


def reasoning_messages(n_frames: int) -> list[dict[str, Any]]:
    """A reasoning prompt over `n_frames` descriptions, the way the robot builds it."""
    colours = ["red", "blue", "green", "yellow", "white", "black"]
    things = ["box", "door", "chair", "table", "car", "sign"]
    sides = ["ahead-left", "ahead-right", "to the left", "to the right", "behind", "below"]
    frames = []
    for i in range(n_frames):
        c, t, s = colours[i % 6], things[(i * 5) % 6], sides[(i * 7) % 6]
        text = (f"A {c} {t} is {s}; the {colours[(i + 2) % 6]} {things[(i + 1) % 6]} seen "
                f"before is now {sides[(i + 3) % 6]}, next to a {colours[(i + 4) % 6]} wall.")
        frames.append(FrameDescription(keyframe_index=i, observation=text,
                                       action="move forward" if i else None))
    question = format_question("Where is the red box now, relative to you?",
                               ["A. ahead-left", "B. ahead-right", "C. behind", "D. not seen"])
    return list(build_reasoning_messages(render_video_text(frames), question))


def _timed(call: Any, repeats: int, sync: Any) -> tuple[float, list[float], Any]:
    samples, result = [], None
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        result = call()
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), samples, result


def _sync_for(device: str) -> Any:
    def sync() -> None:
        if device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
    return sync


def _spec(args: argparse.Namespace, new_tokens: int, options: dict[str, Any],
          batch_size: int = 1) -> ModelSpec:
    opts = dict(options)
    if opts.get("compile") and args.compile_backend:
        opts["extra"] = {"compile_config": {"backend": args.compile_backend}}
    if opts.get("kv_cache") == "static":
        opts.setdefault("max_cache_len", args.max_cache_len)
    return ModelSpec.from_dict({"model": "bench", "device": args.device, "dtype": args.dtype,
                                "max_new_tokens": new_tokens, "batch_size": batch_size,
                                "warmup": bool(opts.get("compile")), **opts})


def measure_reasoning(args: argparse.Namespace, folders: Any, report: SpeedReport) -> None:
    sync = _sync_for(args.device)
    start = time.perf_counter()
    parts = random_models.reasoning_parts(args.size, _spec(args, args.lm_new_tokens, {}), folders)
    report.build_s["reasoning"] = time.perf_counter() - start
    messages = reasoning_messages(args.lm_frames)
    plain_text: str | None = None
    for name in args.reasoning_options:
        reasoner = random_models.make_reasoner(
            args.size, _spec(args, args.lm_new_tokens, REASONING_OPTIONS[name]), folders, parts)
        prompt_tokens = reasoner.count_tokens(messages)
        seconds, samples, text = _timed(lambda r=reasoner: r.generate(messages), args.repeats,
                                        sync)
        plain_text = text if name == "plain" else plain_text
        report.rows.append(SpeedRow(
            "reasoning", name, 1, args.lm_new_tokens, prompt_tokens, seconds,
            args.lm_new_tokens / seconds, warmup_s=reasoner.warmup_s,
            identical=None if plain_text is None else text == plain_text, samples_s=samples))
        print(f"reasoning {name}: {args.lm_new_tokens / seconds:.1f} tok/s", file=sys.stderr)
    del parts
    _release(args.device)


def measure_perception(args: argparse.Namespace, folders: Any, report: SpeedReport) -> None:
    sync = _sync_for(args.device)
    width, height = (int(v) for v in args.image_size.split("x"))
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
              for _ in range(max(args.batches) + 1)]
    pairs = [keyframe_request(frames[i + 1], frames[i]) for i in range(max(args.batches))]
    start = time.perf_counter()
    parts = random_models.perception_parts(args.size, _spec(args, args.vlm_new_tokens, {}),
                                           folders)
    report.build_s["perception"] = time.perf_counter() - start

    def prompt_tokens(perceiver: Any, request: Any) -> int:
        images, prompt = request
        from embodied_r_ros.core.backends.images import model_images

        pils = model_images(images, perceiver.spec.image_encoding())
        batch = perceiver._processor(text=[perceiver._prompt_text(len(pils), prompt)],
                                     images=pils, return_tensors="pt")
        return int(batch["input_ids"].shape[1])

    plain_text: str | None = None
    for name in args.perception_options:
        perceiver = random_models.make_perceiver(
            args.size, _spec(args, args.vlm_new_tokens, PERCEPTION_OPTIONS[name]), folders, parts)
        seconds, samples, text = _timed(lambda p=perceiver: p.describe(*pairs[0]), args.repeats,
                                        sync)
        plain_text = text if name == "plain" else plain_text
        report.rows.append(SpeedRow(
            "perception", name, 1, args.vlm_new_tokens, prompt_tokens(perceiver, pairs[0]),
            seconds, args.vlm_new_tokens / seconds, keyframes_per_s=1 / seconds,
            warmup_s=perceiver.warmup_s,
            identical=None if plain_text is None else text == plain_text, samples_s=samples))
        print(f"perception {name}: {args.vlm_new_tokens / seconds:.1f} tok/s", file=sys.stderr)
    # Batched throughput, plain decoding (the robot's default), one call per batch.
    one_by_one: list[str] = []
    for batch in args.batches:
        perceiver = random_models.make_perceiver(
            args.size, _spec(args, args.vlm_new_tokens, {}, batch_size=batch), folders, parts)
        requests = pairs[:batch]
        seconds, samples, texts = _timed(lambda p=perceiver, r=requests: p.describe_batch(r),
                                         args.repeats, sync)
        if batch == 1:
            one_by_one = [perceiver.describe(*r) for r in pairs[:max(args.batches)]]
        report.rows.append(SpeedRow(
            "perception", "batched (plain)", batch, args.vlm_new_tokens,
            prompt_tokens(perceiver, requests[0]), seconds, batch * args.vlm_new_tokens / seconds,
            keyframes_per_s=batch / seconds, samples_s=samples,
            identical=(texts == one_by_one[:batch]) if one_by_one else None))
        print(f"perception batch {batch}: {batch / seconds:.2f} key frames/s", file=sys.stderr)
    del parts
    _release(args.device)


def _release(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def format_table(report: SpeedReport) -> str:
    head = (f"{'model':<11}{'option':<23}{'batch':>6}{'prompt':>8}{'new':>6}{'seconds':>10}"
            f"{'tok/s':>9}{'kf/s':>8}{'warm-up s':>11}  same text")
    lines = [head]
    for r in report.rows:
        kf = "-" if r.keyframes_per_s is None else f"{r.keyframes_per_s:.2f}"
        same = "-" if r.identical is None else ("yes" if r.identical else "NO")
        lines.append(f"{r.model:<11}{r.option:<23}{r.batch:>6}{r.prompt_tokens:>8}"
                     f"{r.new_tokens:>6}{r.seconds:>10.3f}{r.tokens_per_s:>9.1f}{kf:>8}"
                     f"{r.warmup_s:>11.1f}  {same}")
    batched = {r.batch: r.keyframes_per_s for r in report.rows
               if r.option == "batched (plain)" and r.keyframes_per_s}
    if 1 in batched and len(batched) > 1:
        lines.append("batched perception vs one at a time: " + ", ".join(
            f"batch {b}: {v / batched[1]:.2f}x" for b, v in sorted(batched.items()) if b > 1))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true", help="tiny models on the CPU (smoke test)")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    p.add_argument("--dtype", default=None, help="default: bfloat16 (float32 with --tiny)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per row (2; 3 tiny)")
    p.add_argument("--lm-new-tokens", type=int, default=None, help="answer length (256)")
    p.add_argument("--lm-frames", type=int, default=None,
                   help="frame descriptions in the reasoning prompt (20)")
    p.add_argument("--vlm-new-tokens", type=int, default=None, help="description length (256)")
    p.add_argument("--image-size", default=None, help="WIDTHxHEIGHT (640x480; 160x120 tiny)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--max-cache-len", type=int, default=None,
                   help="static cache size for every call (4096)")
    p.add_argument("--reasoning-options", nargs="*", default=list(REASONING_OPTIONS),
                   choices=list(REASONING_OPTIONS))
    p.add_argument("--perception-options", nargs="*", default=list(PERCEPTION_OPTIONS),
                   choices=list(PERCEPTION_OPTIONS))
    p.add_argument("--compile-backend", default=None,
                   help="torch.compile backend (default inductor; 'eager' with --tiny)")
    p.add_argument("--skip-reasoning", action="store_true")
    p.add_argument("--skip-perception", action="store_true")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (1 with --tiny: on a shared CPU, more threads "
                        "spin against other processes and make timings erratic)")
    p.add_argument("--workdir", default=None, help="where the tiny folders are built")
    p.add_argument("--json", dest="json_path", default=None)
    args = p.parse_args(argv)
    tiny = args.tiny
    defaults = {"device": "cpu" if tiny else "cuda", "dtype": "float32" if tiny else "bfloat16",
                "repeats": 3 if tiny else 2, "lm_new_tokens": 32 if tiny else 256,
                "lm_frames": 20, "vlm_new_tokens": 64 if tiny else 256,
                "image_size": "160x120" if tiny else "640x480",
                "max_cache_len": 4096, "compile_backend": "eager" if tiny else None}
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.size = "tiny" if tiny else "full"
    if args.threads is None and tiny:
        args.threads = 1
    if args.workdir is None:
        args.workdir = str(Path(tempfile.gettempdir()) / "embodied_r_bench")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = SpeedReport(settings={k: v for k, v in vars(args).items() if k != "json_path"})
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    folders = random_models.tiny_folders(args.workdir)
    if not args.skip_reasoning:
        measure_reasoning(args, folders, report)
    if not args.skip_perception:
        measure_perception(args, folders, report)
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(format_table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
