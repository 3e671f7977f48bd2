"""The mini world's GRPO runs: the paper's stage weights, and one real step of the run's
own config (TRL's GRPOTrainer through training/grpo.py, the three rewards, the frozen
judge) on the shipped reasoning model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embodied_r_training.mini_world import curriculum
from embodied_r_training.mini_world.judge import JUDGE_TOKENS
from embodied_r_training.mini_world.run import SHIP_DIR, SideJob, build_parser, grpo_config, staged_runs


def _weights(stages: list[dict]) -> list[tuple[float, float, float]]:
    return [(s["format"], s["accuracy"], s["consistency"]) for s in stages]


def test_the_arms_follow_the_papers_stages() -> None:
    runs = staged_runs(1, 2)
    assert runs["grpo_stages12"] == (None, runs["grpo_stages12"][1], 2)
    assert _weights(runs["grpo_stages12"][1]) == [(0.7, 0.3, 0.0), (0.3, 0.7, 0.0)]
    assert [s["epochs"] for s in runs["grpo_stages12"][1]] == [[1, 1], [2, 2]]
    assert runs["grpo"][0] == runs["grpo_no_consistency"][0] == "grpo_stages12"
    assert _weights(runs["grpo"][1]) == [(0.1, 0.7, 0.2)]  # with the consistency reward (row c)
    assert _weights(runs["grpo_no_consistency"][1]) == [(0.1, 0.7, 0.0)]  # without it (row d)


def test_one_step_of_the_runs_grpo_config_trains_with_three_rewards(tmp_path: Path) -> None:
    """The way the run trains its arm with the consistency reward: the run's own config,
    in a side process (SideJob), with no time limit (the run's default)."""
    args = build_parser().parse_args(["--out", str(tmp_path)])
    assert (args.grpo_batch, args.grpo_lr) == (8, 5e-5)
    records = curriculum.make_records(5, 8, curriculum.LONG_FRAMES)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({**r, "solution": r["answer"]}) + "\n" for r in records))
    lm = SHIP_DIR / "mini_world_lm"
    cfg = grpo_config(tmp_path / "grpo", lm, lm, data, stages=staged_runs(1, 2)["grpo"][1], epochs=1, seed=0,
                      learning_rate=args.grpo_lr, batch=args.grpo_batch, group=args.grpo_group)
    assert cfg["grpo"]["num_generations"] == args.grpo_group
    assert cfg["rewards"]["consistency_model"]["max_new_tokens"] == JUDGE_TOKENS  # room for the judge's scan
    cfg["grpo"]["max_steps"] = 1
    job = SideJob("one GRPO step", "grpo", tmp_path / "done.json", {"config": cfg})
    job.wait()
    result = json.loads((tmp_path / "done.json").read_text())
    assert result["global_step"] == 1 and not result["stopped_by_time_budget"]
    logged = json.loads((tmp_path / "grpo" / "trainer_state.json").read_text())["log_history"][0]
    for name in ("format", "accuracy", "consistency"):
        assert 0.0 <= logged[f"rewards/{name}/mean"] <= 1.0
    assert (tmp_path / "grpo" / "final" / "model.safetensors").exists()


def test_bad_grpo_settings_are_refused_before_anything_runs(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from embodied_r_training.mini_world.run import main

    for bad, says in ((["--grpo-batch", "6"], "multiple of 4"), (["--grpo-lr", "0"], "must be positive"),
                      (["--eval-rooms", "41"], "must be 1..--test-rooms (40)"),
                      (["--grpo-batch", "12", "--grpo-group", "8"], "multiple of 8 (--grpo-group)"),
                      (["--grpo-group", "1"], "must be at least 2"),
                      (["--judge-minutes", "-1"], "must be 0 (no limit) or more"),
                      (["--judge-steps", "0"], "must be at least 1")):
        with pytest.raises(SystemExit) as exit_info:
            main(["--out", str(tmp_path / "run"), *bad])
        assert exit_info.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()  # refused before the run made its folder
