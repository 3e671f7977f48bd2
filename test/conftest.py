"""Shared pytest fixtures. Tiny models are built once per test session, locally, with
no download, and loaded by tests through the same code the robot uses."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from helpers.env import REPO_ROOT  # also isolates this session's ROS domain (helpers/env.py)

# The source tree must win over the copy colcon installs, so edits are tested directly.
if str(REPO_ROOT) not in sys.path[:1]:
    sys.path.insert(0, str(REPO_ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_CORES = len(os.sched_getaffinity(0))
_XDIST_WORKERS = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist (`make test` runs one worker per core, up to 4): each worker's torch and
    # OpenMP get their share of the cores. Left at the default (all cores), the idle OpenMP
    # threads of one worker spin on the cores the others need (the suite took 7.5 min on 2
    # cores instead of 5.4 min). Set here, in the controlling process, before the workers
    # start (they inherit it); numprocesses is None without -n.
    workers = getattr(config.option, "numprocesses", None) or _XDIST_WORKERS
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _CORES // int(workers))))


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory):
    """Paths of a tiny Qwen2.5-VL (`.vlm`) and a tiny Qwen2 causal LM (`.lm`)."""
    from embodied_r_ros.testing.tiny_models import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny_models"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test (and the graphs its fixtures start) gets a ROS_HOME of its own, so the
    nodes' key-frame stores (memory.path default: $ROS_HOME/embodied_r/<namespace>.sqlite,
    docs/memory.md) never carry an episode from one test into another. A restart inside
    one test continues its episode, as on a robot."""
    import tempfile

    os.environ["ROS_HOME"] = tempfile.mkdtemp(prefix="ros_home_")


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic sample (bag + questions + scene), made once per session by the same
    command the demo uses."""
    from embodied_r_ros.sample_data.cli import main as make_sample

    out = tmp_path_factory.mktemp("sample")
    assert make_sample([str(out)]) == 0
    return out


# -- markers, from the folder a test lives in ----------------------------------------------
#   unit/  ROS-free logic, one folder per sub-package (test/unit/<sub-package>/)
#   ros/   real rclpy over DDS inside the test process                      -> ros
#   e2e/   the installed executables, node graphs and commands end to end   -> ros, slow
# models: the test loads the tiny transformers models (the `tiny_models` fixture).
# A few unit/ros modules that train or push long loads say `pytestmark = pytest.mark.slow`
# themselves. `make test-quick` runs everything but slow; CI and `make test` run all.
TEST_ROOT = Path(__file__).resolve().parent
FOLDER_MARKERS = {"ros": ("ros",), "e2e": ("ros", "slow")}

# Without the ROS 2 wheels (setup with only the core), the ROS folders are not collected.
if importlib.util.find_spec("rclpy") is None:
    collect_ignore_glob = [f"{folder}/*" for folder in FOLDER_MARKERS]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).resolve().relative_to(TEST_ROOT).parts[0]
        for name in FOLDER_MARKERS.get(folder, ()):
            item.add_marker(getattr(pytest.mark, name))
        if "tiny_models" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.models)
    # Files with slow tests run first: pytest-xdist (--dist loadfile) hands out files in
    # this order, so the long ones start early instead of leaving one worker busy at the end.
    slow_files = {str(item.fspath) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: str(item.fspath) not in slow_files)  # stable: order kept within
