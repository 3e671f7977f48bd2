"""The documented dry run, end to end on the CPU with tiny models: training/dry_run.sh
builds the download tree, then runs prepare -> cache-perception -> grpo -> evaluate with
the installed commands, from a folder outside the repository, and must leave every file a
GPU run leaves (records, cache, checkpoints, metrics, curves)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.env import REPO_ROOT

pytestmark = pytest.mark.slow  # trains, builds or pushes long loads

REPO = REPO_ROOT
SCRIPT = REPO / "training" / "dry_run.sh"


def test_dry_run_script_is_tracked_and_uses_packaged_configs():
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "training/dry_run.sh"], cwd=REPO,
                             capture_output=True, text=True)
    if tracked.returncode != 0 and "not a git repository" in tracked.stderr:
        return  # an exported source tree: nothing to check
    assert tracked.returncode == 0, "training/dry_run.sh must be committed (a clean clone runs it)"
    text = SCRIPT.read_text()
    assert "training/configs/" not in text.split("set -euo pipefail", 1)[1]  # packaged names only


def test_dry_run_end_to_end(tmp_path):
    out = tmp_path / "dry"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               DRY_RUN_TRAIN_QUESTIONS="8", DRY_RUN_TEST_QUESTIONS="4", DRY_RUN_GRPO_SAMPLES="8")
    done = subprocess.run(["bash", str(SCRIPT), str(out)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]

    times = dict(line.split("\t") for line in (out / "dry_run_times.tsv").read_text().splitlines())
    assert list(times) == ["tiny-models", "toy-data", "prepare", "cache-perception train",
                           "cache-perception val", "cache-perception test", "grpo", "evaluate"]

    summary = json.loads((out / "prepared" / "summary.json").read_text())
    tree = json.loads((out / "toy_data.json").read_text())
    assert summary["kept"] == tree["kept_vsi"] + tree["kept_urban"] + tree["n_records"]
    assert "missing_video" not in summary["dropped"]
    assert all(summary["splits"][s]["questions"] > 0 for s in ("train", "val", "test"))

    cache = out / "cache"
    for split, expected in (("train", 8), ("val", summary["splits"]["val"]["questions"]), ("test", 4)):
        stats = json.loads((cache / f"{split}.on_query.summary.json").read_text())
        assert stats["complete"] and stats["records_written"] == expected
        rows = [json.loads(line) for line in (cache / f"{split}.on_query.jsonl").read_text().splitlines()]
        assert len(rows) == expected and all(r["prompt"] and r["solution"] for r in rows)
    assert (cache / "keyframes.jsonl").is_file() and (cache / "descriptions.on_query.jsonl").is_file()
    assert not list((cache / ".videos").rglob("*.mp4"))  # zip members removed after decoding

    grpo = out / "grpo"
    run = json.loads((grpo / "run_summary.json").read_text())
    assert run["global_step"] == 12 and run["epoch"] == 3.0  # 8 questions, 2 per step, 3 epochs
    assert [c["global_step"] for c in run["weight_changes"]] == [0, 4, 8]
    assert sorted(p.name for p in grpo.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-8"]
    assert (grpo / "final" / "model.safetensors").is_file() and (grpo / "final" / "tokenizer.json").is_file()
    state = json.loads((grpo / "trainer_state.json").read_text())
    # Validation every eval_steps (8) and once more at the last step.
    assert [h["step"] for h in state["log_history"] if "eval_reward" in h] == [8, 12]
    assert (grpo / "training_curves.png").read_bytes()[:4] == b"\x89PNG"

    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    assert metrics["n"] == 4 and metrics["model"] == str(grpo / "final") and "consistency" in metrics
    assert len((out / "eval" / "predictions.jsonl").read_text().splitlines()) == 4
    results = (out / "eval" / "results.md").read_text()
    assert "| **tiny GRPO (ours)** |" in results
    test_records = map(json.loads, (cache / "test.on_query.jsonl").read_text().splitlines())
    if any(r["dataset"] != "urbanvideo" for r in test_records):
        assert "VSI-Bench questions scored the VSI-Bench way" in results and "vsi_bench" in metrics
