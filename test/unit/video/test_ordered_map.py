"""The in-order parallel map under whole-clip key frames (ORB features beside decoding)."""

from __future__ import annotations

import random
import threading
import time
from typing import Iterator

import pytest

from embodied_r_ros.core.video.ordered_map import ordered_map


class Source:
    """Numbered items; counts what was pulled and whether it was closed."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        self.n, self.fail_at = n, fail_at
        self.pulled = 0
        self.closed = False
        self._it = self._items()

    def _items(self) -> Iterator[tuple[int, int]]:
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise OSError(f"source broke at {i}")
                self.pulled += 1
                yield i, i * 10
        finally:
            self.closed = True

    def __iter__(self) -> "Source":
        return self

    def __next__(self) -> tuple[int, int]:
        return next(self._it)

    def close(self) -> None:
        self._it.close()


def _map_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("ordered-map")]


def test_results_come_in_source_order_from_several_threads() -> None:
    rng = random.Random(4)
    delays = [rng.uniform(0, 0.01) for _ in range(60)]
    ran_on: set[str] = set()

    def slow_square(key: int, value: int) -> int:
        time.sleep(delays[key])  # later items often finish first
        ran_on.add(threading.current_thread().name)
        return value * value

    source = Source(60)
    got = list(ordered_map(source, slow_square, 4))
    assert got == [(i, (i * 10) ** 2) for i in range(60)]
    assert len(ran_on) > 1 and all(name.startswith("ordered-map") for name in ran_on)
    assert source.closed and _map_threads() == []


def test_one_worker_runs_on_the_calling_thread() -> None:
    ran_on: set[str] = set()

    def record(key: int, value: int) -> int:
        ran_on.add(threading.current_thread().name)
        return value + 1

    assert list(ordered_map(Source(5), record, 1)) == [(i, i * 10 + 1) for i in range(5)]
    assert ran_on == {threading.current_thread().name}


def test_items_in_flight_are_bounded() -> None:
    source = Source(200)
    ahead = []
    for consumed, _ in enumerate(ordered_map(source, lambda k, v: v, 3, depth=5), start=1):
        time.sleep(0.002)  # a slow consumer: the feeder runs ahead as far as it may
        ahead.append(source.pulled - consumed)
    # `depth` submitted items wait, the feeder holds one more while it waits to hand it on
    assert max(ahead) <= 5 + 1
    assert max(ahead) >= 3  # it does run ahead


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failing_function_is_raised_after_the_items_before_it(workers: int) -> None:
    def fail_at_7(key: int, value: int) -> int:
        if key == 7:
            raise ValueError("bad item 7")
        return value

    source = Source(50)
    got = []
    with pytest.raises(ValueError, match="bad item 7"):
        for item in ordered_map(source, fail_at_7, workers):
            got.append(item)
    assert got == [(i, i * 10) for i in range(7)]
    assert source.closed and _map_threads() == []


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failing_source_is_raised_after_its_items(workers: int) -> None:
    source = Source(50, fail_at=12)
    got = []
    with pytest.raises(OSError, match="source broke at 12"):
        for item in ordered_map(source, lambda k, v: v, workers):
            got.append(item)
    assert [k for k, _ in got] == list(range(12))
    assert _map_threads() == []


def test_closing_early_stops_the_source_and_leaves_no_thread() -> None:
    source = Source(10_000)
    mapped = ordered_map(source, lambda k, v: v, 3)
    assert [next(mapped)[0] for _ in range(3)] == [0, 1, 2]
    mapped.close()
    assert source.closed and source.pulled < 50
    assert _map_threads() == []
