"""Load benchmark: a camera stream into the embedded graph for minutes, questions on top.

    python -m bench.bench_load [--minutes 10] [--rate 30] [--width 1280 --height 720]
                               [--question-every 5] [--graph embedded] [--json out.json]

Publishes `--rate` Hz rgb8 frames (a panorama panned across the view, so key frames keep
coming) with increasing header stamps to the graph's camera topic, asks a question every
`--question-every` seconds, and samples the node processes' resident memory and CPU time
every 5 s. Tiny random models (built locally) keep model time small, so what is measured
is the package's own cost. Reports:

- resident memory after the warm-up (`--warmup-minutes`, default the first 20% of the
  run, at least 60 s) and its slope in MB per hour (least squares over the rest);
- ingest CPU: node CPU seconds per wall second (1.0 = one core);
- frames published, received by the node, dropped by cause (from /diagnostics);
- the non-model overhead of a question (total - perception wait - reasoning), p50/p95,
  and the answer latency p50/p95.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def proc_stats(pid: int) -> tuple[float, float]:
    """(resident MB, CPU seconds) of a process from /proc."""
    with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
        rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks


def slope_per_hour(times: list[float], values: list[float]) -> float:
    if len(times) < 2:
        return 0.0
    t = np.asarray(times) - times[0]
    v = np.asarray(values)
    a = np.vstack([t, np.ones_like(t)]).T
    slope, _ = np.linalg.lstsq(a, v, rcond=None)[0]
    return float(slope * 3600.0)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(np.ceil(q / 100 * len(ordered))) - 1))]


def panorama(width: int, height: int) -> np.ndarray:
    """A wide textured image to pan across (deterministic)."""
    rng = np.random.default_rng(0)
    wide = np.zeros((height, width * 4, 3), np.uint8)
    for _ in range(400):
        x, y = int(rng.integers(0, width * 4 - 80)), int(rng.integers(0, height - 80))
        w, h = int(rng.integers(20, 160)), int(rng.integers(20, 160))
        wide[y:y + h, x:x + w] = rng.integers(0, 256, 3)
    noise = rng.integers(0, 40, size=wide.shape, dtype=np.uint8)
    return wide + noise


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # A ROS domain of its own: another graph on the host (a demo, tests) must not feed
    # frames or questions into the measured one.
    os.environ["ROS_DOMAIN_ID"] = str(args.domain)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy  # noqa: F401 - fail early without ROS
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header

    from embodied_r_ros.client import GraphClient, spinning
    from embodied_r_ros.graph_processes import GraphProcesses
    from embodied_r_ros.nodes.common.conversions import seconds_to_stamp
    from embodied_r_ros.testing.tiny_models import build_tiny_models

    models = build_tiny_models(Path(args.artifacts) / "tiny_models")
    overrides = {"perception.model": str(models.vlm), "reasoning.model": str(models.lm),
                 "perception.device": "cpu", "reasoning.device": "cpu",
                 "perception.max_new_tokens": 16, "reasoning.max_new_tokens": 16}

    class Loader(GraphClient):
        def __init__(self) -> None:
            super().__init__("load_bench")
            self.camera = self.create_publisher(Image, "/camera/image_raw", qos_profile_sensor_data)
            self.diagnostics: deque[DiagnosticArray] = deque(maxlen=20)
            self.create_subscription(DiagnosticArray, "/diagnostics",
                                     lambda msg: self.diagnostics.append(msg), 10)

    wide = panorama(args.width, args.height)
    seconds = args.minutes * 60.0
    warmup = args.warmup_minutes * 60.0 if args.warmup_minutes > 0 else max(60.0, 0.2 * seconds)
    samples: list[tuple[float, float, float]] = []  # (t, rss MB, cpu s) summed over nodes
    answers: list[Any] = []
    published = 0
    with GraphProcesses(args.graph, REPO / "config" / "embodied_r.yaml", overrides,
                        echo=None) as graph, spinning(Loader) as client:
        client.wait_for_graph(300, alive_check=graph.check_alive)
        pids = [n.process.pid for n in graph.nodes]
        stop = threading.Event()

        def ask_loop() -> None:
            while not stop.wait(args.question_every):
                answers.append(client.ask("What is to my left?", ["a wall", "a door"],
                                          timeout_s=60))

        asker = threading.Thread(target=ask_loop, daemon=True)
        start = time.monotonic()
        asker.start()
        next_sample = start
        period = 1.0 / args.rate
        step = max(1, args.width // 200)
        while True:
            now = time.monotonic()
            elapsed = now - start
            if elapsed >= seconds:
                break
            offset = (published * step) % (wide.shape[1] - args.width)
            frame = np.ascontiguousarray(wide[:, offset:offset + args.width])
            client.camera.publish(Image(
                header=Header(stamp=seconds_to_stamp(1000.0 + published * period), frame_id="cam"),
                width=args.width, height=args.height, encoding="rgb8", step=args.width * 3,
                data=frame.tobytes()))
            published += 1
            if now >= next_sample:
                rss = cpu = 0.0
                for pid in pids:
                    r, c = proc_stats(pid)
                    rss, cpu = rss + r, cpu + c
                samples.append((elapsed, rss, cpu))
                next_sample += 5.0
                graph.check_alive()
            delay = start + published * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        stop.set()
        asker.join(timeout=90)
        status = client.status()
        drops: dict[str, str] = {}
        for array in list(client.diagnostics)[-5:]:
            for entry in array.status:
                if entry.name.endswith(": camera"):
                    drops = {kv.key: kv.value for kv in entry.values}
    after = [(t, r, c) for t, r, c in samples if t >= warmup]
    cpu_per_s = ((after[-1][2] - after[0][2]) / (after[-1][0] - after[0][0])
                 if len(after) >= 2 else float("nan"))
    ok = [a for a in answers if a.total_s > 0]
    overhead = [max(0.0, a.total_s - a.perception_s - a.reasoning_s) for a in ok]
    return {
        "graph": args.graph, "minutes": args.minutes, "rate_hz": args.rate,
        "frame": f"{args.width}x{args.height} rgb8",
        "frames_published": published, "frames_received_by_node": status.frames_received,
        "frames_sampled": status.frames_sampled, "keyframes": status.keyframes,
        "camera_diagnostics": drops,
        "rss_after_warmup_mb": round(after[0][1], 1) if after else None,
        "rss_end_mb": round(samples[-1][1], 1) if samples else None,
        "rss_slope_mb_per_hour": round(slope_per_hour([t for t, _, _ in after],
                                                      [r for _, r, _ in after]), 2),
        "node_cpu_cores": round(cpu_per_s, 3),
        "questions": len(answers),
        "question_codes": dict(sorted({str(a.error_code): sum(1 for b in answers if b.error_code == a.error_code)
                                       for a in answers}.items())),
        "overhead_p50_s": round(percentile(overhead, 50), 4),
        "overhead_p95_s": round(percentile(overhead, 95), 4),
        "answer_p50_s": round(percentile([a.total_s for a in ok], 50), 3),
        "answer_p95_s": round(percentile([a.total_s for a in ok], 95), 3),
        "median_reasoning_s": round(statistics.median([a.reasoning_s for a in ok]), 3) if ok else None,
        "warmup_minutes": round(warmup / 60.0, 1),
        "rss_mb_by_minute": {f"{t / 60:.0f}": round(r, 1) for t, r, _ in samples
                             if abs(t % 60) < 5.0},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=720)
    parser.add_argument("--question-every", type=float, default=5.0)
    parser.add_argument("--warmup-minutes", type=float, default=0.0,
                        help="minutes excluded from the memory slope (default: 20%% of the run, "
                        "at least 1); the episode window fills in about 8-10 minutes at 30 Hz")
    parser.add_argument("--graph", choices=["embedded", "split"], default="embedded")
    parser.add_argument("--artifacts", default=str(REPO / "artifacts"))
    parser.add_argument("--json", default="")
    parser.add_argument("--domain", type=int, default=int(os.environ.get("BENCH_ROS_DOMAIN", "142")),
                        help="ROS_DOMAIN_ID of the measured graph (default 142)")
    args = parser.parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
