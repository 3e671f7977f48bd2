"""Style and type checks, run with the suite (and so in CI): ruff over the tree (config in
ruff.toml); mypy over the ROS-free core and over every package (scripts/typecheck.py:
embodied_r_ros, embodied_r_training, bench, the tests' helpers; config in mypy.ini); no bare
`type: ignore` anywhere."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.env import REPO_ROOT

REPO = REPO_ROOT
# The folders holding the project's Python sources.
SOURCE_FOLDERS = ("embodied_r_ros", "training", "bench", "test", "scripts", "launch")


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    assert Path(path).exists(), f"{name} is not installed (requirements/test.txt)"
    return path


def test_ruff_is_clean() -> None:
    done = subprocess.run([_tool("ruff"), "check", "."], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_is_clean_on_the_core() -> None:
    done = subprocess.run([_tool("mypy"), "embodied_r_ros/core"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_is_clean_on_every_package() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "typecheck.py")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_every_type_ignore_names_its_error_code() -> None:
    """mypy flags those in the packages it checks (ignore-without-code); this covers the
    rest of the Python sources too (the tests, scripts, launch files)."""
    bare = re.compile(r"#\s*type:\s*ignore(?!\[)")
    sources = [REPO / "setup.py", *(path for folder in SOURCE_FOLDERS
                                    for path in sorted((REPO / folder).rglob("*.py")))]
    found = [f"{path.relative_to(REPO)}:{n}" for path in sources
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if bare.search(line)]
    assert not found, f"bare `type: ignore` (name the error code): {found}"


def test_no_more_type_ignores_than_recorded() -> None:
    """The count of `type: ignore` and `noqa` comments in the core may only go down."""
    text = "".join(p.read_text() for p in (REPO / "embodied_r_ros" / "core").rglob("*.py"))
    ignores = text.count("type: ignore") + text.count("noqa")
    assert ignores <= CORE_IGNORES, f"{ignores} ignores in core/ (limit {CORE_IGNORES})"


# The count when the checks were introduced; lower it when ignores are removed.
CORE_IGNORES = 35
