"""Shared pytest fixtures. Tiny models are built once per test session, locally, with
no download, and loaded by tests through the same code the robot uses."""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory):
    """Paths of a tiny Qwen2.5-VL (`.vlm`) and a tiny Qwen2 causal LM (`.lm`)."""
    from embodied_r_ros.core.tiny_models import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny_models"))


# DDS isolation: traffic stays on this host, and every graph a test starts gets a domain
# id of its own (`fresh_ros_domain`), so graphs of earlier tests that are still shutting
# down, parallel runs or other ROS processes never answer another test's questions.
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
_DOMAINS = iter(range(1 + os.getpid() % 50, 232))


def fresh_ros_domain() -> str:
    """Switch this process (and the children it starts) to an unused ROS domain id; rclpy
    contexts created afterwards use it."""
    os.environ["ROS_DOMAIN_ID"] = str(next(_DOMAINS))
    return os.environ["ROS_DOMAIN_ID"]
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
