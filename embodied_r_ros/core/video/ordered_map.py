"""Apply a function to a stream of numbered items on a thread pool, results kept in order.

Used by whole-clip key-frame extraction: a decoder yields ``(frame number, image)``, the
function turns each image into its ORB features, and the selector needs the results in
frame order. The source is pulled on a background thread (so decoding overlaps the
function and the consumer), the function runs on `workers` pool threads, and at most
`depth` items are between the source and the consumer at any time (bounded memory).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Generator, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_END = object()


def _close(source: object) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


def ordered_map(
    source: Iterator[tuple[int, T]],
    fn: Callable[[int, T], R],
    workers: int,
    *,
    depth: int | None = None,
) -> Generator[tuple[int, R], None, None]:
    """Yield ``(key, fn(key, value))`` for each ``(key, value)`` of `source`, in source order.

    - workers <= 1: everything runs on the calling thread, no thread is started.
    - otherwise: a feeder thread pulls `source` and submits `fn` to a pool of `workers`
      threads; at most `depth` (default ``2 * workers + 1``) submitted items wait for the
      consumer.
    - An exception raised by `source` or by `fn` is raised to the consumer at the position
      where it happened (items before it are yielded first).
    - `source` is closed (if it has ``close``) when it ends, fails, or when the consumer
      closes this generator early; no thread is left running after that.
    """
    if workers <= 1:
        try:
            for key, value in source:
                yield key, fn(key, value)
        finally:
            _close(source)
        return
    waiting: queue.Queue = queue.Queue(maxsize=max(1, depth if depth is not None else 2 * workers + 1))
    stop = threading.Event()
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ordered-map")

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                waiting.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def feed() -> None:
        try:
            for key, value in source:
                if not put((key, pool.submit(fn, key, value))):
                    return
                del value
            put((_END, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, in order
            put((_END, exc))
        finally:
            _close(source)

    feeder = threading.Thread(target=feed, name="ordered-map-source", daemon=True)
    feeder.start()
    try:
        while True:
            key, job = waiting.get()
            if key is _END:
                if job is not None:
                    raise job
                return
            assert isinstance(job, Future)
            result = job.result()
            del job
            yield key, result
    finally:
        stop.set()
        feeder.join()
        while True:  # futures nobody will read: cancel the ones not started
            try:
                _, job = waiting.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, Future):
                job.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
