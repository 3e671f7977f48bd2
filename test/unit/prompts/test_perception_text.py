"""Perception prompts and the parser that splits the VLM's reply into action/observation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_r_ros.core.perception.parser import (
    ParsedFrameText,
    normalize_action,
    parse_frame_description,
)
from embodied_r_ros.core.prompts.perception import ACTIONS, first_frame_prompt, pair_prompt

QUESTION = "Question: Which is closer to the door?\nChoices:\nA. red chair\nB. blue sofa"


def test_actions_are_the_ten_motions_in_order():
    assert ACTIONS == (
        "move forward", "move backward", "move left", "move right", "move upward",
        "move downward", "rotate left", "rotate right", "tilt downward", "tilt upward",
    )


def test_first_frame_prompt_carries_what_the_method_asks_for():
    aware = first_frame_prompt(QUESTION)
    streaming = first_frame_prompt()
    assert streaming == first_frame_prompt(None) == first_frame_prompt("   ")
    for text in (aware, streaming):
        lower = text.lower()
        assert "first-person" in lower and "describe the scene" in lower
        assert "colour" in lower and "shape" in lower
        assert "three-dimensional space around the agent" in lower
        assert "to its left" in lower and "ahead-left" in lower and "below" in lower
        assert "rather than as places in the picture" in lower
        assert "concise and clear" in lower
        # Nothing the method does not ask for.
        for extra in ("how far", "distance", "metre", "not visible", "say so"):
            assert extra not in lower, extra
    # The question and its choices, without answering.
    assert "Question: Which is closer to the door?" in aware
    assert "A. red chair" in aware and "B. blue sofa" in aware
    assert "do not answer the question" in aware.lower() and "option" in aware.lower()
    assert "red chair" not in streaming and "question" not in streaming.lower()


def test_pair_prompt_carries_what_the_method_asks_for():
    aware = pair_prompt(QUESTION)
    streaming = pair_prompt()
    for text in (aware, streaming):
        lower = text.lower()
        assert "image 1" in lower and "image 2" in lower and "before" in lower and "after" in lower
        assert "three numbered parts" in lower
        for marker in ("\n1. ", "\n2. ", "\n3. "):
            assert marker in text
        assert text.index("\n1. ") < text.index("\n2. ") < text.index("\n3. ")
        part1 = text[text.index("\n1. "):text.index("\n2. ")]
        assert "exactly one" in part1 and ", ".join(ACTIONS) in part1
        part2 = text[text.index("\n2. "):text.index("\n3. ")].lower()
        assert "newly" in part2 and "unclear before" in part2
        assert "look alike" in part2 and "buildings of a city" in part2
        assert "colour and shape" in part2
        assert "three-dimensional" in part2 and "to its left" in part2
        assert "rather than as places in the picture" in part2
        assert "concise and clear" in lower
        for extra in ("how far", "distance", "metre", "not visible", "say so"):
            assert extra not in lower, extra
    part3 = aware[aware.index("\n3. "):].lower()
    assert "question" in part3 and "do not answer the question" in part3 and "option" in part3
    assert "blue sofa" in aware and "blue sofa" not in streaming
    assert "question" not in streaming.lower()


REFERENCE_SPLIT_CASES = [
    # (reply, action, observation): what the reference's split rule gives, with part 1
    # mapped onto the ten actions.
    ("1. Move forward\n2. A red door ahead.\n3. The chair is on the left.",
     "move forward", "A red door ahead. The chair is on the left."),
    # "###" headings, blank lines and indentation before the next number.
    ("### 1. Action\nRotate left\n\n   ### 2. New information\nA window.\n###3. Question objects\nNo sofa.",
     "rotate left", "New information\nA window. Question objects\nNo sofa."),
    # Markdown inside the parts is kept as written.
    ("1. **Action:** Tilt up.\n\n2. **New:** a **white** ceiling.\n\n3. **Objects:** a lamp.",
     "tilt upward", "**New:** a **white** ceiling. **Objects:** a lamp."),
    # Text before part 1 is dropped.
    ("Here is my answer:\n1. Fly upward\n2. Roofs below.\n3. A road.", "move upward",
     "Roofs below. A road."),
    # Part 1 names no known motion: its text is kept as the action.
    ("1. The agent stayed still\n2. Same room.\n3. A lamp.", "The agent stayed still",
     "Same room. A lamp."),
    # Empty part 1: no action.
    ("1.\n2. Same room.\n3. A lamp.", None, "Same room. A lamp."),
    # "3." is found anywhere, also inside a number: part 3 starts in "3.5".
    ("1. Move forward\n2. The door is 3.5 m ahead.\n3. A lamp.", "move forward",
     "The door is 3.5 m ahead. 5 m ahead.\n3. A lamp."),
    # Part 1 not found ("1." appears, but no line starts with "2." after it): no action,
    # the observation is still parts 2 and 3.
    ("Moved on.\n2. A door ahead.\n3. Item 1. a lamp", None, "A door ahead. Item 1. a lamp"),
]

WHOLE_TEXT_CASES = [
    "1. Move left\n2. A wall.",  # no "3."
    "1. Move forward\n2. A door. 3. A lamp.",  # no line starts with "3." after part 2
    "1) Move forward\n2) A door\n3) A lamp",  # no "1."
    "**1. Action:** Move forward\n**2. New:** a door\n**3. Objects:** a lamp",  # bold numbers
    "The agent moved forward.\nA desk is ahead.",
    "",
]


@pytest.mark.parametrize("text,action,observation", REFERENCE_SPLIT_CASES)
def test_pair_reply_is_split_by_the_reference_rule(text, action, observation):
    parsed = parse_frame_description(text, first=False)
    assert parsed == ParsedFrameText(action=action, observation=observation, raw_text=text)


@pytest.mark.parametrize("text", WHOLE_TEXT_CASES)
def test_reply_without_the_numbered_parts_is_the_whole_observation(text):
    assert parse_frame_description(text, first=False) == ParsedFrameText(None, text, text)


def test_first_frame_keeps_everything_as_observation():
    text = "1. move forward\n2. **red** door\n3. lamp"
    assert parse_frame_description(text, first=True) == ParsedFrameText(None, text, text)


def test_non_text_reply_is_empty():
    assert parse_frame_description(None, first=False) == ParsedFrameText(None, "", "")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("Moved forward", "move forward"),
        ("**Action:** turn left", "rotate left"),
        ("go ahead", "move forward"),
        ("strafe right", "move right"),
        ("tilting down", "tilt downward"),
        ("pan left", "rotate left"),
        ("MOVE BACKWARD", "move backward"),
        ("The agent walked backwards a few steps.", "move backward"),
        ("backed up", "move backward"),
        ("The camera turned slightly to the left.", "rotate left"),
        ("yawed right", "rotate right"),
        ("rotated counter-clockwise", "rotate left"),
        ("rotated clockwise", "rotate right"),
        ("The drone ascended", "move upward"),
        ("flew upward", "move upward"),
        ("descending", "move downward"),
        ("pitched up", "tilt upward"),
        ("looks down at the floor", "tilt downward"),
        ("shifted to the left", "move left"),
        ("Forward.", "move forward"),
        ("tilt downward", "tilt downward"),
        ("moved forward, then turned right", "move forward"),  # earliest motion wins
        ("left", None),  # bare left/right: could be a move or a rotation
        ("no movement", None),
        ("The camera turned. A door is on the left.", None),  # not across sentences
        ("", None),
    ],
)
def test_normalize_action(text, expected):
    assert normalize_action(text) == expected


def test_every_action_maps_to_itself():
    for action in ACTIONS:
        assert normalize_action(action) == action
        assert normalize_action(f"1. **{action.title()}**") == action


@settings(max_examples=300, deadline=None)
@given(st.text(), st.booleans())
def test_parser_never_raises(text, first):
    parsed = parse_frame_description(text, first=first)
    assert parsed.raw_text == text
    assert parsed.action is None or (parsed.action.strip() and not first)
    if parsed.action is None and (first or "3." not in text):
        assert parsed.observation == text
    assert normalize_action(text) in (None, *ACTIONS)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(ACTIONS), st.text(alphabet="abcdefg xyz", min_size=1),
       st.text(alphabet="abcdefg xyz", min_size=1), st.sampled_from(["", "### ", "  "]))
def test_numbered_reply_roundtrips(action, new, objects, heading):
    text = f"{heading}1. {action.title()}\n{heading}2. {new}\n{heading}3. {objects}"
    parsed = parse_frame_description(text, first=False)
    assert parsed.action == action
    assert parsed.observation == f"{new.strip()} {objects.strip()}"


def test_memory_put_adds_or_replaces_by_index() -> None:
    from embodied_r_ros.core.memory.episode import EpisodeMemory
    from embodied_r_ros.core.types import FrameDescription

    memory = EpisodeMemory("e")
    memory.put(FrameDescription(2, "two"))
    memory.put(FrameDescription(0, "zero"))
    memory.put(FrameDescription(2, "two again"))
    assert [(d.keyframe_index, d.observation) for d in memory.descriptions()] == [
        (0, "zero"), (2, "two again")]
