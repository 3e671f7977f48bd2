#!/usr/bin/env bash
# The benchmarks that need a machine these 2-core development machines are not, as one
# prepared run (the GPU machine this workplace lends some sessions has 16 cores and an
# H200): whole-clip key frames against the reference, one table per CPU count; the
# training cache's key-frame stage on one process vs a pool; and the latency of the two
# models at full size on the GPU (bench/gpu_latency.py). It needs python3 with numpy,
# OpenCV, tqdm and PyYAML (torch and transformers for the gpu step); PyAV, when missing,
# is installed from a wheel carried along, since such a machine may have no package index.
#
#   bash bench/device_benchmarks.sh fetch           # where PyPI is reachable: the PyAV
#                                                  # wheel (pinned version) into $WHEELS
#   bash bench/device_benchmarks.sh run [ARGS...]   # on the many-core machine; ARGS go to
#                                                  # bench.bench_keyframes after the defaults
#
# Settings (environment):
#   PYTHON      interpreter (default python3)
#   WHEELS      folder of carried wheels (default .devwheels, git-ignored)
#   DEVICE_PY   Python version the fetched wheel is for (default 3.12; PyAV's wheels are
#               abi3, so any CPython >= 3.11 takes them)
#   CPUS        CPU counts to pin to (default 1 2 4 ... and all of this machine's CPUs)
#   MINUTES     clip length (default 10, the clip of docs/benchmarks.md)
#   CODECS      codecs to run (default h264)
#   REPEAT      rounds per table (default 1)
#   CLIPS       where the clip is written and reused (default /tmp/bench_clips)
#   OUT         where the tables are copied (default $OUT of the device tool, else ./bench_out)
#   STEPS       what to run (default "keyframes cache gpu decoding robot_rate"): keyframes =
#               bench.bench_keyframes (on the 16-core machine, 2026-12-04: the clip in
#               224 s, then reference and ours pinned to 16, 2, 4 and 8 CPUs in 267 s);
#               cache = bench.bench_cache_perception, videos per minute of the training
#               cache's key-frame stage on one process vs a pool of all CPUs (36 s with
#               CACHE_CLIPS=16); gpu = bench/gpu_latency.py, the perception and reasoning
#               models at full size with random bf16 weights (181 s; results also as
#               gpu_latency.json); decoding = bench.decoding_speed, tokens per second of
#               each decoding option (plain, static cache + torch.compile, prompt lookup)
#               for the 3B reasoning and 7B perception shapes, and key frames per second
#               of batched perception at batch 1, 4 and 8 (decoding_speed.json);
#               robot_rate = bench.bench_robot_rate, a key frame every 2 s for 5 min into
#               the real perception worker with questions under load (robot_rate.json).
#               decoding and robot_rate together are meant to fit in 8 minutes; not yet
#               run on a GPU. One step per call keeps each call short.
#   CACHE_CLIPS clips for the cache step (default 32)
#   GPU_ARGS    extra arguments for gpu_latency.py (e.g. --tiny to try it on a CPU)
#   DECODING_ARGS  extra arguments for bench.decoding_speed (e.g. --tiny)
#   RATE_ARGS   extra arguments for bench.bench_robot_rate (e.g. --tiny, --duration 120,
#               --perception-options '{"kv_cache":"static","compile":true}')
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.devwheels}
mode=${1:-run}
[ $# -gt 0 ] && shift

case "$mode" in
fetch)
    version=$(sed -n 's/^av==//p' requirements/constraints.txt)
    "$PYTHON" -m pip download "av==$version" --no-deps --only-binary=:all: \
        --python-version "${DEVICE_PY:-3.12}" --platform manylinux_2_28_x86_64 -d "$WHEELS"
    echo "carry $WHEELS to the machine and run: bash bench/device_benchmarks.sh run"
    exit 0 ;;
run) ;;
*)
    echo "usage: bash bench/device_benchmarks.sh fetch | run [bench args...]" >&2
    exit 2 ;;
esac

# The training package is installed as embodied_r_training; from a bare checkout it is
# the folder training/, made importable under that name here.
deps=$(mktemp -d)
trap 'rm -rf "$deps"' EXIT
ln -s "$PWD/training" "$deps/embodied_r_training"
export PYTHONPATH="$PWD:$deps${PYTHONPATH:+:$PYTHONPATH}"

steps=${STEPS:-keyframes cache gpu decoding robot_rate}
needs_av=0
case " $steps " in *" keyframes "*|*" cache "*) needs_av=1 ;; esac
if [ "$needs_av" = 1 ] && ! "$PYTHON" -c 'import av' 2>/dev/null; then
    wheel=$(ls "$WHEELS"/av-*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
        echo "PyAV is not installed and no av-*.whl is in $WHEELS: run" \
             "'bash bench/device_benchmarks.sh fetch' where PyPI is reachable and carry $WHEELS" >&2
        exit 2
    fi
    "$PYTHON" -m pip install --quiet --no-index --no-deps --target "$deps" "$wheel"
fi

n=$(nproc)
if [ -z "${CPUS:-}" ]; then
    CPUS=""
    c=1
    while [ "$c" -lt "$n" ]; do CPUS="$CPUS $c"; c=$((c * 2)); done
    CPUS="$CPUS $n"
fi
out=${OUT:-bench_out}
clips=${CLIPS:-/tmp/bench_clips}
mkdir -p "$out" "$clips"

{
    date -u '+%Y-%m-%d %H:%M UTC'
    echo "CPUs: $n ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'))"
    "$PYTHON" -c 'import importlib, importlib.metadata as md, sys
def version(name):
    try:
        return importlib.import_module(name).__version__
    except ImportError:
        return "missing"
def dist(name):  # without importing it (torch takes seconds)
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "missing"
print("python", sys.version.split()[0], "| opencv", version("cv2"), "| pyav", version("av"),
      "| numpy", version("numpy"), "| torch", dist("torch"), "| transformers",
      dist("transformers"))'
} | tee "$out/machine.txt"

status=0
for step in $steps; do
    case "$step" in
    keyframes)
        for codec in ${CODECS:-h264}; do
            # shellcheck disable=SC2086 # CPUS is a list of numbers
            PYTHONUNBUFFERED=1 "$PYTHON" -m bench.bench_keyframes --minutes "${MINUTES:-10}" \
                --codec "$codec" --impls reference ours --cpus $CPUS --repeat "${REPEAT:-1}" \
                --clips "$clips" "$@" 2>&1 | tee "$out/keyframes_$codec.txt" || status=1
        done ;;
    cache)
        PYTHONUNBUFFERED=1 "$PYTHON" -m bench.bench_cache_perception \
            --clips "${CACHE_CLIPS:-32}" --workers "$n" 2>&1 \
            | tee "$out/cache_perception.txt" || status=1 ;;
    gpu)
        # shellcheck disable=SC2086 # GPU_ARGS is a list of arguments
        PYTHONUNBUFFERED=1 "$PYTHON" bench/gpu_latency.py --json "$out/gpu_latency.json" \
            ${GPU_ARGS:-} 2>&1 | tee "$out/gpu_latency.txt" || status=1 ;;
    decoding)
        # shellcheck disable=SC2086 # DECODING_ARGS is a list of arguments
        PYTHONUNBUFFERED=1 "$PYTHON" -m bench.decoding_speed --json "$out/decoding_speed.json" \
            ${DECODING_ARGS:-} 2>&1 | tee "$out/decoding_speed.txt" || status=1 ;;
    robot_rate)
        # RATE_ARGS may hold JSON with spaces: it is split by the shell like the others,
        # so write JSON options without spaces ('{"kv_cache":"static"}').
        # shellcheck disable=SC2086
        PYTHONUNBUFFERED=1 "$PYTHON" -m bench.bench_robot_rate --json "$out/robot_rate.json" \
            ${RATE_ARGS:-} 2>&1 | tee "$out/robot_rate.txt" || status=1 ;;
    *)
        echo "unknown step $step (keyframes, cache, gpu, decoding, robot_rate)" >&2
        status=2 ;;
    esac
done
exit $status
