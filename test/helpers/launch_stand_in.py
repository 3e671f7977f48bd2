"""Stand-ins for launch / launch_ros, which are not installable here: they record what the
launch file builds, so tests can execute it (the only mock of the launch tests)."""

from __future__ import annotations

import types
from typing import Any


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
