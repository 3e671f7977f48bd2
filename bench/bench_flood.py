"""Flood benchmark: N questions fired at once at a running graph, every reply counted.

    python -m bench.bench_flood [--graph embedded|split|both] [--questions 100]
                                [--timeout 20] [--actions 0] [--json out.json]

Starts the graph (the installed executables, tiny random models built locally, the
sample bag's first frames played so there is an episode), then sends `--questions`
AskSpatial calls at the same moment from one client (plus `--actions` AnswerSpatial
goals), each with a time limit of `--timeout` seconds, and waits for every reply. The
reasoning model generates long answers (min_new_tokens), so the first admitted question
holds the queue and the rest must be queued (up to qa.max_waiting_questions) or refused
with BUSY at once. Reports per graph: replies by error code, calls with no reply, the
slowest reply and the time to the last BUSY. The contract (docs/reliability.md): no call
without a reply, the slowest within the time limit plus a small margin.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def flood(graph: str, args: argparse.Namespace, models: Any, sample: Path) -> dict[str, Any]:
    from embodied_r_ros.action import AnswerSpatial
    from embodied_r_ros.core.errors import ErrorCode
    from embodied_r_ros.graph_processes import GraphProcesses
    from embodied_r_ros.replay import SpinningClient
    from embodied_r_ros.sample_data.bag_io import read_image_bag
    from embodied_r_ros.srv import AskSpatial

    overrides = {"perception.model": str(models.vlm), "reasoning.model": str(models.lm),
                 "perception.device": "cpu", "reasoning.device": "cpu",
                 "perception.max_new_tokens": 8, "reasoning.max_new_tokens": 4000,
                 "reasoning.extra_json": json.dumps({"generate_kwargs": {"min_new_tokens": 4000}})}
    frames = [(f.stamp_s, f.image, f.frame_id) for f in read_image_bag(sample / "sample.mcap")]
    with GraphProcesses(graph, REPO / "config" / "embodied_r.yaml", overrides,
                        echo=None) as running, SpinningClient() as client:
        client.wait_for_graph(300, alive_check=running.check_alive)
        client.play(frames[:40], rate=0)
        start = time.monotonic()
        calls = [client.ask_client.call_async(AskSpatial.Request(
            question=f"Flood question {i}?", timeout_s=float(args.timeout)))
            for i in range(args.questions)]
        goals = [client.answer_client.send_goal_async(AnswerSpatial.Goal(
            question=f"Flood goal {i}?", timeout_s=float(args.timeout)))
            for i in range(args.actions)]
        arrived: dict[int, float] = {}
        for i, future in enumerate(calls):
            def note_arrival(_done: Any, i: int = i) -> None:
                arrived.setdefault(i, time.monotonic())

            future.add_done_callback(note_arrival)
        deadline = start + args.timeout + 60
        while time.monotonic() < deadline and not all(f.done() for f in calls + goals):
            time.sleep(0.05)
        codes: Counter[str] = Counter()
        busy_last = 0.0
        for i, future in enumerate(calls):
            reply = future.result() if future.done() else None
            if reply is None:  # not done (or cancelled: a cancelled future's result is None)
                codes["NO_REPLY"] += 1
                continue
            name = ErrorCode(reply.error_code).name
            codes[name] += 1
            if name == "BUSY":
                busy_last = max(busy_last, arrived[i] - start)
        results = []
        for handle_future in goals:
            handle = handle_future.result() if handle_future.done() else None
            if handle is None:  # not done (or cancelled, which this benchmark never does)
                codes["GOAL_NO_REPLY"] += 1
                continue
            if not handle.accepted:
                codes["GOAL_REJECTED_BUSY"] += 1
                continue
            results.append(handle.get_result_async())
        while time.monotonic() < deadline and not all(r.done() for r in results):
            time.sleep(0.05)
        for result in results:
            outcome = result.result() if result.done() else None
            codes["GOAL_" + (ErrorCode(outcome.result.error_code).name
                             if outcome is not None else "NO_RESULT")] += 1
        slowest = max((t - start for t in arrived.values()), default=float("nan"))
        in_progress = client.status().questions_in_progress
    return {"graph": graph, "questions": args.questions, "actions": args.actions,
            "timeout_s": args.timeout, "replies_by_code": dict(codes),
            "no_reply": codes["NO_REPLY"] + codes["GOAL_NO_REPLY"] + codes["GOAL_NO_RESULT"],
            "slowest_reply_s": round(slowest, 2), "last_busy_s": round(busy_last, 2),
            "in_progress_after": in_progress}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", choices=("embedded", "split", "both"), default="both")
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--actions", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--artifacts", default=os.path.join(tempfile.gettempdir(), "bench_flood"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("ROS_DOMAIN_ID", str(100 + os.getpid() % 100))

    from embodied_r_ros.sample_data.cli import main as make_sample
    from embodied_r_ros.testing.tiny_models import build_tiny_models

    artifacts = Path(args.artifacts)
    models = build_tiny_models(artifacts / "tiny_models")
    sample = artifacts / "sample"
    if not (sample / "sample.mcap").exists():
        make_sample([str(sample)])
    graphs = ("embedded", "split") if args.graph == "both" else (args.graph,)
    report = [flood(graph, args, models, sample) for graph in graphs]
    for row in report:
        print(json.dumps(row))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if all(row["no_reply"] == 0 for row in report) else 1


if __name__ == "__main__":
    raise SystemExit(main())
