"""The documents' commands work as written (issue 25).

Convention: every ```bash block of README.md, training/README.md and docs/*.md is run,
as written, unless it is listed in EXCEPTIONS below with the reason (needs GPU,
downloads, apt ROS, a long job that another test runs, a synopsis with placeholders).
A block whose last command is `embodied-r launch ...` starts the graph and keeps it
running (until the graph says it is up) for the blocks after it in the same file, as a
user's second shell would use it; it is stopped with Ctrl-C (SIGINT) at the end and must
exit 0. The blocks of one file run in order, in one scratch folder laid out like the
repository (config/, scripts/, training/ linked in), so relative paths such as
`artifacts/...` and `scripts/env.sh` resolve as they do for a user in the repository
root, without writing into the checkout. A new block in a document either runs here or
gets an entry below.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from helpers.env import REPO_ROOT, fresh_ros_domain
from helpers.running import Running

REPO = REPO_ROOT
DOCUMENTS = ["README.md", "training/README.md",
             *sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").glob("*.md"))]

# (document, text the block contains) -> why it is not run here
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("README.md", "make demo"):
        "long job (setup + demo 2-5 min, the suite itself): the demo is run by "
        "test_demo_and_replay_eval.py",
    ("README.md", "source /opt/ros/jazzy/setup.bash"):
        "needs apt ROS (a robot); scripts/robot_setup.sh runs in dry-run mode in "
        "test_robot_setup.py",
    ("README.md", "ros2 launch embodied_r_ros embodied_r.launch.py"):
        "needs apt ROS (ros2 launch); the launch file is executed by "
        "test_graph_definition.py and test_first_hour.py",
    ("README.md", "models:=my_models.yaml"):
        "downloads (the template names hub models)",
    ("README.md", "ros2 service call"):
        "needs the ros2 CLI (apt ROS); the embodied-r ask/reset/status lines are run by "
        "test_cli_commands.py",
    ("README.md", "--bag my_run.mcap"):
        "the user's own bag, question file and models; downloads (benchmark videos)",
    ("README.md", "embodied-r keyframes VIDEO"):
        "a synopsis with placeholders; each command has its own tests",
    ("training/README.md", "huggingface-cli download"):
        "downloads and needs GPUs",
    ("training/README.md", "--vsi data/VSI-Bench/test-00000-of-00001.parquet"):
        "needs the downloaded benchmarks (downloads)",
    ("training/README.md", "pip install -e"):
        "downloads (a GPU machine's install)",
    ("training/README.md", "bash training/dry_run.sh artifacts/dry_run"):
        "long job (4-7 min on 2 cores): run by test_training_dry_run.py; "
        "test_first_hour.py runs it from a fresh shell up to its first step",
    ("training/README.md", "embodied-r tiny-models $OUT/tiny_models"):
        "the commands dry_run.sh runs, with $OUT set by the script",
    ("training/README.md", "python -m pytest test/unit/training/test_training_data.py"):
        "the training tests themselves (minutes)",
    ("docs/mini_world.md", "embodied-r-train mini-world --out artifacts/mini_world --ship"):
        "long job (the whole mini-world training, about an hour on 2 cores); its steps are "
        "tested in test_mini_world.py, one GRPO step of its settings in test_mini_world_grpo.py "
        "and the shipped result in test_mini_world_models.py",
    ("docs/mini_world.md", "python -m bench.mini_world_selection sets --run artifacts/mini_world"):
        "needs a finished mini-world run (about an hour) and takes minutes; the same commands "
        "run on a small world in test/unit/bench/test_mini_world_selection.py",
    ("docs/robot_install.md", "sudo apt install"):
        "needs apt ROS on Ubuntu 24.04 (a robot)",
}

# (document, text the block contains) -> (exit code accepted besides 0, why)
EXPECTED_EXIT: dict[tuple[str, str], tuple[int, str]] = {
    ("docs/cli.md", "embodied-r ask"):
        (1, "tiny random models: the answer fails with UNPARSEABLE_ANSWER (exit 1)"),
}

BLOCK = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def bash_blocks(document: str) -> list[str]:
    return [m.group(1) for m in BLOCK.finditer((REPO / document).read_text(encoding="utf-8"))]


def _lookup(table: dict, document: str, block: str):  # type: ignore[no-untyped-def, type-arg]
    for (doc, needle), value in table.items():
        if doc == document and needle in block:
            return value
    return None


def _commands(block: str) -> list[str]:
    """The block's command lines (continuations joined, comments and blanks dropped)."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _scratch(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    root.mkdir()
    for name in ("config", "scripts", "training", "docs", "embodied_r_ros", "launch",
                 "requirements"):
        (root / name).symlink_to(REPO / name, target_is_directory=True)
    return root


def test_every_document_has_its_blocks_run_or_excused() -> None:
    """Lists what is not run, with the reason (pytest -rA shows it)."""
    excused = []
    for document in DOCUMENTS:
        for block in bash_blocks(document):
            reason = _lookup(EXCEPTIONS, document, block)
            if reason:
                excused.append(f"{document}: {_commands(block)[0][:60]!r}: {reason}")
    print("\n".join(excused))
    assert all(reason.strip() for reason in EXCEPTIONS.values())


@pytest.mark.slow
@pytest.mark.parametrize("document", [d for d in DOCUMENTS if bash_blocks(d)])
def test_documented_commands_run_as_written(document: str, tmp_path: Path) -> None:
    runnable = [b for b in bash_blocks(document) if not _lookup(EXCEPTIONS, document, b)]
    if not runnable:
        pytest.skip(f"every bash block of {document} is excused (see EXCEPTIONS)")
    fresh_ros_domain()
    cwd = _scratch(tmp_path)
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    server: Running | None = None
    try:
        for block in runnable:
            commands = _commands(block)
            if commands and commands[-1].lstrip().startswith("embodied-r launch"):
                if server is not None:
                    assert server.stop() == 0, "\n".join(server.lines[-40:])
                before = "\n".join(commands[:-1])
                server = Running(["bash", "-c", f"set -e\n{before}\nexec {commands[-1]}\n"], cwd, env)
                server.wait_for("graph is up", 240)
                continue
            done = subprocess.run(["bash", "-c", "set -e -o pipefail\n" + block], cwd=cwd,
                                  env=env, capture_output=True, text=True, timeout=300)
            allowed = _lookup(EXPECTED_EXIT, document, block)
            ok = {0} | ({allowed[0]} if allowed else set())
            assert done.returncode in ok, (
                f"{document}: block exited {done.returncode}:\n{block}\n--- stdout\n"
                f"{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}")
    finally:
        if server is not None:
            code = server.stop()
            assert code == 0, "\n".join(server.lines[-40:])
