"""Per-episode store of key-frame descriptions and the text the reasoning LM reads.

`EpisodeMemory` keeps `FrameDescription` objects sorted by `keyframe_index`; it is shared
between the perception worker (writer) and the question handler (reader), so every method
takes a lock. `render_video_text` turns a list of descriptions into the LM's "video"
(docs/method.md §3), with the shipped templates:

    <preamble: the video is given as text; frame 0 is the starting view, the last frame
     the current view>
    Frame 0: Observe: <observation>
    Frame 1: After <action>, Observe: <observation>
    ...

Frames are renumbered 0..n-1 by their position in the list given (key-frame indices may
have gaps after count limiting). A frame after the first whose action is ``None`` or empty
is written with the ``reasoning.unknown_action`` text ("an unknown movement"), an empty
observation with ``reasoning.empty_observation`` ("(no description)"). With
``reasoning.one_line_frames`` (the default) newlines and runs of whitespace inside
observations and actions become one space, so each frame stays on one line; otherwise the
text is kept as the perception model wrote it (as the reference does). The action of
frame 0 is never shown (it has no previous frame). Every text here is a template of the
`PromptSet` given (shipped wording by default).
"""

from __future__ import annotations

import bisect
import re
import threading
from collections.abc import Sequence

from embodied_r_ros.core.prompts.prompt_set import PromptSet
from embodied_r_ros.core.prompts.wording import SHIPPED_TEMPLATES
from embodied_r_ros.core.types import FrameDescription

__all__ = [
    "EpisodeMemory",
    "render_video_text",
    "VIDEO_PREAMBLE",
    "UNKNOWN_ACTION_TEXT",
    "EMPTY_OBSERVATION_TEXT",
]

# The shipped wording (a prompt file may replace each of them).
VIDEO_PREAMBLE = str(SHIPPED_TEMPLATES["reasoning.video_preamble"])
UNKNOWN_ACTION_TEXT = str(SHIPPED_TEMPLATES["reasoning.unknown_action"])
EMPTY_OBSERVATION_TEXT = str(SHIPPED_TEMPLATES["reasoning.empty_observation"])
_WS = re.compile(r"\s+")


def _flat(text: str | None) -> str:
    return _WS.sub(" ", text or "").strip()


def _kept(text: str | None) -> str:
    return (text or "").strip()


def render_video_text(descriptions: Sequence[FrameDescription], prompts: PromptSet | None = None,
                      ages: Sequence[str] | None = None) -> str:
    """Render descriptions as the LM's video text (format in the module docstring).

    With ``ages`` (one per description, e.g. "12 min"; long-horizon selection only) each
    frame is labelled with its time before now: "Frame 3, 12 min ago: ...".
    """
    prompts = prompts or PromptSet.default()
    clean = _flat if prompts.flag("reasoning.one_line_frames") else _kept
    preamble = prompts.text("reasoning.video_preamble")
    lines = [preamble] if preamble.strip() else []
    if not descriptions:
        lines.append(prompts.text("reasoning.no_frames"))
    empty = prompts.text("reasoning.empty_observation")
    for i, desc in enumerate(descriptions):
        observation = clean(desc.observation) or empty
        label: int | str = i if ages is None else f"{i}, {ages[i]} ago"
        if i == 0:
            lines.append(prompts.render("reasoning.frame_first", index=label, observation=observation))
        else:
            action = clean(desc.action) or prompts.text("reasoning.unknown_action")
            lines.append(prompts.render("reasoning.frame_next", index=label, action=action,
                                        observation=observation))
    return "\n".join(lines)


class EpisodeMemory:
    """Thread-safe, key-frame-ordered list of `FrameDescription` for one episode.

    Writers may pass ``episode_id=`` to `add`/`replace`; the write is then ignored (and
    False returned) when the memory has meanwhile been cleared for another episode, so a
    slow perception call can never leak into the next episode.
    """

    def __init__(self, episode_id: str = "", max_items: int = 0) -> None:
        self._lock = threading.RLock()
        self._episode_id = episode_id
        self._items: list[FrameDescription] = []
        self._keys: list[int] = []
        self.max_items = max(0, int(max_items))
        self._evicted_below = 0
        self.evicted = 0

    @property
    def evicted_below(self) -> int:
        """Key frames with index in 1 .. evicted_below - 1 were dropped by the window
        (`max_items`): the first key frame and the most recent ones are kept."""
        with self._lock:
            return self._evicted_below

    def _enforce_window(self) -> None:
        while self.max_items and len(self._items) > self.max_items and len(self._items) > 2:
            dropped = self._keys.pop(1)
            self._items.pop(1)
            self._evicted_below = max(self._evicted_below, dropped + 1)
            self.evicted += 1

    @property
    def episode_id(self) -> str:
        with self._lock:
            return self._episode_id

    def _stale(self, episode_id: str | None) -> bool:
        return episode_id is not None and episode_id != self._episode_id

    def add(self, description: FrameDescription, *, episode_id: str | None = None) -> bool:
        """Insert in key-frame order. Raises ValueError if that key-frame index exists.

        Returns False (and stores nothing) when ``episode_id`` is given and stale.
        """
        with self._lock:
            if self._stale(episode_id):
                return False
            key = description.keyframe_index
            pos = bisect.bisect_left(self._keys, key)
            if pos < len(self._keys) and self._keys[pos] == key:
                raise ValueError(f"key frame {key} is already in episode memory")
            self._keys.insert(pos, key)
            self._items.insert(pos, description)
            self._enforce_window()
            return True

    def replace(
        self,
        item: FrameDescription | Sequence[FrameDescription],
        *,
        episode_id: str | None = None,
    ) -> bool:
        """Replace one description (same key-frame index) or, given a sequence, all of them.

        A single description whose index is absent raises KeyError; a sequence with
        duplicate indices raises ValueError. Returns False when ``episode_id`` is stale.
        """
        with self._lock:
            if self._stale(episode_id):
                return False
            if isinstance(item, FrameDescription):
                key = item.keyframe_index
                pos = bisect.bisect_left(self._keys, key)
                if pos >= len(self._keys) or self._keys[pos] != key:
                    raise KeyError(f"key frame {key} is not in episode memory")
                self._items[pos] = item
                return True
            items = sorted(item, key=lambda d: d.keyframe_index)
            keys = [d.keyframe_index for d in items]
            if len(set(keys)) != len(keys):
                raise ValueError("duplicate key-frame indices in replacement list")
            self._items, self._keys = items, keys
            return True

    def put(self, description: FrameDescription) -> None:
        """Add, or replace the description with the same key-frame index (a key frame
        delivered twice, e.g. replayed to a restarted node, is described once in memory)."""
        with self._lock:
            key = description.keyframe_index
            pos = bisect.bisect_left(self._keys, key)
            if pos < len(self._keys) and self._keys[pos] == key:
                self._items[pos] = description
            elif 0 < key < self._evicted_below:
                return  # older than the window: already forgotten
            else:
                self._keys.insert(pos, key)
                self._items.insert(pos, description)
                self._enforce_window()

    def get(self, keyframe_index: int) -> FrameDescription | None:
        """The description of one key frame, or None."""
        with self._lock:
            pos = bisect.bisect_left(self._keys, keyframe_index)
            if pos < len(self._keys) and self._keys[pos] == keyframe_index:
                return self._items[pos]
            return None

    def descriptions(self) -> list[FrameDescription]:
        """A copy of the stored descriptions in key-frame order."""
        with self._lock:
            return list(self._items)

    def render(self, prompts: PromptSet | None = None) -> str:
        """`render_video_text` of the current contents."""
        return render_video_text(self.descriptions(), prompts)

    def clear(self, new_episode_id: str = "") -> None:
        """Drop everything and start episode ``new_episode_id``."""
        with self._lock:
            self._items, self._keys = [], []
            self._episode_id = new_episode_id
            self._evicted_below = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
