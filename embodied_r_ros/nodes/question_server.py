"""The AskSpatial service, the AnswerSpatial action and the answers topic, around any
`ask(...) -> AnswerResult` function. Used by the embedded node and the reasoning node."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from std_msgs.msg import String

from embodied_r_ros.action import AnswerSpatial
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.core.question_answering import AnswerResult
from embodied_r_ros.msg import SpatialAnswer
from embodied_r_ros.nodes.conversions import answer_record, fill_result
from embodied_r_ros.nodes.qos import EVENT_QOS
from embodied_r_ros.srv import AskSpatial


class AskFunction(Protocol):
    def __call__(self, question: str, choices: Sequence[str], *, timeout_s: float,
                 on_text: Callable[[str], None] | None,
                 on_stage: Callable[[str], None] | None,
                 should_stop: Callable[[], bool] | None) -> AnswerResult: ...


class QuestionServer:
    """Serves questions; every answer is also published on the answers topic and the
    exact reasoning-model input on `<answers topic>/prompt` (JSON chat messages)."""

    FEEDBACK_PERIOD_S = 0.25

    def __init__(self, node: Node, ask: AskFunction, *, service_name: str,
                 action_name: str, answers_topic: str) -> None:
        self.node = node
        self.ask = ask
        group = ReentrantCallbackGroup()
        self.answers_pub = node.create_publisher(SpatialAnswer, answers_topic, EVENT_QOS)
        self.prompt_pub = node.create_publisher(String, answers_topic + "/prompt", EVENT_QOS)
        self.service = node.create_service(AskSpatial, service_name, self._on_service,
                                           callback_group=group)
        self.action = ActionServer(node, AnswerSpatial, action_name,
                                   execute_callback=self._on_goal,
                                   goal_callback=lambda _goal: GoalResponse.ACCEPT,
                                   cancel_callback=lambda _goal: CancelResponse.ACCEPT,
                                   callback_group=group)

    def _log_result(self, question: str, result: AnswerResult) -> None:
        if result.success:
            self.node.get_logger().info(
                f"answered {question[:60]!r} -> {result.answer!r} from "
                f"{result.keyframes_used} key frames in {result.timing.total_s:.2f}s "
                f"(perception wait {result.timing.perception_s:.2f}s, reasoning "
                f"{result.timing.reasoning_s:.2f}s)")
        else:
            self.node.get_logger().warning(
                f"question {question[:60]!r} failed with {ErrorCode(result.error_code).name}: "
                f"{result.message}")

    def _publish(self, question: str, choices: Sequence[str], result: AnswerResult) -> None:
        self.answers_pub.publish(answer_record(result, question, list(choices),
                                               self.node.get_clock().now().to_msg()))
        if result.messages:
            self.prompt_pub.publish(String(data=json.dumps(result.messages)))
        self._log_result(question, result)

    def _on_service(self, request: AskSpatial.Request,
                    response: AskSpatial.Response) -> AskSpatial.Response:
        result = self.ask(request.question, list(request.choices), timeout_s=request.timeout_s,
                          on_text=None, on_stage=None, should_stop=None)
        self._publish(request.question, request.choices, result)
        fill_result(response, result)
        return response

    def _on_goal(self, goal_handle) -> AnswerSpatial.Result:  # type: ignore[no-untyped-def]
        goal = goal_handle.request
        start = time.monotonic()
        state = {"stage": "accepted", "text": "", "sent": 0.0}
        lock = threading.Lock()

        def send(force: bool = False) -> None:
            now = time.monotonic()
            with lock:
                if not force and now - state["sent"] < self.FEEDBACK_PERIOD_S:
                    return
                state["sent"] = now
                feedback = AnswerSpatial.Feedback(stage=state["stage"], partial_text=state["text"],
                                                  elapsed_s=float(now - start))
            goal_handle.publish_feedback(feedback)

        def on_stage(stage: str) -> None:
            state["stage"] = stage
            send(force=True)

        def on_text(piece: str) -> None:
            state["text"] += piece
            send()

        result = self.ask(goal.question, list(goal.choices), timeout_s=goal.timeout_s,
                          on_text=on_text, on_stage=on_stage,
                          should_stop=lambda: goal_handle.is_cancel_requested)
        self._publish(goal.question, goal.choices, result)
        out = fill_result(AnswerSpatial.Result(), result)
        if result.error_code == ErrorCode.CANCELLED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif result.success:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return out  # type: ignore[return-value]
