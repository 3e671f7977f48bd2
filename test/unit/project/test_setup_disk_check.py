"""scripts/setup.sh refuses a first install that the disk cannot hold, before it creates
anything, and says how much space it found, how much it needs and what to do. (A CI run
once failed after 91 s with pip's "No space left on device" half-way through torch.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from helpers.env import REPO_ROOT


def _copy_of_setup(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO_ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    shutil.copytree(REPO_ROOT / "requirements", tmp_path / "requirements")
    return tmp_path / "scripts" / "setup.sh"


def _run_setup(script: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(script)], env={**os.environ, **env}, text=True,
                          capture_output=True, timeout=60)


def _free_gb(path: Path) -> int:
    return shutil.disk_usage(path).free // 1024**3


def test_first_install_stops_before_anything_when_the_disk_is_too_small(tmp_path: Path) -> None:
    script = _copy_of_setup(tmp_path)
    need = _free_gb(tmp_path) + 1000  # more than this disk has
    done = _run_setup(script, EMBODIED_R_SETUP_FREE_GB=str(need))
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"the first install needs about {need} GB" in done.stderr
    found = re.search(r"only (\d+) GB free", done.stderr)
    assert found and abs(int(found.group(1)) - _free_gb(tmp_path)) <= 1, done.stderr
    assert "EMBODIED_R_SKIP_ML=1" in done.stderr
    assert not (tmp_path / ".venv").exists()  # nothing half-made is left behind


def test_the_check_is_skipped_once_installed(tmp_path: Path) -> None:
    """A checkout whose dependencies are installed (the pip stamp exists) is not checked:
    a later run needs no space for torch again. The run goes on past the check (and then
    fails at the venv's missing interpreter, which this copy does not have)."""
    script = _copy_of_setup(tmp_path)
    stamps = tmp_path / ".venv" / ".embodied_r_stamps"
    stamps.mkdir(parents=True)
    (stamps / "pip").write_text("stale\n")
    done = _run_setup(script, EMBODIED_R_SETUP_FREE_GB=str(_free_gb(tmp_path) + 1000),
                      PYTHON="/nonexistent/python3.11")
    assert "first install needs" not in done.stderr
    assert "/nonexistent/python3.11 not found" in done.stderr


def test_a_threshold_that_is_not_a_number_is_named(tmp_path: Path) -> None:
    script = _copy_of_setup(tmp_path)
    done = _run_setup(script, EMBODIED_R_SETUP_FREE_GB="8GB")
    assert done.returncode == 1
    assert "EMBODIED_R_SETUP_FREE_GB must be a whole number of GB (0 = no check), not '8GB'" in done.stderr
    assert not (tmp_path / ".venv").exists()
