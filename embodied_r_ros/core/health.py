"""Health of a running node, ROS-free: rates, latency percentiles and the OK/WARN/ERROR
levels the nodes publish on /diagnostics (diagnostic_msgs/DiagnosticArray).

Levels and their thresholds (`DiagnosticsSettings`, ROS parameters `diagnostics.*`):

camera (embedded and key-frame nodes)
  WARN   no camera frame for `stale_input_s` seconds while active;
  WARN   more than `drop_warn_fraction` of the frames received in the last window were
         dropped (bad stamps, undecodable, rejected);
perception (embedded and perception nodes)
  WARN   the queue holds at least `queue_warn_fraction` of `perception.max_queue`, or
         key frames were dropped from a full queue in the last window;
  ERROR  the last `failures_error_count` key frames all failed (VLM or server down);
questions (embedded and reasoning nodes)
  WARN   questions were refused (BUSY) or failed in the last window;
node (every node)
  ERROR  not configured and the last configure failed (the reason is the message);
  WARN   configured but not active; or resident memory above `memory_warn_mb` (0 = off).
"""

from __future__ import annotations

import math
import os
import resource
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from embodied_r_ros.core.settings import DiagnosticsSettings

OK, WARN, ERROR = 0, 1, 2
LEVEL_NAMES = {OK: "OK", WARN: "WARN", ERROR: "ERROR"}


class EventWindow:
    """Counts events over the last `window_s` seconds (a rate meter); thread-safe."""

    def __init__(self, window_s: float = 10.0, now: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self._now = now
        self._events: deque[float] = deque()
        self._lock = threading.Lock()
        self.total = 0
        self.last: float | None = None

    def add(self, count: int = 1) -> None:
        t = self._now()
        with self._lock:
            for _ in range(count):
                self._events.append(t)
            self.total += count
            self.last = t
            self._trim(t)

    def _trim(self, t: float) -> None:
        while self._events and t - self._events[0] > self.window_s:
            self._events.popleft()
        # bound memory whatever the rate: one entry per event, at most 100k kept
        while len(self._events) > 100_000:
            self._events.popleft()

    def count(self) -> int:
        with self._lock:
            self._trim(self._now())
            return len(self._events)

    def rate(self) -> float:
        return self.count() / self.window_s

    def age(self) -> float | None:
        """Seconds since the last event, None when none yet."""
        with self._lock:
            return None if self.last is None else self._now() - self.last


class LatencyStats:
    """The last `size` durations; p50/p95 by nearest rank."""

    def __init__(self, size: int = 200) -> None:
        self._values: deque[float] = deque(maxlen=size)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self._values.append(float(seconds))

    def percentile(self, q: float) -> float | None:
        with self._lock:
            values = sorted(self._values)
        if not values:
            return None
        rank = max(0, min(len(values) - 1, math.ceil(q / 100.0 * len(values)) - 1))
        return values[rank]

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)


def resident_memory_mb() -> float:
    """Resident set size of this process in MB (Linux /proc; elsewhere the peak)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


@dataclass
class HealthItem:
    """One DiagnosticStatus: a name, a level, a one-line message and key/values."""

    name: str
    level: int = OK
    message: str = "ok"
    values: dict[str, str] = field(default_factory=dict)

    def raise_to(self, level: int, message: str) -> None:
        """Keep the worst level; the message of the worst problem wins."""
        if level > self.level:
            self.level, self.message = level, message
        elif level == self.level and level > OK:
            self.message += "; " + message


def _fmt(value: float | None, unit: str = "") -> str:
    return "n/a" if value is None else f"{value:.3f}{unit}"


class QuestionStats:
    """What the question servers record for diagnostics."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.answered = EventWindow(window_s)
        self.failed = EventWindow(window_s)
        self.refused = EventWindow(window_s)
        self.codes: Counter[str] = Counter()
        self.total_s = LatencyStats()
        self.reasoning_s = LatencyStats()
        self.overhead_s = LatencyStats()  # total minus model time: the package's own cost
        self.last_failure = ""

    def record(self, success: bool, code: str, message: str, total_s: float,
               perception_s: float, reasoning_s: float) -> None:
        self.codes[code] += 1
        self.total_s.add(total_s)
        if reasoning_s > 0:
            self.reasoning_s.add(reasoning_s)
        self.overhead_s.add(max(0.0, total_s - reasoning_s - perception_s))
        if success:
            self.answered.add()
        elif code == "BUSY":
            self.refused.add()
        else:
            self.failed.add()
            self.last_failure = f"{code}: {message}"


def camera_item(node: str, *, active: bool, received: EventWindow, sampled: EventWindow,
                keyframes: int, drops: Counter[str], dropped_recent: int,
                thresholds: DiagnosticsSettings) -> HealthItem:
    item = HealthItem(f"{node}: camera")
    age = received.age()
    item.values = {"frames received": str(received.total), "input rate (Hz)": _fmt(received.rate()),
                   "sampled rate (Hz)": _fmt(sampled.rate()), "key frames": str(keyframes),
                   "seconds since last frame": _fmt(age),
                   **{f"dropped: {cause}": str(n) for cause, n in sorted(drops.items())}}
    if active and (age is None or age > thresholds.stale_input_s):
        item.raise_to(WARN, "no camera frame for "
                      + ("the whole run" if age is None else f"{age:.0f} s")
                      + "; check the camera driver, the topic name and its QoS")
    recent = received.count()
    if recent and dropped_recent / recent > thresholds.drop_warn_fraction:
        item.raise_to(WARN, f"{dropped_recent} of the last {recent} frames were dropped "
                      "(see the dropped: counts)")
    return item


def perception_item(node: str, *, model: str, ready: bool, pending: int, max_queue: int,
                    described: int, failed: int, dropped: int, dropped_recent: int,
                    recent_outcomes: Iterable[bool], latency: LatencyStats, last_error: str,
                    thresholds: DiagnosticsSettings) -> HealthItem:
    item = HealthItem(f"{node}: perception")
    item.values = {"model": model or "<unset>", "model loaded": str(ready),
                   "queue depth": f"{pending}/{max_queue}", "described": str(described),
                   "failed": str(failed), "dropped (queue full)": str(dropped),
                   "latency p50 (s)": _fmt(latency.percentile(50)),
                   "latency p95 (s)": _fmt(latency.percentile(95)),
                   "last error": last_error or "none"}
    if pending >= max(1, thresholds.queue_warn_fraction * max_queue):
        item.raise_to(WARN, f"perception queue {pending}/{max_queue}: the VLM is slower than "
                      "key frames arrive")
    if dropped_recent:
        item.raise_to(WARN, f"{dropped_recent} key frame(s) dropped from a full queue recently")
    outcomes = list(recent_outcomes)[-thresholds.failures_error_count:]
    if len(outcomes) >= thresholds.failures_error_count and not any(outcomes):
        item.raise_to(ERROR, f"the last {len(outcomes)} key frames all failed: {last_error}")
    return item


def questions_item(node: str, *, model: str, ready: bool, stats: QuestionStats,
                   in_progress: int, capacity: int) -> HealthItem:
    item = HealthItem(f"{node}: questions")
    item.values = {"reasoning model": model or "<unset>", "model loaded": str(ready),
                   "in progress": f"{in_progress}/{capacity}",
                   "answered": str(stats.answered.total), "failed": str(stats.failed.total),
                   "refused (busy)": str(stats.refused.total),
                   "reasoning p50 (s)": _fmt(stats.reasoning_s.percentile(50)),
                   "reasoning p95 (s)": _fmt(stats.reasoning_s.percentile(95)),
                   "total p50 (s)": _fmt(stats.total_s.percentile(50)),
                   "total p95 (s)": _fmt(stats.total_s.percentile(95)),
                   "overhead p95 (s)": _fmt(stats.overhead_s.percentile(95)),
                   **{f"code {code}": str(n) for code, n in sorted(stats.codes.items())}}
    if stats.refused.count():
        item.raise_to(WARN, f"{stats.refused.count()} question(s) refused as BUSY recently")
    if stats.failed.count():
        item.raise_to(WARN, f"{stats.failed.count()} question(s) failed recently; last: "
                      f"{stats.last_failure}")
    return item


def node_item(node: str, *, state: str, last_error: str, callback_errors: int,
              thresholds: DiagnosticsSettings) -> HealthItem:
    item = HealthItem(f"{node}: node")
    rss = resident_memory_mb()
    item.values = {"lifecycle state": state, "resident memory (MB)": f"{rss:.1f}",
                   "callback errors": str(callback_errors), "last error": last_error or "none"}
    if state == "unconfigured" and last_error:
        item.raise_to(ERROR, last_error)
    elif state in {"unconfigured", "inactive"}:
        item.raise_to(WARN, f"node is {state}")
    if thresholds.memory_warn_mb and rss > thresholds.memory_warn_mb:
        item.raise_to(WARN, f"resident memory {rss:.0f} MB above {thresholds.memory_warn_mb:.0f} MB")
    return item
