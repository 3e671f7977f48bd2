"""Python client of a running embodied_r_ros graph (either shape), over ROS 2.

    from embodied_r_ros.client import connect

    with connect(namespace="robot1") as client:
        client.wait_for_graph(30)
        reply = client.ask("Is the door to my left or right?", ["left", "right"])
        print(reply.answer, reply.answer_text, reply.message)
        result = client.ask_streaming("How do I get back to the red car?",
                                      on_feedback=lambda f: print(f.stage, f.partial_text))
        client.reset()
        print(client.status())

`ask` calls the AskSpatial service and blocks; `ask_streaming` sends an AnswerSpatial goal
and reports feedback (stage, text so far) while it runs; it can be cancelled. Both return
the typed response/result (success, error_code, message, answer, ...). `embodied-r ask |
reset | status` are the command-line form (client_cli.py).

Waiting ends with the reply, with TimeoutError after the question's time limit (+30 s),
or with GraphUnavailableError when the server has been gone for SERVER_GONE_S seconds
(a node killed or shut down mid-question never replies).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import rclpy
from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.client import Client
from rclpy.executors import MultiThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_srvs.srv import Trigger

from embodied_r_ros.action import AnswerSpatial
from embodied_r_ros.msg import NodeStatus
from embodied_r_ros.srv import AskSpatial, GetStatus

# Replies are read with a deep history, so a client with many calls in flight at once
# never has a reply overwritten before it is taken (the ROS default keeps 10).
REPLY_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                       durability=DurabilityPolicy.VOLATILE)


class GraphUnavailableError(RuntimeError):
    """The graph's service or action is not there (not started, other namespace/domain)."""


# How long a server may be missing from discovery, while a reply is awaited, before the
# client gives up on it (a reply sent just before the server went away still arrives:
# nodes that stop cleanly send their replies before their services go). A node killed
# without that chance leaves discovery after the DDS lease (4 s in the shipped Fast DDS
# profile), so such a caller hears GraphUnavailableError about 5 s after the kill.
SERVER_GONE_S = 1.0


class _ServerWatch:
    """Raises GraphUnavailableError once `served()` has been false for SERVER_GONE_S."""

    def __init__(self, served: Callable[[], bool], what: str) -> None:
        self.served = served
        self.what = what
        self.gone_since: float | None = None

    def check(self) -> None:
        now = time.monotonic()
        if self.served():
            self.gone_since = None
        elif self.gone_since is None:
            self.gone_since = now
        elif now - self.gone_since >= SERVER_GONE_S:
            raise GraphUnavailableError(
                f"the server of {self.what} went away before replying (node shut down, "
                "crashed or restarted); ask again once the graph is active")


def wait_future(future: Any, timeout_s: float, what: str,
                served: Callable[[], bool] | None = None) -> Any:
    """The future's result, waiting at most `timeout_s` (TimeoutError). With `served`
    (e.g. `client.service_is_ready`), GraphUnavailableError as soon as the server has been
    gone for SERVER_GONE_S: a node shut down, crashed or restarted mid-question never
    replies, and the caller should not wait out the whole time limit."""
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    deadline = time.monotonic() + timeout_s
    watch = _ServerWatch(served, what) if served is not None else None
    while not done.wait(timeout=max(0.0, min(0.2, deadline - time.monotonic()))):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no reply to {what} within {timeout_s:.0f}s")
        if watch is not None:
            watch.check()
    return future.result()


def call_service(client: Any, request: Any, timeout_s: float) -> Any | None:
    """Call a service and wait at most `timeout_s` in all; None when the service is not
    there or does not reply in time (how the nodes ask their peers)."""
    deadline = time.monotonic() + timeout_s
    if not client.wait_for_service(timeout_sec=max(0.0, timeout_s)):
        return None
    future = client.call_async(request)
    try:
        return wait_future(future, max(0.0, deadline - time.monotonic()), "service call")
    except TimeoutError:
        future.cancel()
        return None


class GraphClient(Node):
    """An rclpy node with clients for the graph's services and action."""

    def __init__(self, name: str = "embodied_r_client", *, namespace: str = "",
                 ask_service: str = "ask", answer_action: str = "answer",
                 reset_service: str = "reset_episode", status_service: str = "status") -> None:
        super().__init__(name, namespace=namespace)
        group = ReentrantCallbackGroup()
        # The generated interface classes carry no types, so the clients' are named here.
        self.ask_client: Client[AskSpatial.Request, AskSpatial.Response] = self.create_client(
            AskSpatial, ask_service, qos_profile=REPLY_QOS, callback_group=group)
        self.reset_client: Client[Trigger.Request, Trigger.Response] = self.create_client(
            Trigger, reset_service, callback_group=group)
        self.status_client: Client[GetStatus.Request, GetStatus.Response] = self.create_client(
            GetStatus, status_service, callback_group=group)
        self.answer_client: ActionClient[AnswerSpatial.Goal, AnswerSpatial.Result,
                                         AnswerSpatial.Feedback] = ActionClient(
            self, AnswerSpatial, answer_action, goal_service_qos_profile=REPLY_QOS,
            result_service_qos_profile=REPLY_QOS, callback_group=group)

    # -- discovery --------------------------------------------------------------------------
    def wait_for_graph(self, timeout_s: float,
                       alive_check: Callable[[], None] | None = None) -> None:
        """Wait until the ask service and the answer action are served."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if alive_check is not None:
                alive_check()
            if self.ask_client.service_is_ready() and self.answer_client.server_is_ready():
                return
            time.sleep(0.1)
        raise GraphUnavailableError(
            f"no embodied_r_ros graph answers on {self.ask_client.srv_name} within "
            f"{timeout_s:.0f}s; is it running, active, in this namespace and ROS_DOMAIN_ID?")

    def _ready(self, client: Any, timeout_s: float) -> None:
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise GraphUnavailableError(f"service {client.srv_name} is not available; is the "
                                        "graph running and active?")

    # -- calls ------------------------------------------------------------------------------
    def ask(self, question: str, choices: Sequence[str] = (), timeout_s: float = 0.0
            ) -> AskSpatial.Response:
        """Blocking question; the reply comes back by the question's own time limit
        (`timeout_s`, 0 = the node's default)."""
        self._ready(self.ask_client, 10.0)
        request = AskSpatial.Request(question=question, choices=list(choices),
                                     timeout_s=float(timeout_s))
        limit = (timeout_s if timeout_s > 0 else 300.0) + 30.0
        return wait_future(self.ask_client.call_async(request), limit, "AskSpatial",
                           served=self.ask_client.service_is_ready)

    def ask_streaming(self, question: str, choices: Sequence[str] = (), timeout_s: float = 0.0,
                      on_feedback: Callable[[AnswerSpatial.Feedback], None] | None = None,
                      cancel: threading.Event | None = None
                      ) -> tuple[int, AnswerSpatial.Result]:
        """Question as an action: feedback while it runs; set `cancel` to stop it.
        Returns (GoalStatus code, result). A goal the node rejects (queue full, or the node
        not active) returns (STATUS_ABORTED, a result with error_code BUSY). Feedback is a
        topic and the result a service reply, so a stage sent milliseconds before the
        result can arrive after it, and rclpy then drops it: feedback is progress
        information, the result is what counts."""
        if not self.answer_client.wait_for_server(timeout_sec=10.0):
            raise GraphUnavailableError("action answer is not available; is the graph "
                                        "running and active?")
        goal = AnswerSpatial.Goal(question=question, choices=list(choices),
                                  timeout_s=float(timeout_s))
        handle = wait_future(self.answer_client.send_goal_async(
            goal, feedback_callback=(lambda f: on_feedback(f.feedback)) if on_feedback else None),
            30.0, "the AnswerSpatial goal")
        if not handle.accepted:
            from embodied_r_ros.core.errors import ErrorCode

            return GoalStatus.STATUS_ABORTED, AnswerSpatial.Result(
                success=False, error_code=int(ErrorCode.BUSY),
                message="the node rejected the question: too many questions in progress, or "
                        "the node is not active (its log says which)")
        result_future = handle.get_result_async()
        limit = time.monotonic() + (timeout_s if timeout_s > 0 else 300.0) + 30.0
        cancelled = False
        watch = _ServerWatch(self.answer_client.server_is_ready, "the AnswerSpatial goal")
        while not result_future.done():
            if cancel is not None and cancel.is_set() and not cancelled:
                handle.cancel_goal_async()
                cancelled = True
            if time.monotonic() > limit:
                raise TimeoutError("no AnswerSpatial result in time")
            watch.check()
            time.sleep(0.05)
        reply = result_future.result()
        return reply.status, reply.result

    def reset(self, wait_s: float = 10.0) -> Trigger.Response:
        """Start a new episode; `wait_s`: how long to wait for the service to appear."""
        self._ready(self.reset_client, wait_s)
        return wait_future(self.reset_client.call_async(Trigger.Request()), 30.0, "reset_episode")

    def status(self, wait_s: float = 10.0) -> NodeStatus:
        """The graph's NodeStatus; `wait_s`: how long to wait for the service to appear."""
        self._ready(self.status_client, wait_s)
        return wait_future(self.status_client.call_async(GetStatus.Request()), 30.0,
                           "status").status


@contextmanager
def spinning(node: Node | Callable[[], Node]) -> Iterator[Any]:
    """Spin a node (or the node a factory makes, after rclpy is initialised) on a
    background executor; rclpy is initialised here if needed and then shut down again."""
    owns = False
    if not rclpy.ok():
        rclpy.init()
        owns = True
    if not isinstance(node, Node):
        node = node()
    executor = MultiThreadedExecutor(num_threads=4)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        yield node
    finally:
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=5.0)  # no thread may still be inside DDS when the process exits
        node.destroy_node()
        if owns and rclpy.ok():
            rclpy.shutdown()


@contextmanager
def connect(**kwargs: Any) -> Iterator[GraphClient]:
    """A spinning `GraphClient` (keyword arguments as GraphClient's)."""
    with spinning(lambda: GraphClient(**kwargs)) as client:
        yield client
