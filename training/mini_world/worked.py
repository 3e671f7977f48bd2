"""Worked reasoning for the mini world's warm-up: a rule-based reading of the descriptions.

The reasoning model is warmed up on worked examples before GRPO. A worked example only
teaches reasoning if its `<think>` text is made of facts the model can find in its own
prompt, so the reasoning here is written from the frame descriptions the model reads (the
perception model's, in training), never from the renderer's labels:

* appearance order: the frame where each listed object is first named;
* action generation: the frame where the object is first named and the next frame whose
  action is a turn;
* progress evaluation: the first action between key frames, the first turn, and (when an
  option moves backward and the frames never do) that no move was backward;
* where an object is now or was at a moment (relative direction, landmark position,
  route planning): where it was last named, and the turns since; each turn of a key frame
  counts `TURN_DEG` degrees (chosen on training rooms), a position word counts the middle
  of its fifth of the 70-degree view.

The reading's decision (its last sentence) names the chosen option's text as the option
writes it (for route planning, its start); the worked examples then add the option scan
(`with_scan`: "A. right: no; B. left: yes."), so the answer's letter is copied, not looked up.
The reading ends in an answer text; `lm_sft.worked_reasoning` keeps it only when that text is the
graded answer of the question (the rule-based reading fails where perception missed an
object, and on kinds it cannot read: relative distance and "standing by A facing B"
questions get a one-sentence reasoning naming the answer, as before).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from embodied_r_ros.core.prompts.reasoning import parse_choices
from embodied_r_ros.sample_data.captions import POSITION_WORDS
from embodied_r_ros.sample_data.questions import LETTERS, NO_TURN, QUESTION_TEXTS

# Degrees one turning key frame counts. On training rooms, with the robot's key-frame
# rules, a turning key frame changes the heading by 47.5 degrees on average (the camera
# scripts turn 45, 90 or 135 degrees at a time); 55 read the label-derived descriptions of
# training rooms best (tried 47.5, 55, 60).
TURN_DEG = 55.0
HFOV_DEG = 70.0
_POSITION_BEARING = {w: (0.5 - (i + 0.5) / len(POSITION_WORDS)) * HFOV_DEG for i, w in enumerate(POSITION_WORDS)}
_NAME = r"[a-z]+ (?:box|ball|pillar|cabinet|door)"
_ITEM = re.compile(rf"({_NAME}) ({'|'.join(sorted(POSITION_WORDS, key=len, reverse=True))})\b")


@dataclass
class Frame:
    index: int
    action: str | None
    seen: dict[str, str] = field(default_factory=dict)  # object -> position word


def parse_frames(frames: Sequence[Mapping[str, Any]]) -> list[Frame]:
    """The cached record's frames (index, action, observation) -> objects named per frame."""
    out = []
    for f in frames:
        seen: dict[str, str] = {}
        for m in _ITEM.finditer(str(f.get("observation") or "")):
            seen[m.group(1)] = m.group(2)
        out.append(Frame(int(f["index"]), f.get("action"), seen))
    return out


def _first(frames: Sequence[Frame], name: str) -> int | None:
    return next((k for k, f in enumerate(frames) if name in f.seen), None)


def _turn_sign(action: str | None) -> int:
    return {"rotate left": 1, "rotate right": -1}.get(action or "", 0)


def _bearing_at(frames: Sequence[Frame], name: str, upto: int) -> tuple[str, float] | None:
    """(reasoning, bearing in degrees, left positive) of `name` at frame `upto`, from where
    it was last named at or before `upto` and the turns since."""
    last = next((k for k in range(upto, -1, -1) if name in frames[k].seen), None)
    if last is None:
        return None
    word = frames[last].seen[name]
    turns = [frames[k].action for k in range(last + 1, upto + 1) if _turn_sign(frames[k].action)]
    bearing = _POSITION_BEARING[word] - TURN_DEG * sum(_turn_sign(a) for a in turns)
    bearing = (bearing + 180.0) % 360.0 - 180.0
    text = f"The {name} was {word} in frame {last}."
    if turns:
        text += " Since then I turned: " + ", ".join(str(a) for a in turns) + "."
    else:
        text += " I have not turned since."
    return text, bearing


def _side(bearing: float) -> str:
    if abs(bearing) >= 135.0:
        return "back"
    return "left" if bearing > 0 else "right"


def _sector(bearing: float) -> str:
    a = abs(bearing)
    if a < 27.5:
        return "ahead"
    if a > 132.5:
        return "behind"
    return "left" if bearing > 0 else "right"


_Q_ALLOCENTRIC = re.compile(r"If I am standing by the")
_Q_NOW = re.compile(rf"is the ({_NAME}) to my left")
_Q_THEN = re.compile(rf"first saw the ({_NAME}), was the ({_NAME}) to my")
_Q_LANDMARK = re.compile(rf"where is the ({_NAME}) relative to me")
_Q_ROUTE = re.compile(rf"how do I get to the ({_NAME})")
_Q_TURN = re.compile(rf"After I first saw the ({_NAME}), what was the next turn")
_Q_ORDER = re.compile(r"first appear in the video: (.+)\?")
_Q_PROGRESS = "Question: " + QUESTION_TEXTS["progress"].split("{count}")[0]


def read(question: str, frames: Sequence[Frame]) -> tuple[str, str] | None:
    """(reasoning, answer text) of a rule-based reading of `frames`, or None when the
    question is of a kind the reading does not handle or the frames lack what it needs."""
    q = question.split("\nChoices:", 1)[0]
    choices = [text for _, text in parse_choices(question)]
    if not frames or _Q_ALLOCENTRIC.search(q):
        return None  # "standing by A and facing B" needs where objects stand, not read here
    end = len(frames) - 1
    if m := _Q_ORDER.search(q):
        names = [n.strip() for n in m.group(1).split(",")]
        firsts = {n: _first(frames, n) for n in names}
        if any(v is None for v in firsts.values()):
            return None
        order = sorted(names, key=lambda n: (firsts[n], names.index(n)))
        text = "First named: " + "; ".join(f"{n} in frame {firsts[n]}" for n in names) + "."
        return text + " So the order is " + ", ".join(order) + ".", ", ".join(order)
    if m := _Q_TURN.search(q):
        k = _first(frames, m.group(1))
        if k is None:
            return None
        nxt = next((j for j in range(k + 1, len(frames)) if _turn_sign(frames[j].action)), None)
        text = f"The {m.group(1)} is first named in frame {k}."
        if nxt is None:
            return text + f" No turn comes after it: {NO_TURN}.", NO_TURN
        return text + f" The next turn is in frame {nxt}: {frames[nxt].action}.", str(frames[nxt].action)
    if q.startswith(_Q_PROGRESS):
        moved = [(k, str(f.action)) for k, f in enumerate(frames) if k and f.action]
        actions = [a for _, a in moved]
        turns = [(k, a) for k, a in moved if a.startswith("rotate")]
        if not actions or not turns:
            return None
        fits = []
        backward_ruled_out = False
        for text in choices:
            listed = [a.strip() for a in text.split(",")]
            their = [a for a in listed if a.startswith("rotate")]
            if "move backward" in listed and "move backward" not in actions:
                backward_ruled_out = True
                continue
            if their and their[0] == turns[0][1]:
                fits.append((listed[0].startswith("rotate") == actions[0].startswith("rotate"), text))
        best = [text for same_start, text in fits if same_start] if len(fits) > 1 else [t for _, t in fits]
        if len(best) != 1:
            return None
        # Only the three facts the choice rests on, each one look-up in the prompt (the
        # whole list of actions ran past the answer budget and was copied wrong).
        text = (f"The first move is in frame {moved[0][0]}: {actions[0]}. "
                f"The first turn is in frame {turns[0][0]}: {turns[0][1]}.")
        if backward_ruled_out:
            text += " I did not move backward."
        return text, best[0]
    if m := _Q_THEN.search(q):
        at = _first(frames, m.group(1))
        got = None if at is None else _bearing_at(frames, m.group(2), at)
        if at is None or got is None:
            return None
        text, bearing = got
        return f"I first saw the {m.group(1)} in frame {at}. {text} So it was to my {_side(bearing)}.", _side(bearing)
    for pattern, decide in ((_Q_NOW, _side), (_Q_LANDMARK, _sector)):
        if m := pattern.search(q):
            got = _bearing_at(frames, m.group(1), end)
            if got is None:
                return None
            text, bearing = got
            where = decide(bearing)
            return f"{text} So now it is {'to my ' if where in ('left', 'right', 'back') else ''}{where}.", where
    if m := _Q_ROUTE.search(q):
        got = _bearing_at(frames, m.group(1), end)
        if got is None or abs(bearing := got[1]) < 22.5:
            return None
        turn = int(min(max(round(abs(bearing) / 45.0), 1), 3) * 45)
        side = "left" if bearing > 0 else "right"
        return f"{got[0]} So I rotate {side} about {turn} degrees.", f"rotate {side} about {turn} degrees"
    return None


def match_option(answer_text: str, choices: Sequence[str]) -> int | None:
    """Index of the option the reading's answer names: equal, or (route planning) the
    only option that starts with it."""
    exact = [i for i, c in enumerate(choices) if c == answer_text]
    if exact:
        return exact[0]
    starts = [i for i, c in enumerate(choices) if c.startswith(answer_text)]
    return starts[0] if len(starts) == 1 else None


def _option_key(choice: str) -> str:
    """The words of an option a reading names (route planning: its part before ", then")."""
    return choice.split(", then")[0]


def option_scan(choices: Sequence[str], k: int) -> str:
    """The options in order up to the chosen one `k`, each with its verdict: "A. right: no;
    B. back: no; C. left: yes." (route planning: each option's part before ", then").

    A reasoning ends with it so the answer's letter is copied from right before the "yes"
    instead of looked up by the option's text: in side experiments the tiny model never
    learned that lookup (the loss stayed at chance for 4,400 steps), but answered with the
    scan right 83% of the time after 3,000 steps."""
    return scan_text((i, c, i == k) for i, c in enumerate(choices[: k + 1]))


def scan_text(entries: Iterable[tuple[int, str, bool]]) -> str:
    """A scan written from (letter position, option text, verdict) entries, in the form of
    `option_scan`; the judge's training also writes forged ones with it (`judge.py`)."""
    return "; ".join(f"{LETTERS[pos]}. {_option_key(text)}: {'yes' if yes else 'no'}"
                     for pos, text, yes in entries) + "."


_SCAN = re.compile(r"\s*\b[A-H]\. [^;]*?: (?:no|yes)(?:; [A-H]\. [^;]*?: (?:no|yes))*\.?\s*$")


def strip_scan(think: str) -> str:
    """The reasoning without its trailing option scan (unchanged when it has none)."""
    return _SCAN.sub("", think.strip()).strip()


def with_scan(think: str, choices: Sequence[str], k: int) -> str:
    """A worked reasoning followed by its option scan."""
    return f"{think} {option_scan(choices, k)}"


def named_option(think: str, choices: Sequence[str]) -> int | None:
    """Index of the option a reasoning's decision (its last sentence before the option
    scan) names, by the option's text (route planning: its part before ", then"); the
    longest one when several are named, None when none is or two of the longest length
    are. A rule-based judge of which letter a reading of this module's form supports:
    exact where the consistency judge model guesses."""
    last = strip_scan(think).rstrip(".").rsplit(". ", 1)[-1]
    found = [(len(key), i) for i, c in enumerate(choices) if (key := _option_key(c)) and
             re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", last)]
    if not found:
        return None
    found.sort(reverse=True)
    return found[0][1] if len(found) == 1 or found[0][0] > found[1][0] else None


def letter_follows(think: str, choices: Sequence[str], letter: str | None) -> bool | None:
    """Whether `letter` is the option the reasoning's decision names (`named_option`);
    None when the decision names no single option."""
    k = named_option(think, choices)
    return None if k is None else letter == LETTERS[k]


def vocabulary() -> list[str]:
    """Sentences in the shape of every reading, over every object name, position word and
    action, for the tokenizer's corpus (so a reading is a few tokens per fact)."""
    from embodied_r_ros.core.prompts.perception import ACTIONS
    from embodied_r_ros.sample_data.world import COLOURS, SHAPES

    names = [f"{c} {s}" for c in COLOURS for s in (*SHAPES, "door")]
    out = []
    for k, name in enumerate(names):
        word = POSITION_WORDS[k % len(POSITION_WORDS)]
        act = ACTIONS[k % len(ACTIONS)]
        out += [
            f"First named: {name} in frame {k % 10}; {names[k - 1]} in frame {k % 7}. So the order is {name}, "
            f"{names[k - 1]}.",
            f"The {name} is first named in frame {k % 9}. The next turn is in frame {k % 9 + 1}: {act}. "
            f"No turn comes after it: {NO_TURN}.",
            f"The first move is in frame 1: {act}. The first turn is in frame {k % 9 + 2}: {act}. "
            "I did not move backward.",
            f"A. {word}: no; B. {name}: no; C. {act}: yes.",
            f"I first saw the {name} in frame {k % 8}. The {name} was {word} in frame {k % 6}. Since then I "
            f"turned: {act}. I have not turned since. So it was to my left. So now it is to my back. So now it "
            "is ahead. So now it is behind. So I rotate right about 90 degrees.",
        ]
    return out
