"""The first hour of a new user (issue 25): the commands as the README gives them, run for
real (the `embodied-r` console script in the sourced environment, the installed node
executables, real DDS), and what they print.

- an explicit model argument wins over a model setup, under `embodied-r launch` and under
  the launch file alike, and the node says where each model setting came from;
- `scripts/env.sh` leaves model downloads allowed;
- `bash training/dry_run.sh` works from a fresh shell; documented files exist;
- error codes carry their names; configure errors name the setting; one-line answer logs;
  `embodied-r launch` says when the graph is up and what to do next.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from embodied_r_ros import graph
from embodied_r_ros.core import parameters as cfg

from helpers.env import REPO_ROOT, fresh_ros_domain
from helpers.launch_stand_in import load_launch_file
from helpers.running import Running

REPO = REPO_ROOT
ENV_SH = REPO / "scripts" / "env.sh"


def command(*args: str) -> list[str]:
    """`embodied-r ...` as a user types it: the console script of the sourced environment
    (the module where the script is not installed)."""
    script = shutil.which("embodied-r")
    return [script, *args] if script else [sys.executable, "-m", "embodied_r_ros.cli", *args]


# -- item 1: explicit model arguments win --------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("setup,argument,value", [
    ("remote_vlm", "reasoning_model", "/path/to/lm"),
    ("onboard_small_vlm", "perception_model", "/path/to/vlm"),
])
def test_explicit_model_argument_wins_over_model_setup_in_embodied_r_launch(
        setup: str, argument: str, value: str) -> None:
    fresh_ros_domain()
    group = argument.removesuffix("_model")
    run = Running(command("launch", f"models:={setup}", f"{argument}:={value}"))
    try:
        line = run.wait_for("model settings:", 120)
        assert f"{group}.model={value} (from launch argument {argument}:=)" in line, line
        loading = run.wait_for("loading models:", 5)
        assert f":{value}" in loading, loading
    finally:
        run.stop()


def _launch_ros_arguments(node_kwargs: dict, tmp: Path) -> list[str]:  # type: ignore[type-arg]
    """The `--ros-args` launch_ros gives a LifecycleNode: each parameter file in order, and
    each dict written to a file of its own with flat (dotted) names under `/**`."""
    args = ["--ros-args", "-r", f"__node:={node_kwargs['name']}"]
    for i, entry in enumerate(node_kwargs["parameters"]):
        if isinstance(entry, dict):
            path = tmp / f"launch_params_{i}.yaml"
            path.write_text(yaml.safe_dump({"/**": {"ros__parameters": dict(entry)}}))
            entry = str(path)
        args += ["--params-file", str(entry)]
    return args


PROBE = """
import json, sys
import rclpy
from embodied_r_ros.core import parameters as cfg
rclpy.init(args=sys.argv)
node = rclpy.create_node("probe")
names = [s.name for s in cfg.PARAMETERS if s.name.split(".")[0] in ("perception", "reasoning")]
for spec in cfg.PARAMETERS:
    if spec.name in names or spec.name in ("autostart", "camera.topic"):
        node.declare_parameter(spec.name, spec.default)
print(json.dumps({n: node.get_parameter(n).value for n in names + ["autostart"]}))
rclpy.shutdown()
"""


def _effective(ros_args: list[str]) -> dict:  # type: ignore[type-arg]
    """The parameters rcl resolves from these arguments, read by a real rclpy node."""
    done = subprocess.run([sys.executable, "-c", PROBE, *ros_args], capture_output=True,
                          text=True, timeout=120, env=os.environ.copy())
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_launch_file_and_runner_give_the_same_effective_parameters(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    module = load_launch_file(monkeypatch)
    opaque = module.generate_launch_description().args[0][-1]
    context = {a.name: a.default for a in graph.LAUNCH_ARGUMENTS}
    context.update(models="remote_vlm", reasoning_model="/path/to/lm", autostart="false")
    (launched,) = opaque.kwargs["function"](context)
    runner = graph.graph_launch("embedded", models="remote_vlm", reasoning_model="/path/to/lm",
                                autostart="false")[0]
    with tempfile.TemporaryDirectory() as tmp:
        from_launch_file = _effective(_launch_ros_arguments(launched.kwargs, Path(tmp)))
    from_runner = _effective(graph.ros_arguments(runner))
    assert from_runner["reasoning.model"] == "/path/to/lm"
    assert from_runner["perception.backend"] == "openai"  # the setup still applies
    assert from_runner["autostart"] is False
    assert from_launch_file == from_runner


# -- item 4: downloads allowed after `source scripts/env.sh` -------------------------------
def test_env_sh_leaves_model_downloads_allowed() -> None:
    script = ("unset HF_HUB_OFFLINE TRANSFORMERS_OFFLINE; source scripts/env.sh; "
              "echo \"offline=${HF_HUB_OFFLINE:-unset}\"; python -c '"
              "from embodied_r_ros.core.backends.model_spec import ModelSpec, locate_model\n"
              "print(\"located\", locate_model(ModelSpec(model=\"EmbodiedCity/Embodied-R\")))'")
    done = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "offline=unset" in done.stdout
    # a hub id that is not cached is handed to the hub (downloaded on first use), not refused
    assert "located EmbodiedCity/Embodied-R" in done.stdout


# -- item 5: documented instructions work as written ---------------------------------------
def test_dry_run_sh_runs_from_a_fresh_shell(tmp_path: Path) -> None:
    """A new terminal has neither the venv nor the install space on PATH."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           "DRY_RUN_STOP_AFTER": "tiny-models", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(["bash", str(REPO / "training" / "dry_run.sh"), str(tmp_path / "dry")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "command not found" not in done.stderr
    assert (tmp_path / "dry" / "tiny_models" / "lm" / "config.json").is_file()


def test_documented_model_setups_exist_and_load() -> None:
    readme = (REPO / "README.md").read_text()
    template = REPO / "config" / "models" / "my_models.example.yaml"
    assert template.is_file()
    loaded = cfg.load_parameters([REPO / "config" / "embodied_r.yaml", template])
    assert loaded["reasoning.model"] and loaded["perception.model"]
    if "models:=my_models.yaml" in readme:  # the user's copy is made by a documented step
        assert "cp config/models/my_models.example.yaml my_models.yaml" in readme
    training = (REPO / "training" / "README.md").read_text()
    assert "--num-shards" not in training and "--shard-index" not in training


# -- item 7: outputs a person can read -----------------------------------------------------
@pytest.mark.slow
def test_configure_error_names_the_setting_once() -> None:
    fresh_ros_domain()
    run = Running(command("launch"))  # the shipped parameter file names no model
    try:
        run.proc.wait(timeout=180)
    finally:
        run.stop()
    time.sleep(0.3)
    final = [line for line in run.lines if "[embodied_r_ros]" in line]
    assert final, run.text()[-3000:]
    text = final[-1]
    assert text.count("configure failed") == 1, text
    assert "perception.model" in text and "perception_model:=" in text, text
    assert run.proc.returncode == 1


@pytest.mark.slow
@pytest.mark.models
def test_launch_play_ask_as_documented(tmp_path: Path, tiny_models, sample_dir: Path) -> None:  # type: ignore[no-untyped-def]
    """The README's path on a bare machine: the tiny_cpu setup from the repository root
    (here a folder laid out like it), `embodied-r launch` says when the graph is up,
    `embodied-r play` feeds the sample, `embodied-r ask` answers with the code's name."""
    fresh_ros_domain()
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "tiny_models").symlink_to(Path(tiny_models.vlm).parent)
    run = Running(command("launch", "models:=tiny_cpu", "namespace:=robot7"), cwd=tmp_path)
    try:
        up = run.wait_for("graph is up", 240)
        assert "embodied-r ask" in run.text() and "--namespace robot7" in run.text(), up
        played = subprocess.run(command("play", str(sample_dir / "sample.mcap"), "--rate", "0",
                                        "--wait", "30"), capture_output=True, text=True,
                                timeout=300)
        assert played.returncode == 0, played.stderr[-2000:]
        assert "published 321 frames" in played.stdout
        time.sleep(3)
        asked = subprocess.run(command("ask", "Is the door to my left or right?", "--choice",
                                       "left", "--choice", "right", "--namespace", "robot7",
                                       "--json", "--wait", "30"),
                               capture_output=True, text=True, timeout=400)
        reply = json.loads(asked.stdout)
        from embodied_r_ros.core.errors import ErrorCode

        assert reply["error_name"] == ErrorCode(reply["error_code"]).name
        assert reply["error_name"] != "NO_KEYFRAMES", reply  # the frames arrived
        text_mode = subprocess.run(command("ask", "Is the door to my left or right?",
                                           "--choice", "left", "--choice", "right",
                                           "--namespace", "robot7", "--wait", "30"),
                                   capture_output=True, text=True, timeout=400)
        if text_mode.returncode == 1:
            assert f"failed ({reply['error_name']}, code {reply['error_code']})" in \
                text_mode.stderr or "failed (" in text_mode.stderr
        # the node logs one short line per answer, not the model's whole output
        answer_logs = [line for line in run.lines
                       if "failed with" in line or "answered '" in line]
        assert answer_logs, run.text()[-3000:]
        assert all(len(line) < 400 for line in answer_logs), answer_logs
        assert any("(code " in line for line in answer_logs if "failed with" in line) or \
            all("answered" in line for line in answer_logs)
    finally:
        assert run.stop() == 0, run.text()[-3000:]


def test_grpo_console_leaves_out_library_future_warnings_and_nested_bars(tmp_path: Path) -> None:
    """`embodied-r-train grpo` calls quiet_libraries() first: the libraries' FutureWarning
    notes and their weights-loading / dataset progress bars stay out of the console;
    the project's own warnings stay in."""
    code = (
        "import warnings\n"
        "from embodied_r_training.grpo import quiet_libraries\n"
        "quiet_libraries()\n"
        "warnings.warn_explicit('x will change in v5', FutureWarning, 'trainer.py', 1,"
        " module='transformers.trainer')\n"
        "warnings.warn_explicit('our own note', UserWarning, 'grpo.py', 1,"
        " module='embodied_r_training.grpo')\n"
        "import transformers\n"
        "print('bars', transformers.utils.logging.is_progress_bar_enabled())\n")
    # this checkout's training/ as embodied_r_training, however the package was installed
    (tmp_path / "embodied_r_training").symlink_to(REPO / "training", target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "will change in v5" not in done.stderr
    assert "our own note" in done.stderr
    assert "bars False" in done.stdout
