"""Protocol-conformant scripted models for tests that need a reply of a known shape (a tiny
random model cannot be made to emit a given answer) or controlled timing, plus the
helper that feeds a rendered clip into a pipeline."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from embodied_r_ros.core.backends.base import PerceptionRequest, StopCheck, TextCallback
from embodied_r_ros.core.errors import CancelledError
from embodied_r_ros.core.types import ChatMessage, GenerationSettings

if TYPE_CHECKING:
    from embodied_r_ros.core.pipeline import EmbodiedRPipeline
    from embodied_r_ros.sample_data.scene import SyntheticClip


class ScriptedReasoner:
    """Protocol-conformant Reasoner returning a fixed reply, streaming it word by word."""

    name = "scripted"

    def __init__(self, reply: str, delay_s: float = 0.0) -> None:
        self.reply, self.delay_s = reply, delay_s
        self.calls: list[list[ChatMessage]] = []

    def generate(self, messages: Sequence[ChatMessage], settings: GenerationSettings | None = None,
                 on_text: TextCallback | None = None, should_stop: StopCheck | None = None) -> str:
        self.calls.append(list(messages))
        out = ""
        for word in self.reply.split(" "):
            if should_stop is not None and should_stop():
                raise CancelledError("stopped")
            time.sleep(self.delay_s)
            piece = word if not out else " " + word
            out += piece
            if on_text is not None:
                on_text(piece)
        return out

    def generate_batch(self, conversations: Sequence[Sequence[ChatMessage]],
                       settings: GenerationSettings | None = None) -> list[str]:
        return [self.generate(c, settings) for c in conversations]

    def close(self) -> None:
        pass


class CountingPerceiver:
    """Protocol-conformant Perceiver: says how many images it saw."""

    name = "counting"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def describe(self, images: Sequence[np.ndarray], prompt: str,
                 settings: GenerationSettings | None = None) -> str:
        self.calls.append(len(images))
        if len(images) == 1:
            return "A textured room seen from the start."
        return "1. rotate left\n2. a red box appears ahead-left\n3. nothing else"

    def describe_batch(self, requests: Sequence[PerceptionRequest],
                       settings: GenerationSettings | None = None) -> list[str]:
        return [self.describe(images, prompt, settings) for images, prompt in requests]

    def close(self) -> None:
        pass


def feed(pipeline: EmbodiedRPipeline, clip: SyntheticClip) -> None:
    """Push every frame of a `render_clip` clip into an EmbodiedRPipeline."""
    for i, (image, stamp) in enumerate(zip(clip.frames, clip.stamps_s)):
        pipeline.push_frame(image, stamp, i, "camera")
