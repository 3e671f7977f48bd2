"""Memory stays bounded by parameters however long the run: thousands of frames through
the in-process pipeline (what the embedded node runs), every sampled frame a new key
frame, with the long-episode policy of episode.policy."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from embodied_r_ros.core.pipeline import EmbodiedRPipeline
from embodied_r_ros.core.settings import build_settings

from helpers.scripted_models import CountingPerceiver, ScriptedReasoner

pytestmark = pytest.mark.slow  # trains, builds or pushes long loads


def views(n: int) -> list[np.ndarray]:
    """Unrelated textured views: each sampled frame becomes a key frame."""
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, size=(72, 96, 3), dtype=np.uint8) for _ in range(n)]


def push(pipeline: EmbodiedRPipeline, frames: list[np.ndarray], start: int, count: int) -> None:
    for i in range(start, start + count):
        # 2 frames per second of stream time, 1 Hz sampling: every other frame is sampled
        pipeline.push_frame(frames[i % len(frames)], 100.0 + i * 0.5, i)


@pytest.mark.parametrize("policy", ["window", "restart"])
def test_thousands_of_frames_keep_memory_flat(policy: str) -> None:
    params = build_settings({"episode.policy": policy, "episode.max_keyframes": 64,
                           "keyframes.ring_size": 16})
    pipeline = EmbodiedRPipeline(params, CountingPerceiver(), ScriptedReasoner("ok"))
    frames = views(12)
    try:
        push(pipeline, frames, 0, 400)  # warm-up: fills the window, ring and queues
        pipeline.worker.wait_for(pipeline.tracker.last_keyframe_index, 60)
        gc.collect()
        tracemalloc.start()
        base = tracemalloc.take_snapshot()
        push(pipeline, frames, 400, 3000)
        assert pipeline.worker.wait_for(pipeline.tracker.last_keyframe_index, 120)
        gc.collect()
        grown = sum(stat.size_diff for stat in
                    tracemalloc.take_snapshot().compare_to(base, "filename"))
        tracemalloc.stop()
        assert len(pipeline.memory) <= 64
        assert len(pipeline.tracker.sampled_frames()) <= 16
        if policy == "window":
            assert pipeline.memory.evicted > 1000
            kept = [d.keyframe_index for d in pipeline.memory.descriptions()]
            assert kept[0] == 0 and kept[-1] == pipeline.tracker.last_keyframe_index
        # 3000 frames later (1500 key frames described), allocations grew by less than
        # 1 MB: nothing accumulates per frame (the frames alone would be 62 MB).
        assert grown < 1_000_000, f"memory grew by {grown} bytes"
        answer = pipeline.ask("Where am I?", timeout_s=60)
        assert answer.success and answer.keyframes_used <= params.keyframes.max_keyframes
    finally:
        pipeline.close()


def test_restart_policy_time_budget_starts_new_episodes_and_announces_them() -> None:
    announced: list[tuple[str, str, str]] = []
    params = build_settings({"episode.policy": "restart", "episode.max_keyframes": 1000,
                           "episode.max_duration_s": 10.0})
    pipeline = EmbodiedRPipeline(params, CountingPerceiver(), ScriptedReasoner("ok"),
                                 on_episode=lambda *e: announced.append(e))
    try:
        push(pipeline, views(6), 0, 70)  # 35 s of stream time, 10 s per episode
        assert [reason for _, _, reason in announced] == ["budget"] * 3
        assert all(new != old for new, old, _ in announced)
        assert announced[-1][0] == pipeline.episode_id
        assert pipeline.status().frames_sampled <= 10  # the current episode only
    finally:
        pipeline.close()
