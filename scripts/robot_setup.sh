#!/usr/bin/env bash
# Set up embodied_r_ros on a robot with ROS 2 installed from apt (Ubuntu 24.04 + Jazzy,
# or Kilted), in a ROS 2 workspace:
#
#   source /opt/ros/jazzy/setup.bash
#   cd ~/ros2_ws/src && git clone <this repository> embodied_r_ros
#   bash embodied_r_ros/scripts/robot_setup.sh            # venv + models + colcon build
#   source ~/ros2_ws/install/setup.bash && source ~/ros2_ws/.venv/bin/activate
#   ros2 launch embodied_r_ros embodied_r.launch.py models:=onboard_small_vlm
#
# Why a virtual environment: Ubuntu 24.04 refuses `pip install` into the system Python
# (PEP 668), and the ROS Python packages (rclpy, generated messages, cv_bridge) are
# compiled against the system numpy: a pip-installed numpy 2.x breaks them. So the venv
# is created with --system-site-packages (it sees rclpy, cv_bridge, launch_ros from apt)
# and numpy is pinned to the system's version; torch/transformers go into the venv.
#
# Environment (all optional):
#   VENV=<dir>            the virtual environment (default <workspace>/.venv)
#   EXTRAS=models|vllm    what to install besides the core (default models)
#   TORCH_INDEX_URL=<url> where torch comes from (Jetson: NVIDIA's wheel index, see
#                         docs/robot_install.md); default PyPI
#   DRY_RUN=1             print the commands instead of running them
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
workspace="$(cd "$here/../.." && pwd)"
VENV="${VENV:-$workspace/.venv}"
EXTRAS="${EXTRAS:-models}"
run() { if [ "${DRY_RUN:-0}" = "1" ]; then echo "+ $*"; else "$@"; fi; }
die() { echo "robot_setup: $*" >&2; exit 1; }

[ -n "${ROS_DISTRO:-}" ] || die "source your ROS 2 setup first (e.g. source /opt/ros/jazzy/setup.bash)"
python3 -c "import rclpy" 2>/dev/null || die "rclpy is not importable with python3; is ROS 2 $ROS_DISTRO installed and sourced?"
[ "$(basename "$(dirname "$here")")" = "src" ] || echo "robot_setup: note: $here is not in a workspace's src/ folder; building in $workspace" >&2
numpy_version="$(python3 -c 'import numpy; print(numpy.__version__)')" || die "the system python3 has no numpy (apt install python3-numpy)"
python_version="$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
echo "robot_setup: ROS 2 $ROS_DISTRO, Python $python_version, system numpy $numpy_version, venv $VENV"

if [ ! -x "$VENV/bin/python" ]; then
  run python3 -m venv --system-site-packages "$VENV"
fi
run touch "$VENV/COLCON_IGNORE"   # colcon must not look for packages inside the venv
pins="$(mktemp)"
trap 'rm -f "$pins"' EXIT
echo "numpy==$numpy_version" > "$pins"
echo "robot_setup: pinning numpy==$numpy_version (the version ROS was built against)"
torch_args=()
[ -n "${TORCH_INDEX_URL:-}" ] && torch_args=(--extra-index-url "$TORCH_INDEX_URL")
run "$VENV/bin/python" -m pip install --upgrade pip
run "$VENV/bin/python" -m pip install -c "$pins" "${torch_args[@]}" -e "$here[$EXTRAS]"
run "$VENV/bin/python" -c "import numpy, rclpy, torch; assert numpy.__version__ == '$numpy_version', numpy.__version__"
(
  cd "$workspace"
  run env "PATH=$VENV/bin:$PATH" colcon build --packages-select embodied_r_ros \
      --cmake-args "-DPython3_EXECUTABLE=$VENV/bin/python"
)
echo "robot_setup: done. In every shell: source $workspace/install/setup.bash && source $VENV/bin/activate"
