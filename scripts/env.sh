# Source this file to use the bare-machine setup: the venv, the colcon install space and
# the source tree (first, so edits take effect without rebuilding).
#   source scripts/env.sh
_er_root="$(cd -P "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
_er_install="$_er_root/.ros_ws/install/embodied_r_ros"
export VIRTUAL_ENV="$_er_root/.venv"
export PATH="$VIRTUAL_ENV/bin:$PATH"
# the install space's site-packages, whatever the interpreter's version
for _er_site in "$_er_install"/lib/python3*/site-packages; do :; done
export PYTHONPATH="$_er_root:$_er_site${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$_er_install/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export AMENT_PREFIX_PATH="$_er_install:$VIRTUAL_ENV${AMENT_PREFIX_PATH:+:$AMENT_PREFIX_PATH}"
export RMW_IMPLEMENTATION="${RMW_IMPLEMENTATION:-rmw_fastrtps_cpp}"
# Shared memory + large buffers for camera-size messages on one host (see the file).
export FASTDDS_DEFAULT_PROFILES_FILE="${FASTDDS_DEFAULT_PROFILES_FILE:-$_er_root/config/fastdds_large_images.xml}"
# No HF_HUB_OFFLINE here: a robot or a workstation with network access downloads model
# weights from the Hugging Face hub on first use (cached in ~/.cache/huggingface/hub,
# or $HF_HOME/hub). The demo (tiny models) and the tests set it for themselves.
export TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
unset _er_root _er_install _er_site
