"""scripts/robot_setup.sh (the apt-ROS robot install) in dry-run mode: no Ubuntu/apt ROS
machine is reachable from here, so the commands it would run are checked instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
SCRIPT = REPO / "scripts" / "robot_setup.sh"


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], env=env, text=True, capture_output=True,
                          timeout=120)


def test_dry_run_pins_numpy_and_uses_a_venv_that_sees_ros(tmp_path: Path) -> None:
    import numpy

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "python3"  # "the system python" of this test: the venv's
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    env = {**os.environ, "DRY_RUN": "1", "ROS_DISTRO": "kilted", "VENV": str(tmp_path / "venv"),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = run(env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"python3 -m venv --system-site-packages {tmp_path / 'venv'}" in out
    assert f"pinning numpy=={numpy.__version__}" in out
    assert f"-e {REPO}[models]" in out and "-m pip install -c " in out
    assert f"-DPython3_EXECUTABLE={tmp_path / 'venv'}/bin/python" in out
    assert "COLCON_IGNORE" in out


def test_refuses_without_a_sourced_ros() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROS_DISTRO"}
    done = run({**env, "DRY_RUN": "1"})
    assert done.returncode == 1 and "source your ROS 2 setup first" in done.stderr
