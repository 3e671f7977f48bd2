"""Parsing of the reasoning LM's <think>/<answer> output and of option letters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_r_ros.core.qa.answer_parser import (
    ParsedAnswer,
    extract_choice_letter_reply,
    extract_letter,
    is_well_formed,
    parse_reasoning_output,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("B", "B"),
        ("b", "B"),  # a lone lowercase letter is unambiguous
        ("B.", "B"),
        ("(B)", "B"),
        ("[C]", "C"),
        ("B) left", "B"),
        ("b) left", "B"),
        ("C, the whiteboard", "C"),
        ("Answer: B", "B"),
        ("answer: b", "B"),
        ("**B**", "B"),
        ("`D`", "D"),
        ("The answer is C.", "C"),
        ("Final Answer: A. computer tower", "A"),
        ("I would pick option (D) here", "D"),
        ("The answer is B, not C", "B"),  # the phrase rule beats the lone-capital rule
        ("I think B", "B"),  # exactly one stand-alone capital letter
        ("A", "A"),
        ("A chair is closest", None),  # "A" read as the article
        ("a chair", None),  # lowercase letter followed by a word: a word, not an option
        ("b left", None),
        ("A and B", None),  # two candidates: ambiguous
        ("left", None),
        ("", None),
        ("G", None),  # not one of the valid letters
        ("Z.", None),
    ],
)
def test_extract_letter(text, expected):
    assert extract_letter(text, "ABCD") == expected


def test_extract_letter_respects_valid_letters():
    assert extract_letter("E", "ABCDEFGH") == "E"
    assert extract_letter("E", "ABC") is None
    assert extract_letter("B", "") is None


def test_well_formed_output():
    parsed = parse_reasoning_output("<think> door is left </think>\n<answer> B </answer>\n")
    assert parsed == ParsedAnswer(think="door is left", answer="B", letter="B", well_formed=True)


@pytest.mark.parametrize(
    "text,think,answer,letter,well_formed",
    [
        # Template pre-filled <think>: only the closing tag is generated.
        ("the chair is near</think><answer>A</answer>", "the chair is near", "A", "A", False),
        # No answer tags: the text after </think> is the answer.
        ("<think>x</think> So the answer is C.", "x", "So the answer is C.", "C", False),
        # Two answers: the last complete block wins.
        ("<think>x</think><answer>A</answer><answer>C</answer>", "x", "C", "C", False),
        # Unclosed answer.
        ("<think>x</think><answer>D", "x", "D", "D", False),
        # Unclosed think, no answer.
        ("<think>still thinking about B", "still thinking about B", "", None, False),
        # No tags: whole text is the answer.
        ("B) right", "", "B) right", "B", False),
        # Text after </answer> is not part of the answer.
        ("<think>x</think><answer>B</answer> or maybe C", "x", "B", "B", False),
        ("", "", "", None, False),
    ],
)
def test_parse_reasoning_output_fallbacks(text, think, answer, letter, well_formed):
    assert parse_reasoning_output(text, "ABCD") == ParsedAnswer(think, answer, letter, well_formed)


def test_free_text_answer_keeps_text_without_letter():
    parsed = parse_reasoning_output(
        "<think>I came from the left.</think><answer>Turn around and walk to the red car.</answer>",
        valid_letters="",
    )
    assert parsed.answer == "Turn around and walk to the red car."
    assert parsed.letter is None and parsed.well_formed


@pytest.mark.parametrize(
    "text,ok",
    [
        ("<think>a</think><answer>B</answer>", True),
        ("  \n<think>a</think>\n\n<answer>B</answer>  \n", True),
        ("<think></think><answer>B</answer>", True),  # empty blocks are still the format
        ("<answer>B</answer>", False),
        ("<think>a</think>", False),
        ("<think>a</think><answer>B</answer>.", False),
        ("Sure: <think>a</think><answer>B</answer>", False),
        ("<think>a</think> so <answer>B</answer>", False),
        ("<think><think>a</think></think><answer>B</answer>", False),
        ("<think>a</think><answer>B</answer><answer>C</answer>", False),
        ("<answer>B</answer><think>a</think>", False),
    ],
)
def test_is_well_formed(text, ok):
    assert is_well_formed(text) is ok


@pytest.mark.parametrize(
    "reply,expected",
    [
        ("B", "B"),
        (" c\n", "C"),
        ("The answer is D.", "D"),
        ("<think>hmm</think><answer>A</answer>", "A"),
        ("<think>A or B</think>B", "B"),
        ("I cannot tell", None),
        ("", None),
        ("E", None),
    ],
)
def test_extract_choice_letter_reply(reply, expected):
    assert extract_choice_letter_reply(reply, "ABCD") == expected


@settings(max_examples=300, deadline=None)
@given(st.text(), st.sampled_from(["ABCDEFGH", "ABC", ""]))
def test_never_raises_on_arbitrary_text(text, letters):
    parsed = parse_reasoning_output(text, letters)
    assert parsed.letter is None or parsed.letter in letters
    assert isinstance(parsed.well_formed, bool)
    assert extract_choice_letter_reply(text, letters) in (None, *letters)


tag_soup = st.lists(
    st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "B", " ", "x", "\n"]),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(tag_soup)
def test_tag_soup_is_consistent(text):
    parsed = parse_reasoning_output(text)
    if parsed.well_formed:
        assert text.strip().startswith("<think>") and text.strip().endswith("</answer>")
        assert all(text.count(t) == 1 for t in ("<think>", "</think>", "<answer>", "</answer>"))
