"""The key-frame side of the running episode, for both graphs: its id, the live tracker
and the 'restart' policy's budget, and the one place an episode rolls over.

The embedded pipeline and the split graph's key-frame node each hold a `KeyFrameEpisode`
under their own lock; what they do when an episode changes (announce it, reset the
perception worker, fail the old episode's questions) stays with them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from embodied_r_ros.core.keyframes.rules import KeyFrameParams
from embodied_r_ros.core.keyframes.tracker import KeyFrameEvent, KeyFrameTracker
from embodied_r_ros.core.settings import EpisodeSettings, KeyFrameSettings
from embodied_r_ros.core.types import Frame


def new_episode_id() -> str:
    return uuid.uuid4().hex[:12]


class EpisodeBudget:
    """episode.policy 'restart': whether the current episode has used up its budget of
    key frames (`max_keyframes`) or of stream time (`max_duration_s`, 0 = none). Shared by
    the embedded pipeline and the split graph's key-frame node."""

    def __init__(self, episode: EpisodeSettings) -> None:
        self.enabled = episode.policy == "restart"
        self.max_keyframes = episode.max_keyframes
        self.max_duration_s = episode.max_duration_s
        self._start_s: float | None = None

    def spent(self, keyframes: int, stamp_s: float) -> bool:
        """Call with each sampled frame's stream time before it is examined."""
        if not self.enabled:
            return False
        if self._start_s is None:
            self._start_s = stamp_s
        return keyframes >= self.max_keyframes or (
            self.max_duration_s > 0 and stamp_s - self._start_s >= self.max_duration_s)

    def restart(self) -> None:
        """A new episode began: the time budget counts from its first frame."""
        self._start_s = None


@dataclass(frozen=True)
class EpisodeChange:
    new: str
    old: str
    reason: str  # "startup", "reset", "budget"


class KeyFrameEpisode:
    """See the module docstring. Not thread-safe: the owner serialises calls."""

    def __init__(self, keyframes: KeyFrameSettings, episode: EpisodeSettings, *,
                 image_max_side: int = 0, episode_id: str | None = None) -> None:
        self.params = KeyFrameParams.from_settings(keyframes)
        self.tracker = KeyFrameTracker(self.params, ring_size=keyframes.ring_size,
                                       image_max_side=image_max_side)
        self.budget = EpisodeBudget(episode)
        self.episode_id = episode_id or new_episode_id()

    def push_sampled(self, frame: Frame) -> tuple[KeyFrameEvent | None, EpisodeChange | None]:
        """Examine a sampled frame; a spent budget first starts a new episode."""
        change = None
        if self.budget.spent(self.tracker.n_keyframes, frame.stamp_s):
            change = self.new_episode("budget")
        return self.tracker.push_sampled(frame), change

    def continue_episode(self, episode_id: str, next_keyframe_index: int) -> None:
        """Take over a running episode (a restarted node): its id and its numbering."""
        self.episode_id = episode_id
        self.tracker.continue_from(next_keyframe_index)

    def new_episode(self, reason: str, episode_id: str | None = None) -> EpisodeChange:
        """Forget the key frames seen so far and start a new episode."""
        old = self.episode_id
        self.tracker.reset()
        self.budget.restart()
        self.episode_id = episode_id or new_episode_id()
        return EpisodeChange(self.episode_id, old, reason)
