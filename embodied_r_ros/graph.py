"""The node graph of embodied_r_ros, defined once.

Which executables run, under which node names, with which parameter files, overrides
and remappings: `launch/embodied_r.launch.py` turns `graph_launch(...)` into launch_ros
`Node` actions, and `embodied_r_ros.graph_processes` (used where `ros2 launch` is not
installed: CI, the demo, the tests) starts the same installed executables with the same
command-line arguments `ros2 launch` would pass. Nothing here imports rclpy or launch.

Graphs:
  embedded  one process, `embodied_r_node` (models loaded once; the default)
  split     `keyframe_node` -> `perception_node` -> `reasoning_node`, three processes

Launch arguments (the same names for `ros2 launch` and `embodied-r launch`):
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from embodied_r_ros.core.model_settings import EXPLICIT_FILE_PREFIX

PACKAGE = "embodied_r_ros"


@dataclass(frozen=True)
class NodeSpec:
    """One node of a graph: the installed executable, its default name, and the Python
    module whose `main()` the executable runs (scripts/<executable>)."""

    executable: str
    name: str
    module: str


GRAPHS: dict[str, tuple[NodeSpec, ...]] = {
    "embedded": (NodeSpec("embodied_r_node", "embodied_r", "embodied_r_ros.nodes.embedded_node"),),
    "split": (
        NodeSpec("keyframe_node", "keyframe_selector", "embodied_r_ros.nodes.keyframe_node"),
        NodeSpec("perception_node", "perception", "embodied_r_ros.nodes.perception_node"),
        NodeSpec("reasoning_node", "reasoning", "embodied_r_ros.nodes.reasoning_node"),
    ),
}

EXECUTABLES: tuple[NodeSpec, ...] = tuple(spec for specs in GRAPHS.values() for spec in specs)


@dataclass(frozen=True)
class LaunchArgument:
    name: str
    default: str
    description: str


LAUNCH_ARGUMENTS: tuple[LaunchArgument, ...] = (
    LaunchArgument("graph", "embedded",
                   "embedded (one process, models loaded once) or split (keyframe_node, "
                   "perception_node and reasoning_node as three processes)"),
    LaunchArgument("params_file", "",
                   "ROS 2 parameter file for every node (default: the package's "
                   "config/embodied_r.yaml)"),
    LaunchArgument("models", "",
                   "model setup applied on top of params_file: a file name under the "
                   "package's config/models/ (paper_72b_3b, onboard_small_vlm, remote_vlm, "
                   "tiny_cpu) or a path to a parameter file of your own (template: "
                   "config/models/my_models.example.yaml); explicit perception_model / "
                   "reasoning_model arguments win over it"),
    LaunchArgument("namespace", "", "ROS namespace of every node (e.g. robot1)"),
    LaunchArgument("use_sim_time", "false", "use the /clock topic (simulation, bag replay)"),
    LaunchArgument("autostart", "true",
                   "configure and activate the lifecycle nodes by themselves; false when a "
                   "lifecycle manager drives them"),
    LaunchArgument("perception_model", "", "VLM id or path (overrides perception.model)"),
    LaunchArgument("reasoning_model", "", "reasoning LM id or path (overrides reasoning.model)"),
    LaunchArgument("camera_topic", "",
                   "remap the camera topic (the camera.topic parameter) to this topic"),
)

__doc__ += "\n".join(f"  {a.name:16s} {a.description} (default {a.default!r})"
                     for a in LAUNCH_ARGUMENTS) + "\n"

# launch argument -> parameter it overrides when non-empty
MODEL_OVERRIDES = {"perception_model": "perception.model", "reasoning_model": "reasoning.model"}

# Name prefix of the generated parameter file that carries a launch's explicit parameters
# (see `explicit_parameters_file`); the nodes recognise it when they log where a setting
# came from.


@dataclass(frozen=True)
class NodeLaunch:
    """Everything needed to start one node, whoever starts it."""

    spec: NodeSpec
    name: str
    namespace: str
    params_files: tuple[str, ...]
    parameters: dict[str, Any] = field(default_factory=dict)
    remappings: tuple[tuple[str, str], ...] = ()


class GraphDefinitionError(ValueError):
    """A launch argument is invalid (unknown graph, missing parameter file, ...)."""


def _truthy(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"true", "1", "yes", "on"}:
        return True
    if text in {"false", "0", "no", "off", ""}:
        return False
    raise GraphDefinitionError(f"expected true or false, got {value!r}")


def prefixes() -> list[Path]:
    """Install prefixes on AMENT_PREFIX_PATH, in order (what `ros2 run` searches)."""
    return [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]


def package_prefix() -> Path:
    """The install prefix holding this package (the ament resource index marker)."""
    for prefix in prefixes():
        if (prefix / "share" / "ament_index" / "resource_index" / "packages" / PACKAGE).exists():
            return prefix
    raise GraphDefinitionError(
        f"{PACKAGE} is not installed in any prefix on AMENT_PREFIX_PATH "
        f"({os.environ.get('AMENT_PREFIX_PATH', '') or 'unset'}); build it with colcon "
        "(`make setup` here) and source the install space (`source scripts/env.sh` or "
        "`source install/setup.bash`)")


def share_dir() -> Path:
    return package_prefix() / "share" / PACKAGE


def installed_executable(spec: NodeSpec) -> Path:
    """`<prefix>/lib/embodied_r_ros/<executable>`: the file `ros2 run` starts."""
    path = package_prefix() / "lib" / PACKAGE / spec.executable
    if not path.is_file() or not os.access(path, os.X_OK):
        raise GraphDefinitionError(f"installed executable {path} is missing or not "
                                   "executable; rebuild the package with colcon")
    return path


def _is_path(models: str) -> bool:
    return Path(models).suffix in {".yaml", ".yml"} or os.sep in models


def resolve_models(models: str, share: Path | None) -> str:
    """The parameter file of a model setup: a path, or a name under config/models/."""
    if not models:
        return ""
    path = Path(models)
    if _is_path(models):
        candidates = [path]
    else:
        candidates = [(share or Path()) / "config" / "models" / f"{models}.yaml"]
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    known = sorted(p.stem for p in ((share or Path()) / "config" / "models").glob("*.yaml"))
    raise GraphDefinitionError(f"model setup {models!r} not found (tried "
                               f"{', '.join(map(str, candidates))}); known setups: "
                               f"{', '.join(known) or 'none'}")


def graph_launch(graph: str = "embedded", *, params_file: str = "", models: str = "",
                 namespace: str = "", use_sim_time: str | bool = False,
                 autostart: str | bool = True, perception_model: str = "",
                 reasoning_model: str = "", camera_topic: str = "",
                 overrides: Mapping[str, Any] | None = None,
                 share: Path | None = None) -> list[NodeLaunch]:
    """The nodes to start for these launch arguments (see the module docstring).

    `overrides` are extra parameters (dotted names) applied last, after the model
    arguments. `share` is the package share directory (found on AMENT_PREFIX_PATH when
    not given), used for the default parameter file and named model setups.
    """
    if graph not in GRAPHS:
        raise GraphDefinitionError(f"graph must be one of {', '.join(GRAPHS)}, not {graph!r}")
    if share is None and (not params_file or (models and not _is_path(models))):
        share = share_dir()
    files = [params_file or str(Path(share or ".") / "config" / "embodied_r.yaml")]
    models_file = resolve_models(models, share)
    if models_file:
        files.append(models_file)
    for path in files:
        if not Path(path).is_file():
            raise GraphDefinitionError(f"parameter file {path} does not exist")
    parameters: dict[str, Any] = {"use_sim_time": _truthy(use_sim_time),
                                  "autostart": _truthy(autostart)}
    for arg, value in (("perception_model", perception_model),
                       ("reasoning_model", reasoning_model)):
        if value:
            parameters[MODEL_OVERRIDES[arg]] = value
    parameters.update(overrides or {})
    remappings: tuple[tuple[str, str], ...] = ()
    if camera_topic:
        from embodied_r_ros.core.settings import load_settings

        merged = {k: v for k, v in parameters.items() if k != "use_sim_time"}
        topic = load_settings(files, overrides=merged).camera.topic
        remappings = ((topic, camera_topic),)
    ns = namespace.strip("/")
    return [NodeLaunch(spec, spec.name, ns, tuple(files), dict(parameters), remappings)
            for spec in GRAPHS[graph]]


def nest_parameters(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted names -> the nested mapping of a parameter file ("a.b": 1 -> {"a": {"b": 1}})."""
    nested: dict[str, Any] = {}
    for name, value in parameters.items():
        *groups, leaf = name.split(".")
        level = nested
        for group in groups:
            level = level.setdefault(group, {})
        level[leaf] = value
    return nested


def explicit_parameters_file(parameters: Mapping[str, Any],
                             directory: str | Path | None = None) -> str:
    """Write a launch's explicit parameters (model arguments, overrides, use_sim_time,
    autostart) as a ROS 2 parameter file, in nested form, and return its path.

    They are given to the node as its LAST `--params-file`, so they win over params_file
    and the models setup. Passing them as `-p name:=value` after two parameter files that
    both set the name does not work: rcl then keeps the second file's value (seen with
    the Kilted wheels: `--params-file a.yaml --params-file b.yaml -p x:=c` gives b's x),
    which silently ignored `reasoning_model:=` under `models:=remote_vlm`. A later file in
    nested form does win. The file name is derived from its content, in the temporary
    directory, so repeated launches reuse one file.
    """
    import yaml

    body = yaml.safe_dump({"/**": {"ros__parameters": nest_parameters(parameters)}},
                          sort_keys=True, default_flow_style=False)
    text = ("# Explicit parameters of an embodied_r_ros launch (launch arguments and\n"
            "# overrides), generated by embodied_r_ros.graph; given last, so they win.\n" + body)
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    path = Path(directory or tempfile.gettempdir()) / f"{EXPLICIT_FILE_PREFIX}{digest}.yaml"
    if not (path.is_file() and path.read_text(encoding="utf-8") == text):
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return str(path)


def parameter_files(launch: NodeLaunch) -> list[str]:
    """Every parameter file of a node, in the order they apply (a later one wins):
    params_file, the models setup, then the launch's explicit parameters."""
    files = list(launch.params_files)
    if launch.parameters:
        files.append(explicit_parameters_file(launch.parameters))
    return files


def ros_arguments(launch: NodeLaunch) -> list[str]:
    """The `--ros-args ...` part of the command line, as `ros2 launch` builds it."""
    args = ["--ros-args", "-r", f"__node:={launch.name}"]
    if launch.namespace:
        args += ["-r", f"__ns:=/{launch.namespace}"]
    for path in parameter_files(launch):
        args += ["--params-file", path]
    for source, target in launch.remappings:
        args += ["-r", f"{source}:={target}"]
    return args


def command_line(launch: NodeLaunch) -> list[str]:
    """The installed executable plus its ROS arguments."""
    return [str(installed_executable(launch.spec)), *ros_arguments(launch)]


def parse_launch_arguments(argv: Sequence[str]) -> dict[str, str]:
    """`name:=value` pairs (the `ros2 launch` syntax) -> dict; unknown names are errors."""
    known = {a.name for a in LAUNCH_ARGUMENTS}
    out: dict[str, str] = {}
    for item in argv:
        if ":=" not in item:
            raise GraphDefinitionError(f"launch arguments look like name:=value, got {item!r}")
        name, value = item.split(":=", 1)
        if name not in known:
            raise GraphDefinitionError(f"unknown launch argument {name!r}; known: "
                                       f"{', '.join(sorted(known))}")
        out[name] = value
    return out


def run_executable(executable: str, args: list[str] | None = None) -> NoReturn:
    """Entry point of the installed scripts: run the `main()` of the node module the
    graph definition names for `executable`, then end the process with its exit code.

    By then the node has shut down (questions answered or cancelled, models released, the
    ROS context closed), so the process ends at once: output is flushed and the atexit
    handlers run, but the interpreter's own teardown is skipped. That teardown garbage-
    collects every object torch and transformers made and took 2-3 s of CPU at each
    stop of a model-loading node."""
    import atexit
    import importlib
    import sys

    for spec in EXECUTABLES:
        if spec.executable == executable:
            module = importlib.import_module(spec.module)
            code = int(module.main(args if args is not None else sys.argv) or 0)
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    raise SystemExit(f"{executable}: not an embodied_r_ros executable "
                     f"({', '.join(s.executable for s in EXECUTABLES)})")
