"""mypy over every package (config in mypy.ini): embodied_r_ros, embodied_r_training, bench
and the tests' helpers (test/helpers, imported as `helpers`).

    python scripts/typecheck.py [more mypy arguments]

The folder training/ is the package `embodied_r_training` (setup.py's package_dir), and its
modules import each other under that name. mypy names a module after its folder and does not
follow the editable install's import hook, so this script makes a symbolic link
build/mypy_path/embodied_r_training -> training (build/ is ignored by git; mypy.ini puts
build/mypy_path and test/ on mypy's path), checks the packages by name and prints the link's
paths as training/ paths. Exit status is mypy's (0: no errors). `make lint` and
test/unit/project/test_lint.py run it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("embodied_r_ros", "embodied_r_training", "bench", "helpers")
LINK = REPO / "build" / "mypy_path" / "embodied_r_training"
LINK_TARGET = Path("..") / ".." / "training"


def link_training() -> None:
    """Make (or repair) build/mypy_path/embodied_r_training -> training."""
    LINK.parent.mkdir(parents=True, exist_ok=True)
    if LINK.is_symlink() and Path(os.readlink(LINK)) == LINK_TARGET:
        return
    if LINK.is_symlink() or LINK.is_file():
        LINK.unlink()
    LINK.symlink_to(LINK_TARGET, target_is_directory=True)


def main(argv: list[str]) -> int:
    link_training()
    package_args = [arg for name in PACKAGES for arg in ("-p", name)]
    done = subprocess.run([sys.executable, "-m", "mypy", *package_args, *argv], cwd=REPO,
                          capture_output=True, text=True)
    shown = f"{LINK.relative_to(REPO)}/"
    sys.stdout.write(done.stdout.replace(shown, "training/"))
    sys.stderr.write(done.stderr.replace(shown, "training/"))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
