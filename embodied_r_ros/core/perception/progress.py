"""A small thread-safe record of which key frames of an episode have been processed,
with waiting. Shared by the perception worker and the split-graph reasoning node."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable


class ProcessedFrames:
    """Key-frame indices processed (described or failed) in the current episode."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._done: set[int] = set()
        self._failed: dict[int, str] = {}

    def mark_done(self, index: int) -> None:
        """Described (also after an earlier failure: a retry that succeeded)."""
        with self._cond:
            self._done.add(index)
            self._failed.pop(index, None)
            self._cond.notify_all()

    def mark_done_many(self, indices: Iterable[int]) -> None:
        with self._cond:
            self._done.update(indices)
            self._cond.notify_all()

    def mark_failed(self, index: int, reason: str) -> None:
        with self._cond:
            if index in self._done:  # a late failure never hides a description
                return
            self._failed[index] = reason
            self._cond.notify_all()

    def is_processed(self, index: int) -> bool:
        with self._cond:
            return index in self._done or index in self._failed

    @property
    def failures(self) -> dict[int, str]:
        with self._cond:
            return dict(self._failed)

    def forget_below(self, index: int) -> None:
        """Drop the records of key frames 1 .. index - 1 (bounded memory over hours)."""
        with self._cond:
            self._done = {i for i in self._done if i == 0 or i >= index}
            self._failed = {i: r for i, r in self._failed.items() if i == 0 or i >= index}

    def reset(self) -> None:
        with self._cond:
            self._done.clear()
            self._failed.clear()
            self._cond.notify_all()

    def wait_for(self, index: int, timeout_s: float,
                 should_stop: Callable[[], bool] | None = None) -> bool:
        """Wait until `index` is processed; False on timeout or when should_stop() is true."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while index not in self._done and index not in self._failed:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (should_stop is not None and should_stop()):
                    return False
                self._cond.wait(timeout=min(remaining, 0.1))
            return True
