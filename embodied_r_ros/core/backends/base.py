"""The two protocols every model backend implements.

A *Perceiver* turns images plus a text prompt into text (the vision-language model).
A *Reasoner* turns chat messages into text (the small reasoning language model, and the
frozen reference model of the consistency reward). Both are plain synchronous calls; the
ROS nodes and the training code run them in worker threads when they need concurrency.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from embodied_r_ros.core.types import ChatMessage, GenerationSettings

# Called with each new piece of generated text while streaming.
TextCallback = Callable[[str], None]
# Polled between tokens; returning True stops generation early (cancellation).
StopCheck = Callable[[], bool]

# One perception request: the images (RGB uint8 HxWx3, in order) and the prompt text.
PerceptionRequest = tuple[Sequence[np.ndarray], str]


@runtime_checkable
class Perceiver(Protocol):
    """Images + prompt -> text."""

    name: str

    def describe(
        self,
        images: Sequence[np.ndarray],
        prompt: str,
        settings: GenerationSettings | None = None,
    ) -> str: ...

    def describe_batch(
        self,
        requests: Sequence[PerceptionRequest],
        settings: GenerationSettings | None = None,
    ) -> list[str]: ...

    def close(self) -> None: ...


@runtime_checkable
class Reasoner(Protocol):
    """Chat messages -> text."""

    name: str

    def generate(
        self,
        messages: Sequence[ChatMessage],
        settings: GenerationSettings | None = None,
        on_text: TextCallback | None = None,
        should_stop: StopCheck | None = None,
    ) -> str: ...

    def generate_batch(
        self,
        conversations: Sequence[Sequence[ChatMessage]],
        settings: GenerationSettings | None = None,
    ) -> list[str]: ...

    def close(self) -> None: ...
