"""Multiple-choice questions about the synthetic clip, graded from its geometry.

Every answer is computed from the scene: which object pixels were drawn in which frame,
where the objects stand, and the scripted camera path. Questions whose answer would sit
close to a decision boundary (an object almost exactly behind, two objects at nearly the
same distance) are avoided, so the ground truth is unambiguous. The correct option's
letter is drawn among the letters least used so far by questions with as many options:
balanced within a clip, uniform for every kind across clips.

Records follow the dataset format (Question_id, video_id, question_category, question,
answer, scene_name) and add ``question_text`` and ``choices`` (options without letters)
for the AskSpatial service, plus ``answer_text`` and a ``ground_truth`` dict that shows
the numbers the answer came from.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.types import OPTION_LETTERS
from embodied_r_ros.sample_data.scene import SyntheticClip

__all__ = ["BACK_RULE", "NO_TURN", "QUESTION_KINDS", "QUESTION_TEXTS", "SAMPLE_KINDS", "format_question",
           "make_questions", "progress_choices", "route_choices"]

LETTERS = OPTION_LETTERS
BACK_RULE = "An object is to my back if I would have to turn at least 135 degrees in order to face it."
NO_TURN = "I did not turn again"
# The wording of each question kind that names objects (str.format fields in braces); the
# reasoning curriculum (training/mini_world/curriculum.py) asks its text episodes the same.
QUESTION_TEXTS = {
    "appearance_order": "What is the order in which the following objects first appear in the video: {names}?",
    "direction_now": ("Where I am standing now, at the end of the video, and facing the way I face now, "
                      "is the {name} to my left, right, or back? " + BACK_RULE),
    "direction_then": ("At the moment I first saw the {anchor}, was the {name} to my left, right, "
                       "or back? " + BACK_RULE),
    "next_turn": "After I first saw the {name}, what was the next turn I made?",
    "route": "From where I am now, facing the way I face now, how do I get to the {name}?",
    "landmark_position": "At the end of the video, where is the {name} relative to me?",
    "progress": "Which list gives, in order, the first {count} movements I made in the video?",
}


def route_choices(side: str, turn_deg: int, dist: float) -> tuple[str, list[str]]:
    """(correct, distractors) of a route-planning question: turn `turn_deg` degrees to
    `side`, then walk `dist` metres."""
    other = "right" if side == "left" else "left"
    alt_deg = 135 if turn_deg != 135 else 45
    correct = f"rotate {side} about {turn_deg} degrees, then move forward about {dist:.1f} m"
    return correct, [
        f"rotate {other} about {turn_deg} degrees, then move forward about {dist:.1f} m",
        f"rotate {side} about {alt_deg} degrees, then move forward about {dist:.1f} m",
        f"move backward about {dist:.1f} m",
    ]


def format_question(text: str, choices: list[str]) -> str:
    """The dataset form: "Question: ...\\nChoices:\\nA. ...\\nB. ..."."""
    if not 2 <= len(choices) <= len(LETTERS):
        raise InvalidRequestError(f"need 2..{len(LETTERS)} choices, got {len(choices)}")
    lines = [f"Question: {text}", "Choices:"]
    lines += [f"{LETTERS[i]}. {c}" for i, c in enumerate(choices)]
    return "\n".join(lines)


def _bearing(from_xy: tuple[float, float], heading_rad: float, to_xy: tuple[float, float]) -> float:
    """Angle (deg, CCW positive = left) of `to_xy` seen from `from_xy` facing `heading_rad`."""
    ang = math.atan2(to_xy[1] - from_xy[1], to_xy[0] - from_xy[0]) - heading_rad
    return math.degrees((ang + math.pi) % (2 * math.pi) - math.pi)


def _lrb(bearing_deg: float, margin: float) -> str | None:
    """left/right/back for a bearing, or None when within `margin` of a boundary
    (0 for left vs right, ±135 for back) or nearly straight ahead."""
    b = abs(bearing_deg)
    if b >= 135 + margin:
        return "back"
    if margin + 20 <= b <= 135 - margin:
        return "left" if bearing_deg > 0 else "right"
    return None


class _Builder:
    """Collects records and rotates the correct letter."""

    def __init__(self, clip: SyntheticClip, video_id: str, seed: int) -> None:
        self.clip = clip
        self.video_id = video_id
        self.rng = np.random.default_rng(seed)
        self.records: list[dict[str, Any]] = []
        self.letter_counts: dict[tuple[int, str], int] = {}

    def add(
        self, category: str, text: str, correct: str, distractors: list[str], truth: dict[str, Any]
    ) -> None:
        options = [correct] + [d for d in dict.fromkeys(distractors) if d != correct]
        n = len(options)
        # The answer goes on a letter least used so far by this clip's questions with as
        # many options, drawn at random among those: the letters stay balanced within a
        # clip, and the letter of any one kind of question is uniform across clips (a
        # fixed tie-break would put, e.g., every 4-option question on D after three
        # 3-option ones, which a model learns from the question text alone).
        used = [self.letter_counts.get((n, LETTERS[i]), 0) for i in range(n)]
        least = [i for i in range(n) if used[i] == min(used)]
        target = int(least[int(self.rng.integers(len(least)))])
        self.letter_counts[(n, LETTERS[target])] = used[target] + 1
        others = options[1:]
        order = self.rng.permutation(len(others))
        others = [others[i] for i in order]
        choices = others[:target] + [correct] + others[target:]
        letter = LETTERS[target]
        self.records.append(
            {
                "Question_id": f"{self.clip.scene_name}_q{len(self.records):02d}",
                "video_id": self.video_id,
                "question_category": category,
                "question": format_question(text, choices),
                "answer": letter,
                "scene_name": self.clip.scene_name,
                "question_text": text,
                "choices": choices,
                "answer_text": correct,
                "ask_time_s": round(self.clip.stamps_s[-1], 6),
                "ground_truth": truth,
            }
        )


def _appearance_order(b: _Builder) -> None:
    clip = b.clip
    found = [(clip.first_seen(o.name), o.name) for o in clip.objects]
    seen = sorted((t, n) for t, n in found if t is not None)
    # Four objects whose first appearances are at least a second apart.
    picked: list[tuple[float, str]] = []
    for t, n in seen:
        if not picked or t - picked[-1][0] >= 1.0:
            picked.append((t, n))
    if len(picked) < 4:
        return
    picked = picked[:4]
    names = [n for _, n in picked]
    listed = sorted(names)  # ask in a neutral (alphabetical) order
    correct = ", ".join(names)
    perms = [", ".join(p) for p in itertools.permutations(names) if list(p) != names]
    idx = b.rng.choice(len(perms), size=3, replace=False)
    b.add(
        "appearance_order",
        QUESTION_TEXTS["appearance_order"].format(names=", ".join(listed)),
        correct,
        [perms[i] for i in idx],
        {"first_seen_s": {n: round(t, 3) for t, n in picked}},
    )


def _direction_now(b: _Builder) -> None:
    clip = b.clip
    t_end = clip.stamps_s[-1]
    candidates = []
    for o in clip.objects:
        if clip.first_seen(o.name) is None:
            continue
        side = _lrb(clip.bearing_deg(o.name, t_end), margin=15.0)
        if side is not None:
            candidates.append((o.name, side))
    if not candidates:
        return
    # Prefer an object that is not in view at the end (a memory question).
    hidden = [c for c in candidates if not clip.visible_at(c[0], len(clip.frames) - 1)]
    name, side = (hidden or candidates)[0]
    b.add(
        "object_rel_direction",
        QUESTION_TEXTS["direction_now"].format(name=name),
        side,
        [s for s in ("left", "right", "back") if s != side],
        {"bearing_deg": round(clip.bearing_deg(name, t_end), 2), "time_s": round(t_end, 3)},
    )


def _direction_then(b: _Builder) -> None:
    """Relative direction at an earlier moment: when another object was first seen."""
    clip = b.clip
    found = [(clip.first_seen(o.name), o.name) for o in clip.objects]
    firsts = sorted((t, n) for t, n in found if t is not None and t > 0)
    for t, anchor in firsts:
        for o in clip.objects:
            if o.name == anchor or (seen := clip.first_seen(o.name)) is None or seen > t:
                continue
            side = _lrb(clip.bearing_deg(o.name, t), margin=15.0)
            if side is None:
                continue
            b.add(
                "object_rel_direction",
                QUESTION_TEXTS["direction_then"].format(anchor=anchor, name=o.name),
                side,
                [s for s in ("left", "right", "back") if s != side],
                {"bearing_deg": round(clip.bearing_deg(o.name, t), 2), "time_s": round(t, 3)},
            )
            return


def _direction_allocentric(b: _Builder) -> None:
    """'If I stand by A facing B, is C to my left, right or back?' from object positions."""
    clip = b.clip
    objs = [o for o in clip.objects if clip.first_seen(o.name) is not None]
    for a, c_obj, tgt in itertools.permutations(objs, 3):
        pa, pb, pc = a.position[:2], c_obj.position[:2], tgt.position[:2]
        if math.dist(pa, pb) < 1.5 or math.dist(pa, pc) < 1.5:
            continue
        heading = math.atan2(pb[1] - pa[1], pb[0] - pa[0])
        bearing = _bearing(pa, heading, pc)
        side = _lrb(bearing, margin=20.0)
        if side is None:
            continue
        b.add(
            "object_rel_direction",
            f"If I am standing by the {a.name} and facing the {c_obj.name}, is the {tgt.name} "
            f"to my left, right, or back? {BACK_RULE}",
            side,
            [s for s in ("left", "right", "back") if s != side],
            {"bearing_deg": round(bearing, 2), "standing_by": a.name, "facing": c_obj.name},
        )
        return


def _distance(b: _Builder) -> None:
    clip = b.clip
    objs = [o.name for o in clip.objects if clip.first_seen(o.name) is not None]
    best = None
    for target in objs:
        others = [n for n in objs if n != target]
        if len(others) < 3:
            continue
        for combo in itertools.combinations(others, min(4, len(others))):
            d = sorted((clip.distance_between(target, n), n) for n in combo)
            gap = d[1][0] - d[0][0]
            if best is None or gap > best[0]:
                best = (gap, target, list(combo), d)
    if best is None or best[0] < 0.5:
        return
    _, target, group, d = best
    b.add(
        "object_rel_distance",
        f"Measuring between the centres of the objects on the floor, which of these objects "
        f"({', '.join(group)}) is the closest to the {target}?",
        d[0][1],
        [n for _, n in d[1:]],
        {"distances_m": {n: round(v, 3) for v, n in d}},
    )


def _next_turn(b: _Builder) -> None:
    clip = b.clip
    firsts = sorted((t, o.name) for o in clip.objects if (t := clip.first_seen(o.name)) is not None)
    for t, name in firsts:
        turns = [s for s in clip.segments if s.action.startswith("rotate") and s.start_s >= t]
        if not turns or turns[0].start_s - t < 0.5:
            continue  # want a clear "after"
        correct = turns[0].action
        b.add(
            "action_generation",
            QUESTION_TEXTS["next_turn"].format(name=name),
            correct,
            [a for a in ("rotate left", "rotate right") if a != correct] + [NO_TURN],
            {"first_seen_s": round(t, 3), "turn_start_s": round(turns[0].start_s, 3)},
        )
        return


def _route(b: _Builder) -> None:
    clip = b.clip
    t_end = clip.stamps_s[-1]
    for o in clip.objects:
        bearing = clip.bearing_deg(o.name, t_end)
        if not 30.0 <= abs(bearing) <= 150.0 or clip.first_seen(o.name) is None:
            continue
        # Round the turn to the nearest 45 degrees; skip when that rounding is borderline.
        steps = abs(bearing) / 45.0
        if abs(steps - round(steps)) > 0.35:
            continue
        turn_deg = int(round(steps) * 45)
        dist = clip.distance_from_camera(o.name, t_end)
        correct, distractors = route_choices("left" if bearing > 0 else "right", turn_deg, dist)
        b.add(
            "route_planning",
            QUESTION_TEXTS["route"].format(name=o.name),
            correct,
            distractors,
            {"bearing_deg": round(bearing, 2), "distance_m": round(dist, 3), "time_s": round(t_end, 3)},
        )
        return


_SWAP = {"left": "right", "right": "left", "forward": "backward", "backward": "forward",
         "upward": "downward", "downward": "upward"}


def _swapped(actions: list[str], verb: str) -> list[str]:
    """`actions` with the direction of every action of `verb` ("rotate", "move") reversed."""
    return [f"{a.split(' ')[0]} {_SWAP.get(a.split(' ')[1], a.split(' ')[1])}" if a.startswith(verb) else a
            for a in actions]


def progress_choices(labels: list[str]) -> tuple[str, list[str]] | None:
    """(correct, distractors) of a progress-evaluation question on the movements `labels`
    ("move forward", "rotate left", ...): the distractors turn the other way, list the
    movements backwards, reverse the moves, or both turn and move the other way; None when
    fewer than two distinct distractors remain."""
    correct = ", ".join(labels)
    mirrored, flipped = _swapped(labels, "rotate"), _swapped(labels, "move")
    candidates = [", ".join(mirrored), ", ".join(labels[::-1]), ", ".join(flipped),
                  ", ".join(_swapped(flipped, "rotate"))]
    distractors = [c for c in dict.fromkeys(candidates) if c != correct][:3]
    return (correct, distractors) if len(distractors) >= 2 else None


def _progress(b: _Builder) -> None:
    clip = b.clip
    labels = [s.action for s in clip.segments[:4]]
    if len(labels) < 3 or (choices := progress_choices(labels)) is None:
        return
    b.add(
        "progress_evaluation",
        QUESTION_TEXTS["progress"].format(count=len(labels)),
        *choices,
        {"segments": [(s.action, s.amount, round(s.start_s, 3), round(s.end_s, 3)) for s in clip.segments[:4]]},
    )


def _landmark_position(b: _Builder) -> None:
    """Where a landmark seen earlier is now, relative to the agent: ahead, left, right or
    behind (four sectors, with a clear margin around each boundary)."""
    clip = b.clip
    t_end = clip.stamps_s[-1]
    sectors = ("ahead", "left", "right", "behind")
    for o in clip.objects:
        if clip.first_seen(o.name) is None:
            continue
        bearing = clip.bearing_deg(o.name, t_end)
        a = abs(bearing)
        if a <= 15.0:
            where = "ahead"
        elif 40.0 <= a <= 115.0:
            where = "left" if bearing > 0 else "right"
        elif a >= 150.0:
            where = "behind"
        else:
            continue
        b.add(
            "landmark_position",
            QUESTION_TEXTS["landmark_position"].format(name=o.name),
            where,
            [s for s in sectors if s != where],
            {"bearing_deg": round(bearing, 2), "time_s": round(t_end, 3)},
        )
        return


# The question makers, in the order make_questions calls them; the sample clip uses the
# first eight, the mini world adds landmark position.
SAMPLE_KINDS: tuple[str, ...] = (
    "appearance_order", "direction_now", "distance", "next_turn", "route", "direction_then",
    "progress", "direction_allocentric",
)
_MAKERS = {
    "appearance_order": _appearance_order,
    "direction_now": _direction_now,
    "distance": _distance,
    "next_turn": _next_turn,
    "route": _route,
    "direction_then": _direction_then,
    "progress": _progress,
    "direction_allocentric": _direction_allocentric,
    "landmark_position": _landmark_position,
}
QUESTION_KINDS: tuple[str, ...] = tuple(_MAKERS)


def make_questions(
    clip: SyntheticClip,
    *,
    video_id: str = "sample",
    seed: int = 0,
    kinds: tuple[str, ...] = SAMPLE_KINDS,
) -> list[dict[str, Any]]:
    """Graded multiple-choice questions about `clip` (deterministic for a seed), one per
    feasible kind of `kinds` (see `QUESTION_KINDS`); the default gives the sample's eight."""
    unknown = [k for k in kinds if k not in _MAKERS]
    if unknown:
        raise InvalidRequestError(f"unknown question kinds {unknown}; use some of {QUESTION_KINDS}")
    b = _Builder(clip, video_id, seed)
    for kind in kinds:
        _MAKERS[kind](b)
    return b.records
