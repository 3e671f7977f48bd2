"""The whole robot pipeline in one ROS-free object: frames in, answers out.

    camera frames -> KeyFrameTracker -> PerceptionWorker (streaming) -> EpisodeMemory
    question -> QuestionQueue -> [force current view] -> collect_descriptions
             -> QuestionAnswerer

Used by the embedded ROS node (everything in one process), by the demo and by rosbag
replay evaluation. The split ROS graph uses the same pieces, one per node.

Thread safety: frames, resets and questions may come from different threads. The
episode state (tracker, episode id, key-frame list) changes under one lock; a question
binds to the episode current when its turn comes and is answered only from that
episode's key frames; a reset fails the questions bound to the old episode at once
(EPISODE_RESET) instead of letting them wait or answer from the new episode.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_r_ros.core import config as cfg
from embodied_r_ros.core.backends.base import Perceiver, Reasoner, TextCallback
from embodied_r_ros.core.description_wait import collect_descriptions
from embodied_r_ros.core.errors import (
    EpisodeResetError,
    InvalidRequestError,
    NoKeyFramesError,
)
from embodied_r_ros.core.keyframe_tracker import KeyFrameEvent, KeyFrameTracker
from embodied_r_ros.core.keyframes import (
    KeyFrameParams,
    apply_count_rule,
    reference_count_rule,
)
from embodied_r_ros.core.memory import EpisodeMemory
from embodied_r_ros.core.perception_worker import (
    MotionSource,
    PerceptionJob,
    PerceptionWorker,
    describe_keyframe,
)
from embodied_r_ros.core.prompt_set import load_prompt_set
from embodied_r_ros.core.question_answering import AnswerResult, QuestionAnswerer
from embodied_r_ros.core.question_limits import QuestionLimits, check_request
from embodied_r_ros.core.question_queue import QuestionQueue, Ticket
from embodied_r_ros.core.reasoning_prompts import format_question
from embodied_r_ros.core.stamps import EpisodeBudget
from embodied_r_ros.core.types import (
    Frame,
    FrameDescription,
    GenerationSettings,
    TimingInfo,
)

LOG = logging.getLogger("embodied_r_ros.pipeline")

# Called with a stage name: "waiting_for_perception", "describing", "reasoning".
StageCallback = Callable[[str], None]


def keyframe_params(params: Mapping[str, Any]) -> KeyFrameParams:
    return KeyFrameParams(
        sample_fps=params["keyframes.sample_fps"],
        overlap_threshold=params["keyframes.overlap_threshold"],
        min_matches=params["keyframes.min_matches"],
        ransac_reproj_threshold=params["keyframes.ransac_reproj_threshold"],
        min_keyframes=params["keyframes.min_keyframes"],
        max_keyframes=params["keyframes.max_keyframes"],
    )


def generation_settings(params: Mapping[str, Any], prefix: str) -> GenerationSettings:
    return GenerationSettings(temperature=params[f"{prefix}.temperature"],
                              max_new_tokens=params[f"{prefix}.max_new_tokens"],
                              top_p=params[f"{prefix}.top_p"])


def make_self_check(params: Mapping[str, Any], reasoner: Reasoner) -> Reasoner | None:
    """The qa.self_check judge: None when off, the reasoning model itself when
    qa.self_check_model is empty, else a second model with the reasoning.* settings."""
    if not params["qa.self_check"]:
        return None
    if not params["qa.self_check_model"]:
        return reasoner
    from embodied_r_ros.core.backends.factory import make_reasoner
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    spec = dict(cfg.model_spec_dict(params, "reasoning"), model=params["qa.self_check_model"])
    return make_reasoner(ModelSpec.from_dict(spec))


def load_models(params: Mapping[str, Any]) -> tuple[Perceiver, Reasoner]:
    """Build both models from parameters; raises ModelUnavailableError with the reason."""
    from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
    from embodied_r_ros.core.model_settings import model_spec

    perceiver = make_perceiver(model_spec(params, "perception"))
    reasoner = make_reasoner(model_spec(params, "reasoning"))
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


def new_episode_id() -> str:
    return uuid.uuid4().hex[:12]


class EmbodiedRPipeline:
    """Frames in, answers out; one episode at a time; questions answered one at a time."""

    def __init__(self, params: Mapping[str, Any], perceiver: Perceiver, reasoner: Reasoner, *,
                 motion_source: MotionSource | None = None,
                 on_keyframe: Callable[[KeyFrameEvent, str], None] | None = None,
                 on_description: Callable[[FrameDescription], None] | None = None,
                 on_episode: Callable[[str, str, str], None] | None = None) -> None:
        self.params = dict(params)
        self.on_episode = on_episode  # (new episode, previous, reason)
        self.budget = EpisodeBudget.from_params(params)
        self.prompts = load_prompt_set(params["prompts.file"])
        self.perceiver = perceiver
        self.reasoner = reasoner
        self.mode: str = params["perception.mode"]
        self.kf_params = keyframe_params(params)
        self.tracker = KeyFrameTracker(self.kf_params, ring_size=params["keyframes.ring_size"],
                                       image_max_side=params["perception.max_image_side"])
        self._lock = threading.RLock()
        self.episode_id = new_episode_id()
        self.memory = EpisodeMemory(self.episode_id, max_items=self._window(params))
        self.perception_settings = generation_settings(params, "perception")
        self.on_keyframe = on_keyframe
        self.worker = PerceptionWorker(perceiver, self.memory, settings=self.perception_settings,
                                       motion_source=motion_source, on_description=on_description,
                                       max_queue=params["perception.max_queue"],
                                       prompts=self.prompts)
        self.judge = make_self_check(params, reasoner)
        self.answerer = QuestionAnswerer(reasoner, generation_settings(params, "reasoning"),
                                         max_keyframes=self.kf_params.max_keyframes,
                                         prompts=self.prompts, self_check=self.judge)
        # on_query mode keeps key-frame images (bounded by the ring size).
        self._keyframe_images: list[KeyFrameEvent] = []
        self.limits = QuestionLimits.from_params(params)
        self.questions = QuestionQueue(params["qa.default_timeout_s"],
                                       max_waiting=params["qa.max_waiting_questions"])

    # -- frames ----------------------------------------------------------------------------
    def offer_frame(self, stamp_s: float) -> bool:
        """Whether a frame with this stamp is sampled (decode it only then)."""
        return self.tracker.offer(stamp_s)

    def push_sampled(self, image: np.ndarray, stamp_s: float, index: int = 0,
                     frame_id: str = "") -> KeyFrameEvent | None:
        """A decoded frame that `offer_frame` accepted."""
        with self._lock:
            if self.budget.spent(self.tracker.n_keyframes, stamp_s):
                self.reset(reason="budget")
            event = self.tracker.push_sampled(Frame(image=image, stamp_s=stamp_s, index=index,
                                                    frame_id=frame_id))
            if event is not None:
                self._accept(event)
            return event

    def push_frame(self, image: np.ndarray, stamp_s: float, index: int = 0,
                   frame_id: str = "") -> KeyFrameEvent | None:
        """`offer_frame` + `push_sampled` for an already decoded frame."""
        if not self.offer_frame(stamp_s):
            return None
        return self.push_sampled(image, stamp_s, index, frame_id)

    @staticmethod
    def _window(params: Mapping[str, Any]) -> int:
        return params["episode.max_keyframes"] if params["episode.policy"] == "window" else 0

    def _accept(self, event: KeyFrameEvent) -> None:
        if self.on_keyframe is not None:
            self.on_keyframe(event, self.episode_id)
        if self.mode == "streaming":
            self.worker.submit(PerceptionJob(self.episode_id, event.keyframe_index,
                                             event.frame.image, event.frame.stamp_s))
        else:
            self._keyframe_images.append(event)
            cap = self.params["keyframes.ring_size"]
            if len(self._keyframe_images) > cap:
                keep = apply_count_rule(list(range(len(self._keyframe_images))),
                                        len(self._keyframe_images), 1, cap)
                self._keyframe_images = [self._keyframe_images[i] for i in keep]

    # -- episodes ----------------------------------------------------------------------------
    def reset(self, episode_id: str | None = None, reason: str = "reset") -> str:
        """Forget everything seen so far and start a new episode; questions bound to the
        old episode fail at once with EPISODE_RESET."""
        with self._lock:
            old = self.episode_id
            self.episode_id = episode_id or new_episode_id()
            self.tracker.reset()
            self.worker.reset(self.episode_id)
            self._keyframe_images.clear()
            self.budget.restart()
            new = self.episode_id
        if self.on_episode is not None:
            self.on_episode(new, old, reason)
        self.questions.interrupt(
            EpisodeResetError(f"the episode was reset (episode {old} ended, {new} began) "
                              "while this question was answered; ask again"),
            which=lambda ticket: bool(ticket.episode_id) and ticket.episode_id != new)
        return new

    def status(self) -> PipelineStatus:
        with self._lock:
            return PipelineStatus(self.episode_id, self.tracker.n_received,
                                  self.tracker.n_sampled, self.tracker.n_keyframes,
                                  len(self.memory), self.worker.pending(),
                                  len(self.worker.failures), self.questions.in_progress())

    # -- questions -----------------------------------------------------------------------------
    def ask(self, question: str, choices: Sequence[str] = (), *, timeout_s: float = 0.0,
            on_text: TextCallback | None = None, on_stage: StageCallback | None = None,
            should_stop: Callable[[], bool] | None = None,
            ticket: Ticket | None = None) -> AnswerResult:
        """Answer one question about the current episode. Never raises; never returns
        later than the question's deadline (plus a second of grace)."""
        try:
            check_request(question, list(choices), self.limits,
                          getattr(self.reasoner, "count_text_tokens", None))
        except InvalidRequestError as exc:
            if ticket is not None:
                self.questions.release(ticket)
            return AnswerResult.failure(exc, episode_id=self.episode_id)

        def handle(deadline: float, timing: TimingInfo, tk: Ticket) -> AnswerResult:
            question_text = format_question(question, list(choices) or None)
            with self._lock:
                episode = self.episode_id
                tk.episode_id = episode
                if self.mode == "streaming" and self.params["qa.include_current_view"]:
                    forced = self.tracker.force_current()
                    if forced is not None:
                        self._accept(forced)
                last = self.tracker.last_keyframe_index
                frames = self._on_query_frames() if self.mode == "on_query" else []
            if last < 0:
                raise NoKeyFramesError("no camera frame has been received in this episode; "
                                       f"check that images arrive on {self.params['camera.topic']}")
            note = ""
            if self.mode == "streaming":
                if on_stage is not None:
                    on_stage("waiting_for_perception")
                start = time.monotonic()
                collected = collect_descriptions(
                    self.worker.progress, self.memory, episode_id=episode, last_index=last,
                    deadline=deadline, should_stop=tk.should_stop, interrupted=tk.check,
                    check_alive=self.worker.check_alive, pending=self.worker.pending)
                timing.perception_s = time.monotonic() - start
                descriptions, note = collected.descriptions, collected.note()
            else:
                descriptions = self._describe_on_query(frames, question_text, on_stage, timing, tk)
            if on_stage is not None:
                on_stage("reasoning")
            result = self.answerer.answer(question_text, descriptions, episode_id=episode,
                                          deadline=deadline, on_text=on_text,
                                          should_stop=tk.should_stop, timing=timing)
            if self.episode_id != episode:
                raise EpisodeResetError("the episode was reset while the question was "
                                        "answered; ask again")
            if note and result.success:
                result.message += note
            return result

        return self.questions.run(handle, timeout_s=timeout_s, ticket=ticket,
                                  should_stop=should_stop, episode_id=self.episode_id)

    def _describe_on_query(self, frames: list[np.ndarray], question_text: str,
                           on_stage: StageCallback | None, timing: TimingInfo,
                           ticket: Ticket) -> list[FrameDescription]:
        """The paper's mode: describe the chosen frames now, knowing the question."""
        if not frames:
            raise NoKeyFramesError("no camera frame has been received in this episode; check "
                                   f"that images arrive on {self.params['camera.topic']}")
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
                        self.params["keyframes.ring_size"])
        return [by_sampled[i] for i in chosen if i in by_sampled]

    def close(self) -> None:
        """Stop perception, fail waiting questions and release both models."""
        self.questions.close()
        self.worker.stop()
        models: list[Perceiver | Reasoner] = [self.perceiver, self.reasoner]
        if self.judge is not None and self.judge is not self.reasoner:
            models.append(self.judge)
        for model in models:
            try:
                model.close()
            except Exception:  # noqa: BLE001
                LOG.exception("closing a model failed")
