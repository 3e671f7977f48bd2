"""bench/device_benchmarks.sh, the prepared run for a many-core GPU machine: it runs the
real key-frame bench with one table per CPU count, the cache bench and the GPU latency
script (tiny mode here), and copies their output out; it says what to do when PyAV is
missing; and the key-frame bench flags a table whose pinning was not in force."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_keyframes import pinning_warnings

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
SCRIPT = REPO / "bench" / "device_benchmarks.sh"


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
                "CLIPS": str(tmp_path / "clips"), **env}
    return subprocess.run(["bash", str(SCRIPT), *args], env=full_env, capture_output=True,
                          text=True, timeout=600, check=False)


@pytest.mark.slow
def test_runs_the_bench_pinned_to_each_cpu_count_and_keeps_the_tables(tmp_path: Path) -> None:
    cpus = "1 2" if len(os.sched_getaffinity(0)) >= 2 else "1"
    proc = _run(tmp_path, "run", "--minutes", "0.1", "--width", "320", "--height", "240",
                CPUS=cpus, STEPS="keyframes")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    machine = (tmp_path / "out" / "machine.txt").read_text()
    assert "opencv" in machine and "pyav" in machine
    table = (tmp_path / "out" / "keyframes_h264.txt").read_text()
    for n in cpus.split():
        assert f"each run pinned to {n} CPUs" in table
    assert table.count("reference     read all") == len(cpus.split())
    assert "ours          pyav" in table  # the fast path ran, not a fallback
    assert "all implementations agree" in table
    assert "WARNING" not in table
    assert list((tmp_path / "clips").glob("clip_*_h264_320x240.mp4"))


@pytest.mark.slow
def test_the_cache_step_compares_one_process_with_a_pool(tmp_path: Path) -> None:
    proc = _run(tmp_path, "run", STEPS="cache", CACHE_CLIPS="2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = (tmp_path / "out" / "cache_perception.txt").read_text()
    assert "| one process | 1 |" in report and "| process pool |" in report
    assert "identical key frames: True; identical records: True" in report
    assert not (tmp_path / "out" / "keyframes_h264.txt").exists()


@pytest.mark.slow
def test_the_gpu_step_runs_the_latency_script(tmp_path: Path) -> None:
    # --tiny: the same script with tiny configs on the CPU (no GPU here).
    proc = _run(tmp_path, "run", STEPS="gpu", GPU_ARGS="--tiny")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((tmp_path / "out" / "gpu_latency.json").read_text())
    cases = {row["case"] for row in results["rows"]}
    assert {"1 image (frame 0)", "2 images (key frame)", "reasoning"} <= cases
    assert "peak GPU memory" in (tmp_path / "out" / "gpu_latency.txt").read_text()


def test_an_unknown_step_fails(tmp_path: Path) -> None:
    proc = _run(tmp_path, "run", STEPS="nothing")
    assert proc.returncode == 2 and "unknown step nothing" in proc.stderr


def test_without_pyav_or_its_wheel_it_says_how_to_get_one(tmp_path: Path) -> None:
    # A module named av that fails to import stands in for a Python without PyAV.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "av.py").write_text("raise ImportError('no PyAV here')\n")
    proc = _run(tmp_path, "run", WHEELS=str(tmp_path / "no-wheels"),
                PYTHONPATH=f"{shadow}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    assert proc.returncode == 2
    assert "bench/device_benchmarks.sh fetch" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "measure")
    assert proc.returncode == 2 and "usage:" in proc.stderr


def _run_record(cpus_seen: int, cpu_s: float, wall_s: float) -> dict:
    return {"cpus_seen": cpus_seen, "cpu_seconds": cpu_s, "seconds": wall_s}


def test_pinning_warnings() -> None:
    assert pinning_warnings(2, [_run_record(2, 35.0, 18.0), _run_record(2, 70.0, 55.0)]) == []
    # The child saw all 16 CPUs: the mask was not applied.
    seen = pinning_warnings(2, [_run_record(16, 30.0, 16.0)])
    assert len(seen) == 1 and "saw [16] usable CPUs, not 2" in seen[0]
    # The mask was reported but 4 CPUs were busy: not enforced.
    busy = pinning_warnings(2, [_run_record(2, 40.0, 10.0)])
    assert len(busy) == 1 and "not enforced" in busy[0]
