"""bench/gpu_latency.py: the GPU latency script, run here with --tiny on the CPU.

The full-size architectures are also built on PyTorch's "meta" device (no memory, no
GPU) to check the config numbers written in the script against the published parameter
counts of Qwen2.5-VL-7B-Instruct (8.29 B) and Qwen2.5-3B-Instruct (3.09 B).
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import pytest

from helpers.env import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "gpu_latency.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_latency", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["gpu_latency"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("gpu_latency", None)


def test_tiny_run_writes_json_and_prints_table_last(bench, tmp_path, capsys) -> None:
    out = tmp_path / "latency.json"
    assert bench.main(["--tiny", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out.strip().splitlines()
    assert stdout[0].startswith("model") and "decode tok/s" in stdout[0]
    assert stdout[-1].startswith("peak GPU memory") or "reasoning" in stdout[-1]

    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [r["case"] for r in rows] == ["1 image (frame 0)", "2 images (key frame)", "reasoning"]
    one, two, reasoning = rows
    assert len(one["image_tokens"]) == 1 and len(two["image_tokens"]) == 2
    assert two["prompt_tokens"] > one["prompt_tokens"]
    assert one["new_tokens"] == two["new_tokens"] == 4
    assert reasoning["prompt_tokens"] == 64 and reasoning["new_tokens"] == 8
    for row in rows:
        assert row["total_s"] > 0 and row["prefill_s"] > 0
        assert row["decode_tok_s"] is None or math.isfinite(row["decode_tok_s"])
    assert data["environment"]["device"] == "cpu"


def test_skip_flags(bench, tmp_path) -> None:
    out = tmp_path / "lm_only.json"
    assert bench.main(["--tiny", "--skip-vlm", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["case"] for r in rows] == ["reasoning"]


def test_full_size_configs_match_published_sizes(bench) -> None:
    import torch

    vlm = bench.build_vlm(bench.QWEN25_VL_7B, torch, "meta", torch.bfloat16, "sdpa")
    lm = bench.build_lm(bench.QWEN25_3B, torch, "meta", torch.bfloat16, "sdpa")
    vlm_params = sum(p.numel() for p in vlm.parameters())
    lm_params = sum(p.numel() for p in lm.parameters())
    assert abs(vlm_params / 1e9 - 8.29) < 0.01
    assert abs(lm_params / 1e9 - 3.09) < 0.01


def test_full_size_image_budget(bench) -> None:
    """A 640x480 frame costs 391 merged vision tokens with the released processor limits."""
    import argparse

    import torch

    args = argparse.Namespace(width=640, height=480, vlm_prompt_tokens=200)
    inputs = bench.perception_inputs(bench.QWEN25_VL_7B, torch, 2, args, "cpu", torch.float32)
    assert inputs["_image_tokens"] == [391, 391]
    assert inputs["input_ids"].shape[1] == 200 + 2 * (391 + 2)


def test_perception_model_is_released_before_the_reasoning_model_is_built(bench, monkeypatch) -> None:
    """The reasoning model's peak memory must not include the perception model's weights
    (the first H200 run reported 22.0 GiB for a 3B model because the VLM was still held)."""
    import gc
    import weakref

    built: list[weakref.ref] = []
    alive_when_lm_built: list[bool] = []
    build_vlm, build_lm = bench.build_vlm, bench.build_lm

    def tracking_build_vlm(*args, **kwargs):
        model = build_vlm(*args, **kwargs)
        built.append(weakref.ref(model))
        return model

    def tracking_build_lm(*args, **kwargs):
        gc.collect()
        alive_when_lm_built.append(built[0]() is not None)
        return build_lm(*args, **kwargs)

    monkeypatch.setattr(bench, "build_vlm", tracking_build_vlm)
    monkeypatch.setattr(bench, "build_lm", tracking_build_lm)
    assert bench.main(["--tiny"]) == 0
    assert alive_when_lm_built == [False]
