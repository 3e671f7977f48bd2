"""The device run's new steps (bench/device_benchmarks.sh STEPS=decoding / robot_rate),
run here in their --tiny CPU mode: each writes its JSON and text next to the others, and
the decoding bench reports every option with greedy texts equal to the plain path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "bench" / "device_benchmarks.sh"


def _run(tmp_path: Path, tiny_models: Any, **env: str) -> subprocess.CompletedProcess[str]:
    # The tiny folders of this session are reused (bench/random_models.py looks in workdir).
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "tiny_models").symlink_to(Path(tiny_models.vlm).parent)
    full_env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"), **env}
    for key in ("DECODING_ARGS", "RATE_ARGS"):
        if key in full_env:
            full_env[key] += f" --workdir {workdir}"
    return subprocess.run(["bash", str(SCRIPT), "run"], env=full_env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.models
@pytest.mark.slow
def test_decoding_and_robot_rate_steps_in_tiny_mode(tmp_path: Path, tiny_models: Any) -> None:
    proc = _run(tmp_path, tiny_models, STEPS="decoding robot_rate",
                DECODING_ARGS="--tiny --repeats 1 --lm-new-tokens 6 --vlm-new-tokens 4 "
                              "--lm-frames 3 --batches 1 2 --reasoning-options plain lookup "
                              "--perception-options plain",
                RATE_ARGS="--tiny --duration 1 --interval 0.1 --question-every 0.5 "
                          "--vlm-new-tokens 4 --lm-new-tokens 6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = tmp_path / "out"
    assert "torch" in (out / "machine.txt").read_text()
    speed = json.loads((out / "decoding_speed.json").read_text())
    rows = {(r["model"], r["option"], r["batch"]): r for r in speed["rows"]}
    assert set(rows) == {("reasoning", "plain", 1), ("reasoning", "lookup", 1),
                         ("perception", "plain", 1),
                         ("perception", "batched (plain)", 1),
                         ("perception", "batched (plain)", 2)}
    assert all(r["identical"] in (True, None) for r in speed["rows"])
    assert rows[("reasoning", "lookup", 1)]["identical"] is True
    assert "batched perception vs one at a time: batch 2:" in (
        out / "decoding_speed.txt").read_text()
    rate = json.loads((out / "robot_rate.json").read_text())
    assert rate["offered"] == 10 and rate["settings"]["interval"] == 0.1
    assert "key frames: offered 10" in (out / "robot_rate.txt").read_text()


def test_gpu_steps_do_not_need_pyav(tmp_path: Path) -> None:
    # A module named av that fails to import stands in for a GPU machine without PyAV;
    # an unknown step makes the run stop right after the check.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "av.py").write_text("raise ImportError('no PyAV here')\n")
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "WHEELS": str(tmp_path / "none"), "STEPS": "nothing",
           "PYTHONPATH": f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(["bash", str(SCRIPT), "run"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "unknown step nothing" in proc.stderr
    assert "pyav missing" in (tmp_path / "out" / "machine.txt").read_text()
