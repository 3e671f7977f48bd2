"""The whole robot pipeline in one ROS-free object: frames in, answers out.

    camera frames -> KeyFrameTracker -> PerceptionWorker (streaming) -> EpisodeMemory
    question -> [force current view] -> wait for pending perception -> QuestionAnswerer

Used by the embedded ROS node (everything in one process), by the demo and by rosbag
replay evaluation. The split ROS graph uses the same pieces, one per node.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from embodied_r_ros.core import config as cfg
from embodied_r_ros.core.backends.base import Perceiver, Reasoner, TextCallback
from embodied_r_ros.core.errors import (
    CancelledError,
    NoKeyFramesError,
    RequestTimeoutError,
)
from embodied_r_ros.core.keyframe_tracker import KeyFrameEvent, KeyFrameTracker
from embodied_r_ros.core.keyframes import KeyFrameParams, apply_count_rule
from embodied_r_ros.core.memory import EpisodeMemory
from embodied_r_ros.core.perception_worker import (
    MotionSource,
    PerceptionJob,
    PerceptionWorker,
    describe_keyframe,
)
from embodied_r_ros.core.question_answering import (
    AnswerResult,
    QuestionAnswerer,
    QuestionGate,
)
from embodied_r_ros.core.reasoning_prompts import format_question
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


def load_models(params: Mapping[str, Any]) -> tuple[Perceiver, Reasoner]:
    """Build both models from parameters; raises ModelUnavailableError with the reason."""
    from embodied_r_ros.core.backends.factory import make_perceiver, make_reasoner
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    perceiver = make_perceiver(ModelSpec.from_dict(cfg.model_spec_dict(params, "perception")))
    reasoner = make_reasoner(ModelSpec.from_dict(cfg.model_spec_dict(params, "reasoning")))
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


class EmbodiedRPipeline:
    """Frames in, answers out; one episode at a time; one question at a time."""

    def __init__(self, params: Mapping[str, Any], perceiver: Perceiver, reasoner: Reasoner, *,
                 motion_source: MotionSource | None = None,
                 on_keyframe: Callable[[KeyFrameEvent, str], None] | None = None,
                 on_description: Callable[[FrameDescription], None] | None = None) -> None:
        self.params = dict(params)
        self.perceiver = perceiver
        self.reasoner = reasoner
        self.mode: str = params["perception.mode"]
        self.kf_params = keyframe_params(params)
        self.tracker = KeyFrameTracker(self.kf_params, ring_size=params["keyframes.ring_size"],
                                       max_image_side=params["camera.max_image_side"])
        self.episode_id = uuid.uuid4().hex[:12]
        self.memory = EpisodeMemory(self.episode_id)
        self.perception_settings = generation_settings(params, "perception")
        self.on_keyframe = on_keyframe
        self.worker = PerceptionWorker(perceiver, self.memory, settings=self.perception_settings,
                                       motion_source=motion_source, on_description=on_description)
        self.answerer = QuestionAnswerer(reasoner, generation_settings(params, "reasoning"),
                                         max_keyframes=self.kf_params.max_keyframes)
        # on_query mode keeps key-frame images (bounded by the ring size).
        self._keyframe_images: list[KeyFrameEvent] = []
        self._gate = QuestionGate(params["qa.default_timeout_s"])
        self._last_keyframe = -1

    # -- frames ----------------------------------------------------------------------------
    def push_frame(self, image: np.ndarray, stamp_s: float, index: int = 0,
                   frame_id: str = "") -> KeyFrameEvent | None:
        event = self.tracker.push(Frame(image=image, stamp_s=stamp_s, index=index,
                                        frame_id=frame_id))
        if event is not None:
            self._accept(event)
        return event

    def _accept(self, event: KeyFrameEvent) -> None:
        self._last_keyframe = event.keyframe_index
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
    def reset(self, episode_id: str | None = None) -> str:
        """Forget everything seen so far and start a new episode."""
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        self.tracker.reset()
        self.worker.reset(self.episode_id)
        self._keyframe_images.clear()
        self._last_keyframe = -1
        return self.episode_id

    def status(self) -> PipelineStatus:
        return PipelineStatus(self.episode_id, self.tracker.n_received, self.tracker.n_sampled,
                              self.tracker.n_keyframes, len(self.memory),
                              self.worker.pending(), len(self.worker.failures))

    # -- questions -----------------------------------------------------------------------------
    def ask(self, question: str, choices: Sequence[str] = (), *, timeout_s: float = 0.0,
            on_text: TextCallback | None = None, on_stage: StageCallback | None = None,
            should_stop: Callable[[], bool] | None = None) -> AnswerResult:
        """Answer one question about the current episode. Never raises."""

        def handle(deadline: float, timing: TimingInfo) -> AnswerResult:
            question_text = format_question(question, list(choices) or None)
            if self.mode == "streaming":
                descriptions = self._streaming_descriptions(deadline, on_stage, should_stop,
                                                            timing)
            else:
                descriptions = self._on_query_descriptions(question_text, on_stage, timing)
            if on_stage is not None:
                on_stage("reasoning")
            result = self.answerer.answer(question_text, descriptions,
                                          episode_id=self.episode_id, deadline=deadline,
                                          on_text=on_text, should_stop=should_stop,
                                          timing=timing)
            failed = len(self.worker.failures)
            if failed and result.success:
                result.message += (f" ({failed} key frame(s) could not be described and "
                                   "were left out)")
            return result

        return self._gate.run(timeout_s, handle, self.episode_id)

    def _streaming_descriptions(self, deadline: float, on_stage: StageCallback | None,
                                should_stop: Callable[[], bool] | None,
                                timing: TimingInfo) -> list[FrameDescription]:
        if self.params["qa.include_current_view"]:
            forced = self.tracker.force_current()
            if forced is not None:
                self._accept(forced)
        if self._last_keyframe < 0:
            raise NoKeyFramesError("no camera frame has been received in this episode; check "
                                   f"that images arrive on {self.params['camera.topic']}")
        if on_stage is not None:
            on_stage("waiting_for_perception")
        start = time.monotonic()
        done = self.worker.wait_for(self._last_keyframe, max(0.0, deadline - time.monotonic()),
                                    should_stop)
        timing.perception_s = time.monotonic() - start
        if not done:
            if should_stop is not None and should_stop():
                raise CancelledError("the question was cancelled while waiting for perception")
            raise RequestTimeoutError(
                f"perception of the pending key frames did not finish in time "
                f"({self.worker.pending()} still queued); the VLM is slower than the key-frame "
                "rate: use a faster perception model/server or raise the timeout")
        return self.memory.descriptions()

    def _on_query_descriptions(self, question_text: str, on_stage: StageCallback | None,
                               timing: TimingInfo) -> list[FrameDescription]:
        """The paper's mode: describe the chosen frames now, knowing the question."""
        frames = self._on_query_frames()
        if not frames:
            raise NoKeyFramesError("no camera frame has been received in this episode; check "
                                   f"that images arrive on {self.params['camera.topic']}")
        if on_stage is not None:
            on_stage("describing")
        start = time.monotonic()
        descriptions: list[FrameDescription] = []
        previous: np.ndarray | None = None
        for position, image in enumerate(frames):
            descriptions.append(describe_keyframe(self.perceiver, image, previous, position,
                                                  self.perception_settings, question=question_text))
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
        chosen = apply_count_rule(positions, n_sampled, self.kf_params.min_keyframes,
                                  self.kf_params.max_keyframes)
        missing = [i for i in chosen if i not in by_sampled]
        if missing:
            LOG.warning("%d frame(s) picked by the count rule are older than the sampled-frame "
                        "ring (keyframes.ring_size=%d) and are left out", len(missing),
                        self.params["keyframes.ring_size"])
        return [by_sampled[i] for i in chosen if i in by_sampled]

    def close(self) -> None:
        self.worker.stop()
        for model in (self.perceiver, self.reasoner):
            try:
                model.close()
            except Exception:  # noqa: BLE001
                LOG.exception("closing a model failed")
