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
