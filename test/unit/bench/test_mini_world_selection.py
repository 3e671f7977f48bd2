"""bench/mini_world_selection.py, run as a user runs it: the two model-selection sets are
made from a run's world (the run's own world and prepare steps) and a second world, then
the shipped reasoning model is scored on both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embodied_r_ros.sample_data.world import WorldConfig, write_world
from embodied_r_training.data import read_jsonl
from embodied_r_training.mini_world.run import SHIP_DIR, prepare_world, room_roles

from helpers.env import REPO_ROOT


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.mini_world_selection", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.slow
def test_sets_are_the_runs_caption_rooms_and_a_second_world_and_the_shipped_model_scores(tmp_path: Path) -> None:
    run, sets = tmp_path / "run", tmp_path / "sets"
    write_world(run / "world", WorldConfig(seed=3, n_train=5, n_val=1, n_test=1), progress=False)
    prepare_world(run / "world", run / "prepared")
    rooms = ["--seed", "3", "--warmup-rooms", "2", "--grpo-rooms", "1", "--caption-rooms", "2"]
    made = _bench("sets", "--run", str(run), "--out", str(sets), "--second-world-rooms", "2", *rooms)
    assert made.returncode == 0, made.stdout + made.stderr
    # S1 is exactly the questions of the run's caption rooms (as the run splits its rooms).
    summary = json.loads((run / "world" / "world.json").read_text())
    captions = set(room_roles(summary, 3, 2, 1, 2)["captions"])
    s1 = read_jsonl(sets / "cache_s1" / "sel.streaming.jsonl")
    assert {r["scene_name"] for r in s1} == captions
    assert len(s1) == sum(r["scene_name"] in captions for r in read_jsonl(run / "prepared" / "train.jsonl"))
    s2 = read_jsonl(sets / "cache_s2" / "sel.streaming.jsonl")
    assert len({r["scene_name"] for r in s2}) == 2 and not {r["scene_name"] for r in s2} & captions
    assert all(r["frames"] and r["frames"][0]["observation"] for r in s1 + s2)  # described by the perception model
    assert f"s1: {len(s1)} questions of 2 rooms" in made.stdout

    scored = _bench("score", "--sets", str(sets), "--name", "shipped", "--model", str(SHIP_DIR / "mini_world_lm"))
    assert scored.returncode == 0, scored.stdout + scored.stderr
    rows = json.loads((sets / "scores" / "shipped" / "rows.json").read_text())
    assert rows["s1"]["n"] == len(s1) and rows["s2"]["n"] == len(s2)
    for name in ("s1", "s2"):
        assert rows[name]["well_formed"] == 100.0 and 0.0 <= rows[name]["overall"] <= 100.0
        assert f"shipped {name}: n={rows[name]['n']} accuracy {rows[name]['overall']:.1f}%" in scored.stdout


def test_scoring_before_the_sets_exist_says_what_to_run(tmp_path: Path) -> None:
    proc = _bench("score", "--sets", str(tmp_path), "--name", "x", "--model", str(SHIP_DIR / "mini_world_lm"))
    assert proc.returncode != 0 and "make the sets first" in proc.stderr
    proc = _bench("sets", "--run", str(tmp_path / "nothing"), "--out", str(tmp_path / "s"))
    assert proc.returncode != 0 and "no world/world.json" in proc.stderr
    proc = _bench("score", "--sets", str(tmp_path), "--name", "x", "--model", str(tmp_path))
    assert proc.returncode != 0 and "no config.json" in proc.stderr
