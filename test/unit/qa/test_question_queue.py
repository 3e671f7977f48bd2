"""The question queue and episode binding, in process (the contract both graphs rely on).

Scripted models (protocol-conformant Perceiver/Reasoner) make the timing controllable:
a perceiver that takes a known time per key frame, a reasoner that ignores stop requests
(a stalled model server).
"""

from __future__ import annotations

import threading
import time

import pytest

from embodied_r_ros.core.errors import (
    CancelledError,
    EpisodeResetError,
    ErrorCode,
    PerceptionError,
    RequestTimeoutError,
)
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.perception.progress import ProcessedFrames
from embodied_r_ros.core.pipeline import EmbodiedRPipeline
from embodied_r_ros.core.qa.answerer import AnswerResult
from embodied_r_ros.core.qa.description_wait import collect_descriptions
from embodied_r_ros.core.qa.queue import QuestionQueue
from embodied_r_ros.core.settings import build_settings
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.sample_data.scene import render_clip

from helpers.scripted_models import CountingPerceiver, ScriptedReasoner, feed


@pytest.fixture(scope="module")
def clip():  # type: ignore[no-untyped-def]
    return render_clip(fps=4.0)


def ok_after(seconds: float):  # type: ignore[no-untyped-def]
    def handler(deadline, timing, ticket):  # type: ignore[no-untyped-def]
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ticket.check()
            time.sleep(0.01)
        return AnswerResult(success=True, answer="A")
    return handler


def test_admission_is_bounded_and_answers_are_first_come_first_served() -> None:
    queue = QuestionQueue(10.0, max_waiting=2)
    order: list[int] = []

    def handler(n: int):  # type: ignore[no-untyped-def]
        def run(deadline, timing, ticket):  # type: ignore[no-untyped-def]
            order.append(n)
            time.sleep(0.2)
            return AnswerResult(success=True)
        return run

    tickets = [queue.admit() for _ in range(3)]
    assert all(tickets) and queue.admit() is None  # 1 answered + 2 waiting
    assert queue.rejected == 1
    results: dict[int, AnswerResult] = {}
    threads = [threading.Thread(target=lambda i=i: results.__setitem__(
        i, queue.run(handler(i), ticket=tickets[i]))) for i in (2, 1, 0)]
    for t in threads:
        t.start()
        time.sleep(0.05)
    for t in threads:
        t.join()
    assert order == [0, 1, 2] and all(r.success for r in results.values())
    assert queue.in_progress() == 0
    busy = QuestionQueue(10.0, max_waiting=0)
    first = busy.admit()
    assert busy.run(ok_after(0.0)).error_code == ErrorCode.BUSY
    busy.release(first)  # type: ignore[arg-type]
    assert busy.run(ok_after(0.0)).success


def test_a_stalled_model_never_holds_the_caller_past_the_deadline() -> None:
    queue = QuestionQueue(10.0, max_waiting=1, grace_s=0.5)
    released = threading.Event()

    def stalled(deadline, timing, ticket):  # type: ignore[no-untyped-def]
        released.wait(10)  # a model call that ignores stop requests
        return AnswerResult(success=True)

    start = time.monotonic()
    result = queue.run(stalled, timeout_s=1.0)
    elapsed = time.monotonic() - start
    assert result.error_code == ErrorCode.TIMEOUT and "time limit" in result.message
    assert 1.0 <= elapsed < 6.0  # the stalled call holds on for 10 s
    # The stalled call still owns the models: the next question waits, then times out
    # on its own deadline instead of running beside it.
    second = queue.run(ok_after(0.0), timeout_s=0.5)
    assert second.error_code == ErrorCode.TIMEOUT and "earlier questions" in second.message
    released.set()
    deadline = time.monotonic() + 5
    while queue.in_progress() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.run(ok_after(0.0), timeout_s=1.0).success


def test_interrupt_ends_bound_questions_at_once() -> None:
    queue = QuestionQueue(60.0, max_waiting=2)
    results: list[AnswerResult] = []

    def bound(episode: str):  # type: ignore[no-untyped-def]
        def run(deadline, timing, ticket):  # type: ignore[no-untyped-def]
            ticket.episode_id = episode
            return ok_after(30.0)(deadline, timing, ticket)
        return run

    thread = threading.Thread(target=lambda: results.append(queue.run(bound("old"))))
    thread.start()
    time.sleep(0.3)
    start = time.monotonic()
    assert queue.interrupt(EpisodeResetError("reset"), which=lambda t: t.episode_id == "new") == 0
    assert queue.interrupt(EpisodeResetError("reset"), which=lambda t: t.episode_id != "new") == 1
    thread.join(timeout=20)
    assert time.monotonic() - start < 10.0  # the question alone would take 30 s
    assert results[0].error_code == ErrorCode.EPISODE_RESET


class SlowPerceiver(CountingPerceiver):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def describe(self, images, prompt, settings=None):  # type: ignore[no-untyped-def]
        time.sleep(self.delay_s)
        return super().describe(images, prompt, settings)


def test_reset_while_a_question_waits_for_perception_fails_it_at_once(clip) -> None:  # type: ignore[no-untyped-def]
    pipeline = EmbodiedRPipeline(build_settings({}), SlowPerceiver(0.5),
                                 ScriptedReasoner("<think>t</think><answer>x</answer>"))
    try:
        feed(pipeline, clip)  # ~12 key frames at 0.5 s each: perception lags behind
        results: list[AnswerResult] = []
        asker = threading.Thread(target=lambda: results.append(pipeline.ask("Where?")))
        asker.start()
        time.sleep(0.5)
        start = time.monotonic()
        pipeline.reset()
        asker.join(timeout=30)
        assert time.monotonic() - start < 15.0  # not the 300 s question timeout
        assert results[0].error_code == ErrorCode.EPISODE_RESET, results[0].message
        # Other callers are not blocked: the new episode answers from its own frames only.
        for i, (image, stamp) in enumerate(zip(clip.frames[:8], clip.stamps_s[:8])):
            pipeline.push_frame(image, stamp, i)
        fresh = pipeline.ask("Where now?", timeout_s=60)
        assert fresh.success, fresh.message
        assert fresh.episode_id == pipeline.episode_id
        assert fresh.keyframes_used == pipeline.status().keyframes
        assert fresh.keyframes_used < results[0].keyframes_used or results[0].keyframes_used == 0
    finally:
        pipeline.close()


def test_descriptions_carry_their_episode_and_stale_ones_are_dropped(clip) -> None:  # type: ignore[no-untyped-def]
    seen: list[FrameDescription] = []
    pipeline = EmbodiedRPipeline(build_settings({}), SlowPerceiver(0.3), ScriptedReasoner("ok"),
                                 on_description=seen.append)
    try:
        feed(pipeline, clip)
        old = pipeline.episode_id
        time.sleep(0.4)  # one description is being made for the old episode
        new = pipeline.reset()
        time.sleep(0.6)
        assert all(d.episode_id == old for d in seen)
        assert len(pipeline.memory) == 0  # nothing of the old episode leaked in
        pipeline.push_frame(clip.frames[0], 100.0, 0)
        assert pipeline.ask("Q?", timeout_s=30).success
        assert seen[-1].episode_id == new
        assert {d.episode_id for d in pipeline.memory.descriptions()} == {new}
    finally:
        pipeline.close()


def test_collect_descriptions_types_each_failure() -> None:
    memory, progress = EpisodeMemory("e1"), ProcessedFrames()
    never = lambda: False  # noqa: E731
    with pytest.raises(RequestTimeoutError, match="key frame 0 was not described"):
        collect_descriptions(progress, memory, episode_id="e1", last_index=0,
                             deadline=time.monotonic() + 0.3, should_stop=never,
                             pending=lambda: 3)
    progress.mark_failed(0, "connection refused")
    with pytest.raises(PerceptionError, match="connection refused"):
        collect_descriptions(progress, memory, episode_id="e1", last_index=0,
                             deadline=time.monotonic() + 1, should_stop=never, grace_s=0)

    def dead() -> None:
        raise PerceptionError("the perception node 'perception' does not answer")

    with pytest.raises(PerceptionError, match="does not answer"):
        collect_descriptions(progress, memory, episode_id="e1", last_index=3,
                             deadline=time.monotonic() + 30, should_stop=never, check_alive=dead)
    with pytest.raises(CancelledError):
        collect_descriptions(progress, memory, episode_id="e1", last_index=3,
                             deadline=time.monotonic() + 30, should_stop=lambda: True)
    memory.clear("e2")
    with pytest.raises(EpisodeResetError):
        collect_descriptions(progress, memory, episode_id="e1", last_index=3,
                             deadline=time.monotonic() + 30, should_stop=never)
    memory.put(FrameDescription(0, "a room", episode_id="e2"))
    progress.reset()
    progress.mark_done(0)
    progress.mark_failed(1, "timeout")
    memory.put(FrameDescription(2, "a door", episode_id="e2"))
    progress.mark_done(2)
    got = collect_descriptions(progress, memory, episode_id="e2", last_index=2,
                               deadline=time.monotonic() + 5, should_stop=never, grace_s=0)
    assert [d.keyframe_index for d in got.descriptions] == [0, 2]
    assert got.left_out == [1] and "left out: 1" in got.note()


def test_a_full_perception_queue_drops_the_oldest_and_says_so(clip) -> None:  # type: ignore[no-untyped-def]
    pipeline = EmbodiedRPipeline(build_settings({"perception.max_queue": 2}), SlowPerceiver(0.2),
                                 ScriptedReasoner("ok"))
    try:
        feed(pipeline, clip)
        assert pipeline.worker.dropped > 0
        result = pipeline.ask("Q?", timeout_s=60)
        assert result.success
        assert "left out" in result.message
        assert any("perception queue full" in r for r in pipeline.worker.failures.values())
    finally:
        pipeline.close()


class JudgeReasoner(ScriptedReasoner):
    """The reasoning model answers B; as a judge (consistency prompt) it says `judge`."""

    def __init__(self, judge: str) -> None:
        super().__init__("<think>the door is on my right</think><answer>B</answer>")
        self.judge = judge

    def generate(self, messages, settings=None, on_text=None, should_stop=None):  # type: ignore[no-untyped-def]
        if "Reasoning" in messages[-1]["content"] or settings is not None and settings.max_new_tokens == 10:
            self.calls.append(list(messages))
            return self.judge
        return super().generate(messages, settings, on_text, should_stop)


@pytest.mark.parametrize("judge, outcome, letter", [
    ("B", "consistent", "B"), ("A", "inconsistent", "A"), ("no idea", "unavailable", "")])
def test_runtime_self_check_flags_reasoning_that_points_elsewhere(clip, judge, outcome, letter) -> None:  # type: ignore[no-untyped-def]
    from embodied_r_ros.core.qa.consistency import JUDGE_SETTINGS

    reasoner = JudgeReasoner(judge)
    pipeline = EmbodiedRPipeline(build_settings({"qa.self_check": True}), CountingPerceiver(),
                                 reasoner)
    try:
        feed(pipeline, clip)
        result = pipeline.ask("Is the door left or right?", ["left", "right"], timeout_s=60)
        assert result.success and result.answer == "B"
        assert (result.self_check, result.self_check_letter) == (outcome, letter)
        judge_call = reasoner.calls[-1]
        # the judge sees the question, its choices and the reasoning, not the video text
        assert "the door is on my right" in judge_call[-1]["content"]
        assert "Frame 0" not in judge_call[-1]["content"]
        if outcome == "inconsistent":
            assert "points to A, not B" in result.message
        assert JUDGE_SETTINGS.max_new_tokens == 10 and JUDGE_SETTINGS.temperature == 0.1
    finally:
        pipeline.close()


def test_self_check_is_off_by_default(clip) -> None:  # type: ignore[no-untyped-def]
    reasoner = JudgeReasoner("A")
    pipeline = EmbodiedRPipeline(build_settings({}), CountingPerceiver(), reasoner)
    try:
        feed(pipeline, clip)
        result = pipeline.ask("Is the door left or right?", ["left", "right"], timeout_s=60)
        assert result.success and result.self_check == "" and len(reasoner.calls) == 1
    finally:
        pipeline.close()
