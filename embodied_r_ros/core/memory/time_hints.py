"""Time words in a question ("at the start", "two minutes ago", "just now") turned into
places in the episode the selection should look at.

`parse_time_hints` returns `TimeHint`s: ``start`` (the first key frames), ``recent``
(the newest ones) or ``ago`` with `seconds_ago` (key frames whose stamps are nearest to
now - seconds_ago). Numbers may be digits or words up to twenty, "a"/"an" (= 1), "a few"
(= 3), "half an hour" (= 1800 s).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TimeHint", "parse_time_hints", "format_age"]


@dataclass(frozen=True)
class TimeHint:
    kind: str  # "start", "recent" or "ago"
    seconds_ago: float = 0.0


_NUMBERS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty".split())}
_NUMBERS.update({"a": 1, "an": 1, "a few": 3, "few": 3, "a couple of": 2, "couple of": 2})
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
          "hr": 3600.0, "hour": 3600.0}
_NUM = r"(\d+(?:\.\d+)?|a couple of|couple of|a few|few|an|a|" + "|".join(
    sorted((w for w in _NUMBERS if " " not in w and w not in ("a", "an", "few")),
           key=len, reverse=True)) + ")"
_AGO = re.compile(_NUM + r"\s+(seconds?|secs?|s|minutes?|mins?|hours?|hrs?|h)\s+ago\b", re.I)
_HALF_HOUR = re.compile(r"\bhalf an hour ago\b", re.I)
_START = re.compile(r"\b(at|in|near) the (very )?(start|beginning)\b|\bwhen (i|we) (started|"
                    r"began|set off)\b|\binitially\b|\bat first\b|\bstarting (point|position)\b",
                    re.I)
_RECENT = re.compile(r"\bjust now\b|\ba moment ago\b|\brecently\b|\bright now\b|"
                     r"\bcurrently\b|\ba (few|couple of) seconds ago\b", re.I)


def parse_time_hints(question: str) -> list[TimeHint]:
    """The time hints in a question, in the order found (see the module docstring)."""
    hints: list[TimeHint] = []
    if _START.search(question):
        hints.append(TimeHint("start"))
    if _RECENT.search(question):
        hints.append(TimeHint("recent"))
    if _HALF_HOUR.search(question):
        hints.append(TimeHint("ago", 1800.0))
    for m in _AGO.finditer(_HALF_HOUR.sub(" ", question)):
        word = m.group(1).lower()
        number = float(word) if word[0].isdigit() else float(_NUMBERS.get(word, 1))
        unit = m.group(2).lower().rstrip("s") or "s"
        seconds = number * _UNITS.get(unit, 1.0)
        if seconds <= 30 and any(h.kind == "recent" for h in hints):
            continue
        hints.append(TimeHint("ago", seconds))
    return hints


def format_age(seconds: float) -> str:
    """'12 s', '12 min', '2 h 5 min': how long before now a key frame was seen."""
    seconds = max(0.0, float(seconds))
    if seconds < 60:
        return f"{int(round(seconds))} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
