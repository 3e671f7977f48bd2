"""Robot-rate benchmark: key frames arrive at a fixed rate into the real perception worker.

A moving robot makes a key frame every 1-3 s. This benchmark feeds key frames into the
robot's own `PerceptionWorker` (batching, queue and drop policy included) at a fixed
interval for a fixed time, with the configured perception backend, and asks the
reasoning model a question every few seconds while perception runs, the way a question
arrives on the robot: it waits for the key frames seen before it, then the reasoning
model answers from the descriptions in memory. Reported:

* key frames offered, described, dropped (queue full) and failed; described per second;
* the queue length (waiting + being described) sampled over time;
* the batches the worker formed and the perception call latency;
* question latency under that load: wait for perception + reasoning = total.

    python -m bench.bench_robot_rate --tiny                    # CPU, tiny models, ~20 s
                                                               # (a key frame every 0.2 s)
    python -m bench.bench_robot_rate --size full               # GPU: 7B + 3B shapes,
                                                               # random weights, 2 s x 5 min
    python -m bench.bench_robot_rate --params my_robot.yaml    # the robot's own models
    ... --perception-options '{"kv_cache": "static", "compile": true, "warmup": true}'

Random weights ("full") generate exactly `--vlm-new-tokens` / `--lm-new-tokens` tokens,
so their timings are those of real weights of the same shapes producing that much text.
The summary is printed last; `--json` also writes every number.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.perception.worker import PerceptionJob, PerceptionWorker
from embodied_r_ros.core.prompts.reasoning import format_question
from embodied_r_ros.core.qa.answerer import QuestionAnswerer
from embodied_r_ros.core.types import GenerationSettings

QUESTION = "Where is the red box now, relative to you?"
CHOICES = ["A. ahead-left", "B. ahead-right", "C. behind", "D. not seen"]


@dataclass
class Question:
    asked_at_s: float
    wait_s: float  # waiting for the key frames seen before the question
    reasoning_s: float
    total_s: float
    keyframes_used: int
    success: bool


@dataclass
class RobotRateReport:
    settings: dict[str, Any]
    offered: int = 0
    described: int = 0
    dropped: int = 0
    failed: int = 0
    elapsed_s: float = 0.0  # first key frame to the last one processed (or the cap)
    described_per_s: float = 0.0
    offered_per_s: float = 0.0
    kept_up: bool = False
    queue: list[tuple[float, int]] = field(default_factory=list)  # (seconds, pending)
    queue_max: int = 0
    queue_mean: float = 0.0
    batches: int = 0
    mean_batch: float = 0.0
    call_p50_s: float | None = None
    call_p95_s: float | None = None
    questions: list[Question] = field(default_factory=list)
    question_p50_s: float | None = None
    question_max_s: float | None = None
    reasoning_p50_s: float | None = None
    build_s: float = 0.0
    warmup_s: dict[str, float] = field(default_factory=dict)


# ------------------------------------------------------------------------------ frames
def synthetic_frames(n: int, width: int, height: int, seed: int = 0) -> list[np.ndarray]:
    """`n` distinct frames of a smooth scene with a moving box (cheap to make)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack([xx * 255 // max(1, width - 1), yy * 255 // max(1, height - 1),
                     np.full_like(xx, 96)], axis=-1).astype(np.uint8)
    frames = []
    for i in range(n):
        img = base.copy()
        x = (i * width // 7) % max(1, width - width // 4)
        img[height // 3: height // 3 + height // 4, x: x + width // 4] = (200, 30, 30)
        noise = rng.integers(0, 16, img.shape, dtype=np.uint8)
        frames.append(img + noise)
    return frames


# ------------------------------------------------------------------------------ models
def _spec(args: argparse.Namespace, new_tokens: int, options: dict[str, Any],
          batch_size: int) -> ModelSpec:
    return ModelSpec.from_dict({"model": "bench", "device": args.device, "dtype": args.dtype,
                                "max_new_tokens": new_tokens, "temperature": 0.0,
                                "batch_size": batch_size, **options})


def build_models(args: argparse.Namespace) -> tuple[Any, Any, int]:
    """(perceiver, reasoner, perception batch size) for the chosen source."""
    if args.params:
        from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
        from embodied_r_ros.core.settings import load_settings

        overrides = {} if args.batch_size is None else {"perception.batch_size": args.batch_size}
        settings = load_settings(args.params, overrides=overrides)
        perceiver = make_perceiver(ModelSpec.from_dict(settings.perception.spec_dict()))
        reasoner = make_reasoner(ModelSpec.from_dict(settings.reasoning.spec_dict()))
        return perceiver, reasoner, settings.perception.batch_size
    from bench import random_models

    batch = args.batch_size or 4
    folders = random_models.tiny_folders(args.workdir)
    perceiver = random_models.make_perceiver(
        args.size, _spec(args, args.vlm_new_tokens, args.perception_options, batch), folders)
    reasoner = random_models.make_reasoner(
        args.size, _spec(args, args.lm_new_tokens, args.reasoning_options, 1), folders)
    return perceiver, reasoner, batch


# ------------------------------------------------------------------------------ the run
def run(args: argparse.Namespace, perceiver: Any, reasoner: Any, batch_size: int) -> RobotRateReport:
    report = RobotRateReport(settings={k: v for k, v in vars(args).items()
                                       if k not in ("json_path",)})
    report.settings["batch_size"] = batch_size
    width, height = (int(v) for v in args.image_size.split("x"))
    n_frames = max(1, int(args.duration / args.interval))
    frames = synthetic_frames(n_frames, width, height)
    # Not timed: the first calls of a model pay one-off costs (allocation, kernels; the
    # robot's `warmup` option pays them at configure).
    short = GenerationSettings(temperature=0.0, max_new_tokens=2)
    perceiver.describe_batch([([frames[0]], "warm-up"), ([frames[0], frames[-1]], "warm-up")],
                             short)
    reasoner.generate([{"role": "user", "content": "warm-up"}], short)
    memory = EpisodeMemory("bench")
    worker = PerceptionWorker(perceiver, memory, settings=None, max_queue=args.max_queue,
                              episode_id="bench", batch_size=batch_size)
    answerer = QuestionAnswerer(reasoner, GenerationSettings(
        temperature=0.0, max_new_tokens=args.lm_new_tokens))
    question_text = format_question(QUESTION, CHOICES)
    stop = threading.Event()
    start = time.monotonic()
    submitted = [-1]  # last key frame index submitted

    def sample_queue() -> None:
        while not stop.is_set():
            report.queue.append((round(time.monotonic() - start, 2), worker.pending()))
            stop.wait(args.sample_every)

    def ask_questions() -> None:
        next_at = args.question_every
        while not stop.wait(max(0.0, start + next_at - time.monotonic())):
            asked = time.monotonic()
            last = submitted[0]
            if last >= 0:
                worker.wait_for(last, args.question_timeout)
            waited = time.monotonic() - asked
            result = answerer.answer(question_text, memory.descriptions(), episode_id="bench")
            report.questions.append(Question(
                asked_at_s=round(asked - start, 2), wait_s=waited,
                reasoning_s=result.timing.reasoning_s, total_s=time.monotonic() - asked,
                keyframes_used=result.keyframes_used, success=result.success))
            next_at = max(next_at + args.question_every, time.monotonic() - start)

    threads = [threading.Thread(target=sample_queue, daemon=True)]
    if args.question_every > 0:
        threads.append(threading.Thread(target=ask_questions, daemon=True))
    for thread in threads:
        thread.start()
    try:
        for i, image in enumerate(frames):  # the robot: one key frame every `interval`
            time.sleep(max(0.0, start + i * args.interval - time.monotonic()))
            worker.submit(PerceptionJob("bench", i, image, i * args.interval))
            submitted[0] = i
        report.offered = len(frames)
        feed_end = time.monotonic()
        worker.wait_for(len(frames) - 1, args.drain_timeout)
        done = time.monotonic()
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=args.question_timeout + 60)
        worker.stop()
    report.described, report.dropped, report.failed = (
        worker.described, worker.dropped, worker.failed - worker.dropped)
    report.elapsed_s = done - start
    report.described_per_s = report.described / report.elapsed_s if report.elapsed_s else 0.0
    report.offered_per_s = report.offered / max(1e-9, feed_end - start + args.interval)
    pending = [p for _, p in report.queue]
    report.queue_max = max(pending, default=0)
    report.queue_mean = statistics.fmean(pending) if pending else 0.0
    report.batches = worker.batches
    report.mean_batch = worker.batched_frames / worker.batches if worker.batches else 0.0
    report.call_p50_s = worker.latency.percentile(50)
    report.call_p95_s = worker.latency.percentile(95)
    # Kept up: nothing dropped or failed, and the backlog at the end was at most one batch.
    report.kept_up = (report.dropped == 0 and report.failed == 0
                      and report.described == report.offered
                      and done - feed_end <= max(args.interval, 2 * (report.call_p95_s or 0)))
    totals = [q.total_s for q in report.questions]
    if totals:
        report.question_p50_s = statistics.median(totals)
        report.question_max_s = max(totals)
        report.reasoning_p50_s = statistics.median(q.reasoning_s for q in report.questions)
    return report


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_report(report: RobotRateReport) -> str:
    s = report.settings
    lines = [
        f"robot rate: one key frame every {s['interval']:g} s for {s['duration']:g} s; "
        f"{s['size'] if not s.get('params') else s['params']} models on {s['device']}; "
        f"perception batch_size {s['batch_size']}, max_queue {s['max_queue']}",
        f"key frames: offered {report.offered}, described {report.described}, "
        f"dropped {report.dropped}, failed {report.failed}",
        f"described per second: {report.described_per_s:.3f} (offered "
        f"{report.offered_per_s:.3f}/s); kept up: {'yes' if report.kept_up else 'NO'}",
        f"queue length: max {report.queue_max}, mean {report.queue_mean:.2f} "
        f"({len(report.queue)} samples)",
        f"batches: {report.batches} (mean {report.mean_batch:.2f} key frames); perception "
        f"call p50 {_fmt(report.call_p50_s)} s, p95 {_fmt(report.call_p95_s)} s",
    ]
    if report.questions:
        lines.append(
            f"questions under load: {len(report.questions)}; total p50 "
            f"{_fmt(report.question_p50_s)} s, max {_fmt(report.question_max_s)} s; "
            f"reasoning p50 {_fmt(report.reasoning_p50_s)} s; waits for perception: "
            + ", ".join(f"{q.wait_s:.2f}" for q in report.questions[:10])
            + (" ..." if len(report.questions) > 10 else ""))
    return "\n".join(lines)


# ------------------------------------------------------------------------------ main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tiny", action="store_true",
                   help="tiny models on the CPU, CI-size: a key frame every 0.2 s for 12 s")
    p.add_argument("--size", choices=("tiny", "full"), default=None,
                   help="tiny folders, or 7B + 3B published shapes with random weights")
    p.add_argument("--params", default=None,
                   help="ROS parameter file: use its perception and reasoning models")
    p.add_argument("--device", default=None, help="default: cuda (cpu with --tiny)")
    p.add_argument("--dtype", default=None, help="default: bfloat16 (float32 with --tiny)")
    p.add_argument("--interval", type=float, default=None, help="seconds between key frames (2)")
    p.add_argument("--duration", type=float, default=None, help="seconds of key frames (300)")
    p.add_argument("--batch-size", type=int, default=None, help="perception.batch_size (4)")
    p.add_argument("--max-queue", type=int, default=64, help="perception.max_queue")
    p.add_argument("--image-size", default=None, help="WIDTHxHEIGHT (640x480; 160x120 tiny)")
    p.add_argument("--vlm-new-tokens", type=int, default=None, help="description length (256)")
    p.add_argument("--lm-new-tokens", type=int, default=None, help="answer length (256)")
    p.add_argument("--question-every", type=float, default=None,
                   help="seconds between questions (30; 0 = none)")
    p.add_argument("--question-timeout", type=float, default=60.0,
                   help="longest wait of a question for perception")
    p.add_argument("--drain-timeout", type=float, default=120.0,
                   help="longest wait for the backlog after the last key frame")
    p.add_argument("--sample-every", type=float, default=0.5, help="queue sampling period (s)")
    p.add_argument("--perception-options", type=json.loads, default={},
                   help='model spec keys as JSON, e.g. \'{"kv_cache": "static"}\'')
    p.add_argument("--reasoning-options", type=json.loads, default={},
                   help='model spec keys as JSON, e.g. \'{"prompt_lookup_tokens": 10}\'')
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (1 with --tiny: on a shared CPU, more threads "
                        "spin against other processes and make timings erratic)")
    p.add_argument("--workdir", default=None, help="where the tiny folders are built")
    p.add_argument("--json", dest="json_path", default=None, help="also write the numbers here")
    args = p.parse_args(argv)
    tiny = args.tiny
    defaults = {
        "size": "tiny" if tiny else "full", "device": "cpu" if tiny else "cuda",
        "dtype": "float32" if tiny else "bfloat16", "interval": 0.2 if tiny else 2.0,
        "duration": 12.0 if tiny else 300.0, "image_size": "160x120" if tiny else "640x480",
        "vlm_new_tokens": 64 if tiny else 256, "lm_new_tokens": 32 if tiny else 256,
        "question_every": 4.0 if tiny else 30.0,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.threads is None and tiny:
        args.threads = 1
    if args.workdir is None:
        args.workdir = str(Path(tempfile.gettempdir()) / "embodied_r_bench")
    return args


def main(argv: list[str] | None = None) -> int:
    import logging

    args = parse_args(argv)
    # Drops are counted in the report; one warning per dropped key frame would bury it.
    logging.getLogger("embodied_r_ros.perception").setLevel(logging.ERROR)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    start = time.monotonic()
    perceiver, reasoner, batch = build_models(args)
    build_s = time.monotonic() - start
    report = run(args, perceiver, reasoner, batch)
    report.build_s = build_s
    report.warmup_s = {"perception": getattr(perceiver, "warmup_s", 0.0),
                       "reasoning": getattr(reasoner, "warmup_s", 0.0)}
    for model in (perceiver, reasoner):
        model.close()
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(format_report(report))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
