"""Turning camera header stamps into stream time, with a fallback for broken stamps.

Key-frame sampling runs on stream time (1 frame per second of header stamps), so a
camera driver that stamps every frame 0, or repeats one stamp, would collapse a whole
episode into one sampled frame. `StampClock` passes good stamps through and replaces bad
ones by the frame's arrival time:

* a stamp that is zero, negative or not finite is bad;
* a stamp equal to the previous frame's stamp is a duplicate; after `frozen_after`
  duplicates in a row the stamps count as frozen and are bad until they advance again;
* a bad stamp becomes ``last good stamp + (arrival - arrival of that frame)``, or the
  seconds since the first frame when no good stamp was seen yet, so stream time stays
  continuous and increasing.

Each switch to the fallback is reported once (`fallback_started` flips true) so the node
can warn; `fallbacks` counts the frames that used it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class StampClock:
    """See the module docstring."""

    def __init__(self, *, frozen_after: int = 3,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.frozen_after = max(1, int(frozen_after))
        self._now = now
        self.reset()

    def reset(self) -> None:
        self._first_arrival: float | None = None
        self._good: tuple[float, float] | None = None  # (stamp, arrival)
        self._previous_stamp: float | None = None
        self._repeats = 0
        self._in_fallback = False
        self.fallbacks = 0
        self.fallback_started = False  # set when a run of fallbacks begins; caller clears
        self.last_reason = ""

    def stream_time(self, stamp_s: float) -> float:
        arrival = self._now()
        if self._first_arrival is None:
            self._first_arrival = arrival
        reason = self._bad(stamp_s)
        if not reason:
            self._good = (float(stamp_s), arrival)
            self._in_fallback = False
            return float(stamp_s)
        self.fallbacks += 1
        if not self._in_fallback:
            self._in_fallback = True
            self.fallback_started = True
            self.last_reason = reason
        if self._good is None:
            return arrival - self._first_arrival
        good_stamp, good_arrival = self._good
        return good_stamp + (arrival - good_arrival)

    def _bad(self, stamp_s: float) -> str:
        if not math.isfinite(stamp_s) or stamp_s <= 0.0:
            self._previous_stamp = None
            self._repeats = 0
            return f"header stamp {stamp_s!r} is not a positive time"
        if self._previous_stamp is not None and stamp_s == self._previous_stamp:
            self._repeats += 1
        else:
            self._repeats = 0
        self._previous_stamp = stamp_s
        if self._repeats >= self.frozen_after or (self._repeats and self._in_fallback):
            return f"header stamp {stamp_s:.3f} repeated {self._repeats + 1} times (frozen clock)"
        return ""
