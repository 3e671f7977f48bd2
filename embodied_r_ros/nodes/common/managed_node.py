"""The lifecycle behaviour shared by every embodied_r_ros node.

    unconfigured --configure--> inactive --activate--> active
    active --deactivate--> inactive --cleanup--> unconfigured;  shutdown from any state

* configure: read and validate the parameters, load and check the models. On any
  failure the transition fails, the reason is logged and kept in `last_error` (shown by
  the status service), everything half-built is released, and the node stays
  unconfigured.
* activate: create the subscriptions, services and action servers (nothing is served
  and no camera frame is read before that); lifecycle publishers start publishing.
* deactivate: fail the questions in progress (CANCELLED, "node deactivated"), wait for
  running callbacks to return and for the replies of running service calls to be sent
  (a few seconds at most), then destroy the subscriptions and services. The question
  action server stays until cleanup so that the results of the goals deactivate ended
  reach their clients; while the node is inactive it rejects new goals.
* cleanup: release the models (GPU memory included) and all state.
* shutdown: deactivate and clean up as needed, from any state.

Subclasses implement `configure_node(settings)`, `activate_node()`, `deactivate_node()` and
`release()`; they register what activate creates with `self.entity(...)` so deactivate can
destroy it, and create services with `create_tracked_service(...)`.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any

from rclpy.client import Client
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.timer import Timer

from embodied_r_ros.core.errors import EmbodiedRError
from embodied_r_ros.core.health import HealthItem, node_item
from embodied_r_ros.core.settings import Settings, build_settings
from embodied_r_ros.nodes.common.diagnostics import DiagnosticsPublisher
from embodied_r_ros.nodes.common.node_runtime import CallbackGuard, forward_python_logging, lifecycle_state
from embodied_r_ros.nodes.common.ros_params import declare_parameters, parameter_guard, read_settings

# How long deactivate keeps a service after its last response was sent, so that the
# response reaches the caller before the service (and its DDS writer) is destroyed.
REPLY_LINGER_S = 1.0

# QoS of the services that take questions (and of the action's goal/result/cancel
# services). The ROS default keeps the last 10 requests: 30 callers at once overwrote
# the oldest requests in the reader's history before the executor took them, and those
# callers never heard back. Requests are small; a deep history costs nothing until used.
REQUEST_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1000,
                         reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE)


class DeferredReply:
    """Returned by a tracked service callback that answers later, from another thread,
    so that no executor thread waits for an answer (see `create_tracked_service`).
    `complete(response)` is called exactly once by whoever computes the answer; the
    response goes out as soon as both it and the request header are known."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._response: Any = None
        self._send: Any = None
        self._sent = False

    def attach(self, send: Any) -> None:
        """Called with `send(response)` once the executor would have sent the reply."""
        with self._lock:
            self._send = send
        self._flush()

    def complete(self, response: Any) -> None:
        with self._lock:
            if self._response is not None:
                return
            self._response = response
        self._flush()

    def _flush(self) -> None:
        with self._lock:
            if self._sent or self._send is None or self._response is None:
                return
            self._sent = True
            send, response = self._send, self._response
        send(response)


def free_accelerator_memory() -> None:
    """Return cached GPU memory to the driver after models were released. A process that
    never imported torch (the key-frame node) holds none, and importing torch only to find
    that out cost about 4 s of CPU at every shutdown. What start-up froze (run_node) is
    thawed for this collection, so released models are collected, and frozen again."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    torch = sys.modules.get("torch")
    if torch is None:
        return
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class ManagedNode(LifecycleNode):
    """Base class; see the module docstring."""

    PARAMETER_GROUPS: tuple[str, ...] = ()

    def __init__(self, name: str) -> None:
        super().__init__(name)
        forward_python_logging(self)
        self.guard = CallbackGuard(self)
        self.parameter_names = declare_parameters(
            self, ("autostart", "diagnostics", *self.PARAMETER_GROUPS))
        self.add_on_set_parameters_callback(
            parameter_guard(self, self.parameter_names, self._parameters_may_change))
        self.current_settings: Settings | None = None  # built by configure
        self.last_error = ""
        self._entities: list[Any] = []
        self._active_callbacks = 0
        self._callbacks_done = threading.Condition()
        self._last_reply_at = float("-inf")  # monotonic time of the last response sent
        # Executor threads: action goals hold one each while they are answered, so there
        # must be more threads than questions admitted (1 + qa.max_waiting_questions) or
        # new requests would wait unanswered. Known here (before configure) because the
        # executor is made before a lifecycle manager configures the node.
        waiting = (self.get_parameter("qa.max_waiting_questions").value
                   if "qa.max_waiting_questions" in self.parameter_names else 0)
        self.executor_threads = max(4, int(waiting) + 6) if isinstance(waiting, int) else 10
        diag = {name: self.get_parameter(name).value for name in self.parameter_names
                if name.startswith("diagnostics.")}
        self.thresholds = build_settings(diag).diagnostics
        self.diagnostics = DiagnosticsPublisher(self, self.thresholds.period_s,
                                                self._health_items, self.guard.record)

    def health_items(self) -> list[HealthItem]:
        """The node's own /diagnostics entries (besides the common "node" entry)."""
        return []

    def _health_items(self) -> list[HealthItem]:
        common = node_item(self.get_fully_qualified_name(), state=self.state,
                           last_error=self.last_error or self.guard.last_error,
                           callback_errors=sum(self.guard.errors.values()),
                           thresholds=self.thresholds)
        return [common, *self.health_items()]

    # -- helpers for subclasses ---------------------------------------------------------------
    def entity(self, created: Any) -> Any:
        """Register a subscription/service/action server/timer created by activate."""
        self._entities.append(created)
        return created

    def tracked(self, kind: str, func: Any, default: Any = None) -> Any:
        """Wrap a callback: exceptions are counted and logged (never end the node), and
        deactivate waits for running calls to return before destroying entities."""
        guarded = self.guard.wrap(kind, func, default)

        def call(*args: Any) -> Any:
            self._hold()
            try:
                return guarded(*args)
            finally:
                self._release_hold()

        return call

    def create_tracked_service(self, srv_type: Any, name: str, kind: str, func: Any,
                               default: Any = None, callback_group: Any = None) -> Service:
        """Create (and register for deactivate) a service whose replies deactivate never
        drops. rclpy sends a service's response after its callback has returned, so
        waiting for the callback alone would let deactivate destroy the service between
        the two, and the caller would never get its reply (seen as a client timeout when
        a question in progress is cancelled by deactivate). Here a call counts as running
        until its response has been handed to the middleware. Exceptions are counted and
        logged as for `tracked`; the caller then gets `default(request, response)`, or the
        blank response when there is no default.

        A callback may return a `DeferredReply` instead of a response: the executor thread
        is free at once and the reply is sent when the reply is completed (from any
        thread); the call counts as running until then. Requests are read with
        REQUEST_QOS (deep history), so a burst of callers is never overwritten unread."""
        guarded = self.guard.wrap(kind, func, default or (lambda _request, response: response))

        def call(request: Any, response: Any) -> Any:
            self._hold()  # released once the response is sent (below), or on failure
            try:
                return guarded(request, response)
            except BaseException:
                self._release_hold()
                raise

        service = self.create_service(srv_type, name, call, qos_profile=REQUEST_QOS,
                                      callback_group=callback_group)
        send = service.send_response  # what the executor calls right after the callback

        def send_then_release(response: Any, header: Any) -> None:
            if isinstance(response, DeferredReply):
                response.attach(lambda real: send_then_release(real, header))
                return
            try:
                send(response, header)
            except Exception as exc:  # noqa: BLE001 - e.g. the caller's context went away
                self.get_logger().warning(f"could not send the reply of {kind}: {exc!r}")
            finally:
                self._last_reply_at = time.monotonic()
                self._release_hold()

        # this one service's method replaced (setattr: mypy refuses assignments to methods)
        setattr(service, "send_response", send_then_release)
        return self.entity(service)

    def _hold(self) -> None:
        with self._callbacks_done:
            self._active_callbacks += 1

    def _release_hold(self) -> None:
        with self._callbacks_done:
            self._active_callbacks -= 1
            self._callbacks_done.notify_all()

    def fill_model_status(self, status: Any) -> None:
        """The model fields of a NodeStatus message (empty until configured)."""
        settings = self.current_settings
        if settings is not None:
            status.perception_model = settings.perception.model
            status.reasoning_model = settings.reasoning.model
            status.perception_mode = settings.perception.mode

    @property
    def settings(self) -> Settings:
        """The settings of the last configure (only valid once configured)."""
        if self.current_settings is None:
            raise RuntimeError(f"{self.get_name()} is not configured")
        return self.current_settings

    @property
    def state(self) -> str:
        return lifecycle_state(self)

    def _parameters_may_change(self) -> str:
        if self.state == "unconfigured":
            return ""
        return (f"parameters of {self.get_name()} can only change while it is unconfigured "
                f"(now {self.state}); deactivate and clean it up first, e.g. `ros2 lifecycle "
                f"set {self.get_fully_qualified_name()} deactivate` then `... cleanup`")

    # -- to implement ---------------------------------------------------------------------------
    def configure_node(self, settings: Settings) -> None:
        raise NotImplementedError

    def activate_node(self) -> None:
        raise NotImplementedError

    def deactivate_node(self) -> None:
        """Stop work in progress (e.g. fail questions); entities are destroyed after."""

    def release(self) -> None:
        """Free models and state; must be safe to call more than once."""

    # -- lifecycle callbacks ------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            self.current_settings = read_settings(self, self.parameter_names)
            # Diagnostics settings may have changed while unconfigured: apply them now.
            self.thresholds = self.current_settings.diagnostics
            self.diagnostics.set_period(self.thresholds.period_s)
            self.configure_node(self.current_settings)
        except Exception as exc:  # noqa: BLE001 - every failure fails the transition
            code = exc.code.name if isinstance(exc, EmbodiedRError) else type(exc).__name__
            self.last_error = f"configure failed ({code}): {exc}"
            self.get_logger().error(self.last_error)
            self._release_quietly()
            return TransitionCallbackReturn.FAILURE
        self.last_error = ""
        self.get_logger().info("configured")
        return super().on_configure(state)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        # Lifecycle publishers first, so nothing produced by a new subscription is lost.
        ret = super().on_activate(state)
        if ret != TransitionCallbackReturn.SUCCESS:
            return ret
        try:
            self.activate_node()
        except Exception as exc:  # noqa: BLE001
            self.last_error = f"activate failed: {exc!r}"
            self.get_logger().error(self.last_error)
            self._stop_serving()  # undo what activate did, as deactivate would
            super().on_deactivate(state)
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info("active")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_serving()
        self.get_logger().info("inactive")
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_quietly()
        self.get_logger().info("cleaned up (models released)")
        return super().on_cleanup(state)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if state.label == "active":
            self._stop_serving()
            super().on_deactivate(state)
        self._release_quietly()
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.get_logger().error(f"error while leaving state {state.label}; releasing "
                                "everything and returning to unconfigured")
        self._destroy_entities()
        self._release_quietly()
        return TransitionCallbackReturn.SUCCESS

    # -- internals --------------------------------------------------------------------------------
    def _stop_serving(self, wait_s: float = 5.0) -> None:
        try:
            self.deactivate_node()
        except Exception as exc:  # noqa: BLE001
            self.get_logger().error(f"stopping work failed: {exc!r}")
        deadline = time.monotonic() + wait_s
        with self._callbacks_done:
            while self._active_callbacks > 0 and time.monotonic() < deadline:
                self._callbacks_done.wait(timeout=0.05)
        # A response handed to the middleware is not yet delivered: destroying its service
        # at once can drop it (seen under load as a caller told the server went away instead
        # of getting its CANCELLED reply). Give replies sent just now time to go out.
        linger = self._last_reply_at + REPLY_LINGER_S - time.monotonic()
        if linger > 0:
            time.sleep(linger)
        self._destroy_entities()

    def _destroy_entities(self) -> None:
        for created in reversed(self._entities):
            try:
                if isinstance(created, Subscription):
                    self.destroy_subscription(created)
                elif isinstance(created, Service):
                    self.destroy_service(created)
                elif isinstance(created, Client):
                    self.destroy_client(created)
                elif isinstance(created, Timer):
                    self.destroy_timer(created)
                elif isinstance(created, Publisher):
                    self.destroy_publisher(created)
                else:  # action servers and clients
                    created.destroy()
            except Exception as exc:  # noqa: BLE001
                self.get_logger().warning(f"could not destroy {created!r}: {exc!r}")
        self._entities.clear()

    def _release_quietly(self) -> None:
        try:
            self.release()
        except Exception as exc:  # noqa: BLE001
            self.get_logger().error(f"releasing resources failed: {exc!r}")
        free_accelerator_memory()
