"""Which key frames a question is given: at most `max_keyframes` from the whole memory.

Mode ``even`` is the paper's spread: the first, the last and the rest evenly between
(`keyframes.rules.apply_count_rule`, the same rule as before the store existed).

Mode ``relevant`` (the default) keeps, in this order until `max_keyframes` are chosen:

1. the episode's first key frame (the starting view the method's prompt refers to);
2. the `recent` newest key frames (the current view and what led to it);
3. key frames the question's time words point to (`time_hints`): the first few for "at
   the start", the newest few for "just now", those nearest to now - t for "t ago";
4. the key frames most relevant to the question: FTS5 BM25 over the observations, fused
   (reciprocal rank) with an embedding ranking when one is configured;
5. an even spread over the rest of the episode, so the prompt still tells the way.

Either way the chosen key frames are shown in time order. An episode with at most
`max_keyframes` key frames is given whole in both modes, so the paper's clips get the
paper's prompt unchanged (test/unit/memory/test_selection.py checks that).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from embodied_r_ros.core.keyframes.rules import apply_count_rule
from embodied_r_ros.core.memory.store import KeyFrameRecord, MemoryStore
from embodied_r_ros.core.memory.time_hints import format_age, parse_time_hints

__all__ = ["MODES", "Selection", "select_keyframes", "even_positions"]

MODES = ("even", "relevant")
HINT_FRAMES = 6  # key frames added per time hint
_RRF_K = 60.0

# (question, k) -> key-frame indices, best first (an embedding ranking).
Ranker = Callable[[str, int], list[int]]


@dataclass
class Selection:
    """The key frames chosen for one question, in time order, with why each was chosen."""

    episode_id: str
    mode: str
    total: int  # key frames of the episode the choice was made from
    records: list[KeyFrameRecord] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)  # index -> first/recent/time/...
    relevance: dict[int, float] = field(default_factory=dict)  # index -> fused score
    now_s: float = 0.0

    @property
    def indices(self) -> list[int]:
        return [r.keyframe_index for r in self.records]

    @property
    def trimmed(self) -> bool:
        """True when the episode had more key frames than were chosen."""
        return self.total > len(self.records)

    def ages(self) -> list[str] | None:
        """'12 min' per chosen key frame (time before now), or None when the whole episode
        fits (the paper's prompt has no ages) or in ``even`` mode."""
        if not self.trimmed or self.mode != "relevant":
            return None
        return [format_age(self.now_s - r.stamp_s) for r in self.records]


def even_positions(n: int, max_keyframes: int) -> list[int]:
    """Positions 0..n-1 the paper's count rule keeps (all of them when n fits)."""
    if n <= max_keyframes:
        return list(range(n))
    return apply_count_rule(list(range(n)), n, min_keyframes=1, max_keyframes=max_keyframes)


def select_keyframes(store: MemoryStore, episode_id: str, question: str, *,
                     max_keyframes: int = 32, mode: str = "relevant",
                     last_index: int | None = None, now_s: float | None = None,
                     recent: int = 4, ranker: Ranker | None = None,
                     exact_total: bool = False) -> Selection:
    """Choose the key frames of `episode_id` (up to `last_index`) for `question`.

    `Selection.total` is exact with ``exact_total``; otherwise counting stops at
    max_keyframes + 1 (enough to know whether the episode fits; cheap at 100k).
    """
    if mode not in MODES:
        raise ValueError(f"episode.selection must be one of {MODES}, got {mode!r}")
    max_keyframes = max(1, int(max_keyframes))
    total = store.count(episode_id, last_index,
                        at_most=None if exact_total else max_keyframes + 1)
    sel = Selection(episode_id, mode, total)
    if total == 0:
        return sel
    newest = store.recent(episode_id, 1, last_index)[0]
    if now_s is None:
        now_s = store.stamp_of(episode_id, newest) or 0.0
    sel.now_s = float(now_s)
    chosen: dict[int, str] = {}

    def add(indices: Sequence[int], reason: str) -> None:
        for i in indices:
            if len(chosen) >= max_keyframes:
                return
            chosen.setdefault(int(i), reason)

    if total <= max_keyframes or mode == "even":
        indices = store.indices(episode_id, last_index)
        add([indices[p] for p in even_positions(len(indices), max_keyframes)], "even")
    else:
        add(store.first(episode_id, 1), "first")
        add(store.recent(episode_id, max(1, recent), last_index), "recent")
        for hint in parse_time_hints(question):
            if hint.kind == "start":
                add(store.first(episode_id, HINT_FRAMES), "time")
            elif hint.kind == "recent":
                add(store.recent(episode_id, recent + HINT_FRAMES, last_index), "time")
            else:
                add(store.near_stamp(episode_id, sel.now_s - hint.seconds_ago, HINT_FRAMES,
                                     last_index), "time")
        ranked = _ranked(store, episode_id, question, 4 * max_keyframes, last_index, ranker)
        sel.relevance = dict(ranked)
        add([i for i, _ in ranked], "relevant")
        if len(chosen) < max_keyframes:
            first = min(chosen)
            targets = [first + round(k * (newest - first) / max_keyframes)
                       for k in range(1, max_keyframes)]
            add(store.at_or_after(episode_id, targets, last_index), "spread")
    sel.reasons = chosen
    sel.records = store.get(episode_id, chosen)
    return sel


def _ranked(store: MemoryStore, episode_id: str, question: str, k: int,
            last_index: int | None, ranker: Ranker | None) -> list[tuple[int, float]]:
    """Indices by relevance, best first: BM25, fused with `ranker` by reciprocal rank."""
    lexical = [i for _, i, _ in store.search(question, k, episode_id=episode_id,
                                             max_index=last_index)]
    if ranker is None:
        return [(i, 1.0 / (_RRF_K + rank)) for rank, i in enumerate(lexical)]
    scores: dict[int, float] = {}
    for ranking in (lexical, ranker(question, k)):
        for rank, i in enumerate(ranking):
            if last_index is None or i <= last_index:
                scores[i] = scores.get(i, 0.0) + 1.0 / (_RRF_K + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])
