"""Batched perception in the robot's worker (core/perception/worker.py).

With `batch_size` > 1 the worker describes the key frames that wait in one
`describe_batch` call. These tests check that each key frame is still paired with its own
predecessor, that results arrive in order, that a failed batch falls back to the
one-at-a-time path, and, with the tiny Qwen2.5-VL, that every description is exactly the
text the one-at-a-time worker produces with greedy decoding.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np
import pytest

from embodied_r_ros.core.perception.worker import PerceptionJob, PerceptionWorker
from embodied_r_ros.core.types import FrameDescription, GenerationSettings


def _frames(n: int, seed: int = 0, shape: tuple[int, int] = (60, 80)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 255, (*shape, 3), dtype=np.uint8) for _ in range(n)]


class GatedPerceiver:
    """Wraps a perceiver; its first call waits for `gate`, so later key frames queue up
    behind it and form batches. Records the shape of every call."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.name = "gated"
        self.gate = threading.Event()
        self.entered = threading.Event()  # the first call is waiting at the gate
        self.calls: list[int] = []  # requests per call

    def _wait(self) -> None:
        self.entered.set()
        assert self.gate.wait(60), "test gate never opened"

    def describe(self, images: Sequence[np.ndarray], prompt: str, settings=None) -> str:  # type: ignore[no-untyped-def]
        self._wait()
        self.calls.append(1)
        return self.inner.describe(images, prompt, settings)  # type: ignore[attr-defined]

    def describe_batch(self, requests, settings=None):  # type: ignore[no-untyped-def]
        self._wait()
        self.calls.append(len(requests))
        return self.inner.describe_batch(requests, settings)  # type: ignore[attr-defined]

    def close(self) -> None:
        pass


class Echo:
    """Names the frames it sees (by their first pixel value), so pairing is visible."""

    name = "echo"

    def __init__(self, fail_batches: bool = False) -> None:
        self.fail_batches = fail_batches

    def describe(self, images: Sequence[np.ndarray], prompt: str, settings=None) -> str:  # type: ignore[no-untyped-def]
        ids = [int(img[0, 0, 0]) for img in images]
        if len(ids) == 1:
            return f"frame {ids[0]} alone"
        return f"1. move forward\n2. frame {ids[1]} after {ids[0]}\n3. none"

    def describe_batch(self, requests, settings=None):  # type: ignore[no-untyped-def]
        if self.fail_batches and len(requests) > 1:
            raise RuntimeError("out of GPU memory")
        return [self.describe(images, prompt, settings) for images, prompt in requests]

    def close(self) -> None:
        pass


def _numbered(n: int) -> list[np.ndarray]:
    frames = []
    for i in range(n):
        img = np.zeros((8, 8, 3), dtype=np.uint8)
        img[0, 0, 0] = i + 10
        frames.append(img)
    return frames


def _run(perceiver: object, frames: list[np.ndarray], batch_size: int,
         skip: Sequence[int] = ()) -> tuple[list[FrameDescription], PerceptionWorker]:
    """Queue every frame while the first call is held, then let the worker run."""
    gated = GatedPerceiver(perceiver)
    got: list[FrameDescription] = []
    worker = PerceptionWorker(gated, settings=GenerationSettings(max_new_tokens=16),  # type: ignore[arg-type]
                              on_description=got.append, episode_id="e", batch_size=batch_size)
    try:
        for i, image in enumerate(frames):
            job = PerceptionJob("e", i, image, float(i))
            (worker.skip if i in skip else worker.submit)(job)
            if i == 0:  # key frame 0 is taken alone; the others queue behind it
                assert gated.entered.wait(30)
        gated.gate.set()
        assert worker.wait_for(len(frames) - 1, 120)
        deadline = time.monotonic() + 30
        while worker.pending() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        worker.stop()
    worker.calls = gated.calls  # type: ignore[attr-defined]
    return got, worker


def test_each_key_frame_of_a_batch_is_paired_with_its_predecessor() -> None:
    got, worker = _run(Echo(), _numbered(9), batch_size=4)
    assert worker.calls == [1, 4, 4]  # type: ignore[attr-defined]
    assert [d.keyframe_index for d in got] == list(range(9))
    assert got[0].observation == "frame 10 alone"
    for i in range(1, 9):
        assert f"frame {i + 10} after {i + 9}" in got[i].observation
        assert got[i].action == "move forward"
    assert worker.batches == 3 and worker.batched_frames == 9
    assert worker.described == 9 and worker.failed == 0


def test_batches_stop_at_a_skipped_key_frame() -> None:
    # Key frame 3 was described before: it is only the predecessor of key frame 4.
    got, worker = _run(Echo(), _numbered(7), batch_size=8, skip=[3])
    assert worker.calls == [1, 2, 3]  # type: ignore[attr-defined]
    assert [d.keyframe_index for d in got] == [0, 1, 2, 4, 5, 6]
    assert "frame 14 after 13" in got[3].observation


def test_a_failed_batch_is_described_one_at_a_time() -> None:
    got, worker = _run(Echo(fail_batches=True), _numbered(5), batch_size=4)
    assert worker.calls == [1, 4, 1, 1, 1, 1]  # type: ignore[attr-defined]
    assert [d.mode for d in got] == ["streaming"] * 5
    assert "frame 13 after 12" in got[3].observation


def test_drops_are_still_counted_with_batching() -> None:
    # A queue of 2 behind a held call: of key frames 1..5, the oldest waiting are dropped.
    gated = GatedPerceiver(Echo())
    got: list[FrameDescription] = []
    worker = PerceptionWorker(gated, on_description=got.append, episode_id="e",  # type: ignore[arg-type]
                              max_queue=2, batch_size=4)
    try:
        frames = _numbered(6)
        worker.submit(PerceptionJob("e", 0, frames[0], 0.0))
        assert gated.entered.wait(30)
        for i in range(1, 6):
            worker.submit(PerceptionJob("e", i, frames[i], float(i)))
        gated.gate.set()
        assert worker.wait_for(5, 30)
    finally:
        worker.stop()
    assert worker.dropped == 3
    assert [d.keyframe_index for d in got if d.mode == "failed"] == [1, 2, 3]
    kept = [d for d in got if d.mode != "failed"]
    assert [d.keyframe_index for d in kept] == [0, 4, 5]
    assert "frame 14 after 10" in kept[1].observation  # paired with the last described
    assert gated.calls == [1, 2]
    item = worker.health("n", "echo", True, _thresholds())
    assert item.values["dropped (queue full)"] == "3"
    assert item.values["batch size (max / mean)"] == "4 / 1.50"


def _thresholds():  # type: ignore[no-untyped-def]
    from embodied_r_ros.core.settings import build_settings

    return build_settings().diagnostics


@pytest.mark.models
def test_tiny_vlm_batched_descriptions_equal_one_at_a_time(tiny_models) -> None:  # type: ignore[no-untyped-def]
    from embodied_r_ros.core.backends.factory import make_perceiver
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    perceiver = make_perceiver(ModelSpec(model=str(tiny_models.vlm), device="cpu",
                                         max_new_tokens=16, batch_size=4))
    frames = _frames(9, shape=(240, 320))
    one, w1 = _run(perceiver, frames, batch_size=1)
    many, w4 = _run(perceiver, frames, batch_size=4)
    assert w1.calls == [1] * 9 and w4.calls == [1, 4, 4]  # type: ignore[attr-defined]
    assert [d.keyframe_index for d in many] == list(range(9))
    assert [d.raw_text for d in many] == [d.raw_text for d in one]
    assert [(d.action, d.observation) for d in many] == [(d.action, d.observation) for d in one]
    assert all(d.mode == "streaming" for d in many)
