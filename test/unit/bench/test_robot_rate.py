"""bench/bench_robot_rate.py: key frames at a fixed rate into the real perception worker.

With a scripted perceiver whose call costs the same for one key frame or a batch (what a
GPU does for small batches), one-at-a-time perception falls behind and drops key frames
while batched perception keeps up. Then the bench itself runs end to end with the tiny
models (CI-size), and the full-size code path runs with small stand-in configs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pytest

from bench import bench_robot_rate as rr


class FixedCostPerceiver:
    """Every call (one request or a batch) takes `cost_s`: the GPU's flat batch cost."""

    name = "fixed-cost"

    def __init__(self, cost_s: float) -> None:
        self.cost_s = cost_s

    def describe(self, images, prompt, settings=None):  # type: ignore[no-untyped-def]
        return self.describe_batch([(images, prompt)], settings)[0]

    def describe_batch(self, requests, settings=None):  # type: ignore[no-untyped-def]
        time.sleep(self.cost_s)
        return ["1. move forward\n2. a red box ahead-left\n3. none" if len(images) == 2
                else "a room with a red box" for images, _ in requests]

    def close(self) -> None:
        pass


class QuickReasoner:
    name = "quick"

    def generate(self, messages, settings=None, on_text=None, should_stop=None):  # type: ignore[no-untyped-def]
        time.sleep(0.01)
        return "<think>the box is ahead-left</think><answer>A</answer>"

    def generate_batch(self, conversations, settings=None):  # type: ignore[no-untyped-def]
        return [self.generate(c) for c in conversations]

    def close(self) -> None:
        pass


def _args(**changes: Any) -> argparse.Namespace:
    args = rr.parse_args(["--tiny", "--interval", "0.02", "--duration", "0.8",
                          "--max-queue", "4", "--question-every", "0.3",
                          "--sample-every", "0.05"])
    for key, value in changes.items():
        setattr(args, key, value)
    return args


def test_batching_keeps_up_where_one_at_a_time_drops() -> None:
    one = rr.run(_args(batch_size=1), FixedCostPerceiver(0.06), QuickReasoner(), 1)
    many = rr.run(_args(batch_size=8), FixedCostPerceiver(0.06), QuickReasoner(), 8)
    assert one.offered == many.offered == 40
    # One at a time: 0.06 s per key frame against one every 0.02 s.
    assert one.dropped > 10 and not one.kept_up
    assert one.described + one.dropped == one.offered and one.mean_batch == 1.0
    # Batched: the same cost per call covers up to 8 key frames.
    assert many.dropped == 0 and many.described == 40 and many.kept_up
    assert many.mean_batch > 1.5
    assert many.described_per_s > 2 * one.described_per_s
    assert many.queue and max(p for _, p in many.queue) == many.queue_max
    for report in (one, many):
        assert report.questions and all(q.success for q in report.questions)
        assert all(q.total_s >= q.reasoning_s for q in report.questions)


@pytest.mark.models
def test_tiny_run_end_to_end(tiny_models: Any, tmp_path: Path, capsys: Any,
                             monkeypatch: Any) -> None:
    from bench import random_models

    monkeypatch.setattr(random_models, "tiny_folders", lambda workdir: tiny_models)
    out = tmp_path / "rr.json"
    assert rr.main(["--tiny", "--duration", "1.5", "--interval", "0.1", "--question-every",
                    "0.7", "--vlm-new-tokens", "8", "--lm-new-tokens", "8",
                    "--json", str(out)]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0].startswith("robot rate: one key frame every 0.1 s for 1.5 s")
    data = json.loads(out.read_text())
    assert data["offered"] == 15
    assert data["described"] + data["dropped"] + data["failed"] == 15
    assert data["settings"]["batch_size"] == 4 and data["questions"]
    assert data["queue"] and data["described_per_s"] > 0


@pytest.mark.models
def test_full_size_path_with_stand_in_configs(tiny_models: Any, monkeypatch: Any) -> None:
    """The --size full code (random weights at published shapes behind the real backend
    classes), with the tiny configs of bench/gpu_latency.py standing in for 7B and 3B."""
    import numpy as np

    from bench import gpu_latency, random_models
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    monkeypatch.setattr(gpu_latency, "QWEN25_VL_7B", gpu_latency.TINY_VL)
    monkeypatch.setattr(gpu_latency, "QWEN25_3B", gpu_latency.TINY_LM)
    spec = ModelSpec(model="bench", device="cpu", dtype="float32", max_new_tokens=6)
    perceiver = random_models.make_perceiver("full", spec, tiny_models)
    reasoner = random_models.make_reasoner("full", spec, tiny_models)
    frame = np.zeros((84, 112, 3), dtype=np.uint8)
    texts = perceiver.describe_batch([([frame], "describe"), ([frame, frame], "what changed")])
    assert len(texts) == 2
    assert isinstance(reasoner.generate([{"role": "user", "content": "where?"}]), str)
    # Output length is pinned: random weights must not stop early.
    assert perceiver.spec.extra["generate_kwargs"]["min_new_tokens"] == 6
