"""The AskSpatial service, the AnswerSpatial action and the answers topic, around any
`ask(...) -> AnswerResult` function. Used by the embedded node and the reasoning node.

Admission: the action's goal callback takes a place in the node's `QuestionQueue`; when
the queue is full the goal is REJECTED at goal time (the client learns at once), not
accepted and aborted later. A service call beyond the bound gets BUSY at once. Every
answer (success or failure) is published on the answers topic, and the exact
reasoning-model input on `<answers topic>/prompt` (JSON chat messages).

Lifecycle: `serve()` (activate) creates the service and, the first time, the action
server, and starts accepting questions; `withdraw()` (deactivate) stops accepting them,
gives back the places of accepted goals that have not started and fails the questions
in progress with CANCELLED. The service is destroyed by deactivate once its replies are
sent (`ManagedNode.create_tracked_service`). The action server lives until `destroy()`
(cleanup): rclpy sends a goal's result to the client after the execute callback has
returned, in a later executor task, so an action server destroyed by deactivate could
drop the CANCELLED results of the goals deactivate ended. While the node is inactive it
rejects new goals at goal time.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from std_msgs.msg import String

from embodied_r_ros.action import AnswerSpatial
from embodied_r_ros.core.errors import CancelledError, ErrorCode
from embodied_r_ros.core.health import HealthItem, QuestionStats, questions_item
from embodied_r_ros.core.qa.answerer import AnswerResult
from embodied_r_ros.core.qa.queue import QuestionQueue, Ticket
from embodied_r_ros.msg import SpatialAnswer
from embodied_r_ros.nodes.common.conversions import answer_record, fill_result
from embodied_r_ros.nodes.common.managed_node import REQUEST_QOS, DeferredReply, ManagedNode
from embodied_r_ros.nodes.common.qos import EVENT_QOS
from embodied_r_ros.srv import AskSpatial


class AskFunction(Protocol):
    def __call__(self, question: str, choices: Sequence[str], *, timeout_s: float,
                 on_text: Callable[[str], None] | None,
                 on_stage: Callable[[str], None] | None,
                 should_stop: Callable[[], bool] | None,
                 ticket: Ticket | None) -> AnswerResult: ...


class QuestionServer:
    """Serves questions (see the module docstring). Publishers are created at once
    (lifecycle publishers); the service and action server by `serve()` on activate."""

    FEEDBACK_PERIOD_S = 0.25

    def __init__(self, node: ManagedNode, ask: AskFunction, queue: QuestionQueue, *,
                 service_name: str, action_name: str, answers_topic: str) -> None:
        self.node = node
        self.ask = ask
        self.queue = queue
        self.service_name = service_name
        self.action_name = action_name
        self.answers_pub = node.create_lifecycle_publisher(SpatialAnswer, answers_topic,
                                                           EVENT_QOS)
        self.prompt_pub = node.create_lifecycle_publisher(String, answers_topic + "/prompt",
                                                          EVENT_QOS)
        self.stats = QuestionStats(node.thresholds.window_s)
        self._reserved: dict[int, tuple[Any, Ticket]] = {}
        self._reserved_lock = threading.Lock()  # guards _reserved and _accepting
        self._accepting = False
        self._action_server: ActionServer | None = None

    def serve(self) -> None:
        """Create the service (and the action server, once) and accept goals (activate)."""
        group = ReentrantCallbackGroup()
        node = self.node
        node.create_tracked_service(AskSpatial, self.service_name, "ask service",
                                    self._on_service, self._service_error,
                                    callback_group=group)
        if self._action_server is None:
            self._action_server = ActionServer(
                node, AnswerSpatial, self.action_name,
                execute_callback=node.tracked("answer action", self._on_goal, self._goal_error),
                goal_callback=node.tracked("answer goal", self._on_goal_request,
                                           lambda _goal: GoalResponse.REJECT),
                cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                goal_service_qos_profile=REQUEST_QOS, result_service_qos_profile=REQUEST_QOS,
                cancel_service_qos_profile=REQUEST_QOS,
                callback_group=ReentrantCallbackGroup())
        with self._reserved_lock:
            self._accepting = True

    def withdraw(self) -> None:
        """Deactivate: stop accepting questions, give back the places reserved by accepted
        goals that never started, and fail every question admitted before (CANCELLED).
        Admission and this switch share one lock, so no question slips in between."""
        with self._reserved_lock:
            self._accepting = False
            reserved = list(self._reserved.values())
            self._reserved.clear()
        for _goal, ticket in reserved:
            self.queue.release(ticket)
        self.queue.interrupt(CancelledError(
            "the node was deactivated while the question was answered"))

    def destroy(self) -> None:
        """Destroy the action server and the publishers (cleanup)."""
        self.withdraw()
        if self._action_server is not None:
            self._action_server.destroy()
            self._action_server = None
        self.node.destroy_lifecycle_publisher(self.answers_pub)
        self.node.destroy_lifecycle_publisher(self.prompt_pub)

    # -- results ------------------------------------------------------------------------------
    def _log_result(self, question: str, result: AnswerResult) -> None:
        if result.success:
            self.node.get_logger().info(
                f"answered {question[:60]!r} -> {result.answer!r} from "
                f"{result.keyframes_used} key frames in {result.timing.total_s:.2f}s "
                f"(perception wait {result.timing.perception_s:.2f}s, reasoning "
                f"{result.timing.reasoning_s:.2f}s)")
        else:
            self.node.get_logger().warning(
                f"question {question[:60]!r} failed with {ErrorCode(result.error_code).name} "
                f"(code {int(result.error_code)}): {_one_line(result.message)}")
        # The whole answer (reasoning, model output, message) only at debug level:
        # `--ros-args --log-level embodied_r:=debug` shows it.
        self.node.get_logger().debug(
            f"answer to {question!r}: success={result.success} answer={result.answer!r} "
            f"message={result.message!r} reasoning={result.reasoning!r} "
            f"raw output={result.raw_output!r}")

    def health(self, model: str, ready: bool) -> HealthItem:
        return questions_item(self.node.get_fully_qualified_name(), model=model, ready=ready,
                              stats=self.stats, in_progress=self.queue.in_progress(),
                              capacity=1 + self.queue.max_waiting)

    def _publish(self, question: str, choices: Sequence[str], result: AnswerResult) -> None:
        timing = result.timing
        self.stats.record(result.success, ErrorCode(result.error_code).name, result.message,
                          timing.total_s, timing.perception_s, timing.reasoning_s)
        self.answers_pub.publish(answer_record(result, question, list(choices),
                                               self.node.get_clock().now().to_msg()))
        if result.messages:
            self.prompt_pub.publish(String(data=json.dumps(result.messages)))
        self._log_result(question, result)

    @staticmethod
    def _service_error(request: AskSpatial.Request,
                       response: AskSpatial.Response) -> AskSpatial.Response:
        response.success = False
        response.error_code = int(ErrorCode.INTERNAL)
        response.message = "internal error while answering; see the node log"
        return response

    @staticmethod
    def _goal_error(goal_handle: Any) -> AnswerSpatial.Result:
        try:
            goal_handle.abort()
        except Exception:  # noqa: BLE001
            pass
        return AnswerSpatial.Result(success=False, error_code=int(ErrorCode.INTERNAL),
                                    message="internal error while answering; see the node log")

    def _not_active(self) -> CancelledError:
        return CancelledError(
            "the node is not active; activate it (`ros2 lifecycle set "
            f"{self.node.get_fully_qualified_name()} activate`)")

    # -- service --------------------------------------------------------------------------------
    def _on_service(self, request: AskSpatial.Request,
                    response: AskSpatial.Response) -> AskSpatial.Response | DeferredReply:
        """Admission happens here, when the request is taken: BUSY (or "not active") is
        replied at once. An admitted question is answered on a thread of its own and its
        reply sent from there (`DeferredReply`), so no executor thread waits for an answer
        and every later request is still taken, and admitted or refused, at once."""
        choices = list(request.choices)
        with self._reserved_lock:
            accepting = self._accepting
            ticket = self.queue.admit() if accepting else None
        if not accepting or ticket is None:
            result = AnswerResult.failure(self._not_active() if not accepting
                                          else self.queue.busy_error())
            self._publish(request.question, choices, result)
            fill_result(response, result)
            return response
        deferred = DeferredReply()

        def answer() -> None:
            try:
                result = self.ask(request.question, choices, timeout_s=request.timeout_s,
                                  on_text=None, on_stage=None, should_stop=None, ticket=ticket)
            except Exception as exc:  # noqa: BLE001 - the caller must still get a reply
                self.node.guard.record("ask service", exc)
                result = AnswerResult(success=False, error_code=ErrorCode.INTERNAL,
                                      message="internal error while answering; see the node log")
            try:
                self._publish(request.question, choices, result)
            except Exception as exc:  # noqa: BLE001
                self.node.guard.record("answers topic", exc)
            fill_result(response, result)
            deferred.complete(response)

        threading.Thread(target=answer, name=f"question-{ticket.number}", daemon=True).start()
        return deferred

    # -- action ---------------------------------------------------------------------------------
    def _on_goal_request(self, goal: AnswerSpatial.Goal) -> GoalResponse:
        with self._reserved_lock:
            if not self._accepting:
                self.node.get_logger().warning(
                    f"rejected goal {goal.question[:60]!r}: {self._not_active()}")
                return GoalResponse.REJECT
            ticket = self.queue.admit()
            if ticket is not None:
                self._reserved[id(goal)] = (goal, ticket)
        if ticket is None:
            self.node.get_logger().warning(
                f"rejected goal {goal.question[:60]!r}: {self.queue.busy_error()}")
            self.stats.refused.add()
            self.stats.codes["BUSY"] += 1
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def _on_goal(self, goal_handle: Any) -> AnswerSpatial.Result:
        goal = goal_handle.request
        with self._reserved_lock:
            reserved = self._reserved.pop(id(goal), None)
        if reserved is None:  # its place was given back by deactivate before it started
            result = AnswerResult.failure(CancelledError(
                "the node was deactivated before the question started"))
            self._publish(goal.question, list(goal.choices), result)
            goal_handle.abort()
            return fill_result(AnswerSpatial.Result(), result)
        ticket = reserved[1]
        start = time.monotonic()
        state: dict[str, Any] = {"stage": "accepted", "text": "", "sent": 0.0}
        lock = threading.Lock()

        def send(force: bool = False) -> None:
            now = time.monotonic()
            with lock:
                if not force and now - state["sent"] < self.FEEDBACK_PERIOD_S:
                    return
                state["sent"] = now
                feedback = AnswerSpatial.Feedback(stage=state["stage"],
                                                  partial_text=state["text"],
                                                  elapsed_s=float(now - start))
            goal_handle.publish_feedback(feedback)

        def on_stage(stage: str) -> None:
            state["stage"] = stage
            send(force=True)

        def on_text(piece: str) -> None:
            state["text"] += piece
            send()

        choices = list(goal.choices)
        result = self.ask(goal.question, choices, timeout_s=goal.timeout_s, on_text=on_text,
                          on_stage=on_stage, should_stop=lambda: goal_handle.is_cancel_requested,
                          ticket=ticket)
        self._publish(goal.question, choices, result)
        out = fill_result(AnswerSpatial.Result(), result)
        if result.error_code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif result.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return out


def _one_line(text: str, width: int = 300) -> str:
    """A log-sized summary: whitespace folded to one line, cut at `width` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 25] + f"... ({len(text)} chars)"
