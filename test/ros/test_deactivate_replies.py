"""Deactivate never drops the reply of a question it ends (ManagedNode + QuestionServer).

rclpy sends a service response after the callback returns, and an action result in a later
executor task. If deactivate destroyed the service or action server in between, the
caller would never hear back (a real failure of test_lifecycle's deactivate test, once in
many runs). These tests make that window wide on purpose: they slow rclpy's own sending
step (`Service.send_response`, `ActionServer._send_result_response`) by half a second, as
a descheduled executor thread would, then deactivate while a question runs.

The node here is a small `ManagedNode` with the real `QuestionServer` and `QuestionQueue`
around an `ask` that waits until it is told to stop (no models are needed to hold a
question in progress); the installed nodes use the same classes, and test_lifecycle
covers the installed embedded node end to end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from action_msgs.msg import GoalStatus
from rclpy.action.server import ActionServer
from rclpy.service import Service

from embodied_r_ros.client import GraphClient, GraphUnavailableError, spinning
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.core.qa.answerer import AnswerResult
from embodied_r_ros.core.qa.queue import QuestionQueue, Ticket
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.nodes.common.question_server import QuestionServer

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import wait_for

SEND_DELAY_S = 0.5


class HoldingNode(ManagedNode):
    """Answers every question only when stopped (deactivate, cancel or deadline)."""

    def __init__(self) -> None:
        super().__init__("holding_node")
        self.queue: QuestionQueue | None = None
        self.questions: QuestionServer | None = None

    def configure_node(self, params: dict[str, Any]) -> None:
        self.queue = QuestionQueue(60.0, max_waiting=2)
        self.questions = QuestionServer(self, self._ask, self.queue, service_name="ask",
                                        action_name="answer", answers_topic="answers")

    def _ask(self, question: str, choices: Any, *, timeout_s: float, on_text: Any,
             on_stage: Any, should_stop: Any, ticket: Ticket | None) -> AnswerResult:
        assert self.queue is not None

        def hold(_deadline: float, _timing: Any, running: Ticket) -> AnswerResult:
            while not running.should_stop():
                time.sleep(0.01)
            running.check()
            return AnswerResult(success=True, answer="A")

        return self.queue.run(hold, timeout_s=timeout_s, ticket=ticket, should_stop=should_stop)

    def activate_node(self) -> None:
        assert self.questions is not None
        self.questions.serve()

    def deactivate_node(self) -> None:
        assert self.questions is not None
        self.questions.withdraw()

    def release(self) -> None:
        if self.queue is not None:
            self.queue.close()
        if self.questions is not None:
            self.questions.destroy()
        self.queue = self.questions = None


@pytest.fixture()
def slow_sending(monkeypatch: pytest.MonkeyPatch) -> None:
    """rclpy's sending steps start half a second late (as on a descheduled thread)."""
    send_response = Service.send_response
    send_result = ActionServer._send_result_response

    def late_response(self: Service, response: Any, header: Any) -> None:
        time.sleep(SEND_DELAY_S)
        send_response(self, response, header)

    def late_result(self: ActionServer, header: Any, future: Any) -> None:
        time.sleep(SEND_DELAY_S)
        send_result(self, header, future)

    monkeypatch.setattr(Service, "send_response", late_response)
    monkeypatch.setattr(ActionServer, "_send_result_response", late_result)


@contextmanager
def _active_node_and_client() -> Iterator[tuple[HoldingNode, GraphClient]]:
    """A configured and active HoldingNode and a client, each spinning, in a fresh domain."""
    fresh_ros_domain()
    with spinning(HoldingNode) as node, spinning(lambda: GraphClient("holding_client")) as client:
        node.trigger_configure()
        node.trigger_activate()
        yield node, client


def test_service_reply_survives_deactivate(slow_sending: None) -> None:
    with _active_node_and_client() as (node, client):
        replies: list[Any] = []
        asker = threading.Thread(target=lambda: replies.append(client.ask("Hold?", timeout_s=60)))
        asker.start()
        assert wait_for(lambda: node.queue is not None and node.queue.in_progress() == 1, 20)
        start = time.monotonic()
        node.trigger_deactivate()
        asker.join(timeout=20)
        assert replies, "the ask service's reply was lost to deactivate"
        assert replies[0].error_code == ErrorCode.CANCELLED
        assert "deactivated" in replies[0].message
        assert time.monotonic() - start < 10
        # deactivate waited for the reply to be sent, then removed the service.
        assert wait_for(lambda: client.count_services("/ask") == 0, 10)


def test_action_result_survives_deactivate_and_inactive_rejects(slow_sending: None) -> None:
    with _active_node_and_client() as (node, client):
        outcome: list[Any] = []
        asker = threading.Thread(target=lambda: outcome.append(
            client.ask_streaming("Hold?", timeout_s=60)))
        asker.start()
        assert wait_for(lambda: node.queue is not None and node.queue.in_progress() == 1, 20)
        node.trigger_deactivate()
        asker.join(timeout=20)
        assert outcome, "the action result was lost to deactivate"
        status, result = outcome[0]
        assert status == GoalStatus.STATUS_ABORTED
        assert result.error_code == ErrorCode.CANCELLED and "deactivated" in result.message
        # Inactive: a new goal is rejected at goal time, not accepted and left hanging.
        status, result = client.ask_streaming("Now?", timeout_s=5)
        assert status == GoalStatus.STATUS_ABORTED and not result.success
        assert "not active" in result.message
        assert node.queue.in_progress() == 0
        # Active again: goals are accepted and answered (here: cancelled by the caller).
        node.trigger_activate()
        cancel = threading.Event()
        again: list[Any] = []
        asker = threading.Thread(target=lambda: again.append(
            client.ask_streaming("Again?", timeout_s=60, cancel=cancel)))
        asker.start()
        assert wait_for(lambda: node.queue.in_progress() == 1, 20)
        cancel.set()
        asker.join(timeout=20)
        assert again and again[0][0] == GoalStatus.STATUS_CANCELED
        node.trigger_deactivate()
        node.trigger_cleanup()


def test_shutdown_mid_question_never_leaves_a_caller_hanging(slow_sending: None) -> None:
    """Shutdown from active destroys the action server right after ending the goals; a
    result rclpy had not sent yet is lost, and the client then says so within seconds
    (GraphUnavailableError) instead of waiting out the question's time limit. The service
    caller still gets its CANCELLED reply."""
    with _active_node_and_client() as (node, client):
        outcomes: dict[str, Any] = {}

        def call(kind: str, fn: Any) -> None:
            try:
                outcomes[kind] = fn()
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                outcomes[kind] = exc

        threads = [threading.Thread(target=call, args=("service", lambda: client.ask(
                       "Hold?", timeout_s=120))),
                   threading.Thread(target=call, args=("action", lambda: client.ask_streaming(
                       "Hold too?", timeout_s=120)))]
        threads[0].start()
        assert wait_for(lambda: node.queue is not None and node.queue.in_progress() == 1, 20)
        threads[1].start()
        assert wait_for(lambda: node.queue is not None and node.queue.in_progress() == 2, 20)
        start = time.monotonic()
        node.trigger_shutdown()
        for thread in threads:
            thread.join(timeout=30)
        assert time.monotonic() - start < 20  # not the questions' 120 s + 30 s
        assert outcomes["service"].error_code == ErrorCode.CANCELLED
        action = outcomes["action"]
        if isinstance(action, Exception):
            assert isinstance(action, GraphUnavailableError), action
            assert "went away" in str(action)
        else:  # the result task won the race with the destruction
            assert action[1].error_code == ErrorCode.CANCELLED
