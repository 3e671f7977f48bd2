"""Frame descriptions written from the renderer's per-pixel labels (no model involved).

The mini world trains its perception model on these texts and uses them as the upper
bound of the results table (descriptions a perfect perception model would write). They
answer the robot's two streaming prompts in the shape the core's parser expects:

* first key frame: the objects in view, left to right, each with a position word
  ("red box ahead-left; green door ahead.");
* later key frames: three numbered parts, (1) the action between the two key frames
  (from the known camera poses), (2) objects newly in view, (3) every object in view.

Position words come from where the object's visible pixels lie across the image (what a
camera-only model can see): left, ahead-left, ahead, ahead-right, right.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "POSITION_WORDS",
    "SeenObject",
    "first_caption",
    "frame_objects",
    "motion_action",
    "pair_caption",
    "position_word",
]

POSITION_WORDS: tuple[str, ...] = ("left", "ahead-left", "ahead", "ahead-right", "right")
# An object is named when at least this share of the image shows it (small specks are
# not recognisable at the model's image size).
MIN_SHARE = 0.004
# Rotation between two key frames (degrees) above which the action is a rotation.
MIN_TURN_DEG = 20.0


@dataclass(frozen=True)
class SeenObject:
    """One object in a frame: its name, visible pixels and horizontal centre (0 = left
    edge of the image, 1 = right edge)."""

    name: str
    pixels: int
    centre: float

    def to_json(self) -> list[Any]:
        return [self.name, self.pixels, round(self.centre, 4)]

    @classmethod
    def from_json(cls, row: Sequence[Any]) -> SeenObject:
        return cls(str(row[0]), int(row[1]), float(row[2]))


def position_word(centre: float) -> str:
    """Position word for an object whose visible pixels centre at `centre` (0..1)."""
    k = min(int(max(centre, 0.0) * len(POSITION_WORDS)), len(POSITION_WORDS) - 1)
    return POSITION_WORDS[k]


def frame_objects(labels: np.ndarray, names: Sequence[str], min_share: float = MIN_SHARE) -> list[SeenObject]:
    """Objects visible in one label image (0 = room, k+1 = names[k]), left to right."""
    h, w = labels.shape
    need = max(1, int(min_share * h * w))
    counts = np.bincount(labels.ravel(), minlength=len(names) + 1)
    seen = []
    cols = np.arange(w, dtype=np.float64)
    for k, name in enumerate(names):
        n = int(counts[k + 1])
        if n < need:
            continue
        per_col = (labels == k + 1).sum(axis=0)
        centre = float((per_col * cols).sum() / per_col.sum() + 0.5) / w
        seen.append(SeenObject(name, n, centre))
    return sorted(seen, key=lambda o: o.centre)


def _listing(objects: Sequence[SeenObject]) -> str:
    return "; ".join(f"{o.name} {position_word(o.centre)}" for o in objects)


def first_caption(objects: Sequence[SeenObject]) -> str:
    """Reply to the first-frame prompt."""
    return (_listing(objects) + ".") if objects else "only walls, no objects."


def pair_caption(action: str, previous: Sequence[SeenObject], current: Sequence[SeenObject]) -> str:
    """Reply to the pair prompt: action, newly visible objects, objects in view."""
    before = {o.name for o in previous}
    new = [o for o in current if o.name not in before]
    part2 = ("new: " + _listing(new) + ".") if new else "nothing new."
    part3 = ("in view: " + _listing(current) + ".") if current else "no objects in view."
    return f"1. {action}\n2. {part2}\n3. {part3}"


def motion_action(a: Mapping[str, float], b: Mapping[str, float], min_turn_deg: float = MIN_TURN_DEG) -> str:
    """The one action that best describes going from pose `a` to pose `b` (dicts with
    x, y, yaw): a rotation when the heading changed by at least `min_turn_deg`, else the
    main direction of the move in `a`'s frame."""
    dyaw = math.degrees((b["yaw"] - a["yaw"] + math.pi) % (2 * math.pi) - math.pi)
    if abs(dyaw) >= min_turn_deg:
        return "rotate left" if dyaw > 0 else "rotate right"
    dx, dy = b["x"] - a["x"], b["y"] - a["y"]
    c, s = math.cos(a["yaw"]), math.sin(a["yaw"])
    fwd, left = dx * c + dy * s, -dx * s + dy * c
    if abs(fwd) >= abs(left):
        return "move forward" if fwd >= 0 else "move backward"
    return "move left" if left > 0 else "move right"
