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

from embodied_r_ros.client import call_service
from embodied_r_ros.core.backends.factory import make_reasoner
from embodied_r_ros.core.errors import (
    CancelledError,
    EpisodeResetError,
    KeyFramesUnavailableError,
    PerceptionError,
)
from embodied_r_ros.core.health import ERROR, HealthItem
from embodied_r_ros.core.memory.episode import EpisodeMemory
from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings
from embodied_r_ros.core.model_settings import model_settings_line, model_spec
from embodied_r_ros.core.perception.progress import ProcessedFrames
from embodied_r_ros.core.pipeline import make_self_check
from embodied_r_ros.core.prompts.prompt_set import load_prompt_set
from embodied_r_ros.core.qa.answerer import AnswerResult, QuestionAnswerer
from embodied_r_ros.core.qa.flow import CurrentView, DescriptionSource, QuestionFlow
from embodied_r_ros.core.qa.queue import QuestionQueue, Ticket
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.msg import Episode, NodeStatus
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.nodes.common.conversions import image_msg_to_rgb, msg_to_description, msg_to_pose
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.nodes.common.memory_services import MemoryServices
from embodied_r_ros.nodes.common.node_runtime import run_node
from embodied_r_ros.nodes.common.qos import DESCRIPTION_QOS, EPISODE_QOS, KEYFRAME_QOS
from embodied_r_ros.nodes.common.question_server import QuestionServer
from embodied_r_ros.nodes.common.status import StatusService
from embodied_r_ros.srv import DescribedFrames, KeyFrameState


@dataclass
class EpisodeStore:
    memory: EpisodeMemory
    progress: ProcessedFrames = field(default_factory=ProcessedFrames)


class ReasoningNode(ManagedNode):
    PARAMETER_GROUPS = ("reasoning", "prompts", "episode", "keyframes.max_keyframes", "qa", "topics", "services",
                        "split", "perception.model", "perception.mode", "camera.topic", "memory")
    LIVENESS_PERIOD_S = 1.0

    def __init__(self, name: str = "reasoning") -> None:
        super().__init__(name)
        self.answerer: QuestionAnswerer | None = None
        self.flow: QuestionFlow | None = None
        self.judge: Any = None
        self.questions_queue: QuestionQueue | None = None
        self.questions: QuestionServer | None = None
        self.long_term: LongTermMemory | None = None
        self.memory: MemoryServices | None = None
        self._stores: OrderedDict[str, EpisodeStore] = OrderedDict()
        self._lock = threading.Lock()
        self._current_episode = ""
        self._peer_checked = 0.0
        self._peer_error: str = ""
        # Descriptions received failed in a row, and the last failure (perception failing).
        self._failed_streak = 0
        self._failed_error = ""
        self.status = StatusService(self, "split", self._fill_status,
                                    self.get_parameter("services.status").value)

    # -- lifecycle ------------------------------------------------------------------------------
    def configure_node(self, settings: Settings) -> None:
        self.executor_threads = settings.qa.max_waiting_questions + 6
        self.get_logger().info(f"loading reasoning model {settings.reasoning.backend}:"
                               f"{settings.reasoning.model or '<unset>'}")
        prompts = load_prompt_set(settings.prompts.file)
        self.get_logger().info(model_settings_line(settings, ("reasoning",), sys.argv,
                                                   self.get_name()))
        reasoner = make_reasoner(model_spec(settings, "reasoning"))
        self.judge = make_self_check(settings, reasoner)
        self.answerer = QuestionAnswerer(reasoner, settings.reasoning.generation(),
                                         max_keyframes=settings.keyframes.max_keyframes,
                                         prompts=prompts, self_check=self.judge)
        self.questions_queue = QuestionQueue(settings.qa.default_timeout_s,
                                             max_waiting=settings.qa.max_waiting_questions)
        self.flow = QuestionFlow(self, self.answerer, self.questions_queue, settings.qa,
                                 settings.camera.topic)
        self.questions = QuestionServer(
            self, self.ask, self.questions_queue, service_name=settings.services.ask,
            action_name=settings.services.answer_action, answers_topic=settings.topics.answers)
        # The key-frame store (docs/memory.md): descriptions (with the poses the perception
        # node sends) are written here; a restarted node answers from what it stored.
        self.long_term = LongTermMemory(MemorySettings.from_settings(settings),
                                        namespace=self.get_namespace())
        self.memory = MemoryServices(self, self.long_term)
        for warning in self.long_term.store.warnings:
            self.get_logger().warning(warning)

    def activate_node(self) -> None:
        assert self.questions is not None
        group = ReentrantCallbackGroup()
        settings = self.settings
        self.state_client = self.entity(self.create_client(
            KeyFrameState, settings.split.keyframe_state_service, callback_group=group))
        self.perception_state = self.entity(self.create_client(
            GetState, f"{settings.split.perception_node}/get_state", callback_group=group))
        self.entity(self.create_subscription(
            FrameDescriptionMsg, settings.topics.descriptions,
            self.tracked("description", self._on_description), DESCRIPTION_QOS,
            callback_group=group))
        self.entity(self.create_subscription(
            Episode, settings.topics.episode, self.tracked("episode", self._on_episode),
            EPISODE_QOS, callback_group=group))
        self.create_tracked_service(DescribedFrames, settings.split.described_service,
                                    "described-frames service", self._on_described,
                                    callback_group=group)
        if self.memory is not None:
            self.memory.serve(settings.services.recall, group)
        if self.long_term is not None and self.long_term.settings.thumbnail_px > 0:
            self.entity(self.create_subscription(
                KeyFrameMsg, settings.topics.keyframes,
                self.tracked("keyframe", self._on_keyframe), KEYFRAME_QOS, callback_group=group))
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
        self.answerer = self.flow = self.questions = self.questions_queue = None
        if self.long_term is not None:
            self.long_term.close()
        self.long_term = self.memory = None
        with self._lock:
            self._stores.clear()
            self._current_episode = ""

    # -- episodes and descriptions --------------------------------------------------------------
    def _store(self, episode_id: str) -> EpisodeStore:
        """The store of an episode, created on first use; the oldest beyond the limit go."""
        with self._lock:
            store = self._stores.get(episode_id)
            if store is None:
                store = self._stores[episode_id] = EpisodeStore(
                    EpisodeMemory(episode_id, self.settings.episode.window))
                if self.long_term is not None:  # a restarted node continues from the store
                    self.long_term.restore(episode_id, store.memory, store.progress)
            self._stores.move_to_end(episode_id)
            while len(self._stores) > self.settings.split.episodes_kept:
                self._stores.popitem(last=False)
            return store

    def _on_episode(self, msg: Episode) -> None:
        with self._lock:
            if msg.episode_id == self._current_episode:
                return
            self._current_episode = msg.episode_id
        self._store(msg.episode_id)
        if self.long_term is not None:
            self.long_term.begin_episode(msg.episode_id)
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
            if not msg.raw_text.startswith("dropped:"):
                self._failed_streak += 1
                self._failed_error = msg.raw_text
            store.progress.mark_failed(msg.keyframe_index, msg.raw_text)
        else:
            self._failed_streak = 0
            description = msg_to_description(msg)
            # Into the store and memory first: a question waiting on this key frame's
            # progress then finds its description wherever it looks.
            if self.long_term is not None:
                self.long_term.record(description, episode_id=msg.episode_id,
                                      pose=msg_to_pose(msg.pose) if msg.has_pose else None)
            store.memory.put(description)
            store.progress.mark_done(msg.keyframe_index)
            if store.memory.evicted_below > 1:
                store.progress.forget_below(store.memory.evicted_below)

    def _on_keyframe(self, msg: KeyFrameMsg) -> None:
        """Key-frame images, for the stored thumbnails (memory.thumbnail_px)."""
        if self.long_term is not None:
            self.long_term.keyframe_image(msg.episode_id, msg.keyframe_index,
                                          image_msg_to_rgb(msg.image))

    def _on_described(self, request: DescribedFrames.Request,
                      response: DescribedFrames.Response) -> DescribedFrames.Response:
        with self._lock:
            store = self._stores.get(request.episode_id)
        long_term = self.long_term
        if store is None and long_term is not None and request.episode_id and \
                long_term.store.count(request.episode_id, at_most=1):
            store = self._store(request.episode_id)  # restarted: known from the store
        if store is not None:
            response.known_episode = True
            response.keyframe_indices = [d.keyframe_index for d in store.memory.descriptions()]
        return response

    def _perception_error(self) -> str:
        """The last failure while the perception node's descriptions failed in a row
        (diagnostics.failures_error_count of them: its model or server is down), else ""."""
        if self._failed_streak >= self.thresholds.failures_error_count:
            return self._failed_error
        return ""

    # -- peers ------------------------------------------------------------------------------
    def _check_perception(self) -> None:
        """Raise PerceptionError when the perception node is down or not active (checked
        at most once per LIVENESS_PERIOD_S)."""
        now = time.monotonic()
        if now - self._peer_checked >= self.LIVENESS_PERIOD_S:
            self._peer_checked = now
            name = self.settings.split.perception_node
            reply = call_service(self.perception_state, GetState.Request(),
                                 self.settings.split.peer_timeout_s)
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
        name = self.settings.split.keyframe_node
        if reply is None:
            raise KeyFramesUnavailableError(
                f"the key-frame node {name!r} does not answer (not running?); start "
                "keyframe_node, or use the embedded graph")
        if not reply.success:
            raise KeyFramesUnavailableError(f"the key-frame node {name!r}: {reply.message}")
        return reply

    # -- questions (EpisodeAccess for core.qa.flow) --------------------------------------------
    def ask(self, question: str, choices: Sequence[str], *, timeout_s: float,
            on_text: Callable[[str], None] | None = None,
            on_stage: Callable[[str], None] | None = None,
            should_stop: Callable[[], bool] | None = None,
            ticket: Ticket | None = None) -> AnswerResult:
        flow = self.flow
        if flow is None:
            return AnswerResult.failure(CancelledError("the reasoning node is not active"))
        return flow.ask(question, choices, timeout_s=timeout_s, on_text=on_text,
                        on_stage=on_stage, should_stop=should_stop, ticket=ticket)

    def admission_episode(self) -> str:
        return ""  # only the key-frame node's current view tells the episode

    def bind_current_view(self, deadline: float) -> CurrentView:
        timeout = min(self.settings.split.peer_timeout_s, max(0.1, deadline - time.monotonic()))
        state = self._keyframe_state(True, timeout)
        return CurrentView(state.episode_id, state.last_keyframe_index)

    def description_source(self, episode_id: str) -> DescriptionSource:
        store = self._store(episode_id)
        return DescriptionSource(store.progress, store.memory, check_alive=self._check_perception,
                                 perception_error=self._perception_error,
                                 long_term=self.long_term)

    def episode_is_current(self, episode_id: str) -> bool:
        # A new episode announced on topics.episode interrupts the question at once
        # (`_on_episode`), so an answer that completes belongs to a current episode.
        return True

    def health_items(self) -> list[HealthItem]:
        if self.questions is None:
            return []
        item = self.questions.health(self.settings.reasoning.model, self.answerer is not None)
        if self._peer_error:
            item.raise_to(ERROR, self._peer_error)
        failing = self._perception_error()
        if failing:
            item.raise_to(ERROR, f"perception is failing: {failing}")
        items = [item]
        if self.memory is not None:
            items.append(self.memory.health(self.get_fully_qualified_name()))
        return items

    # -- status ---------------------------------------------------------------------------------
    def _fill_status(self, status: NodeStatus) -> None:
        self.fill_model_status(status)
        status.reasoning_ready = self.answerer is not None
        if self.state != "active":
            return
        try:
            state = self._keyframe_state(False, self.settings.split.peer_timeout_s)
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
            status.perception_node_alive = True
            failing = self._perception_error()  # the same rule as /diagnostics' ERROR
            status.perception_ready = not failing
            if failing:
                status.last_error = status.last_error or f"perception is failing: {failing}"
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
