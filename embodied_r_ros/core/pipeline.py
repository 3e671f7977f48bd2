"""The whole robot pipeline in one ROS-free object: frames in, answers out.

    camera frames -> KeyFrameTracker -> PerceptionWorker (streaming) -> EpisodeMemory
    question -> QuestionFlow (core.qa.flow; the split graph's reasoning node uses the
                same flow) -> QuestionAnswerer

Used by the embedded ROS node (everything in one process), by the demo and by rosbag
replay evaluation. The split ROS graph uses the same pieces, one per node.

Thread safety: frames, resets and questions may come from different threads. The
episode state (tracker, episode id, key-frame list) changes under one lock; a question
binds to the episode current when its turn comes and is answered only from that
episode's key frames; a reset fails the questions bound to the old episode at once
(EPISODE_RESET) instead of letting them wait or answer from the new episode.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from embodied_r_ros.core.backends.base import Perceiver, Reasoner, TextCallback
from embodied_r_ros.core.errors import EpisodeResetError
from embodied_r_ros.core.keyframes.episode import EpisodeChange, KeyFrameEpisode
from embodied_r_ros.core.keyframes.rules import apply_count_rule, reference_count_rule
from embodied_r_ros.core.keyframes.tracker import KeyFrameEvent
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings
from embodied_r_ros.core.memory.store import MEMORY
from embodied_r_ros.core.perception.worker import (
    MotionSource,
    PerceptionJob,
    PerceptionWorker,
    describe_keyframe,
)
from embodied_r_ros.core.prompts.prompt_set import load_prompt_set
from embodied_r_ros.core.qa.answerer import AnswerResult, QuestionAnswerer
from embodied_r_ros.core.qa.flow import (
    CurrentView,
    DescriptionSource,
    QuestionFlow,
    StageCallback,
    no_keyframes_error,
)
from embodied_r_ros.core.qa.queue import QuestionQueue, Ticket
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.core.types import Frame, FrameDescription, TimingInfo

LOG = logging.getLogger("embodied_r_ros.pipeline")


def make_self_check(settings: Settings, reasoner: Reasoner) -> Reasoner | None:
    """The qa.self_check judge: None when off, the reasoning model itself when
    qa.self_check_model is empty, else a second model with the reasoning.* settings."""
    if not settings.qa.self_check:
        return None
    if not settings.qa.self_check_model:
        return reasoner
    from embodied_r_ros.core.backends.factory import make_reasoner
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    spec = dict(settings.reasoning.spec_dict(), model=settings.qa.self_check_model)
    return make_reasoner(ModelSpec.from_dict(spec))


def load_models(settings: Settings) -> tuple[Perceiver, Reasoner]:
    """Build both models from the settings; raises ModelUnavailableError with the reason."""
    from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
    from embodied_r_ros.core.model_settings import model_spec

    perceiver = make_perceiver(model_spec(settings, "perception"))
    reasoner = make_reasoner(model_spec(settings, "reasoning"))
    return perceiver, reasoner


@dataclass
class PipelineStatus:
    episode_id: str
    frames_received: int
    frames_sampled: int
    keyframes: int
    described: int
    pending_perception: int
    failed_perception: int
    questions_in_progress: int = 0


class EmbodiedRPipeline:
    """Frames in, answers out; one episode at a time; questions answered one at a time.
    It is the embedded graph's `EpisodeAccess` for the question flow."""

    def __init__(self, settings: Settings, perceiver: Perceiver, reasoner: Reasoner, *,
                 motion_source: MotionSource | None = None,
                 on_keyframe: Callable[[KeyFrameEvent, str], None] | None = None,
                 on_description: Callable[[FrameDescription], None] | None = None,
                 on_episode: Callable[[str, str, str], None] | None = None,
                 long_term: LongTermMemory | None = None) -> None:
        self.settings = settings
        # The key-frame store (docs/memory.md). The embedded node passes the persistent one;
        # without it (demo, replay evaluation) the same store lives in RAM.
        self.long_term = long_term or LongTermMemory(
            dataclasses.replace(MemorySettings.from_settings(settings), path=MEMORY,
                                continue_episode=False, thumbnail_px=0))
        self.on_episode = on_episode  # (new episode, previous, reason)
        self.prompts = load_prompt_set(settings.prompts.file)
        self.perceiver = perceiver
        self.reasoner = reasoner
        self.mode: str = settings.perception.mode
        self.episode = KeyFrameEpisode(settings.keyframes, settings.episode,
                                       image_max_side=settings.perception.max_image_side)
        self.tracker = self.episode.tracker
        self.kf_params = self.episode.params
        self._lock = threading.RLock()
        self.memory = EpisodeMemory(self.episode.episode_id, max_items=settings.episode.window)
        self.perception_settings = settings.perception.generation()
        self.on_keyframe = on_keyframe
        self.worker = PerceptionWorker(perceiver, self.memory, settings=self.perception_settings,
                                       motion_source=motion_source,
                                       on_description=on_description,
                                       persist=self.long_term.record,
                                       max_queue=settings.perception.max_queue,
                                       prompts=self.prompts,
                                       batch_size=settings.perception.batch_size)
        self.judge = make_self_check(settings, reasoner)
        self.answerer = QuestionAnswerer(reasoner, settings.reasoning.generation(),
                                         max_keyframes=self.kf_params.max_keyframes,
                                         prompts=self.prompts, self_check=self.judge)
        # on_query mode keeps key-frame images (bounded by the ring size).
        self._keyframe_images: list[KeyFrameEvent] = []
        self.questions = QuestionQueue(settings.qa.default_timeout_s,
                                       max_waiting=settings.qa.max_waiting_questions)
        self.flow = QuestionFlow(self, self.answerer, self.questions, settings.qa,
                                 settings.camera.topic)
        self.resumed_keyframes = self._resume()

    @property
    def episode_id(self) -> str:
        return self.episode.episode_id

    def _resume(self) -> int:
        """Continue the store's current episode and its numbering (memory.continue_episode)."""
        point = self.long_term.resume_point()
        if point is None:
            self.long_term.begin_episode(self.episode_id)
            return 0
        episode, next_index = point
        self.episode.continue_episode(episode, next_index)
        self.worker.reset(episode)
        return self.long_term.restore(episode, self.memory, self.worker.progress)

    # -- frames ----------------------------------------------------------------------------
    def offer_frame(self, stamp_s: float) -> bool:
        """Whether a frame with this stamp is sampled (decode it only then)."""
        return self.tracker.offer(stamp_s)

    def push_sampled(self, image: np.ndarray, stamp_s: float, index: int = 0,
                     frame_id: str = "") -> KeyFrameEvent | None:
        """A decoded frame that `offer_frame` accepted."""
        with self._lock:
            event, change = self.episode.push_sampled(Frame(image=image, stamp_s=stamp_s,
                                                            index=index, frame_id=frame_id))
            if change is not None:
                self._follow(change)
                self._announce(change)
            if event is not None:
                self._accept(event)
            return event

    def push_frame(self, image: np.ndarray, stamp_s: float, index: int = 0,
                   frame_id: str = "") -> KeyFrameEvent | None:
        """`offer_frame` + `push_sampled` for an already decoded frame."""
        if not self.offer_frame(stamp_s):
            return None
        return self.push_sampled(image, stamp_s, index, frame_id)

    def _accept(self, event: KeyFrameEvent) -> None:
        self.long_term.keyframe_image(self.episode_id, event.keyframe_index, event.frame.image)
        if self.on_keyframe is not None:
            self.on_keyframe(event, self.episode_id)
        if self.mode == "streaming":
            self.worker.submit(PerceptionJob(self.episode_id, event.keyframe_index,
                                             event.frame.image, event.frame.stamp_s))
        else:
            self._keyframe_images.append(event)
            cap = self.settings.keyframes.ring_size
            if len(self._keyframe_images) > cap:
                keep = apply_count_rule(list(range(len(self._keyframe_images))),
                                        len(self._keyframe_images), 1, cap)
                self._keyframe_images = [self._keyframe_images[i] for i in keep]

    # -- episodes ----------------------------------------------------------------------------
    def reset(self, episode_id: str | None = None, reason: str = "reset") -> str:
        """Forget everything seen so far and start a new episode; questions bound to the
        old episode fail at once with EPISODE_RESET."""
        with self._lock:
            change = self.episode.new_episode(reason, episode_id)
            self._follow(change)
        self._announce(change)
        return change.new

    def _follow(self, change: EpisodeChange) -> None:
        """The episode rolled over (lock held): perception and the store start on the new one."""
        self.worker.reset(change.new)
        self._keyframe_images.clear()
        self.long_term.begin_episode(change.new)

    def _announce(self, change: EpisodeChange) -> None:
        """Tell the owner, and fail the questions bound to the old episode."""
        if self.on_episode is not None:
            self.on_episode(change.new, change.old, change.reason)
        new = change.new
        self.questions.interrupt(
            EpisodeResetError(f"the episode was reset (episode {change.old} ended, {new} "
                              "began) while this question was answered; ask again"),
            which=lambda ticket: bool(ticket.episode_id) and ticket.episode_id != new)

    def perception_error(self) -> str:
        """The last perception error while perception is failing (see
        PerceptionWorker.failing), else ""."""
        return self.worker.failing(self.settings.diagnostics.failures_error_count)

    def status(self) -> PipelineStatus:
        with self._lock:
            return PipelineStatus(self.episode_id, self.tracker.n_received,
                                  self.tracker.n_sampled, self.tracker.n_keyframes,
                                  len(self.memory), self.worker.pending(),
                                  len(self.worker.failures), self.questions.in_progress())

    # -- questions (EpisodeAccess for core.qa.flow) ------------------------------------------
    def ask(self, question: str, choices: Sequence[str] = (), *, timeout_s: float = 0.0,
            on_text: TextCallback | None = None, on_stage: StageCallback | None = None,
            should_stop: Callable[[], bool] | None = None,
            ticket: Ticket | None = None) -> AnswerResult:
        """Answer one question about the current episode (see `QuestionFlow.ask`)."""
        return self.flow.ask(question, choices, timeout_s=timeout_s, on_text=on_text,
                             on_stage=on_stage, should_stop=should_stop, ticket=ticket)

    def admission_episode(self) -> str:
        return self.episode_id

    def bind_current_view(self, deadline: float) -> CurrentView:
        with self._lock:
            if self.mode == "streaming" and self.settings.qa.include_current_view:
                forced = self.tracker.force_current()
                if forced is not None:
                    self._accept(forced)
            view = CurrentView(self.episode_id, self.tracker.last_keyframe_index)
            if self.mode == "on_query":
                frames = self._on_query_frames()
                view.describe_now = (lambda text, on_stage, timing, ticket:
                                     self._describe_on_query(frames, text, on_stage, timing,
                                                             ticket))
            return view

    def description_source(self, episode_id: str) -> DescriptionSource:
        return DescriptionSource(self.worker.progress, self.memory,
                                 check_alive=self.worker.check_alive, pending=self.worker.pending,
                                 perception_error=self.perception_error,
                                 long_term=self.long_term)

    def episode_is_current(self, episode_id: str) -> bool:
        return self.episode_id == episode_id

    def _describe_on_query(self, frames: list[np.ndarray], question_text: str,
                           on_stage: StageCallback | None, timing: TimingInfo,
                           ticket: Ticket) -> list[FrameDescription]:
        """The paper's mode: describe the chosen frames now, knowing the question."""
        if not frames:
            raise no_keyframes_error(self.settings.camera.topic)
        if on_stage is not None:
            on_stage("describing")
        start = time.monotonic()
        descriptions: list[FrameDescription] = []
        previous: np.ndarray | None = None
        for position, image in enumerate(frames):
            ticket.check()
            descriptions.append(describe_keyframe(self.perceiver, image, previous, position,
                                                  self.perception_settings, question=question_text,
                                                  prompts=self.prompts))
            previous = image
        timing.perception_s = time.monotonic() - start
        return descriptions

    def _on_query_frames(self) -> list[np.ndarray]:
        """Key-frame images after the count rule (with padding from the sampled ring)."""
        ring = self.tracker.sampled_frames()
        if not ring:
            return []
        by_sampled = {e.sampled_index: e.frame.image for e in self._keyframe_images}
        by_sampled.update({i: f.image for i, f in ring})
        positions = [e.sampled_index for e in self._keyframe_images]
        n_sampled = self.tracker.n_sampled
        # The paper's mode uses the reference's count rule (docs/method.md §2), padding a
        # short episode with sampled frames from the ring.
        chosen = reference_count_rule(positions, n_sampled, self.kf_params.min_keyframes,
                                      self.kf_params.max_keyframes)
        missing = [i for i in chosen if i not in by_sampled]
        if missing:
            LOG.warning("%d frame(s) picked by the count rule are older than the sampled-frame "
                        "ring (keyframes.ring_size=%d) and are left out", len(missing),
                        self.settings.keyframes.ring_size)
        return [by_sampled[i] for i in chosen if i in by_sampled]

    def close(self) -> None:
        """Stop perception, fail waiting questions and release both models."""
        self.questions.close()
        self.worker.stop()
        self.long_term.close()
        models: list[Perceiver | Reasoner] = [self.perceiver, self.reasoner]
        if self.judge is not None and self.judge is not self.reasoner:
            models.append(self.judge)
        for model in models:
            try:
                model.close()
            except Exception:  # noqa: BLE001
                LOG.exception("closing a model failed")
