"""`scripts/setup.sh` shows what it is doing: the colcon build reports its start, its progress
and its end, and a settled dependency step says so in one line (issue 25, item 6).

The script runs on a copy of the checkout whose `.venv` holds links to this checkout's
virtual environment (so nothing is downloaded) and its own copy of the stamps without the
colcon stamp: the Python steps are up to date, the colcon build runs for real into the
copy's `.ros_ws`, as on a first set-up."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from helpers.env import REPO_ROOT

VENV = REPO_ROOT / ".venv"


def _checkout_copy(dst: Path) -> Path:
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
    return dst


def test_setup_reports_colcon_progress_and_settled_steps(tmp_path: Path) -> None:
    root = _checkout_copy(tmp_path / "checkout")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "VIRTUAL_ENV")}
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=600)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]
    lines = out.splitlines()
    # Settled steps say so; nothing was reinstalled from the index.
    assert "[setup] Python dependencies up to date" in lines
    assert not any("installing embodied_r_ros" in line for line in lines)
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
    assert (root / ".ros_ws" / "last_build.log").stat().st_size > len(out)
    assert (root / ".ros_ws" / "install" / "embodied_r_ros" / "share" / "embodied_r_ros" / "package.xml").is_file()
    assert lines[-1] == "[setup] done. Use: source scripts/env.sh"


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
