"""Turn the perception model's free text into an (action, observation) pair.

Splitting rules (FACTS §3):

* first key frame: the whole text is the observation and the action is ``None``;
* later key frames: the reply should have three numbered parts. Part 1 becomes the action
  (normalised with :func:`normalize_action`, ``None`` when it names no known motion) and
  parts 2 and 3 joined become the observation. Any text before part 1 is dropped.
* when part 1 or part 2 cannot be found, the whole text is the observation and the
  action is ``None``.

Numbered-part markers are recognised at the start of a line in any of these shapes, with
optional markdown heading ``#``, list bullet, or bold ``**``/``__`` around them:
``1.``, ``1)``, ``1:``, ``(1)``, ``Step 1:``, ``Part 1 -``, ``**1.**``, ``### 1.``.
If no line-start markers are found, inline ``(1) ... (2) ...`` or ``Part 1: ...`` markers
are tried. A number followed by a digit (``1.5 m``) is not a marker.

Observations are returned as one line: markdown emphasis and heading signs are removed
and runs of whitespace (newlines included) become single spaces. Nothing here raises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from embodied_r_ros.core.perception_prompts import ACTIONS

__all__ = ["ParsedFrameText", "parse_frame_description", "normalize_action"]


@dataclass
class ParsedFrameText:
    """Result of parsing one key frame's perception text."""

    action: str | None
    observation: str
    raw_text: str


# --------------------------------------------------------------------------- markers

_LINE_MARKER = re.compile(
    r"^[ \t>]*(?:#{1,6}[ \t]*)?(?:[-*+\u2022][ \t]+)?(?:\*\*|__)?[ \t]*"
    r"(?:(?:step|part|section|item)[ \t]*(?P<a>[1-9])(?![\d.,]\d)"
    r"|\((?P<b>[1-9])\)"
    r"|(?P<c>[1-9])(?=[.):](?!\d)))"
    r"[ \t]*[.):\-\u2013\u2014]*[ \t]*(?:\*\*|__)?[ \t]*[.):\-\u2013\u2014]?",
    re.IGNORECASE | re.MULTILINE,
)

_INLINE_MARKER = re.compile(
    r"(?:\((?P<a>[1-9])\)|\b(?:step|part)[ \t]*(?P<b>[1-9])[ \t]*[:.\-\u2013\u2014])[ \t]*",
    re.IGNORECASE,
)

_MD_NOISE = re.compile(r"\*\*|__|`+|^[ \t]*#{1,6}[ \t]*", re.MULTILINE)
_SPACES = re.compile(r"\s+")


def _one_line(text: str) -> str:
    """Strip markdown emphasis/headings and collapse all whitespace to single spaces."""
    return _SPACES.sub(" ", _MD_NOISE.sub("", text)).strip()


def _markers(pattern: re.Pattern[str], text: str) -> list[tuple[int, int, int]]:
    found = []
    for m in pattern.finditer(text):
        num = next(g for g in m.groups() if g is not None)
        found.append((m.start(), m.end(), int(num)))
    return found


def _split_parts(text: str) -> tuple[str, str, str] | None:
    """Return the text of parts 1, 2, 3 (part 3 may be empty), or None if not numbered."""
    for pattern in (_LINE_MARKER, _INLINE_MARKER):
        marks = _markers(pattern, text)
        chosen: list[tuple[int, int, int]] = []
        for mark in marks:
            wanted = len(chosen) + 1
            if wanted > 3:
                break
            if mark[2] == wanted and (not chosen or mark[0] >= chosen[-1][1]):
                chosen.append(mark)
        if len(chosen) >= 2:
            bounds = [(m[0], m[1]) for m in chosen] + [(len(text), len(text))]
            parts = [text[bounds[i][1] : bounds[i + 1][0]] for i in range(len(chosen))]
            while len(parts) < 3:
                parts.append("")
            return parts[0], parts[1], parts[2]
    return None


def _join_sentences(first: str, second: str) -> str:
    """Join two observation parts; add a full stop when the first lacks end punctuation."""
    if not first or not second:
        return first or second
    sep = " " if first[-1] in ".!?;:" else ". "
    return first + sep + second


def parse_frame_description(text: str, *, first: bool) -> ParsedFrameText:
    """Split one perception reply into action and observation (see module docstring)."""
    raw = text if isinstance(text, str) else ""
    if first:
        return ParsedFrameText(action=None, observation=_one_line(raw), raw_text=raw)
    parts = _split_parts(raw)
    if parts is None:
        return ParsedFrameText(action=None, observation=_one_line(raw), raw_text=raw)
    action = normalize_action(parts[0])
    observation = _join_sentences(_one_line(parts[1]), _one_line(parts[2]))
    return ParsedFrameText(action=action, observation=observation, raw_text=raw)


# --------------------------------------------------------------------------- actions
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
