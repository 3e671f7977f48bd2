"""Model settings of a node: a checked ModelSpec whose errors name the setting, and where
each model setting came from (default, a parameter file, a launch argument).

ROS-free: the sources are read from the node's own command line (`--params-file` and
`-p` after `--ros-args`, in order, a later one winning), which is what `ros2 launch`,
`ros2 run` and `embodied-r launch` pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core import parameters as cfg
from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.settings import ModelSettings, Settings

# The generated file holding a launch's explicit parameters (embodied_r_ros.graph).
EXPLICIT_FILE_PREFIX = "embodied_r_launch_args_"
# parameter -> the launch argument / command option that sets it directly
DIRECT_ARGUMENTS = {"perception.model": "perception_model:=", "reasoning.model": "reasoning_model:="}
SHOWN_KEYS = ("backend", "model", "base_url")


def model_spec(settings: Settings, group: str) -> Any:
    """The validated ModelSpec of 'perception' or 'reasoning'. A bad value raises
    ConfigError naming the parameter, its value and how to set it."""
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    model: ModelSettings = getattr(settings, group)
    try:
        return ModelSpec.from_dict(model.spec_dict())
    except ConfigError as exc:
        text = str(exc)
        key = text.split(":", 1)[0] if ":" in text else ""
        name = f"{group}.{key}" if key else f"{group} model"
        detail = text.split(":", 1)[1].strip() if key else text
        value = getattr(model, key, "") if key else ""
        how = (f"set it with the launch argument {group}_model:=HUB_ID_OR_FOLDER, a models:= "
               f"setup or the params_file (`embodied-r demo` and `replay-eval` take "
               f"--{group}-model)" if key == "model" else
               f"set {name} in the models:= setup or the params_file")
        raise ConfigError(f"{name} = {value!r}: {detail}; {how}") from exc


def _describe_file(path: str, name: str) -> str:
    if Path(path).name.startswith(EXPLICIT_FILE_PREFIX):
        direct = DIRECT_ARGUMENTS.get(name)
        return f"launch argument {direct}" if direct else "launch override"
    marker = "/share/embodied_r_ros/"
    if marker in path:  # a file the package ships: say which, not where it is installed
        return "package " + path.split(marker, 1)[1]
    return path


def parameter_sources(argv: Sequence[str], names: Iterable[str],
                      node_name: str | None = None) -> dict[str, str]:
    """For each name, where its value came from: "default", a parameter file's path,
    "launch argument reasoning_model:=" (the generated file of explicit launch
    parameters) or "-p on the command line"."""
    wanted = list(names)
    sources = {name: "default" for name in wanted}
    in_ros_args = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--ros-args":
            in_ros_args = True
        elif arg == "--":
            in_ros_args = False
        elif in_ros_args and arg == "--params-file" and i + 1 < len(argv):
            path = argv[i + 1]
            i += 1
            try:
                values = cfg.read_parameter_file(Path(path), node_name)
            except ConfigError:
                continue
            for name in wanted:
                if name in values:
                    sources[name] = _describe_file(path, name)
        elif in_ros_args and arg in {"-p", "--param"} and i + 1 < len(argv):
            rule = argv[i + 1].split(":=", 1)[0]
            i += 1
            name = rule.rsplit(":", 1)[-1]  # "node:name" rules name their node first
            if name in sources:
                sources[name] = "-p on the command line"
        i += 1
    return sources


def model_settings_line(settings: Settings, groups: Iterable[str],
                        argv: Sequence[str], node_name: str | None = None) -> str:
    """One log line: each model setting's value and where it came from."""
    shown: dict[str, Any] = {}
    for group in groups:
        model: ModelSettings = getattr(settings, group)
        for key in SHOWN_KEYS:
            if key != "base_url" or model.backend == "openai":
                shown[f"{group}.{key}"] = getattr(model, key)
    sources = parameter_sources(argv, list(shown), node_name)
    return "model settings: " + "; ".join(
        f"{name}={value or '<unset>'} (from {sources[name]})" for name, value in shown.items())
