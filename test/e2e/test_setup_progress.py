"""`scripts/setup.sh` shows what it is doing: the colcon build reports its start, its progress
and its end, and a settled dependency step says so in one line (issue 25, item 6).

The script runs on a copy of the checkout whose `.venv` holds links to this checkout's
virtual environment (so nothing is downloaded) and its own copy of the stamps: the Python
steps are up to date. The colcon build's lines are checked on a real first build by this
very script: when this checkout's last build was a first build by the current
`scripts/setup.sh` (its `.ros_ws/last_setup_build.log` says so beside the script's hash;
in CI, `make test` has just built), the copy also gets the colcon stamp, its set-up must
say the build is up to date, and the recorded lines of that build are checked; otherwise
the copy builds for real into its own `.ros_ws` (about 100 s) and its own lines are
checked."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from helpers.env import REPO_ROOT

VENV = REPO_ROOT / ".venv"


RECORD = REPO_ROOT / ".ros_ws" / "last_setup_build.log"
INSTALLED_MARKER = Path(".ros_ws") / "install" / "embodied_r_ros" / "share" / "embodied_r_ros" / "package.xml"


def _script_hash() -> str:
    """The hash setup.sh writes on its record's first line (`hash_of`: sha256, 16 digits)."""
    return hashlib.sha256((REPO_ROOT / "scripts" / "setup.sh").read_bytes()).hexdigest()[:16]


def _recorded_build() -> list[str] | None:
    """The console lines of this checkout's last colcon build, if it was a first build (an
    empty workspace) by the current script."""
    if not RECORD.is_file() or not (REPO_ROOT / INSTALLED_MARKER).is_file():
        return None
    first, *lines = RECORD.read_text().splitlines() or [""]
    return lines if first == f"setup.sh {_script_hash()} first build" else None


def _checkout_copy(dst: Path, with_colcon_stamp: bool) -> Path:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src = REPO_ROOT / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    venv = dst / ".venv"
    venv.mkdir()
    for entry in VENV.iterdir():
        if entry.name != ".embodied_r_stamps":
            (venv / entry.name).symlink_to(entry)
    stamps = venv / ".embodied_r_stamps"
    stamps.mkdir()
    for name in ("pip", "editable"):
        shutil.copy2(VENV / ".embodied_r_stamps" / name, stamps / name)
    if with_colcon_stamp:
        shutil.copy2(VENV / ".embodied_r_stamps" / "colcon", stamps / "colcon")
        (dst / INSTALLED_MARKER).parent.mkdir(parents=True)
        shutil.copy2(REPO_ROOT / INSTALLED_MARKER, dst / INSTALLED_MARKER)
    return dst


def test_setup_reports_colcon_progress_and_settled_steps(tmp_path: Path) -> None:
    recorded = _recorded_build()
    root = _checkout_copy(tmp_path / "checkout", with_colcon_stamp=recorded is not None)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "VIRTUAL_ENV")}
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    lines = out.splitlines()
    # Settled steps say so; nothing was reinstalled from the index.
    assert "[setup] Python dependencies up to date" in lines
    assert not any("installing embodied_r_ros" in line for line in lines)
    assert lines[-1] == "[setup] done. Use: source scripts/env.sh"
    built_here = any(line.startswith("[setup] building the ROS 2 package") for line in lines)
    workspace = root / ".ros_ws"
    if recorded is not None and not built_here:
        # The copy's sources are the checkout's: its stamp matched and nothing was rebuilt;
        # the lines to check are those of the checkout's own build by this script.
        assert "[setup] ROS 2 package build up to date" in lines, out
        out, lines, workspace = "\n".join(recorded), recorded, REPO_ROOT / ".ros_ws"
    else:
        # Built here: the copy keeps the record of its build step (every line from the
        # build's first to the one before "done"), after the script's hash.
        first = next(n for n, line in enumerate(lines) if line.startswith("[setup] building the ROS 2 package"))
        record = (root / ".ros_ws" / "last_setup_build.log").read_text().splitlines()
        assert record == [f"setup.sh {_script_hash()} first build", *lines[first:-1]], record
    # The colcon step: what it builds and how long it takes, then colcon's own events.
    assert any(line.startswith("[setup] building the ROS 2 package with colcon") for line in lines)
    assert any(re.match(r"\[setup\]   about \d+-\d+ s on 2 cores", line) for line in lines), out
    assert "[setup] colcon: Starting >>> embodied_r_ros" in lines, out
    assert any(line.startswith("[setup] colcon: Finished <<< embodied_r_ros") for line in lines), out
    # Progress in steps of at least 10 %, rising, each with the seconds spent so far.
    steps = [(int(m.group(1)), int(m.group(2))) for line in lines
             if (m := re.fullmatch(r"\[setup\] colcon: build +(\d+)% \((\d+) s\)", line))]
    assert len(steps) >= 3, out
    assert [p for p, _ in steps] == sorted(p for p, _ in steps) and steps[-1][0] >= 90
    assert all(b - a >= 10 for (a, _), (b, _) in zip(steps, steps[1:]))
    # The build's full output is kept, the console shows only the summary lines.
    assert (workspace / "last_build.log").stat().st_size > len(out)
    assert (workspace.parent / INSTALLED_MARKER).is_file()


def test_first_run_announces_the_download_size_before_pip_runs() -> None:
    """The first-run branch (a bare machine) cannot run here without downloading 3.5 GB; the
    script's own text is checked: the size estimate is logged before pip starts, and pip
    runs with its progress bar (not -q) for that step."""
    text = (REPO_ROOT / "scripts" / "setup.sh").read_text()
    estimate = text.index("first run: about 3.5 GB to download")
    pip_step = text.index('"${PIP_SHOWN[@]}" "${args[@]}"')
    assert estimate < pip_step
    shown = re.search(r"PIP_SHOWN=\((.*)\)", text)
    assert shown is not None and "--progress-bar on" in shown.group(1) and "--quiet" not in shown.group(1)
