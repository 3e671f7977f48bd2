"""Reasoning prompts (question formatting, messages) and the episode memory / video text."""

from __future__ import annotations

import json
import threading

import pytest

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.memory.episode import (
    UNKNOWN_ACTION_TEXT,
    VIDEO_PREAMBLE,
    EpisodeMemory,
    render_video_text,
)
from embodied_r_ros.core.prompts.reasoning import (
    OPTION_LETTERS,
    REASONING_SYSTEM_PROMPT,
    build_consistency_messages,
    build_reasoning_messages,
    format_question,
    parse_choices,
)
from embodied_r_ros.core.types import FrameDescription

from helpers.env import REPO_ROOT

# Question records in the published record format (Question_id, video_id,
# question_category, question, answer, scene_name); the texts are the project's own.
RECORDS_FILE = REPO_ROOT / "test" / "fixtures" / "question_records.json"
RECORDS = json.loads(RECORDS_FILE.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ question formatting


def test_format_question_from_choice_list():
    text = format_question("  Is the door to my left or right? ", ["left", "right", "behind"])
    assert text == "Question: Is the door to my left or right?\nChoices:\nA. left\nB. right\nC. behind"
    assert parse_choices(text) == [("A", "left"), ("B", "right"), ("C", "behind")]


def test_format_question_drops_letter_prefixes_that_match():
    assert format_question("Where?", ["A. left", "(B) right", "C) up"]) == (
        "Question: Where?\nChoices:\nA. left\nB. right\nC. up"
    )


def test_free_text_question_has_no_choices_block():
    assert format_question("How do I get back to the red car?") == (
        "Question: How do I get back to the red car?"
    )
    assert format_question("Question: where?", []) == "Question: where?"
    assert parse_choices("Question: where?") == []


def test_dataset_record_is_normalised_without_doubling_choices():
    record = RECORDS[1]
    text = format_question(record["question"])
    assert text == (
        "Question: Measured between their closest points, which of these objects (lamp, "
        "sofa, fridge, plant) is nearest to the bed?\n"
        "Choices:\nA. lamp\nB. sofa\nC. fridge\nD. plant"
    )
    assert text.count("Choices:") == 1
    assert "<video>" not in text and "assume the role" not in text
    assert format_question(text) == text  # idempotent
    # Same options given twice is fine; different options is an error.
    assert format_question(record["question"], ["lamp", "sofa", "fridge", "plant"]) == text
    with pytest.raises(InvalidRequestError):
        format_question(record["question"], ["left", "right"])


def test_fixture_records_keep_their_notes_and_letters():
    assert [sorted(r) for r in RECORDS] == [sorted(
        ["Question_id", "video_id", "question_category", "question", "answer", "scene_name"]
    )] * len(RECORDS)
    for record in RECORDS:
        text = format_question(record["question"])
        assert text.startswith("Question: ") and text.count("Choices:") == 1
        letters = [letter for letter, _ in parse_choices(text)]
        assert letters == list(OPTION_LETTERS[: len(letters)]) and record["answer"] in letters
    first = format_question(RECORDS[0]["question"])
    assert "\nCount an object as behind me when I would need to turn by more than 135 degrees" in first
    assert first.endswith("Choices:\nA. left\nB. right\nC. back")


@pytest.mark.parametrize("question", ["", "   ", "<video>", "Question:  "])
def test_empty_question_is_invalid(question):
    with pytest.raises(InvalidRequestError):
        format_question(question)


def test_choice_limits():
    assert len(parse_choices(format_question("q?", [str(i) for i in range(8)]))) == 8
    with pytest.raises(InvalidRequestError):
        format_question("q?", [str(i) for i in range(9)])
    with pytest.raises(InvalidRequestError):
        format_question("q?", ["left", "  "])


def test_parse_choices_without_label_and_stops_at_other_text():
    assert parse_choices("Pick:\nA. one\nB. two\nReply with a letter.") == [("A", "one"), ("B", "two")]
    assert parse_choices("B. starts late\nC. no") == []
    assert parse_choices(None) == []  # type: ignore[arg-type]


# ------------------------------------------------------------------ messages


def test_reasoning_messages():
    q = format_question("Which did I see first?", ["the car", "the tree"])
    msgs = build_reasoning_messages("VIDEO TEXT LINE", q)
    assert [m["role"] for m in msgs] == ["system", "user"]
    system = msgs[0]["content"]
    assert system == REASONING_SYSTEM_PROMPT
    # Think first, then answer; the two tags; the answer follows from the reasoning.
    assert system.index("<think>") < system.index("</think>") < system.index("<answer>") < system.index("</answer>")
    assert "before you answer" in system and "follow directly from it" in system
    user = msgs[1]["content"]
    # You are the agent; the video is your own view from the past to the present; the
    # video content; then the question with its choices.
    assert user.startswith("Imagine you are the agent.")
    assert "with your own eyes, from the past up to the present moment" in user
    assert user.index("present moment") < user.index("VIDEO TEXT LINE") < user.index(q)
    assert user.endswith(q) and q.endswith("B. the tree")


def test_consistency_messages_hold_question_and_reasoning_only():
    q = format_question("Which is closer?", ["chair", "sofa", "lamp"])
    msgs = build_consistency_messages(q, "  The sofa is two metres away, so B.  ")
    user = msgs[-1]["content"]
    assert q in user and "The sofa is two metres away, so B." in user
    assert "(A, B, C)" in user and "single letter" in user
    assert "Frame 0" not in user
    assert msgs[0]["role"] == "system"
    free = build_consistency_messages(format_question("How far?"), "far")[-1]["content"]
    assert "(the option letters)" in free


# ------------------------------------------------------------------ memory


def fd(i: int, obs: str, action: str | None = None) -> FrameDescription:
    return FrameDescription(keyframe_index=i, observation=obs, action=action)


def test_render_video_text_format():
    text = render_video_text(
        [
            fd(3, "A red door\n ahead.", "rotate left"),
            fd(7, "A table\n\non the left.", "move forward"),
            fd(9, "", None),
        ]
    )
    assert text.splitlines() == [
        VIDEO_PREAMBLE,
        "Frame 0: Observe: A red door ahead.",
        "Frame 1: After move forward, Observe: A table on the left.",
        f"Frame 2: After {UNKNOWN_ACTION_TEXT}, Observe: (no description)",
    ]
    # The preamble: the video is text, frame 0 the starting view, the last frame the
    # current view.
    assert VIDEO_PREAMBLE.startswith("The video is described in text")
    assert "Frame 0 is the starting view" in VIDEO_PREAMBLE
    assert "the last frame is the view at its current position" in VIDEO_PREAMBLE


def test_render_empty():
    assert render_video_text([]).splitlines() == [VIDEO_PREAMBLE, "(no frames were recorded)"]


def test_memory_orders_by_keyframe_and_rejects_duplicates():
    mem = EpisodeMemory("ep1")
    for i in (4, 0, 2):
        assert mem.add(fd(i, f"obs {i}"))
    assert [d.keyframe_index for d in mem.descriptions()] == [0, 2, 4]
    assert len(mem) == 3
    with pytest.raises(ValueError):
        mem.add(fd(2, "again"))
    snapshot = mem.descriptions()
    snapshot.clear()
    assert len(mem) == 3  # a copy was returned
    assert mem.get(2).observation == "obs 2" and mem.get(5) is None


def test_memory_replace_and_clear():
    mem = EpisodeMemory("ep1")
    mem.add(fd(0, "a"))
    mem.add(fd(1, "b", "move left"))
    assert mem.replace(fd(1, "B", "rotate right"))
    assert mem.descriptions()[1].action == "rotate right"
    with pytest.raises(KeyError):
        mem.replace(fd(9, "x"))
    assert mem.replace([fd(5, "y"), fd(2, "x")])
    assert [d.observation for d in mem.descriptions()] == ["x", "y"]
    with pytest.raises(ValueError):
        mem.replace([fd(1, "x"), fd(1, "y")])
    assert "Frame 1: After an unknown movement, Observe: y" in mem.render()
    mem.clear("ep2")
    assert len(mem) == 0 and mem.episode_id == "ep2"
    # A late write for the old episode is ignored.
    assert mem.add(fd(0, "stale"), episode_id="ep1") is False
    assert mem.replace([fd(0, "stale")], episode_id="ep1") is False
    assert len(mem) == 0
    assert mem.add(fd(0, "fresh"), episode_id="ep2") is True


def test_memory_is_thread_safe():
    mem = EpisodeMemory()
    errors: list[Exception] = []

    def writer(offset: int) -> None:
        try:
            for i in range(offset, 400, 4):
                mem.add(fd(i, str(i)))
                mem.render()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [d.keyframe_index for d in mem.descriptions()] == list(range(400))
