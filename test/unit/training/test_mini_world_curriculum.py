"""The reasoning model's reading curriculum: text episodes whose answers are the
rule-based reading of their own descriptions, in the robot's prompt and the world's
question wording."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from embodied_r_ros.core.prompts.perception import ACTIONS
from embodied_r_ros.core.prompts.reasoning import build_reasoning_messages, parse_choices
from embodied_r_ros.sample_data.questions import QUESTION_TEXTS, progress_choices
from embodied_r_training.mini_world import curriculum, lm_sft, worked


@pytest.fixture(scope="module")
def records() -> list[dict]:
    return curriculum.make_records(3, 120, curriculum.LONG_FRAMES)


def test_records_are_seeded(records: list[dict]) -> None:
    again = curriculum.make_records(3, 120, curriculum.LONG_FRAMES)
    assert [(r["question"], r["answer"], r["think"], r["video_text"]) for r in again] == \
        [(r["question"], r["answer"], r["think"], r["video_text"]) for r in records]
    other = curriculum.make_records(4, 120, curriculum.LONG_FRAMES)
    assert [r["video_text"] for r in other] != [r["video_text"] for r in records]


def test_answer_is_the_option_the_reading_of_the_descriptions_reaches(records: list[dict]) -> None:
    for r in records:
        got = worked.read(r["question"], worked.parse_frames(r["frames"]))
        assert got is not None, r["question"]
        choices = [text for _, text in parse_choices(r["question"])]
        k = worked.match_option(got[1], choices)
        assert k is not None and "ABCDEFGH"[k] == r["answer"]
        assert r["think"] == worked.with_scan(got[0], choices, k)
    letters = Counter(r["answer"] for r in records)
    assert set(letters) >= {"A", "B", "C"} and max(letters.values()) < 0.6 * len(records)
    assert len({r["question_category"] for r in records}) >= 4


def test_prompt_is_the_robots_reasoning_prompt_over_caption_lines(records: list[dict]) -> None:
    for r in records:
        assert r["prompt"] == build_reasoning_messages(r["video_text"], r["question"])
        lines = [ln for ln in r["video_text"].splitlines() if ln.startswith("Frame ")]
        assert len(lines) == len(r["frames"]) >= curriculum.LONG_FRAMES[0]
        assert lines[0].startswith("Frame 0: Observe: ")
        assert r["frames"][0]["action"] is None
        assert all(f["action"] in ACTIONS for f in r["frames"][1:])


def test_questions_use_the_worlds_wording(records: list[dict]) -> None:
    patterns = [re.compile(re.escape(t).replace(r"\{names\}", ".+").replace(r"\{name\}", "[a-z]+ [a-z]+")
                           .replace(r"\{anchor\}", "[a-z]+ [a-z]+").replace(r"\{count\}", "[34]") + "$")
                for t in QUESTION_TEXTS.values()]
    for r in records + curriculum.make_records(3, 120, curriculum.LONG_FRAMES, progress=True):
        first = r["question"].split("\nChoices:")[0].removeprefix("Question: ")
        assert any(p.match(first) for p in patterns), first


def test_progress_questions_only_when_asked_with_the_worlds_options_on_the_episodes_actions(records) -> None:
    assert not any(r["question_category"] == "progress_evaluation" for r in records)
    asked = curriculum.make_records(3, 300, curriculum.LONG_FRAMES, progress=True)
    progress = [r for r in asked if r["question_category"] == "progress_evaluation"]
    assert len(progress) >= 0.05 * len(asked)
    for r in progress:
        actions = [f["action"] for f in r["frames"][1:]]
        n = int(re.search(r"the first (\d) movements", r["question"]).group(1))
        correct, distractors = progress_choices(actions[:n])
        choices = [text for _, text in parse_choices(r["question"])]
        assert sorted(choices) == sorted([correct, *distractors])
        # the reading's option (the answer) is the true list: its facts are frame look-ups
        assert choices["ABCD".index(r["answer"])] == correct
        assert f"The first move is in frame 1: {actions[0]}." in r["think"]
        got = worked.read(r["question"], worked.parse_frames(r["frames"]))
        assert got is not None and r["think"] == worked.with_scan(got[0], choices, choices.index(got[1]))


def test_progress_stages_by_setting() -> None:
    assert curriculum.progress_stages("none") == ()
    assert curriculum.progress_stages("long") == ("long",)
    assert curriculum.progress_stages("both") == ("short", "long")
    with pytest.raises(ValueError, match="one of"):
        curriculum.progress_stages("short")


def test_short_stage_prompt_is_the_frame_lines_and_the_question(records: list[dict]) -> None:
    r = records[0]
    (message,) = curriculum.short_messages(r)
    assert message["role"] == "user"
    assert message["content"].startswith("Frame 0: Observe: ") and message["content"].endswith(r["question"])
    robot = "".join(m["content"] for m in r["prompt"])
    assert len(message["content"]) < len(robot) - 300
    pairs = curriculum.stage_pairs(records[:5], short=False, judge=True)
    assert len(pairs) == 10 and pairs[0][1] == f"<think>{r['think']}</think><answer>{r['answer']}</answer>"
    assert pairs[1][1] == r["answer"]


def test_reasoning_names_the_answers_option_by_its_text_then_scans_to_its_letter(records: list[dict]) -> None:
    # The decision names the option's own words (route planning: the option's start), so
    # the table's rule-based check finds it; the scan then walks the options to the answer.
    for r in records:
        choices = [text for _, text in parse_choices(r["question"])]
        k = "ABCDEFGH".index(r["answer"])
        decision, scan = r["think"].split(f" {'A'}. ", 1)
        assert choices[k].split(", then")[0] in decision.rsplit(". ", 1)[-1], (decision, r["question"])
        assert worked.named_option(r["think"], choices) == k
        assert f"A. {scan}" == worked.option_scan(choices, k)
        assert scan.endswith(f"{r['answer']}. {choices[k].split(', then')[0]}: yes.") if k else scan.endswith(": yes.")
        assert scan.count(": no") == k


def test_learning_rate_rises_then_falls_to_zero_at_the_end() -> None:
    rates = [lm_sft.learning_rate(1e-3, d / 100) for d in range(101)]
    assert rates[0] < 1e-4 and rates[5] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(rates[5:], rates[6:]))
    assert rates[100] == pytest.approx(0.0, abs=1e-12)


def test_curriculum_trains_a_model_the_robot_loads(tmp_path) -> None:
    from embodied_r_ros.core.backends.factory import make_reasoner
    from embodied_r_ros.core.backends.model_spec import ModelSpec
    from embodied_r_training.mini_world import models

    tok = models.build_world_tokenizer(worked.vocabulary(), vocab_size=600)
    models.new_lm(tmp_path, tok, hidden=32, layers=2, heads=4, kv_heads=4)
    report = curriculum.train_curriculum(tmp_path, short_steps=6, long_steps=4, seed=1, progress=False)
    assert report["short"]["steps"] >= 1 and report["long"]["steps"] >= 1
    assert (report["short"]["steps"], report["long"]["steps"]) == (6, 4)
    assert report["short"]["loss_last"] < report["short"]["loss_first"] + 1.0
    reasoner = make_reasoner(ModelSpec.from_dict({"backend": "transformers", "model": str(tmp_path),
                                                  "device": "cpu", "dtype": "float32", "max_new_tokens": 8,
                                                  "temperature": 0.0}))
    text = reasoner.generate(curriculum.make_records(5, 1, (2, 3))[0]["prompt"])
    assert isinstance(text, str)


def test_curriculum_job_trains_in_its_own_process_and_reports_failure(tmp_path) -> None:
    import argparse
    import json

    from embodied_r_training.mini_world import models
    from embodied_r_training.mini_world.run import curriculum_job

    tok = models.build_world_tokenizer(worked.vocabulary(), vocab_size=600)
    models.new_lm(tmp_path / "lm", tok, hidden=32, layers=2, heads=4, kv_heads=4)
    args = argparse.Namespace(curriculum_steps=3, curriculum_long_steps=2, curriculum_minutes=0.0,
                              curriculum_long_minutes=0.0, curriculum_lr=2e-3, seed=0, curriculum_progress="long")
    job = curriculum_job(tmp_path / "lm", tmp_path / "done.json", args)
    assert job.process.pid is not None and job.process.daemon
    job.wait()
    report = json.loads((tmp_path / "done.json").read_text())
    assert report["short"]["steps"] >= 1 and report["long"]["steps"] >= 1
    assert (report["short"]["steps"], report["long"]["steps"]) == (3, 2)
    broken = curriculum_job(tmp_path / "missing", tmp_path / "never.json", args)
    with pytest.raises(RuntimeError, match="reading curriculum failed"):
        broken.wait()


def test_every_curriculum_completion_fits_the_reasoning_budget() -> None:
    # A curriculum text longer than the generation budget teaches an answer the model can
    # never finish: it runs out before the letter. Checked with the shipped model's
    # tokenizer over every kind, both frame ranges and the progress questions.
    from transformers import AutoTokenizer

    from embodied_r_ros.evaluation.models import MINI_WORLD_MAX_NEW_TOKENS, MINI_WORLD_MODELS

    tok = AutoTokenizer.from_pretrained(MINI_WORLD_MODELS["reasoning"])
    budget = MINI_WORLD_MAX_NEW_TOKENS["reasoning"]
    recs = (curriculum.make_records(0, 1500, curriculum.LONG_FRAMES, progress=True)
            + curriculum.make_records(1, 1500, curriculum.SHORT_FRAMES, progress=True))
    longest: dict[str, int] = {}
    for r in recs:
        n = len(tok(curriculum.completion(r), add_special_tokens=False)["input_ids"]) + 1  # + end token
        longest[r["question_category"]] = max(longest.get(r["question_category"], 0), n)
    assert len(longest) >= 6, longest
    assert max(longest.values()) <= budget, longest
