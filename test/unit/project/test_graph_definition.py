"""The one graph definition (embodied_r_ros.graph) and everything that must agree with it:
the installed executables, the scripts, CMakeLists.txt, the launch file, the runner.

launch and launch_ros are not on PyPI, so the launch file is executed here against a small
recording stand-in for those two modules (the only mock in this file): it checks that the
launch file turns the graph definition into LifecycleNode actions with exactly the
arguments the runner passes on the command line.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from embodied_r_ros import graph
from embodied_r_ros.core import parameters as cfg

from helpers.env import REPO_ROOT
from helpers.launch_stand_in import load_launch_file

REPO = REPO_ROOT
PARAMS = REPO / "config" / "embodied_r.yaml"


def test_every_executable_has_a_script_installed_by_cmake() -> None:
    cmake = (REPO / "CMakeLists.txt").read_text()
    programs = re.search(r"install\(PROGRAMS(.*?)DESTINATION", cmake, re.S)
    assert programs is not None
    listed = {Path(p).name for p in programs.group(1).split()}
    assert listed == {spec.executable for spec in graph.EXECUTABLES}
    for spec in graph.EXECUTABLES:
        script = REPO / "scripts" / spec.executable
        assert os.access(script, os.X_OK), script
        assert f'run_executable("{spec.executable}")' in script.read_text()
        module = importlib.import_module(spec.module)
        assert callable(module.main)


def test_installed_executables_are_the_ones_the_runner_starts() -> None:
    for spec in graph.EXECUTABLES:
        path = graph.installed_executable(spec)
        assert path.parent == graph.package_prefix() / "lib" / graph.PACKAGE
        assert path.read_text() == (REPO / "scripts" / spec.executable).read_text(), (
            f"{path} is stale; run make setup")


def test_every_installed_executable_starts_from_the_install_space_alone(tiny_models) -> None:  # type: ignore[no-untyped-def]
    """What a robot runs after `source install/setup.bash`: the install space only (no
    source tree on PYTHONPATH). Every executable must reach the active state (all four
    are started at once, each in a ROS domain of its own)."""
    from helpers.env import fresh_ros_domain

    install = graph.package_prefix()
    base_env = dict(os.environ)
    base_env["PYTHONPATH"] = os.pathsep.join(
        str(p) for p in (install / "lib").glob("python3*/site-packages"))
    where = subprocess.run([sys.executable, "-c", "import embodied_r_ros.nodes.embedded_node as m; "
                            "print(m.__file__)"], env=base_env, cwd="/", text=True,
                           capture_output=True, check=True).stdout.strip()
    assert where.startswith(str(install)), where
    overrides = {"perception.model": str(tiny_models.vlm), "reasoning.model": str(tiny_models.lm),
                 "perception.device": "cpu", "reasoning.device": "cpu"}
    procs: dict[str, subprocess.Popen[str]] = {}
    lines: dict[str, list[str]] = {}
    try:
        for spec in graph.EXECUTABLES:
            launch = graph.graph_launch("split" if spec.name != "embodied_r" else "embedded",
                                        params_file=str(PARAMS), overrides=overrides)
            node = next(n for n in launch if n.spec == spec)
            env = dict(base_env, ROS_DOMAIN_ID=fresh_ros_domain())
            procs[spec.executable] = subprocess.Popen(
                graph.command_line(node), env=env, cwd="/", text=True, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT)
            lines[spec.executable] = []
            assert procs[spec.executable].stdout is not None
            os.set_blocking(procs[spec.executable].stdout.fileno(), False)  # type: ignore[union-attr]

        def active(name: str) -> bool:
            return any(line.rstrip().endswith(": active") for line in lines[name])

        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not all(active(n) for n in procs):
            for name, proc in procs.items():
                chunk = proc.stdout.readline()  # type: ignore[union-attr]
                if chunk:
                    lines[name].append(chunk)
                elif proc.poll() is not None and not active(name):
                    raise AssertionError(f"{name} exited:\n" + "".join(lines[name]))
            time.sleep(0.02)
        for name, proc in procs.items():
            assert proc.poll() is None and active(name), f"{name}:\n" + "".join(lines[name])
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=30)


def test_graph_launch_builds_the_documented_command_lines(tmp_path: Path) -> None:
    share = tmp_path / "share"
    (share / "config" / "models").mkdir(parents=True)
    (share / "config" / "embodied_r.yaml").write_text(PARAMS.read_text())
    (share / "config" / "models" / "remote_vlm.yaml").write_text(
        (REPO / "config" / "models" / "remote_vlm.yaml").read_text())
    launches = graph.graph_launch("split", models="remote_vlm", namespace="/robot1/",
                                  use_sim_time="true", autostart="false",
                                  reasoning_model="/m/lm", camera_topic="/front/image",
                                  share=share)
    assert [n.name for n in launches] == ["keyframe_selector", "perception", "reasoning"]
    first = launches[0]
    assert first.params_files == (str(share / "config" / "embodied_r.yaml"),
                                  str(share / "config" / "models" / "remote_vlm.yaml"))
    assert first.namespace == "robot1"
    assert first.parameters == {"use_sim_time": True, "autostart": False,
                                "reasoning.model": "/m/lm"}
    assert first.remappings == (("/camera/image_raw", "/front/image"),)
    args = graph.ros_arguments(first)
    assert args[:5] == ["--ros-args", "-r", "__node:=keyframe_selector", "-r", "__ns:=/robot1"]
    # explicit values travel in a generated parameter file given last (it wins; see
    # graph.explicit_parameters_file), not as -p after the setup's file
    assert "-p" not in args
    explicit = args[args.index("--params-file", args.index(first.params_files[-1])) + 1]
    assert Path(explicit).name.startswith(graph.EXPLICIT_FILE_PREFIX)
    assert yaml.safe_load(Path(explicit).read_text())["/**"]["ros__parameters"] == {
        "use_sim_time": True, "autostart": False, "reasoning": {"model": "/m/lm"}}
    assert args[-2:] == ["-r", "/camera/image_raw:=/front/image"]
    with pytest.raises(graph.GraphDefinitionError, match="known setups: remote_vlm"):
        graph.graph_launch("embedded", models="nope", share=share)
    with pytest.raises(graph.GraphDefinitionError, match="graph must be one of"):
        graph.graph_launch("triangle", share=share)
    with pytest.raises(graph.GraphDefinitionError, match="does not exist"):
        graph.graph_launch("embedded", params_file=str(tmp_path / "missing.yaml"))
    assert graph.parse_launch_arguments(["graph:=split", "namespace:=r1"]) == {
        "graph": "split", "namespace": "r1"}
    with pytest.raises(graph.GraphDefinitionError, match="unknown launch argument"):
        graph.parse_launch_arguments(["grap:=split"])


@pytest.mark.parametrize("graph_name", sorted(graph.GRAPHS))
def test_launch_file_starts_what_the_runner_starts(monkeypatch, graph_name: str) -> None:  # type: ignore[no-untyped-def]
    module = load_launch_file(monkeypatch)
    description = module.generate_launch_description()
    declared = {a.args[0]: a.kwargs for a in description.args[0][:-1]}
    assert set(declared) == {a.name for a in graph.LAUNCH_ARGUMENTS}
    assert all(d["description"] for d in declared.values())
    opaque = description.args[0][-1]
    context = {a.name: a.default for a in graph.LAUNCH_ARGUMENTS}
    context.update(graph=graph_name, params_file=str(PARAMS), namespace="r2",
                   camera_topic="/cam", perception_model="/m/vlm")
    nodes = opaque.kwargs["function"](context)
    expected = graph.graph_launch(graph_name, params_file=str(PARAMS), namespace="r2",
                                  camera_topic="/cam", perception_model="/m/vlm",
                                  share=graph.share_dir())
    assert [n.kwargs["executable"] for n in nodes] == [e.spec.executable for e in expected]
    for node, launch in zip(nodes, expected):
        assert node.kwargs["package"] == "embodied_r_ros"
        assert node.kwargs["name"] == launch.name and node.kwargs["namespace"] == "r2"
        assert node.kwargs["parameters"] == graph.parameter_files(launch)
        assert node.kwargs["remappings"] == list(launch.remappings)


def test_launch_arguments_documented_in_the_readme() -> None:
    readme = (REPO / "README.md").read_text()
    for argument in graph.LAUNCH_ARGUMENTS:
        assert f"`{argument.name}`" in readme, argument.name
    for setup in (REPO / "config" / "models").glob("*.yaml"):
        assert setup.stem in readme


def _flat(tree: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_model_setups_name_real_parameters() -> None:

    setups = sorted((REPO / "config" / "models").glob("*.yaml"))
    assert {s.stem for s in setups} >= {"paper_72b_3b", "onboard_small_vlm", "remote_vlm"}
    for setup in setups:
        values = _flat(yaml.safe_load(setup.read_text())["/**"]["ros__parameters"])
        assert values and set(values) <= set(cfg.PARAMS_BY_NAME), setup.name
        loaded = cfg.load_parameters([PARAMS, setup])  # validates types and ranges too
        assert all(loaded[name] == value for name, value in values.items()), setup.name
