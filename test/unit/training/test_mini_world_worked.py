"""The mini world's worked reasoning: a rule-based reading of frame descriptions, checked
on a small episode whose answers are worked out by hand in the comments."""

from __future__ import annotations

import pytest

from embodied_r_ros.sample_data.questions import format_question
from embodied_r_training.mini_world import lm_sft, worked

# Frame 0 sees the red box ahead-left and the green door ahead; the agent moves forward
# (the blue ball appears on the right, the red box is now on the left), then turns left
# twice (the yellow pillar appears ahead).
FRAMES = [
    {"index": 0, "action": None, "observation": "red box ahead-left; green door ahead."},
    {"index": 1, "action": "move forward",
     "observation": "new: blue ball right. in view: red box left; blue ball right."},
    {"index": 2, "action": "rotate left", "observation": "nothing new. in view: blue ball ahead."},
    {"index": 3, "action": "rotate left", "observation": "new: yellow pillar ahead. in view: yellow pillar ahead."},
]


def _read(text: str, choices: list[str]) -> tuple[str, str] | None:
    return worked.read(format_question(text, choices), worked.parse_frames(FRAMES))


def test_frames_parse_into_named_objects_with_their_position_words() -> None:
    frames = worked.parse_frames(FRAMES)
    assert frames[0].seen == {"red box": "ahead-left", "green door": "ahead"}
    assert frames[1].seen == {"blue ball": "right", "red box": "left"}
    assert [f.action for f in frames] == [None, "move forward", "rotate left", "rotate left"]


def test_appearance_order_lists_first_frames() -> None:
    # blue ball first in frame 1, red box in frame 0, yellow pillar in frame 3.
    think, answer = _read("What is the order in which the following objects first appear in the video: "
                          "blue ball, red box, yellow pillar?",
                          ["red box, blue ball, yellow pillar", "blue ball, red box, yellow pillar"]) or ("", "")
    assert answer == "red box, blue ball, yellow pillar"
    assert "blue ball in frame 1" in think and "red box in frame 0" in think


def test_next_turn_after_first_sight() -> None:
    # The blue ball is first named in frame 1; frame 2 is the next turn (rotate left).
    got = _read("After I first saw the blue ball, what was the next turn I made?",
                ["rotate left", "rotate right", "I did not turn again"])
    assert got is not None and got[1] == "rotate left"
    # Nothing turns after frame 3.
    got = _read("After I first saw the yellow pillar, what was the next turn I made?",
                ["rotate left", "rotate right", "I did not turn again"])
    assert got is not None and got[1] == "I did not turn again"


def test_direction_now_follows_turns_since_last_sight() -> None:
    # Red box last named "left" in frame 1 (about +28 degrees); two left turns of 55
    # degrees since: 28 - 110 = -82 degrees, to the right.
    got = _read("Where I am standing now, at the end of the video, and facing the way I face now, "
                "is the red box to my left, right, or back?", ["left", "right", "back"])
    assert got is not None and got[1] == "right"
    assert "was left in frame 1" in got[0] and "rotate left, rotate left" in got[0]


def test_direction_at_an_earlier_moment() -> None:
    # When the yellow pillar is first seen (frame 3) the red box is where "now" puts it.
    got = _read("At the moment I first saw the yellow pillar, was the red box to my left, right, or back?",
                ["left", "right", "back"])
    assert got is not None and got[1] == "right"


def test_landmark_position_and_route() -> None:
    # Green door ahead in frame 0 (0 degrees), two left turns since: -110 degrees.
    got = _read("At the end of the video, where is the green door relative to me?",
                ["ahead", "left", "right", "behind"])
    assert got is not None and got[1] == "right"
    choices = ["rotate left about 90 degrees, then move forward about 2.0 m",
               "rotate right about 90 degrees, then move forward about 2.0 m",
               "rotate right about 135 degrees, then move forward about 2.0 m",
               "move backward about 2.0 m"]
    got = _read("From where I am now, facing the way I face now, how do I get to the green door?", choices)
    assert got is not None and got[1] == "rotate right about 90 degrees"
    assert worked.match_option(got[1], choices) == 1


def test_progress_picks_the_option_with_the_first_turn_seen() -> None:
    choices = ["move forward, rotate right, move forward", "move forward, rotate left, move forward",
               "move backward, rotate left, move backward"]
    got = _read("Which list gives, in order, the first 3 movements I made in the video?", choices)
    assert got is not None and got[1] == "move forward, rotate left, move forward"
    # Only the facts the choice rests on, each found in one frame line of the prompt:
    # frame 1's action, the first turning frame (2), and that no move was backward.
    assert got[0] == ("The first move is in frame 1: move forward. The first turn is in frame 2: rotate left. "
                      "I did not move backward.")
    # Without a backward option the last sentence is left out.
    got = _read("Which list gives, in order, the first 3 movements I made in the video?", choices[:2])
    assert got is not None and got[0] == ("The first move is in frame 1: move forward. The first turn is in frame 2: "
                                     "rotate left.")


def test_unknown_objects_and_unread_kinds_give_no_reading() -> None:
    assert _read("After I first saw the cyan cabinet, what was the next turn I made?",
                 ["rotate left", "rotate right", "I did not turn again"]) is None
    assert _read("Measuring between the centres of the objects on the floor, which of these objects "
                 "(red box, blue ball, yellow pillar) is the closest to the green door?",
                 ["red box", "blue ball", "yellow pillar"]) is None


@pytest.mark.parametrize("answer_text, expect_read", [("right", True), ("left", False)])
def test_worked_example_uses_the_reading_only_when_it_reaches_the_graded_answer(
        answer_text: str, expect_read: bool) -> None:
    choices = ["left", "right", "back"]
    record = {"question": format_question("Where I am standing now, at the end of the video, and facing the way "
                                          "I face now, is the red box to my left, right, or back?", choices),
              "question_category": "object_rel_direction", "frames": FRAMES,
              "answer": "ABC"[choices.index(answer_text)], "prompt": [{"role": "user", "content": "x"}],
              "Question_id": "q0"}
    think, read = lm_sft.worked_reasoning(record, {"answer_text": answer_text})
    assert read is expect_read
    k = choices.index(answer_text)
    assert think.endswith(f"to my {answer_text}. " + worked.option_scan(choices, k))
    assert worked.named_option(think, choices) == k
    (_, completion), (judge_messages, letter) = lm_sft.sft_pairs([record], {"q0": {"answer_text": answer_text}})
    assert completion == f"<think>{think}</think><answer>{record['answer']}</answer>"
    assert letter == record["answer"] and think in judge_messages[-1]["content"]


def test_standing_by_one_object_facing_another_is_not_read() -> None:
    # Where the agent would stand is not in the descriptions: the reading must not answer
    # with where the target is now (it did, by matching "is the red box to my left").
    got = _read("If I am standing by the green door and facing the blue ball, is the red box to my left, "
                "right, or back?", ["left", "right", "back"])
    assert got is None


def test_named_option_is_the_option_the_last_sentence_names() -> None:
    direction = ["right", "back", "left"]
    assert worked.named_option("The red box was left in frame 1. So now it is to my left.", direction) == 2
    # An earlier sentence does not count, nor a position word inside another ("ahead-left").
    assert worked.named_option("The red box was left in frame 1. I have not turned since.", direction) is None
    assert worked.named_option("So now it is ahead-left.", direction) is None
    landmark = ["ahead", "left", "right", "behind"]
    assert worked.named_option("The box was ahead in frame 0. So now it is behind.", landmark) == 3
    route = ["rotate left about 45 degrees, then move forward about 2.0 m",
             "rotate right about 45 degrees, then move forward about 2.0 m", "move backward about 2.0 m"]
    assert worked.named_option("So I rotate right about 45 degrees.", route) == 1
    order = ["red box, blue ball", "blue ball, red box"]
    assert worked.named_option("So the order is blue ball, red box.", order) == 1
    # The option scan after the decision is not the decision: what the decision names counts.
    assert worked.named_option("So now it is to my left. A. right: no; B. back: no; C. left: yes.", direction) == 2
    assert worked.named_option("So now it is to my left. A. right: yes.", direction) == 2
    assert worked.option_scan(direction, 1) == "A. right: no; B. back: yes."
    assert worked.option_scan(route, 0) == "A. rotate left about 45 degrees: yes."
    # Every reading of the module names its own answer's option.
    for text, choices in (("Where I am standing now, at the end of the video, and facing the way I face now, "
                           "is the red box to my left, right, or back?", direction),):
        got = _read(text, choices)
        assert got is not None and worked.named_option(got[0], choices) == worked.match_option(got[1], choices)
