#!/usr/bin/env python3
"""Point the CMake files shipped in the ROS 2 PyPI wheels at this machine's paths.

The wheels are built in a manylinux container and their exported CMake targets name two
directories that only exist there (the container's Python include dir and numpy's include
dir). CMake configure of any package that generates interfaces fails until those paths
resolve. This rewrites the strings inside the virtual environment's share/*/cmake files,
which needs no root and is idempotent (a second run changes nothing).
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

BAKED_PY_INCLUDE = "/opt/python/cp311-cp311/include/python3.11"
BAKED_NUMPY_INCLUDE = "/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include"


def main() -> int:
    import numpy

    prefix = Path(sys.prefix)
    replacements = {
        BAKED_NUMPY_INCLUDE: numpy.get_include(),
        BAKED_PY_INCLUDE: sysconfig.get_paths()["include"],
    }
    changed = 0
    for path in sorted((prefix / "share").glob("*/cmake/*.cmake")):
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
        new = text
        for old, real in replacements.items():
            new = new.replace(old, real)
        if new != text:
            path.write_text(new, encoding="utf-8", errors="surrogateescape")
            changed += 1
    print(f"fix_ros_wheel_cmake: rewrote {changed} CMake file(s) under {prefix / 'share'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
