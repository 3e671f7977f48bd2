"""The ROS-free robot pipeline (what the embedded node runs), in process.

Real parts: the synthetic clip, the real key-frame selector, the tiny transformers models
loaded through `load_models` (the robot's loading code). Where a test needs a reasoning
reply of a known shape (parsing paths, timeouts), it uses a scripted Reasoner that
satisfies the same protocol: a tiny random LM cannot be made to emit a given answer.
"""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from embodied_r_ros.core.errors import ErrorCode, ModelUnavailableError
from embodied_r_ros.core.keyframes.rules import KeyFrameParams
from embodied_r_ros.core.keyframes.tracker import KeyFrameTracker, downscale
from embodied_r_ros.core.pipeline import EmbodiedRPipeline, load_models
from embodied_r_ros.core.qa.answerer import select_for_prompt
from embodied_r_ros.core.settings import build_settings
from embodied_r_ros.core.types import Frame, FrameDescription
from embodied_r_ros.sample_data.scene import render_clip

from helpers.scripted_models import CountingPerceiver, ScriptedReasoner, feed

FRAME_LINE = re.compile(r"^Frame (\d+): ", re.MULTILINE)


@pytest.fixture(scope="module")
def clip():  # type: ignore[no-untyped-def]
    return render_clip(fps=4.0)


def tiny_params(tiny_models, **extra) -> dict:  # type: ignore[no-untyped-def]
    return build_settings({
        "perception.model": str(tiny_models.vlm), "reasoning.model": str(tiny_models.lm),
        "perception.device": "cpu", "reasoning.device": "cpu",
        "perception.dtype": "float32", "reasoning.dtype": "float32",
        "perception.max_new_tokens": 12, "reasoning.max_new_tokens": 16, **extra})



def test_tiny_models_end_to_end_in_process(tiny_models, clip) -> None:  # type: ignore[no-untyped-def]
    params = tiny_params(tiny_models)
    perceiver, reasoner = load_models(params)
    pipeline = EmbodiedRPipeline(params, perceiver, reasoner)
    try:
        feed(pipeline, clip)
        result = pipeline.ask("What is around me?")
        assert result.success, result.message
        assert result.answer
        assert 4 <= result.keyframes_used <= 32
        text = result.messages[-1]["content"]
        assert [int(n) for n in FRAME_LINE.findall(text)] == list(range(result.keyframes_used))
        assert result.timing.reasoning_s > 0 and result.timing.total_s >= result.timing.reasoning_s
        status = pipeline.status()
        assert status.described == status.keyframes == result.keyframes_used
        assert status.frames_sampled == pytest.approx(clip.duration_s + 1, abs=1.5)
    finally:
        pipeline.close()


def test_missing_model_is_an_immediate_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    params = build_settings({"perception.model": str(tmp_path / "nope"),
                           "reasoning.model": str(tmp_path / "nope")})
    with pytest.raises(ModelUnavailableError, match="nope"):
        load_models(params)


def test_well_formed_answer_is_parsed_with_option_text(clip) -> None:  # type: ignore[no-untyped-def]
    reasoner = ScriptedReasoner("<think>The box was on my left.</think> <answer>B</answer>")
    perceiver = CountingPerceiver()
    pipeline = EmbodiedRPipeline(build_settings({}), perceiver, reasoner)
    try:
        feed(pipeline, clip)
        result = pipeline.ask("Where is the red box?", ["right", "left", "behind"])
        assert result.success and result.answer == "B" and result.answer_text == "left"
        assert result.reasoning == "The box was on my left."
        assert perceiver.calls[0] == 1 and set(perceiver.calls[1:]) == {2}
        prompt = reasoner.calls[0][-1]["content"]
        assert "After rotate left, Observe:" in prompt
        assert "A. right" in prompt and "C. behind" in prompt
    finally:
        pipeline.close()


def test_unparseable_timeout_and_cancel_are_typed(clip) -> None:  # type: ignore[no-untyped-def]
    perceiver = CountingPerceiver()
    pipeline = EmbodiedRPipeline(build_settings({}), perceiver, ScriptedReasoner("no idea at all"))
    try:
        feed(pipeline, clip)
        bad = pipeline.ask("Where?", ["left", "right"])
        assert bad.error_code == ErrorCode.UNPARSEABLE_ANSWER and bad.raw_output == "no idea at all"

        pipeline.answerer.reasoner = ScriptedReasoner("word " * 1000, delay_s=0.02)
        slow = pipeline.ask("Where?", timeout_s=0.5)
        assert slow.error_code == ErrorCode.TIMEOUT and "time limit" in slow.message
        assert slow.timing.total_s < 10.0  # the whole reply would take 20 s

        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        cancelled = pipeline.ask("Where?", should_stop=stop.is_set)
        assert cancelled.error_code == ErrorCode.CANCELLED
    finally:
        pipeline.close()


@pytest.mark.parametrize("waiting", [0, 1])
def test_one_question_at_a_time_and_a_bounded_queue(clip, waiting: int) -> None:  # type: ignore[no-untyped-def]
    reasoner = ScriptedReasoner("word " * 50, delay_s=0.02)
    pipeline = EmbodiedRPipeline(build_settings({"qa.max_waiting_questions": waiting}),
                                 CountingPerceiver(), reasoner)
    try:
        feed(pipeline, clip)
        results = []
        first = threading.Thread(target=lambda: results.append(pipeline.ask("A?")))
        first.start()
        time.sleep(0.3)
        second = pipeline.ask("B?")
        first.join()
        assert results[0].success
        if waiting == 0:
            assert second.error_code == ErrorCode.BUSY
            assert "qa.max_waiting_questions" in second.message
            assert len(reasoner.calls) == 1
        else:  # B waited for A, then was answered: never two model calls at once
            assert second.success, second.message
            assert [c[-1]["content"].rsplit("Question: ", 1)[1] for c in reasoner.calls] == [
                "A?", "B?"]
    finally:
        pipeline.close()


def test_on_query_mode_describes_with_the_question(clip) -> None:  # type: ignore[no-untyped-def]
    perceiver = CountingPerceiver()
    pipeline = EmbodiedRPipeline(build_settings({"perception.mode": "on_query"}), perceiver,
                                 ScriptedReasoner("<think>x</think><answer>A</answer>"))
    try:
        feed(pipeline, clip)
        assert perceiver.calls == []  # nothing is described before the question
        result = pipeline.ask("Which did I see first?", ["red box", "blue pillar"])
        assert result.success and result.answer == "A"
        assert len(perceiver.calls) == result.keyframes_used >= 4
    finally:
        pipeline.close()


def test_reset_starts_a_new_episode(clip) -> None:  # type: ignore[no-untyped-def]
    pipeline = EmbodiedRPipeline(build_settings({}), CountingPerceiver(), ScriptedReasoner("ok"))
    try:
        feed(pipeline, clip)
        assert pipeline.ask("Q?").success
        old = pipeline.episode_id
        assert pipeline.reset() != old
        result = pipeline.ask("Q?")
        assert result.error_code == ErrorCode.NO_KEYFRAMES and "camera" in result.message
    finally:
        pipeline.close()


def test_perception_failures_are_reported_not_hidden(clip) -> None:  # type: ignore[no-untyped-def]
    class Flaky(CountingPerceiver):
        # The second key frame always fails (its retries too: a failure that lasts).
        bad: int | None = None

        def describe(self, images, prompt, settings=None):  # type: ignore[no-untyped-def]
            key = hash(images[-1].tobytes())
            if len(self.calls) == 1 and self.bad is None:
                self.bad = key
            if key == self.bad:
                self.calls.append(-1)
                raise RuntimeError("server hiccup")
            return super().describe(images, prompt, settings)

    pipeline = EmbodiedRPipeline(build_settings({}), Flaky(), ScriptedReasoner("ok"))
    try:
        feed(pipeline, clip)
        result = pipeline.ask("Q?")
        assert result.success
        assert "1 key frame(s) of this episode have no description" in result.message
        assert result.keyframes_used == pipeline.status().keyframes - 1
    finally:
        pipeline.close()


def test_tracker_forces_current_view_once_and_downscales_after_selection(clip) -> None:  # type: ignore[no-untyped-def]
    tracker = KeyFrameTracker(KeyFrameParams(), ring_size=5, image_max_side=160)
    full = KeyFrameTracker(KeyFrameParams(), ring_size=5, image_max_side=0)
    events = [tracker.push(Frame(img, t, i)) for i, (img, t) in
              enumerate(zip(clip.frames, clip.stamps_s))]
    full_events = [full.push(Frame(img, t, i)) for i, (img, t) in
                   enumerate(zip(clip.frames, clip.stamps_s))]
    kept = [e for e in events if e is not None]
    # Detection ran on the full frame: the same decisions as without any shrinking...
    assert [e.sampled_index for e in kept] == [
        e.sampled_index for e in full_events if e is not None]
    # ...and the images handed on are shrunk afterwards.
    assert kept[0].reason == "first" and kept[0].frame.image.shape[1] == 160
    assert clip.frames[0].shape[1] > 160
    assert len(tracker.sampled_frames()) == 5  # bounded ring
    forced = tracker.force_current()
    if kept[-1].sampled_index == tracker.n_sampled - 1:
        assert forced is None
    else:
        assert forced is not None and forced.reason == "forced"
        assert forced.sampled_index == tracker.n_sampled - 1
    assert tracker.force_current() is None  # already the last key frame
    assert downscale(np.zeros((100, 50, 3), np.uint8), 0).shape == (100, 50, 3)


def test_prompt_keeps_first_last_and_at_most_max() -> None:
    descriptions = [FrameDescription(i, f"obs {i}") for i in range(100)]
    chosen = select_for_prompt(descriptions, 32)
    assert len(chosen) == 32
    assert chosen[0].keyframe_index == 0 and chosen[-1].keyframe_index == 99
    idx = [d.keyframe_index for d in chosen]
    assert idx == sorted(set(idx))


def test_odometry_replaces_the_vlm_action_with_the_measured_one(clip) -> None:  # type: ignore[no-untyped-def]
    from embodied_r_ros.core.perception.odometry import Pose2D, PoseHistory, measured_action

    history = PoseHistory(max_age_s=1e6)
    for pose in clip.poses:
        history.add(Pose2D(pose.x, pose.y, pose.yaw, pose.stamp_s))
    seen: list[FrameDescription] = []
    pipeline = EmbodiedRPipeline(
        build_settings({}), CountingPerceiver(), ScriptedReasoner("ok"),
        motion_source=lambda a, b: measured_action(history, a, b), on_description=seen.append)
    try:
        feed(pipeline, clip)
        assert pipeline.ask("Q?").success
        later = [d for d in seen if d.keyframe_index > 0]
        assert later and all(d.action_source == "odometry" for d in later)
        # The scripted VLM always says "rotate left"; odometry must see the real moves.
        actions = {d.action for d in later}
        assert "move forward" in actions or "rotate right" in actions, actions
        assert measured_action(history, -100.0, -99.0) is None
    finally:
        pipeline.close()


def test_the_stored_episode_holds_the_current_view_when_the_question_reads_it(  # type: ignore[no-untyped-def]
        clip, tmp_path) -> None:
    """With the persistent key-frame store, the description of the key frame a question
    waits for (the current view) is stored before it counts as described, so the prompt
    chosen from the store includes it (it was missing when the store was written after)."""
    import dataclasses

    from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings

    settings = build_settings({})
    store = LongTermMemory(dataclasses.replace(MemorySettings.from_settings(settings),
                                               path=str(tmp_path / "memory.sqlite")))
    pipeline = EmbodiedRPipeline(settings, CountingPerceiver(),
                                 ScriptedReasoner("<think>first</think><answer>A</answer>"),
                                 long_term=store)
    try:
        feed(pipeline, clip)
        for _ in range(3):
            result = pipeline.ask("Which did I see first?", ["red box", "green door"])
            assert result.success, result.message
            assert result.keyframes_used == pipeline.status().keyframes
    finally:
        pipeline.close()
