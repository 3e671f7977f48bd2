"""Parse the reasoning LM's ``<think>...</think><answer>...</answer>`` output.

Nothing here raises, whatever the text.

Parts of :func:`parse_reasoning_output`:

* ``think``: the content of the first complete ``<think>...</think>`` block; if only a
  closing ``</think>`` exists (templates that pre-fill ``<think>``), the text before it;
  if ``<think>`` is never closed, the text after it up to ``<answer>`` or the end.
* ``answer``: the content of the last complete ``<answer>...</answer>`` block (the
  text between the last ``</answer>`` and the ``<answer>`` nearest before it); else the
  text after an unclosed ``<answer>``; else the text after the last ``</think>``; else (no
  tags at all) the whole text. Always stripped.
* ``well_formed``: :func:`is_well_formed` (the format reward's rule).
* ``letter``: :func:`extract_letter` of ``answer``. For free-text questions call with
  ``valid_letters=""`` and the letter is always ``None`` (the answer text is kept).

Letter precedence in :func:`extract_letter` (first rule that yields a letter wins; only
letters in ``valid_letters`` count):

1. Markdown (``*``, ``_``, backquotes), surrounding whitespace/quotes and a leading
   label ("Answer:", "Final answer is", "The correct option is", "Option", "Choice") are
   removed.
2. The remainder is a single letter, any case: ``"B"``, ``"b"``.
3. It starts with a letter, any case, closed by ``.``, ``)``, ``:`` or ``,`` or wrapped
   in ``( )``/``[ ]``: ``"B."``, ``"(b)"``, ``"B) left"``, ``"[C]"``. A lowercase letter
   followed by a space and more words ("a chair") does not count - it reads as a word.
4. A phrase anywhere: "answer is B", "option (C)", "choice: D", "answer: b"
   (the last such phrase wins).
5. Exactly one distinct stand-alone upper-case letter in the text ("I pick B as
   well"); an "A" followed by a lower-case word is read as the article and ignored.
6. Otherwise ``None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from embodied_r_ros.core.types import OPTION_LETTERS

__all__ = [
    "ParsedAnswer",
    "parse_reasoning_output",
    "extract_letter",
    "extract_choice_letter_reply",
    "is_well_formed",
]

DEFAULT_LETTERS = OPTION_LETTERS  # the one definition lives in core.types


@dataclass
class ParsedAnswer:
    """The parts of one reasoning output."""

    think: str
    answer: str
    letter: str | None
    well_formed: bool


_WELL_FORMED = re.compile(
    r"\A\s*<think>(?P<think>.*?)</think>\s*<answer>(?P<answer>.*?)</answer>\s*\Z", re.DOTALL
)


def is_well_formed(text: str) -> bool:
    """True iff the text is exactly <think>..</think> then <answer>..</answer>.

    Whitespace is allowed before, between and after; each of the four tags must occur
    exactly once (so nested or repeated tags fail). Empty blocks are allowed.
    """
    if not isinstance(text, str):
        return False
    if any(text.count(tag) != 1 for tag in ("<think>", "</think>", "<answer>", "</answer>")):
        return False
    return _WELL_FORMED.match(text) is not None


def _think_part(text: str) -> str:
    # str.find instead of a lazy regex keeps this linear on texts with many open tags.
    start = text.find("<think>")
    if start >= 0:
        close = text.find("</think>", start + len("<think>"))
        if close >= 0:
            return text[start + len("<think>") : close].strip()
    close = text.find("</think>")
    if close >= 0:
        return text[:close].replace("<think>", "").strip()
    start = text.find("<think>")
    if start >= 0:
        rest = text[start + len("<think>") :]
        stop = rest.find("<answer>")
        return (rest if stop < 0 else rest[:stop]).strip()
    return ""


def _answer_part(text: str) -> str:
    close = text.rfind("</answer>")
    if close >= 0:
        start = text.rfind("<answer>", 0, close)
        if start >= 0:
            return text[start + len("<answer>") : close].strip()
    start = text.rfind("<answer>")
    if start >= 0:
        return text[start + len("<answer>") :].strip()
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>") :].strip()
    if "<think>" in text:  # unclosed think and no answer: no answer given
        return ""
    return text.strip()


def parse_reasoning_output(text: str, valid_letters: str = DEFAULT_LETTERS) -> ParsedAnswer:
    """Split a reasoning output into think, answer, letter (see module docstring)."""
    if not isinstance(text, str):
        text = ""
    answer = _answer_part(text)
    return ParsedAnswer(
        think=_think_part(text),
        answer=answer,
        letter=extract_letter(answer, valid_letters),
        well_formed=is_well_formed(text),
    )


_MARKDOWN = re.compile(r"[*_`]+")
_LABEL = re.compile(
    r"^(?:(?:so|thus|therefore|hence)[,\s]+)?(?:my\s+|the\s+)?(?:final\s+|correct\s+|best\s+)?"
    r"(?:answer|option|choice)s?\b(?:\s+is)?\s*[:\-=]?\s*",
    re.IGNORECASE,
)
_PHRASE = re.compile(
    r"\b(?:answer|option|choice)(?:\s+(?:is|would\s+be|should\s+be))?\s*[:\-=]?\s*"
    r"[(\[]?([A-Ha-h])\b(?![\w'])",
    re.IGNORECASE,
)


# "A" followed by a lower-case word other than a conjunction reads as the article.
_ARTICLE_NEXT = re.compile(r"\s+(?!(?:and|or|nor|vs|versus)\b)[a-z]")


def extract_letter(answer_text: str, valid_letters: str = DEFAULT_LETTERS) -> str | None:
    """The option letter an answer text names, or None (precedence in module docstring)."""
    if not isinstance(answer_text, str) or not valid_letters:
        return None
    valid = valid_letters.upper()
    text = _MARKDOWN.sub("", answer_text).strip().strip("\"'").strip()
    text = _LABEL.sub("", text, count=1).strip()

    def ok(letter: str) -> str | None:
        up = letter.upper()
        return up if len(up) == 1 and up in valid else None

    # Rule 2: the whole answer is one letter.
    if len(text.rstrip(".!")) == 1:
        return ok(text.rstrip(".!"))
    # Rule 3: a leading letter closed by punctuation or bracketed.
    m = re.match(r"^[(\[]\s*([A-Za-z])\s*[)\]]", text) or re.match(
        r"^([A-Za-z])\s*[.):,](?!\w)", text
    )
    if m is not None:
        return ok(m.group(1))
    # Rule 4: "answer is B", "option (C)" anywhere; the last one wins.
    phrases = [ok(p) for p in _PHRASE.findall(text)]
    phrases = [p for p in phrases if p]
    if phrases:
        return phrases[-1]
    # Rule 5: exactly one distinct stand-alone capital letter (ignoring the article "A").
    letters = set()
    for m in re.finditer(r"(?<![\w'])([A-Z])(?![\w'])", text):
        letter = m.group(1)
        if letter == "A" and _ARTICLE_NEXT.match(text[m.end() :]):
            continue
        if letter in valid:
            letters.add(letter)
    if len(letters) == 1:
        return letters.pop()
    return None


def extract_choice_letter_reply(text: str, valid_letters: str = DEFAULT_LETTERS) -> str | None:
    """The letter in the consistency reference model's short reply, or None.

    Uses the ``<answer>`` block when there is one, else the text after ``</think>``,
    else the whole reply; then :func:`extract_letter`.
    """
    if not isinstance(text, str):
        return None
    if "<answer>" in text or "</think>" in text:
        return extract_letter(_answer_part(text), valid_letters)
    return extract_letter(text, valid_letters)
