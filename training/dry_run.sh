#!/usr/bin/env bash
# End-to-end dry run of the training recipe on the CPU with tiny random models:
#   tiny models -> a download tree laid out like VSI-Bench + UrbanVideo-Bench -> prepare ->
#   cache-perception (train, val, test) -> grpo (with validation, checkpoints, curves) ->
#   evaluate (paper table + VSI-Bench way).
# It writes the same files a GPU run writes, with the same commands; only the models, the
# data and the sizes are small. Run from anywhere after `bash scripts/setup.sh` (or
# `pip install -e ".[train]"`): configs are found by their packaged names.
#
#   bash training/dry_run.sh [OUT]          (default OUT: artifacts/dry_run)
#
# Sizes (environment): DRY_RUN_TRAIN_QUESTIONS (16), DRY_RUN_TEST_QUESTIONS (8) limit the
# questions described for those splits (the val split is described whole);
# DRY_RUN_GRPO_SAMPLES (16) the training questions GRPO uses (3 epochs of them).
# DRY_RUN_STOP_AFTER=STEP stops after that step (e.g. tiny-models: a quick check that the
# environment and commands are found).
# On 2 cores the whole run takes 4-7 minutes, depending on what else runs (4 min 24 s in a
# fresh clone; 6 min 32 s with the test suite's smaller sizes on a busy machine).
set -euo pipefail

# The commands come from the repository's environment (scripts/env.sh) unless they are
# already on PATH (a `pip install ".[train]"`): a fresh shell needs nothing sourced.
if ! command -v embodied-r-train >/dev/null 2>&1 || ! command -v embodied-r >/dev/null 2>&1; then
  _env="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/scripts/env.sh"
  if [ -f "$_env" ]; then
    echo "[dry-run] sourcing $_env" >&2
    # shellcheck source=/dev/null
    source "$_env"
  fi
  if ! command -v embodied-r-train >/dev/null 2>&1; then
    echo "[dry-run] embodied-r-train not found: run \`bash scripts/setup.sh\` in the repository" \
      "(or pip install \".[train]\") first" >&2
    exit 127
  fi
fi

OUT="${1:-artifacts/dry_run}"
TRAIN_Q="${DRY_RUN_TRAIN_QUESTIONS:-16}"
TEST_Q="${DRY_RUN_TEST_QUESTIONS:-8}"
GRPO_SAMPLES="${DRY_RUN_GRPO_SAMPLES:-16}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
TIMES="$OUT/dry_run_times.tsv"
: > "$TIMES"

step() {  # step NAME COMMAND...: run it, print and record its wall time
  local name="$1"; shift
  echo "[dry-run] $name: $*" >&2
  local start end ds
  start=$(date +%s%N)
  "$@"
  end=$(date +%s%N)
  ds=$(( (end - start) / 100000000 ))  # tenths of a second
  printf '%s\t%d.%d\n' "$name" $((ds / 10)) $((ds % 10)) >> "$TIMES"
  if [ "${DRY_RUN_STOP_AFTER:-}" = "$name" ]; then
    echo "[dry-run] stopping after $name (DRY_RUN_STOP_AFTER)" >&2
    exit 0
  fi
}

DL="$OUT/download"
MODELS="$OUT/tiny_models"

step tiny-models embodied-r tiny-models "$MODELS"
step toy-data embodied-r-train toy-data --out "$DL" > "$OUT/toy_data.json"
step prepare embodied-r-train prepare \
  --vsi "$DL/VSI-Bench/test-00000-of-00001.parquet" \
  --urban "$DL/UrbanVideo-Bench/MCQ.parquet" \
  --records "$DL/records/questions.json" --records-video-root "$DL/VSI-Bench" \
  --out "$OUT/prepared" --seed 0 > "$OUT/prepare.json"
for split in train val test; do
  limit=()
  [ "$split" = train ] && limit=(--limit "$TRAIN_Q")
  [ "$split" = test ] && limit=(--limit "$TEST_Q")
  step "cache-perception $split" embodied-r-train cache-perception --config perception_tiny.yaml \
    --data "$OUT/prepared" --split "$split" --out "$OUT/cache" "${limit[@]}" --no-progress \
    --set "perception_model.model=$MODELS/vlm" > "$OUT/cache_$split.json"
done
step grpo embodied-r-train grpo --config tiny_cpu.yaml --plots \
  --set "model.name_or_path=$MODELS/lm" \
  --set "rewards.consistency_model.model=$MODELS/lm" \
  --set "data.train=$OUT/cache/train.on_query.jsonl" \
  --set "data.eval=$OUT/cache/val.on_query.jsonl" \
  --set "data.max_samples=$GRPO_SAMPLES" \
  --set "grpo.output_dir=$OUT/grpo" > "$OUT/grpo.log"
step evaluate embodied-r-train evaluate --config eval_tiny.yaml \
  --records "$OUT/cache/test.on_query.jsonl" \
  --set "reasoning_model.model=$OUT/grpo/final" \
  --set "consistency_model.model=$MODELS/lm" \
  --out "$OUT/eval" --name "tiny GRPO" --no-progress > "$OUT/evaluate.log"

echo "[dry-run] done in $SECONDS s; outputs in $OUT; wall time per step (s):" >&2
cat "$TIMES" >&2
