"""Plain data types passed between the core modules (no ROS, no torch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# OpenAI-style chat message: {"role": "system"|"user"|"assistant", "content": str}.
ChatMessage = dict[str, Any]

# The option letters of multiple-choice questions (the datasets use at most eight, A-H).
OPTION_LETTERS = "ABCDEFGH"


@dataclass(frozen=True)
class Frame:
    """One camera frame: an RGB uint8 image of shape (H, W, 3) and its stream time."""

    image: np.ndarray
    stamp_s: float
    index: int = 0  # position among all frames received (source frame number)
    frame_id: str = ""


@dataclass
class FrameDescription:
    """The perception model's text for one key frame, parsed."""

    keyframe_index: int
    observation: str
    action: str | None = None  # one of core.perception_prompts.ACTIONS, or None
    raw_text: str = ""
    action_source: str = ""  # "vlm", "odometry" or "" (frame 0 / unknown)
    mode: str = "streaming"  # "streaming" or "on_query"
    latency_s: float = 0.0
    stamp_s: float = 0.0
    episode_id: str = ""  # episode of the key frame described


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings shared by every backend. temperature 0 means greedy."""

    temperature: float = 0.0
    max_new_tokens: int = 512
    top_p: float = 1.0
    seed: int | None = None


@dataclass
class TimingInfo:
    """Seconds spent per stage of one question."""

    perception_s: float = 0.0
    reasoning_s: float = 0.0
    total_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
