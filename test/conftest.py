"""Shared pytest fixtures. Tiny models are built once per test session, locally, with
no download, and loaded by tests through the same code the robot uses."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
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


# DDS isolation: traffic stays on this host, and every graph a test starts gets a domain
# id of its own (`fresh_ros_domain`), so graphs of earlier tests that are still shutting
# down, other pytest-xdist workers or other ROS processes never answer another test's
# questions. Domain ids 1..231 (FastDDS's usable range) are split between the xdist
# workers: worker k of n takes k+1, k+1+n, k+1+2n, ... starting at a place that depends on
# its process id (two sessions side by side rarely start at the same place), and wraps
# around when it has used them all (by then those graphs have long ended).
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_OWN_DOMAINS = list(range(1 + _WORKER % _XDIST_WORKERS, 232, _XDIST_WORKERS))
_DOMAINS = itertools.islice(itertools.cycle(_OWN_DOMAINS), os.getpid() % len(_OWN_DOMAINS), None)


def fresh_ros_domain() -> str:
    """Switch this process (and the children it starts) to a ROS domain id no other test
    of this session is using; rclpy contexts created afterwards use it."""
    os.environ["ROS_DOMAIN_ID"] = str(next(_DOMAINS))
    return os.environ["ROS_DOMAIN_ID"]


fresh_ros_domain()  # a test that does not ask for one still stays in this worker's domains


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test (and the graphs its fixtures start) gets a ROS_HOME of its own, so the
    nodes' key-frame stores (memory.path default: $ROS_HOME/embodied_r/<namespace>.sqlite,
    docs/memory.md) never carry an episode from one test into another. A restart inside
    one test continues its episode, as on a robot."""
    import tempfile

    os.environ["ROS_HOME"] = tempfile.mkdtemp(prefix="ros_home_")
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


@pytest.fixture(scope="session")
def sample_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic sample (bag + questions + scene), made once per session by the same
    command the demo uses."""
    from embodied_r_ros.sample_data.cli import main as make_sample

    out = tmp_path_factory.mktemp("sample")
    assert make_sample([str(out)]) == 0
    return out


# -- markers -------------------------------------------------------------------------------
# ros: needs the ROS 2 wheels (real DDS); models: loads the tiny transformers models;
# slow: starts node graphs, trains, or pushes thousands of frames (`make test-quick`
# runs everything but these; CI and `make test` run all).
SLOW_MODULES = {"test_training_grpo", "test_training_dry_run", "test_memory_bounds",
                "test_model_server_outage", "test_dds_profile", "test_colcon_test"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    sources: dict[str, str] = {}
    for item in items:
        path = Path(str(item.fspath))
        text = sources.setdefault(str(path), path.read_text(encoding="utf-8"))
        if 'importorskip("rclpy"' in text:
            item.add_marker(pytest.mark.ros)
        if "tiny_models" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.models)
        if "GraphProcesses(" in text or "embodied_r(" in text or path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
    # Files with slow tests run first: pytest-xdist (--dist loadfile) hands out files in
    # this order, so the long ones start early instead of leaving one worker busy at the end.
    slow_files = {str(item.fspath) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: str(item.fspath) not in slow_files)  # stable: order kept within
