"""Stand-ins for launch / launch_ros, which are not installable here: they record what the
launch file builds, so tests can execute it (the only mock of the launch tests)."""

from __future__ import annotations

import importlib.util
import sys
import types
from typing import Any

import pytest

from helpers.env import REPO_ROOT


def recording_launch_modules() -> dict[str, types.ModuleType]:
    """Minimal stand-ins for launch / launch_ros that record what the launch file builds."""
    launch = types.ModuleType("launch")
    actions = types.ModuleType("launch.actions")
    subs = types.ModuleType("launch.substitutions")
    launch_ros = types.ModuleType("launch_ros")
    ros_actions = types.ModuleType("launch_ros.actions")

    class Record:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.args, self.kwargs = args, kwargs

    class LaunchConfiguration:
        def __init__(self, name: str) -> None:
            self.name = name

        def perform(self, context: dict[str, str]) -> str:
            return context[self.name]

    # setattr: a ModuleType's attributes are not declared (the stub reads them, not writes)
    setattr(launch, "LaunchDescription", Record)
    setattr(actions, "DeclareLaunchArgument", Record)
    setattr(actions, "OpaqueFunction", Record)
    setattr(subs, "LaunchConfiguration", LaunchConfiguration)
    setattr(ros_actions, "LifecycleNode", Record)
    return {"launch": launch, "launch.actions": actions, "launch.substitutions": subs,
            "launch_ros": launch_ros, "launch_ros.actions": ros_actions}


def load_launch_file(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """launch/embodied_r.launch.py executed as `ros2 launch` imports it, over the recording
    stand-ins (put into sys.modules for the test's duration)."""
    for name, module in recording_launch_modules().items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("embodied_r_launch",
                                                  REPO_ROOT / "launch" / "embodied_r.launch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
