"""What an answer was built from: the key frames its prompt held and those its reasoning
names ("Frame 7"), each with stamp, pose and key-frame index, and the best one to go to.

The prompt numbers frames 0..n-1 by position; `frames_named` reads "Frame 7" / "frames 3
and 5" back to those positions. The best frame (the goal a navigation behaviour may
drive to) is, among frames that have a pose: the named frame most relevant to the
question, else the last named one, else the most relevant frame of the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from embodied_r_ros.core.memory.store import KeyFrameRecord, StoredPose

__all__ = ["EvidenceItem", "build_evidence", "frames_named", "best_evidence"]

_FRAME_REF = re.compile(r"\bframes?\s+((?:\d+)(?:\s*(?:,|and|&|-|to)\s*\d+)*)", re.I)
_NUMBER = re.compile(r"\d+")


@dataclass
class EvidenceItem:
    """One key frame behind an answer."""

    episode_id: str
    keyframe_index: int
    stamp_s: float
    position: int  # "Frame <position>" in the prompt
    named: bool  # the reasoning names it
    observation: str = ""
    pose: StoredPose | None = None
    relevance: float = 0.0

    def to_json(self) -> dict[str, Any]:
        pose = None if self.pose is None else vars(self.pose).copy()
        return {"episode_id": self.episode_id, "keyframe_index": self.keyframe_index,
                "stamp_s": self.stamp_s, "position": self.position, "named": self.named,
                "observation": self.observation, "pose": pose, "relevance": self.relevance}


def frames_named(text: str, n_frames: int) -> list[int]:
    """Prompt positions the text refers to ("Frame 7", "frames 2 and 4"), in order of
    first mention, limited to 0..n_frames-1."""
    out: list[int] = []
    for m in _FRAME_REF.finditer(text or ""):
        for number in _NUMBER.findall(m.group(1)):
            i = int(number)
            if 0 <= i < n_frames and i not in out:
                out.append(i)
    return out


def build_evidence(records: Sequence[KeyFrameRecord], reply_text: str,
                   relevance: Mapping[int, float] | None = None) -> list[EvidenceItem]:
    """Evidence items for the frames of a prompt (in prompt order)."""
    named = set(frames_named(reply_text, len(records)))
    relevance = relevance or {}
    return [EvidenceItem(r.episode_id, r.keyframe_index, r.stamp_s, pos, pos in named,
                         r.observation, r.pose, float(relevance.get(r.keyframe_index, 0.0)))
            for pos, r in enumerate(records)]


def best_evidence(items: Sequence[EvidenceItem], reply_text: str = "") -> EvidenceItem | None:
    """The key frame to point to (see the module docstring); None without any pose."""
    posed = [e for e in items if e.pose is not None]
    if not posed:
        return None
    order = frames_named(reply_text, len(items))
    named = [e for e in posed if e.named]
    if named:
        if any(e.relevance for e in named):
            return max(named, key=lambda e: e.relevance)
        return max(named, key=lambda e: order.index(e.position) if e.position in order else -1)
    relevant = [e for e in posed if e.relevance]
    if relevant:
        return max(relevant, key=lambda e: e.relevance)
    return None
