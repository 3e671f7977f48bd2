"""Running a node: init, multi-threaded spin, lifecycle autostart, clean shutdown.

Every embodied_r_ros node is a lifecycle (managed) node. With the `autostart` parameter
(the default) `run_node` configures and activates it before spinning; when configuring
fails the reason is printed and the process exits with code 1, so `ros2 launch` and the
runner show why it stopped. With autostart false the node waits, unconfigured, for a
lifecycle manager (or `ros2 lifecycle set`), and a failed configure leaves it alive and
unconfigured, ready for another try. A lifecycle `shutdown` transition (from any state)
releases everything and ends the process with code 0.

SIGTERM and SIGINT (how `embodied-r launch`, `ros2 launch`, systemd and docker stop a
node) do not tear the ROS context down under the questions in flight. The node stops as
deactivate does (docs/reliability.md): it stops taking questions, fails the ones in
flight with CANCELLED, keeps spinning until their replies and action results are sent,
then shuts down (models released) and exits 0, within SHUTDOWN_BUDGET_S. A second signal
ends it at once. Bad start-up parameters end it with exit code 2 and one line saying
what to change (no traceback).

`CallbackGuard` wraps ROS callbacks so that no input can end a node: an exception is
counted per callback kind, logged (at most once per 5 s per kind, with the count) and the
callback returns a safe default.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

import rclpy
from lifecycle_msgs.msg import State
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.node import Node
from rclpy.signals import SignalHandlerOptions

from embodied_r_ros.core.errors import ConfigError

T = TypeVar("T")


def forward_python_logging(node: Node) -> None:
    """Send the core's `logging` records (logger "embodied_r_ros.*") to the ROS log."""
    ros_logger = node.get_logger()

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = f"[{record.name}] {record.getMessage()}"
            if record.levelno >= logging.ERROR:
                ros_logger.error(text)
            elif record.levelno >= logging.WARNING:
                ros_logger.warning(text)
            elif record.levelno >= logging.INFO:
                ros_logger.info(text)
            else:
                ros_logger.debug(text)

    core_logger = logging.getLogger("embodied_r_ros")
    for handler in list(core_logger.handlers):
        if type(handler).__name__ == "_Handler":
            core_logger.removeHandler(handler)
    core_logger.addHandler(_Handler())
    core_logger.setLevel(logging.INFO)
    core_logger.propagate = False


class CallbackGuard:
    """Counts and logs exceptions of ROS callbacks instead of letting them end the node."""

    LOG_PERIOD_S = 5.0

    def __init__(self, node: Node) -> None:
        self.node = node
        self.errors: Counter[str] = Counter()
        self.last_error = ""
        self._last_log: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, kind: str, exc: BaseException) -> None:
        with self._lock:
            self.errors[kind] += 1
            count = self.errors[kind]
            self.last_error = f"{kind}: {exc!r}"
            now = time.monotonic()
            quiet = now - self._last_log.get(kind, -1e9) < self.LOG_PERIOD_S
            if not quiet:
                self._last_log[kind] = now
        if not quiet:
            self.node.get_logger().error(
                f"{kind} callback failed ({count} time(s) so far), input dropped: {exc!r}. "
                "The node keeps running; if this repeats, report it with the log.")

    def wrap(self, kind: str, func: Callable[..., T], default: Callable[..., T] | None = None
             ) -> Callable[..., T | None]:
        def guarded(*args: Any) -> T | None:
            try:
                return func(*args)
            except Exception as exc:  # noqa: BLE001 - no callback may end the node
                self.record(kind, exc)
                return default(*args) if default is not None else None

        guarded.__name__ = getattr(func, "__name__", kind)
        return guarded


def lifecycle_state(node: LifecycleNode) -> str:
    """The node's lifecycle state label: unconfigured, inactive, active, finalized."""
    return str(node._state_machine.current_state[1])  # no public getter


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas (as MALLOC_ARENA_MAX does) so that memory freed by the
    many short-lived allocations of image callbacks and model calls on different threads
    is reused instead of retained per thread: flat memory over hours. An environment
    MALLOC_ARENA_MAX wins; no effect off glibc."""
    if os.environ.get("MALLOC_ARENA_MAX"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-8, int(arenas))  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


# After a stop signal: how long replies and action results may take to go out before the
# node shuts down anyway (the questions themselves are failed at once).
SHUTDOWN_BUDGET_S = 8.0
# Time given to action results after deactivate: rclpy sends a goal's result in an
# executor task after its execute callback returned (see QuestionServer).
RESULT_LINGER_S = 1.0


class _StopSignals:
    """SIGINT/SIGTERM -> a request the main loop acts on (a plain attribute: a signal
    handler must not take locks the interrupted main thread may hold)."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.count = 0

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.count += 1
        self.reason = signal.Signals(signum).name
        if self.count > 1:  # asked twice: stop now
            raise KeyboardInterrupt


def _graceful_stop(node: LifecycleNode, reason: str) -> None:
    """Deactivate (fail questions in flight with CANCELLED, send their replies), give
    action results a moment, then shut down. Runs on its own thread while the main
    thread keeps spinning, so the replies really go out."""
    try:
        node.get_logger().info(
            f"got {reason}: failing the questions in flight with CANCELLED, sending their "
            "replies, then shutting down")
        if lifecycle_state(node) == "active":
            node.trigger_deactivate()
            time.sleep(RESULT_LINGER_S)
        if lifecycle_state(node) != "finalized":
            node.trigger_shutdown()
    except Exception as exc:  # noqa: BLE001 - the main loop releases directly after the budget
        print(f"[embodied_r_ros] {node.get_name()}: clean shutdown failed: {exc!r}",
              file=sys.stderr, flush=True)


def run_node(factory: Callable[[], LifecycleNode], args: list[str] | None = None,
             threads: int = 4) -> int:
    """Create the node with `factory`, autostart it if asked, spin until shutdown; return
    the process exit code."""
    limit_malloc_arenas()
    # Start-up (imports, the node, its models) makes objects that live as long as the
    # process: collecting cycles among them is wasted work (1.8 s of CPU while importing
    # transformers alone), so the collector pauses until the autostart is done, and what
    # start-up made is then frozen: later collections skip it (free_accelerator_memory
    # thaws it, so released models are still collected).
    gc.disable()
    rclpy.init(args=args if args is not None else sys.argv,
               signal_handler_options=SignalHandlerOptions.NO)
    stop = _StopSignals()
    stop.install()
    node: LifecycleNode | None = None
    try:
        try:
            node = factory()
        except ConfigError as exc:
            print(f"[embodied_r_ros] {exc}", file=sys.stderr, flush=True)
            return 2
        if node.get_parameter("autostart").value:
            for name, trigger in (("configure", node.trigger_configure),
                                  ("activate", node.trigger_activate)):
                if stop.reason is not None:
                    break
                if trigger() != TransitionCallbackReturn.SUCCESS:
                    reason = getattr(node, "last_error", "") or "see the log above"
                    if not reason.startswith(f"{name} failed"):
                        reason = f"{name} failed: {reason}"
                    print(f"[embodied_r_ros] {node.get_name()}: {reason}",
                          file=sys.stderr, flush=True)
                    return 1
        gc.freeze()
        gc.enable()
        executor = MultiThreadedExecutor(num_threads=max(threads,
                                                         getattr(node, "executor_threads", 0)))
        executor.add_node(node)
        stopping_since: float | None = None
        try:
            # Spin until a stop signal has been handled (or its budget is spent) or until
            # the node is finalized by a lifecycle shutdown transition; then exit 0.
            while rclpy.ok() and lifecycle_state(node) != "finalized":
                if stop.reason is not None and stopping_since is None:
                    stopping_since = time.monotonic()
                    threading.Thread(target=_graceful_stop, args=(node, stop.reason),
                                     name="graceful-stop", daemon=True).start()
                if (stopping_since is not None
                        and time.monotonic() - stopping_since > SHUTDOWN_BUDGET_S):
                    print(f"[embodied_r_ros] {node.get_name()}: replies not sent within "
                          f"{SHUTDOWN_BUDGET_S:.0f}s of {stop.reason}; exiting anyway",
                          file=sys.stderr, flush=True)
                    break
                executor.spin_once(timeout_sec=0.1)
            linger = time.monotonic() + 1.0  # let the shutdown request's reply go out
            while stop.reason is None and rclpy.ok() and time.monotonic() < linger:
                executor.spin_once(timeout_sec=0.1)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        return 0
    except KeyboardInterrupt:  # a second signal during start-up
        return 0
    finally:
        if node is not None:
            _shutdown(node)
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


def _shutdown(node: LifecycleNode) -> None:
    """Release the node's models whatever its state. While the ROS context is alive this is
    the lifecycle shutdown transition; after Ctrl-C / SIGTERM (context already shut down,
    and rcl has moved the state machine to shutting down) the models are released
    directly, without transitions or ROS logging that could no longer work."""
    state = lifecycle_state(node)
    if state == "finalized":
        return
    if rclpy.ok() and state in {"unconfigured", "inactive", "active"}:
        try:
            node.trigger_shutdown()
        except Exception:  # noqa: BLE001 - fall through to a direct release
            pass
        if lifecycle_state(node) == "finalized":
            return
    release = getattr(node, "release", None)
    if callable(release):
        try:
            release()
        except Exception as exc:  # noqa: BLE001 - exiting anyway
            print(f"[embodied_r_ros] releasing {node.get_name()} failed: {exc!r}",
                  file=sys.stderr, flush=True)


UNCONFIGURED = State.PRIMARY_STATE_UNCONFIGURED
