"""The mini world's consistency judge data: whatever scan a reasoning carries, the judge's
target is the scan and letter of the option the reasoning's decision names."""

from __future__ import annotations

import random

import pytest

from embodied_r_ros.core.qa.consistency import read_judge_letter
from embodied_r_ros.sample_data.questions import format_question
from embodied_r_training.mini_world import judge, worked

CHOICES = ["right", "back", "left"]
QUESTION = format_question("Where I am standing now, at the end of the video, and facing the way I face "
                           "now, is the red box to my left, right, or back?", CHOICES)
DECISION = "The red box was left in frame 1. I have not turned since. So now it is to my left."


def _shown(messages: list[dict[str, str]]) -> str:
    """The reasoning as the judge's user message shows it."""
    return messages[-1]["content"].split("Reasoning:\n", 1)[1].split("\n\n", 1)[0]


def test_strip_scan_removes_only_a_trailing_scan() -> None:
    assert worked.strip_scan(DECISION + " A. right: no; B. back: no; C. left: yes.") == DECISION
    assert worked.strip_scan(DECISION + " A. left: yes.") == DECISION
    assert worked.strip_scan(DECISION) == DECISION


def test_shortcut_scan_writes_the_decision_on_another_letter() -> None:
    # GRPO's shortcut: "left" (option C) written at letter A or B.
    assert judge.shortcut_scan(CHOICES, named=2, at=0) == "A. left: yes."
    assert judge.shortcut_scan(CHOICES, named=2, at=1) == "A. right: no; B. left: yes."


@pytest.mark.parametrize("variant, ending", [
    ("true", "So now it is to my left. A. right: no; B. back: no; C. left: yes."),
    ("none", "So now it is to my left."),
])
def test_every_variant_targets_the_option_the_decision_names(variant: str, ending: str) -> None:
    pair = judge.judge_pair(QUESTION, DECISION + " A. left: yes.", 0, variant, random.Random(0))
    assert pair is not None
    messages, target = pair
    assert _shown(messages).endswith(ending)
    assert target == "<think>A. right: no; B. back: no; C. left: yes.</think><answer>C</answer>"


@pytest.mark.parametrize("variant", ["other", "shortcut"])
def test_misleading_scans_never_change_the_target(variant: str) -> None:
    for seed in range(6):
        messages, target = judge.judge_pair(QUESTION, DECISION, 2, variant, random.Random(seed)) or ([], "")
        shown = _shown(messages)
        assert not shown.endswith("C. left: yes.")  # the scan shown points elsewhere
        assert target.endswith("<answer>C</answer>")


def test_the_reward_reads_the_judges_letter_from_its_reply() -> None:
    assert read_judge_letter(judge.judge_reply(CHOICES, 1), QUESTION) == "B"
    assert read_judge_letter(judge.judge_reply(CHOICES, 2), QUESTION) == "C"


def test_a_decision_naming_no_option_falls_back_to_the_answer() -> None:
    _, target = judge.judge_pair(QUESTION, "I cannot tell.", 1, "none", random.Random(0)) or ([], "")
    assert target.endswith("<answer>B</answer>")


def test_pairs_are_seeded_and_use_every_variant() -> None:
    items = [(QUESTION, DECISION, "C")] * 40
    first, again = judge.judge_pairs(items, seed=3), judge.judge_pairs(items, seed=3)
    assert first == again and len(first) == 40
    endings = {_shown(m)[len(DECISION):] for m, _ in first}
    assert "" in endings and " A. right: no; B. back: no; C. left: yes." in endings
    assert {" A. left: yes.", " A. right: no; B. left: yes."} & endings  # shortcut
    assert {" A. right: yes.", " A. right: no; B. back: yes."} & endings  # another option
    with pytest.raises(ValueError, match="unknown scan variant"):
        judge.judge_pair(QUESTION, DECISION, 2, "bogus", random.Random(0))


def test_the_judge_trains_in_a_side_job_from_a_copy_of_a_model(tmp_path) -> None:
    """The run's path: the judge trains in its own process on worked items and curriculum
    questions, in place, and reports its steps; a failure is raised with the stage's name."""
    import json

    from embodied_r_training.mini_world import models, worked
    from embodied_r_training.mini_world.run import SideJob

    tok = models.build_world_tokenizer(worked.vocabulary(), vocab_size=600)
    models.new_lm(tmp_path / "judge", tok, hidden=32, layers=2, heads=4, kv_heads=4)
    before = (tmp_path / "judge" / "model.safetensors").read_bytes()
    items = [(QUESTION, DECISION, "C")] * 8
    job = SideJob("consistency judge", "judge", tmp_path / "done.json",
                  {"model_dir": tmp_path / "judge", "items": items, "steps": 3, "text_episodes": 16})
    job.wait()
    report = json.loads((tmp_path / "done.json").read_text())
    assert report["pairs"] == 24 and report["steps"] >= 1
    assert report["steps"] == 3 and not report["stopped_by_time_budget"]
    assert (tmp_path / "judge" / "model.safetensors").read_bytes() != before
    broken = SideJob("consistency judge", "judge", tmp_path / "never.json",
                     {"model_dir": tmp_path / "missing", "items": items, "steps": 1, "text_episodes": 1})
    with pytest.raises(RuntimeError, match="consistency judge failed"):
        broken.wait()


def test_shuffled_scans_put_the_decisions_words_on_another_letter() -> None:
    for seed in range(20):
        scan = judge.shuffled_scan(CHOICES, 2, random.Random(seed))
        parts = [p.strip() for p in scan.rstrip(".").split(";")]
        words = [p.split(". ", 1)[1].rsplit(":", 1)[0] for p in parts]
        assert parts[-1].endswith("left: yes") and not parts[-1].startswith("C.")
        assert len(set(words)) == len(words) and set(words) <= set(CHOICES)
