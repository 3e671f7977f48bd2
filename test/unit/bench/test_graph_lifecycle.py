"""bench/bench_graph_lifecycle.py, as docs/benchmarks.md runs it but one short round: the
installed embedded graph starts, serves, and stops cleanly (exit code 0 from every node)
within the bench, and the figures it writes are the ones it measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.env import REPO_ROOT, fresh_ros_domain

pytestmark = [pytest.mark.ros, pytest.mark.models, pytest.mark.slow]


def test_one_round_of_the_embedded_graph(tmp_path: Path) -> None:
    fresh_ros_domain()
    out = tmp_path / "lifecycle.json"
    done = subprocess.run([sys.executable, "-m", "bench.bench_graph_lifecycle", "--graphs", "embedded",
                           "--rounds", "1", "--settle", "1", "--artifacts", str(tmp_path),
                           "--json", str(out)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert list(figures) == ["embedded"] and len(figures["embedded"]) == 1
    row = figures["embedded"][0]
    # A node that loads models uses seconds of CPU (imports); a clean stop takes two or
    # three seconds (the reply linger, releasing the models); the generous bound only
    # catches a stop that hangs until GraphProcesses kills the nodes (10 s).
    assert row["cpu_s"] > 1.0 and 0 < row["up_s"] < 240 and 0 < row["stop_s"] < 10.0, row
    assert f"embedded: median CPU {row['cpu_s']:.1f} s, stop {row['stop_s']:.1f} s" in done.stdout


def test_rounds_must_be_positive() -> None:
    done = subprocess.run([sys.executable, "-m", "bench.bench_graph_lifecycle", "--rounds", "0"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--rounds must be at least 1" in done.stderr
