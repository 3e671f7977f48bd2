"""Helpers shared by the tests that start node graphs over DDS."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
PARAMS = REPO / "config" / "embodied_r.yaml"


def tiny_overrides(tiny_models: Any, **extra: Any) -> dict[str, Any]:
    """Parameters that run both tiny models on the CPU with short generations."""
    out: dict[str, Any] = {
        "perception.model": str(tiny_models.vlm), "reasoning.model": str(tiny_models.lm),
        "perception.device": "cpu", "reasoning.device": "cpu",
        "perception.dtype": "float32", "reasoning.dtype": "float32",
        "perception.max_new_tokens": 8, "reasoning.max_new_tokens": 8,
        "perception.temperature": 0.0, "reasoning.temperature": 0.0}
    out.update(extra)
    return out


def long_generation(role: str, tokens: int) -> dict[str, Any]:
    """Overrides making the `role` model generate exactly `tokens` tokens (random tiny
    models may otherwise stop early when they happen to emit their end token)."""
    return {f"{role}.max_new_tokens": tokens,
            f"{role}.extra_json": json.dumps({"generate_kwargs": {"min_new_tokens": tokens}})}


def bag_frames(sample_dir: Path) -> list[tuple[float, Any, str]]:
    """(stamp, rgb image, frame_id) of the sample bag, for ReplayClient.play."""
    from embodied_r_ros.sample_data.bag_io import read_image_bag

    return [(f.stamp_s, f.image, f.frame_id) for f in read_image_bag(sample_dir / "sample.mcap")]


def wait_for(predicate: Callable[[], Any], timeout_s: float = 20.0, period_s: float = 0.1) -> bool:
    """Poll until `predicate()` is truthy or the time is up; returns the last outcome."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(period_s)
    return bool(predicate())
