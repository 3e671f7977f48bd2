"""The question flow: one copy of the steps every graph takes to answer a question.

    check the request's limits -> queue (BUSY beyond its bound) -> bind the current view
    (its episode and newest key frame; none -> NO_KEYFRAMES) -> wait for that episode's
    descriptions (or, in on_query mode, describe the frames now) -> reasoning model ->
    the episode must still be current (else EPISODE_RESET) -> answer, with a note when
    key frames had to be left out.

What differs between graphs is only where the episode lives, so each graph implements
the small `EpisodeAccess` protocol: the embedded pipeline reads its own tracker and
memory under a lock; the split graph's reasoning node asks the key-frame node for the
current view and keeps the descriptions that arrive over DDS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from embodied_r_ros.core.backends.base import TextCallback
from embodied_r_ros.core.errors import EpisodeResetError, InvalidRequestError, NoKeyFramesError
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.memory.long_term import LongTermMemory, answer_with_memory
from embodied_r_ros.core.perception.progress import ProcessedFrames
from embodied_r_ros.core.prompts.reasoning import format_question
from embodied_r_ros.core.qa.answerer import AnswerResult, QuestionAnswerer
from embodied_r_ros.core.qa.description_wait import collect_descriptions
from embodied_r_ros.core.qa.limits import check_request
from embodied_r_ros.core.qa.queue import QuestionQueue, Ticket
from embodied_r_ros.core.settings import QASettings
from embodied_r_ros.core.types import FrameDescription, TimingInfo

# Called with a stage name: "waiting_for_perception", "describing", "reasoning".
StageCallback = Callable[[str], None]
# on_query mode: (question text, stage callback, timing, ticket) -> descriptions made now.
DescribeNow = Callable[[str, StageCallback | None, TimingInfo, Ticket], list[FrameDescription]]


@dataclass
class CurrentView:
    """The episode a question is bound to and its newest key frame (-1: none yet).
    `describe_now` is set in on_query mode: the frames are described when asked."""

    episode_id: str
    last_index: int
    describe_now: DescribeNow | None = None


@dataclass
class DescriptionSource:
    """Where an episode's descriptions arrive, and how to tell that perception is alive."""

    progress: ProcessedFrames
    memory: EpisodeMemory
    check_alive: Callable[[], None] | None = None
    pending: Callable[[], int] | None = None
    perception_error: Callable[[], str] | None = None  # "" unless perception is failing
    # The key-frame store: when given, the prompt's key frames are chosen from the whole
    # memory and the answer carries its evidence (core/memory/long_term.py).
    long_term: LongTermMemory | None = None


class EpisodeAccess(Protocol):
    """What a graph offers the question flow (see the module docstring)."""

    def admission_episode(self) -> str:
        """The episode a question joins when admitted ("" when only the current view
        tells it); a reset fails the waiting questions of other episodes."""
        ...

    def bind_current_view(self, deadline: float) -> CurrentView:
        """Make the current view a key frame when configured and return the episode."""
        ...

    def description_source(self, episode_id: str) -> DescriptionSource:
        ...

    def episode_is_current(self, episode_id: str) -> bool:
        ...


def no_keyframes_error(camera_topic: str) -> NoKeyFramesError:
    return NoKeyFramesError("no camera frame has been received in this episode; check that "
                            f"images arrive on {camera_topic}")


class QuestionFlow:
    """Answers questions through an `EpisodeAccess`; never raises, never returns later
    than a question's deadline (plus a second of grace)."""

    def __init__(self, access: EpisodeAccess, answerer: QuestionAnswerer, queue: QuestionQueue,
                 qa: QASettings, camera_topic: str) -> None:
        self.access = access
        self.answerer = answerer
        self.queue = queue
        self.qa = qa
        self.camera_topic = camera_topic

    def ask(self, question: str, choices: Sequence[str] = (), *, timeout_s: float = 0.0,
            on_text: TextCallback | None = None, on_stage: StageCallback | None = None,
            should_stop: Callable[[], bool] | None = None,
            ticket: Ticket | None = None) -> AnswerResult:
        admitted_in = self.access.admission_episode()
        try:
            check_request(question, list(choices), self.qa,
                          getattr(self.answerer.reasoner, "count_text_tokens", None))
        except InvalidRequestError as exc:
            if ticket is not None:
                self.queue.release(ticket)
            return AnswerResult.failure(exc, episode_id=admitted_in)

        def stage(name: str) -> None:
            if on_stage is not None:
                on_stage(name)

        def handle(deadline: float, timing: TimingInfo, tk: Ticket) -> AnswerResult:
            question_text = format_question(question, list(choices) or None)
            view = self.access.bind_current_view(deadline)
            tk.episode_id = view.episode_id
            if view.last_index < 0:
                raise no_keyframes_error(self.camera_topic)
            note = ""
            long_term = None
            if view.describe_now is not None:
                descriptions = view.describe_now(question_text, on_stage, timing, tk)
            else:
                stage("waiting_for_perception")
                start = time.monotonic()
                source = self.access.description_source(view.episode_id)
                collected = collect_descriptions(
                    source.progress, source.memory, episode_id=view.episode_id,
                    last_index=view.last_index, deadline=deadline, should_stop=tk.should_stop,
                    interrupted=tk.check, check_alive=source.check_alive,
                    pending=source.pending, perception_error=source.perception_error)
                timing.perception_s = time.monotonic() - start
                descriptions, note = collected.descriptions, collected.note()
                long_term = source.long_term
            stage("reasoning")
            if long_term is not None:
                result = answer_with_memory(
                    long_term, self.answerer, question_text, question, list(choices),
                    episode_id=view.episode_id, last_index=view.last_index,
                    collected=descriptions, deadline=deadline, on_text=on_text,
                    should_stop=tk.should_stop, timing=timing)
            else:
                result = self.answerer.answer(question_text, descriptions,
                                              episode_id=view.episode_id, deadline=deadline,
                                              on_text=on_text, should_stop=tk.should_stop,
                                              timing=timing)
            if not self.access.episode_is_current(view.episode_id):
                raise EpisodeResetError("the episode was reset while the question was "
                                        "answered; ask again")
            if note and result.success:
                result.message += note
            return result

        return self.queue.run(handle, timeout_s=timeout_s, ticket=ticket,
                              should_stop=should_stop, episode_id=admitted_in)
