"""`colcon test` runs this pytest suite (ament_cmake_pytest), as ROS developers expect.
Here it runs one small test of the suite through colcon, to keep the time down."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from helpers.env import REPO_ROOT

pytestmark = pytest.mark.slow  # trains, builds or pushes long loads

REPO = REPO_ROOT
WS = REPO / ".ros_ws"


@pytest.mark.skipif(not (WS / "src").exists(), reason="needs the colcon workspace (make setup)")
def test_colcon_test_runs_the_pytest_suite(tmp_path: Path) -> None:
    # `make setup` builds the workspace with BUILD_TESTING=ON; `colcon test` runs ctest on
    # that build as it is (nothing is rebuilt or reinstalled, so tests running beside this
    # one keep a stable install space). Logs go to a folder of this test's own.
    env = dict(os.environ, PYTEST_ADDOPTS="-k test_every_interface_file_is_built -p no:cacheprovider")
    run = subprocess.run(["colcon", "--log-base", str(tmp_path / "log"), "test", "--base-paths", "src",
                          "--packages-select", "embodied_r_ros", "--event-handlers",
                          "console_direct+"], cwd=WS, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "1 passed" in run.stdout and "100% tests passed" in run.stdout, run.stdout[-3000:]
