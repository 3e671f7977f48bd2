"""Limits on what a robot request may carry, checked where a question enters.

A question reaches the reasoning model verbatim, and one question at a time is answered:
an oversized question would hold the model (and every other caller) for a long time, and
a choice that carries a line break or another option's marker ("left\\nB. right",
"left B. right") would inject options and change what the letters mean. So a request is
refused with INVALID_REQUEST, naming the limit and the parameter that sets it, when:

* the question is longer than `max_chars` characters, or longer than `max_tokens` tokens
  of the reasoning model's tokenizer (when the backend has one; otherwise the length is
  estimated as one token per 3 characters, an over-estimate for English text);
* a choice is empty, longer than `max_choice_chars`, contains a line break, or contains an
  option marker (a letter A-H followed by ".", ")" or ":" and a space, after a space or
  at its start), other than its own letter at its start (a choice "B. right" given as the
  second option is accepted and read as "right");
* there are more than 8 choices (A-H).

Dataset questions with an embedded "Choices:" block (line breaks between options) are
accepted: the limit on line breaks applies to the separate choices only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.prompts.reasoning import OPTION_LETTERS
from embodied_r_ros.core.settings import QASettings

_MARKER = re.compile(r"(?:^|\s)\(?[A-H]\s*[.):]\s", re.IGNORECASE)
_OWN = re.compile(r"^\s*\(?([A-H])\s*[.):]\s*")


def estimated_tokens(text: str) -> int:
    return math.ceil(len(text) / 3)


def check_request(question: str, choices: Sequence[str], limits: QASettings,
                  count_tokens: Callable[[str], int] | None = None) -> None:
    """Raise InvalidRequestError when the request breaks a limit (module docstring)."""
    if not isinstance(question, str) or not question.strip():
        raise InvalidRequestError("the question is empty; send the question text (choices "
                                  "are optional)")
    if len(question) > limits.max_question_chars:
        raise InvalidRequestError(f"the question has {len(question)} characters; at most "
                                  f"{limits.max_question_chars} are accepted "
                                  "(qa.max_question_chars)")
    tokens = count_tokens(question) if count_tokens is not None else estimated_tokens(question)
    if tokens > limits.max_question_tokens:
        raise InvalidRequestError(f"the question is {tokens} tokens long; at most "
                                  f"{limits.max_question_tokens} are accepted "
                                  "(qa.max_question_tokens)")
    if len(choices) > len(OPTION_LETTERS):
        raise InvalidRequestError(f"{len(choices)} choices given; at most "
                                  f"{len(OPTION_LETTERS)} (A-H) are supported")
    for i, choice in enumerate(choices):
        number = i + 1
        if not isinstance(choice, str) or not choice.strip():
            raise InvalidRequestError(f"choice {number} is empty")
        if "\n" in choice or "\r" in choice:
            raise InvalidRequestError(f"choice {number} contains a line break; send each "
                                      "option as one line")
        if len(choice) > limits.max_choice_chars:
            raise InvalidRequestError(f"choice {number} has {len(choice)} characters; at most "
                                      f"{limits.max_choice_chars} (qa.max_choice_chars)")
        text = choice.strip()
        own = _OWN.match(text)
        if own is not None and own.group(1).upper() == OPTION_LETTERS[i]:
            text = text[own.end():]
        marker = _MARKER.search(text)
        if marker is not None:
            raise InvalidRequestError(
                f"choice {number} ({choice!r}) contains an option marker "
                f"({marker.group(0).strip()!r}); send each option as its own choice, "
                "without letters")
