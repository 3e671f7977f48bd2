"""Reasoning lifecycle node (split graph): frame descriptions -> episode memory -> answers.

Keeps the descriptions of the last `split.episodes_kept` episodes (each description goes
to the episode of its key frame), and serves `ask` (AskSpatial), `answer`
(AnswerSpatial), `status` (GetStatus, every state) and `split.described_service`
(DescribedFrames, for a restarting perception node).

A question: ask the key-frame node for the current view and its episode
(KeyFrameState; no answer within `split.peer_timeout_s` -> KEYFRAMES_UNAVAILABLE), wait
for that episode's descriptions with the core's `collect_descriptions` (the same
component the embedded node uses) while checking, about once a second, that the
perception node is alive and active (else PERCEPTION_FAILED naming it), then run the
reasoning model. A new episode announced on `topics.episode` (a reset, or a restarted
key-frame node) fails the questions of the old episode at once (EPISODE_RESET).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lifecycle_msgs.msg import State
from lifecycle_msgs.srv import GetState
from rclpy.callback_groups import ReentrantCallbackGroup

from embodied_r_ros.core.backends.factory import make_reasoner
from embodied_r_ros.core.description_wait import collect_descriptions
from embodied_r_ros.core.errors import (
    CancelledError,
    EpisodeResetError,
    InvalidRequestError,
    KeyFramesUnavailableError,
    NoKeyFramesError,
    PerceptionError,
)
from embodied_r_ros.core.health import ERROR, HealthItem
from embodied_r_ros.core.memory import EpisodeMemory
from embodied_r_ros.core.model_settings import model_settings_line, model_spec
from embodied_r_ros.core.pipeline import generation_settings, make_self_check
from embodied_r_ros.core.progress import ProcessedFrames
from embodied_r_ros.core.prompt_set import load_prompt_set
from embodied_r_ros.core.question_answering import AnswerResult, QuestionAnswerer
from embodied_r_ros.core.question_limits import QuestionLimits, check_request
from embodied_r_ros.core.question_queue import QuestionQueue, Ticket
from embodied_r_ros.core.reasoning_prompts import format_question
from embodied_r_ros.core.types import TimingInfo
from embodied_r_ros.msg import Episode, NodeStatus
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.nodes.conversions import msg_to_description
from embodied_r_ros.nodes.managed_node import ManagedNode
from embodied_r_ros.nodes.node_runtime import run_node
from embodied_r_ros.nodes.qos import DESCRIPTION_QOS, EPISODE_QOS
from embodied_r_ros.nodes.question_server import QuestionServer
from embodied_r_ros.nodes.status import StatusService
from embodied_r_ros.srv import DescribedFrames, KeyFrameState


@dataclass
class EpisodeStore:
    memory: EpisodeMemory
    progress: ProcessedFrames = field(default_factory=ProcessedFrames)


def call_service(client: Any, request: Any, timeout_s: float) -> Any | None:
    """Call a service and wait at most `timeout_s` (None when unavailable or late)."""
    deadline = time.monotonic() + timeout_s
    if not client.wait_for_service(timeout_sec=max(0.0, timeout_s)):
        return None
    done = threading.Event()
    future = client.call_async(request)
    future.add_done_callback(lambda _f: done.set())
    if not done.wait(timeout=max(0.0, deadline - time.monotonic())):
        future.cancel()
        return None
    return future.result()


class ReasoningNode(ManagedNode):
    PARAMETER_GROUPS = ("reasoning", "prompts", "episode", "keyframes.max_keyframes", "qa", "topics", "services",
                        "split", "perception.model", "perception.mode", "camera.topic")
    LIVENESS_PERIOD_S = 1.0

    def __init__(self, name: str = "reasoning") -> None:
        super().__init__(name)
        self.answerer: QuestionAnswerer | None = None
        self.judge: Any = None
        self.questions_queue: QuestionQueue | None = None
        self.questions: QuestionServer | None = None
        self._stores: OrderedDict[str, EpisodeStore] = OrderedDict()
        self._lock = threading.Lock()
        self._current_episode = ""
        self._peer_checked = 0.0
        self._peer_error: str = ""
        self.status = StatusService(self, "split", self._fill_status,
                                    self.get_parameter("services.status").value)

    # -- lifecycle ------------------------------------------------------------------------------
    def configure_node(self, params: dict[str, Any]) -> None:
        self.executor_threads = params["qa.max_waiting_questions"] + 6
        self.get_logger().info(f"loading reasoning model {params['reasoning.backend']}:"
                               f"{params['reasoning.model'] or '<unset>'}")
        prompts = load_prompt_set(params["prompts.file"])
        self.get_logger().info(model_settings_line(params, ("reasoning",), sys.argv,
                                                   self.get_name()))
        reasoner = make_reasoner(model_spec(params, "reasoning"))
        self.judge = make_self_check(params, reasoner)
        self.answerer = QuestionAnswerer(reasoner, generation_settings(params, "reasoning"),
                                         max_keyframes=params["keyframes.max_keyframes"],
                                         prompts=prompts, self_check=self.judge)
        self.questions_queue = QuestionQueue(params["qa.default_timeout_s"],
                                             max_waiting=params["qa.max_waiting_questions"])
        self.questions = QuestionServer(
            self, self.ask, self.questions_queue, service_name=params["services.ask"],
            action_name=params["services.answer_action"], answers_topic=params["topics.answers"])

    def activate_node(self) -> None:
        assert self.questions is not None
        group = ReentrantCallbackGroup()
        params = self.params
        self.state_client = self.entity(self.create_client(
            KeyFrameState, params["split.keyframe_state_service"], callback_group=group))
        self.perception_state = self.entity(self.create_client(
            GetState, f"{params['split.perception_node']}/get_state", callback_group=group))
        self.entity(self.create_subscription(
            FrameDescriptionMsg, params["topics.descriptions"],
            self.tracked("description", self._on_description), DESCRIPTION_QOS,
            callback_group=group))
        self.entity(self.create_subscription(
            Episode, params["topics.episode"], self.tracked("episode", self._on_episode),
            EPISODE_QOS, callback_group=group))
        self.create_tracked_service(DescribedFrames, params["split.described_service"],
                                    "described-frames service", self._on_described,
                                    callback_group=group)
        self.questions.serve()

    def deactivate_node(self) -> None:
        if self.questions is not None:
            self.questions.withdraw()  # fails the questions in progress (CANCELLED)

    def release(self) -> None:
        if self.answerer is not None:
            self.answerer.reasoner.close()
            if self.judge is not None and self.judge is not self.answerer.reasoner:
                self.judge.close()
        if self.questions is not None:
            self.questions.destroy()
        if self.questions_queue is not None:
            self.questions_queue.close()
        self.answerer = self.questions = self.questions_queue = None
        with self._lock:
            self._stores.clear()
            self._current_episode = ""

    # -- episodes and descriptions --------------------------------------------------------------
    def _store(self, episode_id: str) -> EpisodeStore:
        """The store of an episode, created on first use; the oldest beyond the limit go."""
        with self._lock:
            store = self._stores.get(episode_id)
            if store is None:
                window = (self.params["episode.max_keyframes"]
                          if self.params["episode.policy"] == "window" else 0)
                store = self._stores[episode_id] = EpisodeStore(EpisodeMemory(episode_id, window))
            self._stores.move_to_end(episode_id)
            while len(self._stores) > self.params["split.episodes_kept"]:
                self._stores.popitem(last=False)
            return store

    def _on_episode(self, msg: Episode) -> None:
        with self._lock:
            if msg.episode_id == self._current_episode:
                return
            self._current_episode = msg.episode_id
        self._store(msg.episode_id)
        queue = self.questions_queue
        if queue is not None:
            new = msg.episode_id
            ended = queue.interrupt(
                EpisodeResetError(f"episode {msg.previous_episode_id or '(earlier)'} ended "
                                  f"({msg.reason}) while the question was answered; ask again"),
                which=lambda t: bool(t.episode_id) and t.episode_id != new)
            if ended:
                self.get_logger().info(f"{ended} question(s) of the previous episode ended "
                                       f"by the new episode {new} ({msg.reason})")

    def _on_description(self, msg: FrameDescriptionMsg) -> None:
        store = self._store(msg.episode_id)
        if msg.mode == "failed":
            store.progress.mark_failed(msg.keyframe_index, msg.raw_text)
        else:
            store.progress.mark_done(msg.keyframe_index)
            store.memory.put(msg_to_description(msg))
            if store.memory.evicted_below > 1:
                store.progress.forget_below(store.memory.evicted_below)

    def _on_described(self, request: DescribedFrames.Request,
                      response: DescribedFrames.Response) -> DescribedFrames.Response:
        with self._lock:
            store = self._stores.get(request.episode_id)
        if store is not None:
            response.known_episode = True
            response.keyframe_indices = [d.keyframe_index for d in store.memory.descriptions()]
        return response

    # -- peers ------------------------------------------------------------------------------
    def _check_perception(self) -> None:
        """Raise PerceptionError when the perception node is down or not active (checked
        at most once per LIVENESS_PERIOD_S)."""
        now = time.monotonic()
        if now - self._peer_checked >= self.LIVENESS_PERIOD_S:
            self._peer_checked = now
            name = self.params["split.perception_node"]
            reply = call_service(self.perception_state, GetState.Request(),
                                 self.params["split.peer_timeout_s"])
            if reply is None:
                self._peer_error = (f"the perception node {name!r} does not answer (not "
                                    "running?); start perception_node, or use the embedded "
                                    "graph")
            elif reply.current_state.id != State.PRIMARY_STATE_ACTIVE:
                self._peer_error = (f"the perception node {name!r} is "
                                    f"{reply.current_state.label}, not active")
            else:
                self._peer_error = ""
        if self._peer_error:
            raise PerceptionError(self._peer_error)

    def _keyframe_state(self, capture: bool, timeout_s: float) -> KeyFrameState.Response:
        reply = call_service(self.state_client, KeyFrameState.Request(capture_current_view=capture),
                             timeout_s)
        name = self.params["split.keyframe_node"]
        if reply is None:
            raise KeyFramesUnavailableError(
                f"the key-frame node {name!r} does not answer (not running?); start "
                "keyframe_node, or use the embedded graph")
        if not reply.success:
            raise KeyFramesUnavailableError(f"the key-frame node {name!r}: {reply.message}")
        return reply

    # -- questions ------------------------------------------------------------------------------
    def ask(self, question: str, choices: Sequence[str], *, timeout_s: float,
            on_text: Callable[[str], None] | None = None,
            on_stage: Callable[[str], None] | None = None,
            should_stop: Callable[[], bool] | None = None,
            ticket: Ticket | None = None) -> AnswerResult:
        queue, answerer = self.questions_queue, self.answerer
        if queue is None or answerer is None:
            return AnswerResult.failure(CancelledError("the reasoning node is not active"))
        try:
            check_request(question, list(choices), QuestionLimits.from_params(self.params),
                          getattr(answerer.reasoner, "count_text_tokens", None))
        except InvalidRequestError as exc:
            if ticket is not None:
                queue.release(ticket)
            return AnswerResult.failure(exc)

        def handle(deadline: float, timing: TimingInfo, tk: Ticket) -> AnswerResult:
            question_text = format_question(question, list(choices) or None)
            timeout = min(self.params["split.peer_timeout_s"], max(0.1, deadline - time.monotonic()))
            state = self._keyframe_state(True, timeout)
            episode, last = state.episode_id, state.last_keyframe_index
            tk.episode_id = episode
            if last < 0:
                raise NoKeyFramesError("no camera frame has been received in this episode; "
                                       f"check that images arrive on {self.params['camera.topic']}")
            if on_stage is not None:
                on_stage("waiting_for_perception")
            start = time.monotonic()
            store = self._store(episode)
            collected = collect_descriptions(
                store.progress, store.memory, episode_id=episode, last_index=last,
                deadline=deadline, should_stop=tk.should_stop, interrupted=tk.check,
                check_alive=self._check_perception)
            timing.perception_s = time.monotonic() - start
            if on_stage is not None:
                on_stage("reasoning")
            result = answerer.answer(question_text, collected.descriptions, episode_id=episode,
                                     deadline=deadline, on_text=on_text,
                                     should_stop=tk.should_stop, timing=timing)
            if result.success:
                result.message += collected.note()
            return result

        return queue.run(handle, timeout_s=timeout_s, ticket=ticket, should_stop=should_stop)

    def health_items(self) -> list[HealthItem]:
        if self.questions is None:
            return []
        item = self.questions.health(self.params["reasoning.model"], self.answerer is not None)
        if self._peer_error:
            item.raise_to(ERROR, self._peer_error)
        return [item]

    # -- status ---------------------------------------------------------------------------------
    def _fill_status(self, status: NodeStatus) -> None:
        params = self.params or {}
        status.perception_model = params.get("perception.model", "")
        status.reasoning_model = params.get("reasoning.model", "")
        status.perception_mode = params.get("perception.mode", "")
        status.reasoning_ready = self.answerer is not None
        if self.state != "active":
            return
        try:
            state = self._keyframe_state(False, params["split.peer_timeout_s"])
            status.keyframe_node_alive = True
            status.episode_id = state.episode_id
            status.frames_received = state.frames_received
            status.frames_sampled = state.frames_sampled
            status.keyframes = state.keyframes
        except KeyFramesUnavailableError as exc:
            status.last_error = status.last_error or str(exc)
        try:
            self._peer_checked = 0.0
            self._check_perception()
            status.perception_node_alive = status.perception_ready = True
        except PerceptionError as exc:
            status.last_error = status.last_error or str(exc)
        with self._lock:
            store = self._stores.get(status.episode_id)
        if store is not None:
            status.described = len(store.memory)
            status.perception_failed = len(store.progress.failures)
        if self.questions_queue is not None:
            status.questions_in_progress = self.questions_queue.in_progress()


def main(args: list[str] | None = None) -> int:
    return run_node(ReasoningNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
