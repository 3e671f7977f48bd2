"""Turn the perception model's free text into an (action, observation) pair.

The split follows the reference's rule exactly (docs/method.md §3), so a cached reply
gives the same observation text as the reference would:

* first key frame: the whole reply is the observation; the action is ``None``;
* later key frames: the reply is split only when it contains each of the strings "1.",
  "2." and "3." somewhere. Then
  - part 1 is the text after the first "1." that is followed, later on, by a line break,
    optional white space, an optional "###" heading mark, and "2."; it ends there;
  - part 2 is the text after the first "2." up to a line break + optional white space +
    optional "###" + "3.", found the same way;
  - part 3 is everything after the first "3.";
  each part is stripped of surrounding white space. The observation is part 2 and part 3
  joined with one space; part 1 becomes the action.
* the whole reply is the observation, with action ``None``, when a marker string is
  missing or part 2 cannot be found (the reference gets there through an exception).
  Part 1 alone may be missing: the action is then ``None`` but the observation is still
  parts 2 and 3.

Resolved by following the reference (its behaviour, not a reading of the prompt): the
markers are matched anywhere, not only at the start of a line, so "3." inside "3.5 m"
counts; a "1)", "(1)" or "**1.**" numbering is not split; text before part 1 is dropped;
the observation keeps the model's own line breaks and markdown (`render_video_text` may
put it on one line).

One addition: part 1 is mapped onto the ten actions with `normalize_action` ("**Action:**
Moved forward." -> "move forward"); when it names no known motion, its text is kept as
the action, as the reference keeps it. Nothing here raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from embodied_r_ros.core.prompts.perception import ACTIONS

__all__ = ["ParsedFrameText", "parse_frame_description", "normalize_action", "split_numbered_parts"]


@dataclass
class ParsedFrameText:
    """Result of parsing one key frame's perception text."""

    action: str | None
    observation: str
    raw_text: str


# --------------------------------------------------------------------------- the split
# A part ends where a line break, optional white space and an optional "###" heading mark
# come before the next number.
_PART_1 = re.compile(r"1\.(.*?)(?=\n\s*(?:#{3}\s*)?2\.)", re.DOTALL)
_PART_2 = re.compile(r"2\.(.*?)(?=\n\s*(?:#{3}\s*)?3\.)", re.DOTALL)
_PART_3 = re.compile(r"3\.(.*)", re.DOTALL)


def split_numbered_parts(text: str) -> tuple[str | None, str] | None:
    """(part 1 or None, observation) of a pair reply, or None when it is not split."""
    if not all(marker in text for marker in ("1.", "2.", "3.")):
        return None
    part2 = _PART_2.search(text)
    part3 = _PART_3.search(text)
    if part2 is None or part3 is None:
        return None
    part1 = _PART_1.search(text)
    first = part1.group(1).strip() if part1 is not None else None
    return first, part2.group(1).strip() + " " + part3.group(1).strip()


def parse_frame_description(text: str, *, first: bool) -> ParsedFrameText:
    """Split one perception reply into action and observation (see module docstring)."""
    raw = text if isinstance(text, str) else ""
    split = None if first else split_numbered_parts(raw)
    if split is None:
        return ParsedFrameText(action=None, observation=raw, raw_text=raw)
    part1, observation = split
    action = None
    if part1 is not None:
        action = normalize_action(part1) or part1 or None
    return ParsedFrameText(action=action, observation=observation, raw_text=raw)


# --------------------------------------------------------------------------- actions
_MD_NOISE = re.compile(r"\*\*|__|`+|^[ \t]*#{1,6}[ \t]*", re.MULTILINE)
_SPACES = re.compile(r"\s+")
#
# Synonyms accepted by normalize_action (case-insensitive, any inflection listed):
#   translation verbs: move, go, walk, step, fly, advance, travel, strafe, shift, slide,
#       translate, proceed, drive, climb, ascend, descend, rise, raise, drop, lower,
#       elevate, pull, push, retreat, reverse, dolly
#   rotation verbs: rotate, turn, yaw, pan, spin, swivel, veer, look / glance (left/right)
#   tilt verbs: tilt, pitch, look / glance (up/down), tip, nod, angle, point, aim
#   forward:  forward(s), ahead, straight (ahead), onward(s)
#   backward: backward(s), back, rearward(s), in reverse
#   left / right: left(ward(s)) / right(ward(s)); for rotations also
#       counter-clockwise / anti-clockwise (left) and clockwise (right)
#   up: up, upward(s), higher, skyward ; down: down, downward(s), lower
# A verb and its direction may be up to four words apart within one sentence
# ("turned slightly to the left"). Stand-alone words: advance/proceed -> move forward,
# back up/reverse/retreat -> move backward, ascend/climb/rise/gain altitude -> move
# upward, descend/lose altitude -> move downward. A bare direction word is enough for
# forward/backward/upward/downward ("Forward."); a bare "left"/"right" is ambiguous
# (move or rotate) and gives None. When several motions are named, the earliest one wins.

_FWD = r"(?:forwards?|ahead|straight(?:\s+ahead)?|onwards?)"
_BWD = r"(?:backwards?|back|rearwards?|in\s+reverse)"
_LEFT = r"(?:left(?:wards?)?)"
_RIGHT = r"(?:right(?:wards?)?)"
_CCW = r"(?:counter-?\s?clockwise|anti-?\s?clockwise)"
_CW = r"(?<![-\w])(?<!counter )(?<!anti )clockwise"
_UP = r"(?:up|upwards?|higher|skywards?)"
_DOWN = r"(?:down|downwards?|lower)"

_MOVE_V = (
    r"(?:mov(?:e|es|ed|ing)|go(?:es|ing|ne)?|went|walk(?:s|ed|ing)?|step(?:s|ped|ping)?"
    r"|fl(?:y|ies|ew|ying|own)|advanc(?:e|es|ed|ing)|travel(?:s|led|ed|ling|ing)?"
    r"|strafe[sd]?|strafing|shift(?:s|ed|ing)?|slid(?:e|es|ing)?|translat(?:e|es|ed|ing)"
    r"|proceed(?:s|ed|ing)?|driv(?:e|es|en|ing)|drove|climb(?:s|ed|ing)?"
    r"|ascend(?:s|ed|ing)?|descend(?:s|ed|ing)?|ris(?:e|es|en|ing)|rose|rais(?:e|es|ed|ing)"
    r"|drop(?:s|ped|ping)?|lower(?:s|ed|ing)?|elevat(?:e|es|ed|ing)|pull(?:s|ed|ing)?"
    r"|push(?:es|ed|ing)?|retreat(?:s|ed|ing)?|revers(?:e|es|ed|ing)|doll(?:y|ies|ied|ying))"
)
_ROT_V = (
    r"(?:rotat(?:e|es|ed|ing|ion)|turn(?:s|ed|ing)?|yaw(?:s|ed|ing)?|pan(?:s|ned|ning)?"
    r"|spin(?:s|ning)?|spun|swivel(?:s|ed|led|ing|ling)?|veer(?:s|ed|ing)?"
    r"|look(?:s|ed|ing)?|glanc(?:e|es|ed|ing))"
)
_TILT_V = (
    r"(?:tilt(?:s|ed|ing)?|pitch(?:es|ed|ing)?|look(?:s|ed|ing)?|glanc(?:e|es|ed|ing)"
    r"|tip(?:s|ped|ping)?|nod(?:s|ded|ding)?|angl(?:e|es|ed|ing)|point(?:s|ed|ing)?"
    r"|aim(?:s|ed|ing)?)"
)
# Up to four filler words between verb and direction, never across . ; : ! ? or newline.
_GAP = r"(?:[^\w.;:!?\n]+\w+){0,4}?[^\w.;:!?\n]+"


def _rule(verb: str, direction: str) -> str:
    return rf"\b{verb}{_GAP}{direction}\b"


_ACTION_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p, re.IGNORECASE), action)
    for p, action in [
        (r"\bback(?:s|ed|ing)?\s+up\b", "move backward"),
        (_rule(_ROT_V, _LEFT), "rotate left"),
        (_rule(_ROT_V, _RIGHT), "rotate right"),
        (_rule(_ROT_V, _CCW), "rotate left"),
        (_rule(_ROT_V, _CW), "rotate right"),
        (_rule(_TILT_V, _UP), "tilt upward"),
        (_rule(_TILT_V, _DOWN), "tilt downward"),
        (_rule(_MOVE_V, _FWD), "move forward"),
        (_rule(_MOVE_V, _BWD), "move backward"),
        (_rule(_MOVE_V, _LEFT), "move left"),
        (_rule(_MOVE_V, _RIGHT), "move right"),
        (_rule(_MOVE_V, _UP), "move upward"),
        (_rule(_MOVE_V, _DOWN), "move downward"),
        (r"\b(?:advanc(?:e|es|ed|ing)|proceed(?:s|ed|ing)?)\b", "move forward"),
        (r"\b(?:revers(?:e|es|ed|ing)|retreat(?:s|ed|ing)?)\b", "move backward"),
        (
            r"\b(?:ascend(?:s|ed|ing)?|climb(?:s|ed|ing)?|ris(?:e|es|en|ing)|rose"
            r"|gain(?:s|ed|ing)?\s+(?:some\s+)?altitude)\b",
            "move upward",
        ),
        (
            r"\b(?:descend(?:s|ed|ing)?|los(?:e|es|t|ing)\s+(?:some\s+)?altitude)\b",
            "move downward",
        ),
    ]
]

_BARE_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\b(?:forwards?|ahead)\b", re.IGNORECASE), "move forward"),
    (re.compile(r"\bbackwards?\b", re.IGNORECASE), "move backward"),
    (re.compile(r"\bupwards?\b", re.IGNORECASE), "move upward"),
    (re.compile(r"\bdownwards?\b", re.IGNORECASE), "move downward"),
]
_WHOLE_WORD = {"up": "move upward", "down": "move downward"}
_LABEL = re.compile(r"^\s*(?:the\s+)?(?:action|movement|motion)(?:\s+taken)?\s*[:\-]\s*", re.I)


def normalize_action(text: str) -> str | None:
    """Map a free-text motion to one of ``ACTIONS``; ``None`` if none is recognisable.

    See the synonym table above. Markdown, labels like "**Action:**" and casing are
    ignored. Never raises.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    clean = _LABEL.sub("", _SPACES.sub(" ", _MD_NOISE.sub("", text)).strip())
    lowered = clean.lower().strip(" .!,;:")
    if lowered in ACTIONS:
        return lowered
    best: tuple[int, int, int] | None = None
    best_action: str | None = None
    for rank, (pattern, action) in enumerate(_ACTION_RULES):
        m = pattern.search(clean)
        if m is None:
            continue
        key = (m.start(), m.end(), rank)
        if best is None or key < best:
            best, best_action = key, action
    if best_action is not None:
        return best_action
    if lowered in _WHOLE_WORD:
        return _WHOLE_WORD[lowered]
    for pattern, action in _BARE_RULES:
        if pattern.search(clean):
            return action
    return None
