"""Every mini-world training stage runs a fixed number of steps: a slower machine takes
longer but trains the same model. A stage's minutes option is only an upper limit, and a
stage it stops says so."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from embodied_r_training.mini_world import curriculum, lm_sft, models, vlm_sft, worked

PAIRS = [(r["prompt"], curriculum.completion(r)) for r in curriculum.make_records(3, 24, (2, 3))]


class FakeClock:
    """time.monotonic that advances `step` seconds on every reading (a very slow machine)."""

    def __init__(self, step: float) -> None:
        self.now = itertools.count(0.0, step)

    def __call__(self) -> float:
        return next(self.now)


@pytest.fixture()
def lm(tmp_path: Path) -> Path:
    tok = models.build_world_tokenizer(worked.vocabulary(), vocab_size=600)
    return models.new_lm(tmp_path / "lm", tok, hidden=32, layers=2, heads=4, kv_heads=4)


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_the_same_steps_train_the_same_model_on_a_slow_machine(lm: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The learning-rate schedule follows the steps, not the clock: on a machine where
    # every step takes ten minutes, under a generous limit, the weights are bit-identical.
    fast = lm_sft.train_lm(_copy(lm, tmp_path / "fast"), PAIRS, epochs=4, max_steps=5, progress=False)
    monkeypatch.setattr(lm_sft.time, "monotonic", FakeClock(600.0))
    slow = lm_sft.train_lm(_copy(lm, tmp_path / "slow"), PAIRS, epochs=4, max_steps=5, progress=False,
                           max_minutes=1000.0)
    assert fast["steps"] == slow["steps"] == fast["planned_steps"] == 5
    assert not fast["stopped_by_time_budget"] and not slow["stopped_by_time_budget"]
    assert [h["loss"] for h in fast["history"]] == [h["loss"] for h in slow["history"]]
    weights = [(tmp_path / name / "model.safetensors").read_bytes() for name in ("fast", "slow")]
    assert weights[0] == weights[1]


def test_a_minutes_limit_stops_a_stage_early_and_says_so(lm: Path, monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(lm_sft.time, "monotonic", FakeClock(30.0))  # 30 s a reading: two steps a minute
    with caplog.at_level("WARNING"):
        res = lm_sft.train_lm(lm, PAIRS, epochs=4, max_steps=10, progress=False, max_minutes=1.0)
    assert res["stopped_by_time_budget"] and res["planned_steps"] == 10 and 1 <= res["steps"] < 10
    assert "stopped by its 1-minute limit" in caplog.text and "depends on this machine's speed" in caplog.text


def test_steps_are_capped_by_the_epochs_and_must_be_positive(lm: Path) -> None:
    res = lm_sft.train_lm(lm, PAIRS, epochs=1, batch_size=8, max_steps=100, progress=False)
    assert res["steps"] == res["planned_steps"] == 3  # 24 pairs, batch 8, one pass
    with pytest.raises(ValueError, match="max_steps must be at least 1"):
        lm_sft.train_lm(lm, PAIRS, max_steps=0, progress=False)


def test_the_curriculum_runs_its_stage_steps_exactly(lm: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO"):
        report = curriculum.train_curriculum(lm, short_steps=4, long_steps=3, seed=1, progress=False)
    assert (report["short"]["steps"], report["long"]["steps"]) == (4, 3)
    # Without a bar (the run's side process) progress is logged instead.
    assert "reading curriculum (short): step 2 of 4" in caplog.text and "min left" in caplog.text
    assert not report["short"]["stopped_by_time_budget"]
    assert curriculum.train_curriculum(lm, short_steps=0, long_steps=2, progress=False).keys() == {"long"}


def test_the_perception_model_trains_its_steps_through_repeated_passes(tmp_path: Path) -> None:
    from embodied_r_ros.sample_data.world import WorldConfig, write_world

    world = tmp_path / "world"
    write_world(world, WorldConfig(seed=3, n_train=1, n_val=1, n_test=1), progress=False)
    room = json.loads((world / "world.json").read_text())["rooms"]["train"][0]
    tok = models.build_world_tokenizer([], vocab_size=600)
    vlm = models.new_vlm(tmp_path / "vlm", tok, hidden=32, layers=1, vision_depth=1, vision_hidden=32)
    before = (vlm / "model.safetensors").read_bytes()
    # Four examples and batch 16: the 3 image-only steps are 3 passes.
    res = vlm_sft.train_vlm(vlm, world, [room], n_first=2, n_pair=2, plain_steps=3, prompt_steps=2,
                            progress=False)
    assert (res["examples"], res["steps_images_only"], res["steps_robot_prompts"]) == (4, 3, 2)
    assert not res["stopped_by_time_budget"]
    assert (vlm / "model.safetensors").read_bytes() != before
    with pytest.raises(ValueError, match="no caption examples"):
        vlm_sft.train_vlm(vlm, world, [], plain_steps=1, prompt_steps=1, progress=False)
    with pytest.raises(ValueError, match="prompt_steps must be at least 1"):
        vlm_sft.train_vlm(vlm, world, [room], plain_steps=1, prompt_steps=0, progress=False)


def test_run_defaults_are_the_shipped_runs_steps_and_no_time_limits() -> None:
    from embodied_r_training.mini_world.run import build_parser

    args = build_parser().parse_args(["--out", "x"])
    assert (args.vlm_steps, args.vlm_prompt_steps, args.curriculum_steps, args.curriculum_long_steps,
            args.lm_steps, args.judge_steps) == (2369, 806, 7500, 1300, 816, 1400)
    assert all(getattr(args, n) == 0.0 for n in vars(args) if n.endswith("_minutes"))


@pytest.mark.parametrize(("bad", "says"), [
    (["--lm-steps", "0"], "--lm-steps 0: must be at least 1"),
    (["--vlm-prompt-steps", "-2"], "--vlm-prompt-steps -2: must be at least 1"),
    (["--curriculum-steps", "-1"], "must be 0 (skip the stage) or more"),
    (["--grpo-minutes", "-1"], "--grpo-minutes -1.0: must be 0 (no limit) or more"),
])
def test_bad_step_or_minute_settings_are_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: list[str], says: str) -> None:
    from embodied_r_training.mini_world.run import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "run"), *bad])
    assert exit_info.value.code == 2 and says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_grpo_time_limit_stops_the_trainer_at_a_step_end(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import TrainerControl

    from embodied_r_training.mini_world import run

    clock = FakeClock(40.0)
    monkeypatch.setattr(run.time, "monotonic", clock)
    budget = run.TimeBudget(1.0)  # started at 0 s; every step end reads 40 s later
    control = budget.on_step_end(None, None, TrainerControl())
    assert not control.should_training_stop and not budget.hit
    control = budget.on_step_end(None, None, control)
    assert control.should_training_stop and budget.hit


def test_room_roles_split_the_training_rooms_without_overlap() -> None:
    from embodied_r_training.mini_world.run import room_roles

    summary = {"rooms": {"train": [f"r{i}" for i in range(10)]}}
    roles = room_roles(summary, 0, 3, 2, 4)
    assert [len(roles[k]) for k in ("warmup", "grpo", "captions")] == [3, 2, 4]
    assert len(set(roles["warmup"]) | set(roles["grpo"]) | set(roles["captions"])) == 9
    assert room_roles(summary, 0, 3, 2, 4) == roles and room_roles(summary, 1, 3, 2, 4) != roles
    with pytest.raises(ValueError, match="the world has only 10 training rooms"):
        room_roles(summary, 0, 5, 5, 1)


def test_curriculum_records_are_the_shipped_runs_at_its_steps_and_fewer_for_a_short_stage() -> None:
    # The default run makes exactly the shipped run's records (its stream, its shuffle);
    # more steps never fewer; a few-step stage only what it needs (it made 60,000 before).
    from embodied_r_training.mini_world.curriculum import stage_record_count

    assert stage_record_count(7500, short=True) == 60000 and stage_record_count(1300, short=False) == 12000
    assert stage_record_count(2600, short=False) == 12000 and stage_record_count(9000, short=True) == 72000
    assert stage_record_count(6, short=True) == 48 and stage_record_count(4, short=False) == 37
    assert all(stage_record_count(s, short=sh) * (1 if sh else 2) >= 8 * s
               for s in (1, 3, 100, 1299, 7499, 20000) for sh in (True, False))
