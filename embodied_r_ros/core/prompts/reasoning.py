"""Prompts for the reasoning LM and for the frozen reference model of the consistency reward.

Question normalisation (`format_question`) produces one canonical text,
``"Question: <stem>\\nChoices:\\nA. <text>\\nB. <text>"`` (no "Choices" block for free-text
questions), from either a robot request (question + list of choices) or a dataset record
whose question already embeds a "Choices:" block. Decisions:

* A leading ``<video>`` tag (dataset placeholder for the video) is removed.
* The dataset's agent-role preamble ("Please assume the role of an agent. The video
  represents your egocentric observations ...") is removed, because
  `build_reasoning_messages` already tells the model that it is the agent and that the
  video is its own view; keeping it would say the same thing twice.
* An existing "Choices:" block is parsed and rewritten in the canonical layout, so a
  question is never given two choice blocks. Passing ``choices`` as well is allowed only
  if they are the same options; otherwise it is an `InvalidRequestError`.
* Choices given as a list may carry their own letter prefix ("B. right"); it is dropped
  when it matches the letter the choice gets.
* At most 8 choices (A-H); an empty question or an empty choice is an
  `InvalidRequestError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.prompts.prompt_set import PromptSet, question_values
from embodied_r_ros.core.prompts.wording import SHIPPED_TEMPLATES
from embodied_r_ros.core.types import OPTION_LETTERS, ChatMessage

__all__ = [
    "REASONING_SYSTEM_PROMPT",
    "CONSISTENCY_SYSTEM_PROMPT",
    "OPTION_LETTERS",
    "format_question",
    "parse_choices",
    "build_reasoning_messages",
    "build_consistency_messages",
]


# The shipped wording (docs/method.md §4); a prompt file may replace it (`PromptSet`).
REASONING_SYSTEM_PROMPT = str(SHIPPED_TEMPLATES["reasoning.system"])
CONSISTENCY_SYSTEM_PROMPT = str(SHIPPED_TEMPLATES["consistency.system"])

_VIDEO_TAG = re.compile(r"^(?:\s*<video>\s*)+", re.IGNORECASE)
_ROLE_PREAMBLE = re.compile(r"^\s*please\s+assume\s+the\s+role\s+of\s+an\s+agent\b", re.I)
_ROLE_SENTENCES = re.compile(
    r"^\s*please\s+assume\s+the\s+role\s+of\s+an\s+agent\.\s*"
    r"(?:the\s+video\s+represents\s+your\s+egocentric\s+observations?\s+from\s+the\s+past"
    r"\s+to\s+the\s+present\.\s*)?",
    re.IGNORECASE,
)
_QUESTION_LABEL = re.compile(r"\bquestion\s*:", re.IGNORECASE)
_LEADING_QUESTION_LABEL = re.compile(r"^\s*question\s*:\s*", re.IGNORECASE)
_CHOICES_LABEL = re.compile(r"(?:^|\n)[ \t]*(?:\*\*)?(?:choices|options)(?:\*\*)?[ \t]*:", re.I)
_OPTION_LINE = re.compile(r"^\s*\(?([A-H])\s*[.):]\s*(.*?)\s*$")
_BLANK_RUNS = re.compile(r"\n\s*\n+")


def _clean_stem(text: str) -> str:
    text = _VIDEO_TAG.sub("", text)
    if _ROLE_PREAMBLE.match(text):
        label = _QUESTION_LABEL.search(text)
        text = text[label.start() :] if label else _ROLE_SENTENCES.sub("", text)
    text = _LEADING_QUESTION_LABEL.sub("", text)
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return _BLANK_RUNS.sub("\n", "\n".join(lines)).strip()


def _parse_option_lines(lines: Sequence[str]) -> list[tuple[str, str]]:
    """Options A, B, C... in order; stops at the first line that does not continue them."""
    found: list[tuple[str, str]] = []
    for line in lines:
        if not line.strip():
            continue
        m = _OPTION_LINE.match(line)
        if m is None or m.group(1) != OPTION_LETTERS[len(found) : len(found) + 1]:
            if found:
                break
            continue
        found.append((m.group(1), m.group(2)))
    return found


def parse_choices(question_text: str) -> list[tuple[str, str]]:
    """(letter, text) pairs of a question's options, in order; [] for free-text questions.

    Reads the lines after the first "Choices:" (or "Options:") label; without a label,
    any run of lines "A. ...", "B. ..." starting at A is used. Never raises.
    """
    if not isinstance(question_text, str):
        return []
    label = _CHOICES_LABEL.search(question_text)
    body = question_text[label.end() :] if label else question_text
    return _parse_option_lines(body.splitlines())


def _strip_own_letter(choice: str, letter: str) -> str:
    m = _OPTION_LINE.match(choice)
    if m is not None and m.group(1) == letter and m.group(2):
        return m.group(2)
    return choice


def format_question(question: str, choices: Sequence[str] | None = None) -> str:
    """Canonical question text (see the module docstring for every rule)."""
    if not isinstance(question, str) or not question.strip():
        raise InvalidRequestError("the question is empty; send the question text (choices are optional)")
    label = _CHOICES_LABEL.search(question)
    embedded: list[tuple[str, str]] = []
    embedded_block = ""
    if label is not None:
        embedded_block = question[label.end() :].strip()
        embedded = _parse_option_lines(embedded_block.splitlines())
        question = question[: label.start()]
    stem = _clean_stem(question)
    if not stem:
        raise InvalidRequestError("the question is empty; send the question text (choices are optional)")

    given: list[str] = []
    for i, choice in enumerate(choices or []):
        if not isinstance(choice, str) or not choice.strip():
            raise InvalidRequestError(f"choice {i + 1} is empty")
        if i < len(OPTION_LETTERS):
            choice = _strip_own_letter(choice.strip(), OPTION_LETTERS[i])
        given.append(choice.strip())
    if len(given) > len(OPTION_LETTERS):
        raise InvalidRequestError(
            f"{len(given)} choices given; at most {len(OPTION_LETTERS)} (A-H) are supported"
        )
    if embedded and given and [text for _, text in embedded] != given:
        raise InvalidRequestError(
            "the question already lists choices that differ from the choices given; "
            "pass the choices in one place only"
        )
    options = given or [text for _, text in embedded]
    if not options:
        if embedded_block:  # a choices block we could not read: keep it verbatim
            return f"Question: {stem}\nChoices:\n{embedded_block}"
        return f"Question: {stem}"
    lines = [f"{OPTION_LETTERS[i]}. {text}" for i, text in enumerate(options)]
    return f"Question: {stem}\nChoices:\n" + "\n".join(lines)


def _with_system(system: str, user: str) -> list[ChatMessage]:
    messages: list[ChatMessage] = [{"role": "system", "content": system}] if system.strip() else []
    messages.append({"role": "user", "content": user})
    return messages


def build_reasoning_messages(
    video_text: str, question_text: str, prompts: PromptSet | None = None
) -> list[ChatMessage]:
    """System prompt + user message (agent framing, video text, question with choices).

    Templates ``reasoning.system`` and ``reasoning.user`` of `prompts` (shipped wording by
    default); an empty system template sends no system message.
    """
    prompts = prompts or PromptSet.default()
    user = prompts.render("reasoning.user", video=video_text.strip(), **question_values(question_text))
    return _with_system(prompts.text("reasoning.system"), user)


def build_consistency_messages(
    question_text: str, think_text: str, prompts: PromptSet | None = None
) -> list[ChatMessage]:
    """Messages for the frozen reference model: question, choices and reasoning only."""
    prompts = prompts or PromptSet.default()
    letters = "".join(letter for letter, _ in parse_choices(question_text))
    allowed = ", ".join(letters) if letters else "the option letters"
    user = prompts.render(
        "consistency.user", reasoning=think_text.strip(), letters=allowed, **question_values(question_text)
    )
    return _with_system(prompts.text("consistency.system"), user)
