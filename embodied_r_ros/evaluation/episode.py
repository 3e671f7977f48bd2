"""What one replayed bag produced, in the same form for the fast and the live mode:
the reading report, the key frames chosen and the frame descriptions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class KeyFrameRecord:
    index: int  # key-frame index within the episode
    sampled_index: int  # position among the sampled frames
    source_index: int  # position among the bag's frames handed on
    stamp_s: float
    reason: str
    overlap: float

    def key(self) -> tuple[int, int, int, float, str, float]:
        """Comparable form (stamps to the nanosecond, overlap as float32 carries it)."""
        return (self.index, self.sampled_index, self.source_index, round(self.stamp_s, 6),
                self.reason, round(self.overlap, 4))


@dataclass
class DescriptionRecord:
    index: int
    action: str
    action_source: str
    observation: str
    raw_text: str
    latency_s: float


@dataclass
class EpisodeRecord:
    """One bag's replay (one line of the episodes file)."""

    bag: str
    mode: str
    episode_id: str = ""
    read: dict[str, Any] = field(default_factory=dict)  # bag_io.BagReadReport.to_json()
    frames_published: int = 0  # frames handed to the pipeline (fast) or the topic (live)
    frames_received: int = 0  # frames the pipeline counted (live: the node's status)
    undecodable: int = 0
    keyframes: list[KeyFrameRecord] = field(default_factory=list)
    descriptions: list[DescriptionRecord] = field(default_factory=list)
    replay_s: float = 0.0
    questions_asked: int = 0
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
