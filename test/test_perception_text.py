"""Perception prompts and the parser that splits the VLM's reply into action/observation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_r_ros.core.perception_parser import (
    ParsedFrameText,
    normalize_action,
    parse_frame_description,
)
from embodied_r_ros.core.perception_prompts import ACTIONS, first_frame_prompt, pair_prompt

QUESTION = "Question: Which is closer to the door?\nChoices:\nA. red chair\nB. blue sofa"


def test_actions_are_the_ten_motions_in_order():
    assert ACTIONS == (
        "move forward", "move backward", "move left", "move right", "move upward",
        "move downward", "rotate left", "rotate right", "tilt downward", "tilt upward",
    )


def test_first_frame_prompt_variants():
    streaming = first_frame_prompt()
    aware = first_frame_prompt(QUESTION)
    assert streaming == first_frame_prompt(None) == first_frame_prompt("   ")
    assert "red chair" not in streaming and "Question" not in streaming
    for word in ("colour", "shape", "left", "ahead"):
        assert word in streaming and word in aware
    assert "red chair" in aware and "blue sofa" in aware
    assert "not answer" in aware.lower()


def test_pair_prompt_variants():
    streaming = pair_prompt()
    aware = pair_prompt(QUESTION)
    for text in (streaming, aware):
        assert "image 1" in text and "image 2" in text
        assert all(action in text for action in ACTIONS)
        assert "exactly one" in text
        for marker in ("\n1. ", "\n2. ", "\n3. "):
            assert marker in text
        assert text.index("\n1. ") < text.index("\n2. ") < text.index("\n3. ")
    assert "blue sofa" in aware and "blue sofa" not in streaming
    assert "notable objects" in streaming
    assert "not answer" in aware.lower()


@pytest.mark.parametrize(
    "text,action,observation",
    [
        ("1. move forward\n2. A door appears ahead.\n3. The chair is left.",
         "move forward", "A door appears ahead. The chair is left."),
        ("1) Rotate Left\n2) wall on the right\n3) no chair",
         "rotate left", "wall on the right. no chair"),
        ("(1) tilt up\n(2) ceiling lamp\n(3) nothing", "tilt upward", "ceiling lamp. nothing"),
        ("Step 1: pan left\nStep 2: window ahead\nStep 3: sofa", "rotate left",
         "window ahead. sofa"),
        ("Part 1 - strafe right\nPart 2 - shelf\nPart 3 - lamp", "move right", "shelf. lamp"),
        ("**1. Action:** Moved forward\n**2. Changes:** a red door\nappears.\n"
         "**3. Objects:** chair 1.5 m right",
         "move forward", "Changes: a red door appears. Objects: chair 1.5 m right"),
        ("### 1. Action\ngo ahead\n### 2. New\ntable\n### 3. Question\nlamp",
         "move forward", "New table. Question lamp"),
        ("Sure! Here it is.\n1. tilting down\n2. floor tiles", "tilt downward", "floor tiles"),
        ("(1) rotate right (2) door visible (3) chair gone", "rotate right",
         "door visible. chair gone"),
        ("- 1. descend\n- 2. roofs below\n- 3. road", "move downward", "roofs below. road"),
        # Part 1 names no known motion: action unknown, observation still parts 2+3.
        ("1. The agent stayed still\n2. same room\n3. lamp", None, "same room. lamp"),
    ],
)
def test_pair_parsing(text, action, observation):
    parsed = parse_frame_description(text, first=False)
    assert parsed == ParsedFrameText(action=action, observation=observation, raw_text=text)


def test_missing_parts_make_whole_text_the_observation():
    text = "The agent moved forward.\nA desk is 1.5 m ahead."
    parsed = parse_frame_description(text, first=False)
    assert parsed.action is None
    assert parsed.observation == "The agent moved forward. A desk is 1.5 m ahead."
    # Only part 1 present (no part 2) is also "missing parts".
    assert parse_frame_description("1. move left", first=False).action is None


def test_decimal_numbers_are_not_part_markers():
    text = "1.5 m ahead is a desk\n2.0 m left is a door"
    parsed = parse_frame_description(text, first=False)
    assert parsed.action is None and parsed.observation == "1.5 m ahead is a desk 2.0 m left is a door"


def test_first_frame_keeps_everything_as_observation():
    text = "1. move forward\n2. **red** door"
    parsed = parse_frame_description(text, first=True)
    assert parsed == ParsedFrameText(None, "1. move forward 2. red door", text)


def test_empty_text():
    assert parse_frame_description("", first=False) == ParsedFrameText(None, "", "")
    assert parse_frame_description("", first=True) == ParsedFrameText(None, "", "")


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
    assert parsed.action is None or parsed.action in ACTIONS
    assert "\n" not in parsed.observation
    assert parsed.raw_text == text
    assert normalize_action(text) in (None, *ACTIONS)


marker = st.sampled_from(["1.", "1)", "(1)", "Step 1:", "Part 1 -", "**1.**", "## 1."])


@settings(max_examples=100, deadline=None)
@given(marker, st.sampled_from(ACTIONS), st.text(alphabet="abcdefg xyz", min_size=1))
def test_any_marker_style_roundtrips(mark, action, obs):
    obs = obs.strip() or "x"
    m2 = mark.replace("1", "2")
    text = f"{mark} {action}\n{m2} {obs}"
    parsed = parse_frame_description(text, first=False)
    assert parsed.action == action
    assert parsed.observation == " ".join(obs.split())


def test_memory_put_adds_or_replaces_by_index() -> None:
    from embodied_r_ros.core.memory import EpisodeMemory
    from embodied_r_ros.core.types import FrameDescription

    memory = EpisodeMemory("e")
    memory.put(FrameDescription(2, "two"))
    memory.put(FrameDescription(0, "zero"))
    memory.put(FrameDescription(2, "two again"))
    assert [(d.keyframe_index, d.observation) for d in memory.descriptions()] == [
        (0, "zero"), (2, "two again")]
