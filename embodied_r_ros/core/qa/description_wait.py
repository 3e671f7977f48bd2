"""Waiting for the descriptions a question needs: one component for both graphs.

A question is answered from the key frames of ONE episode, up to the newest key frame at
the time it was asked (`last_index`, the current view). `collect_descriptions`:

1. waits until key frame `last_index` is processed (described, or failed) while checking,
   about every 0.25 s, that the question was not cancelled or interrupted, that the
   episode did not change (EpisodeResetError) and, when given, that perception is still
   alive (`check_alive` raises a typed error naming what is down);
2. then gives descriptions of earlier key frames still in flight `grace_s` more seconds
   (they normally arrive first; over DDS one may lag);
3. returns the descriptions of that episode with index <= last_index, in key-frame order,
   plus the indices left out (failed or never arrived) so the answer can say so. Key
   frames the episode window dropped on purpose (`EpisodeMemory.max_items`, long
   episodes) are not waited for and not reported.

Failures are typed: the deadline passing is TIMEOUT (with the queue length), every key
frame failing is PERCEPTION_FAILED carrying the last perception error (so a VLM server
that is down is reported as such, never as "no key frames").

Used by `core.pipeline.EmbodiedRPipeline` (embedded graph) and by the split graph's
reasoning node, with their own memory, progress record and liveness check.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from embodied_r_ros.core.errors import (
    CancelledError,
    EpisodeResetError,
    PerceptionError,
    RequestTimeoutError,
)
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.perception.progress import ProcessedFrames
from embodied_r_ros.core.types import FrameDescription

# Seconds earlier descriptions may lag behind the newest one before they are left out.
DEFAULT_GRACE_S = 2.0
_POLL_S = 0.25


@dataclass
class CollectedDescriptions:
    """What a question is answered from."""

    descriptions: list[FrameDescription]
    left_out: list[int] = field(default_factory=list)  # failed or never arrived
    failures: dict[int, str] = field(default_factory=dict)

    def note(self) -> str:
        """The sentence appended to a successful answer's message, or ""."""
        if not self.left_out:
            return ""
        return (f" ({len(self.left_out)} key frame(s) of this episode have no description "
                "and were left out: " + ", ".join(map(str, self.left_out)) + ")")


def collect_descriptions(progress: ProcessedFrames, memory: EpisodeMemory, *,
                         episode_id: str, last_index: int, deadline: float,
                         should_stop: Callable[[], bool],
                         interrupted: Callable[[], None] | None = None,
                         check_alive: Callable[[], None] | None = None,
                         pending: Callable[[], int] | None = None,
                         perception_error: Callable[[], str] | None = None,
                         grace_s: float = DEFAULT_GRACE_S) -> CollectedDescriptions:
    """Wait for key frames 0..last_index of `episode_id`; see the module docstring.
    `perception_error()` returns the error while perception is failing (several key
    frames in a row, e.g. its server is down), else "": a deadline passing then is
    PERCEPTION_FAILED naming that error, not a TIMEOUT blaming the model's speed."""

    def checks() -> None:
        if interrupted is not None:
            interrupted()
        if memory.episode_id != episode_id:
            raise EpisodeResetError(
                f"episode {episode_id} ended (a reset or a new episode) while the question "
                "waited for perception; ask again about the new episode")
        if should_stop():
            raise CancelledError("the question was cancelled while it waited for perception")
        if check_alive is not None:
            check_alive()

    while not progress.wait_for(last_index, max(0.0, min(_POLL_S, deadline - time.monotonic())),
                                should_stop):
        checks()
        if time.monotonic() >= deadline:
            queued = f" ({pending()} key frame(s) still queued)" if pending is not None else ""
            failing = perception_error() if perception_error is not None else ""
            if failing:
                raise PerceptionError(
                    f"key frame {last_index} was not described in time{queued}: perception "
                    f"is failing, last error: {failing}. Check the perception server or "
                    "model (perception.base_url, perception.model); failed key frames are "
                    "retried once it answers again")
            raise RequestTimeoutError(
                f"key frame {last_index} was not described in time{queued}; the perception "
                "model is slower than the key-frame rate: use a faster model or server, or "
                "raise the question's timeout")
    checks()
    window = memory.evicted_below  # 1 .. window-1 were dropped on purpose (long episodes)
    expected = [i for i in range(last_index + 1) if i == 0 or i >= window]
    grace_end = min(deadline, time.monotonic() + grace_s)
    for index in expected[:-1]:
        if not progress.is_processed(index):
            progress.wait_for(index, max(0.0, grace_end - time.monotonic()), should_stop)
    checks()
    failures = {i: reason for i, reason in progress.failures.items() if i <= last_index}
    descriptions = [d for d in memory.descriptions() if d.keyframe_index <= last_index
                    and (not d.episode_id or d.episode_id == episode_id)]
    have = {d.keyframe_index for d in descriptions}
    left_out = [i for i in expected if i not in have]
    if not descriptions:
        last_error = list(failures.values())[-1] if failures else "no description arrived"
        raise PerceptionError(
            f"none of the {last_index + 1} key frame(s) of this episode could be described; "
            f"last perception error: {last_error}. Check the perception model or server")
    return CollectedDescriptions(descriptions, left_out, failures)
