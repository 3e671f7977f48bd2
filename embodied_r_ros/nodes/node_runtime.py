"""Running a node: init, multi-threaded spin, clean shutdown, start-up errors as a clear
log line and exit code 1 (so `ros2 launch` and the demo show why a node stopped)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
from rclpy.node import Node

from embodied_r_ros.core.errors import EmbodiedRError


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
    core_logger.addHandler(_Handler())
    core_logger.setLevel(logging.INFO)
    core_logger.propagate = False


def run_node(factory: Callable[[], Node], args: list[str] | None = None,
             threads: int = 4) -> int:
    """Create the node with `factory` and spin it until shutdown; return an exit code."""
    rclpy.init(args=args if args is not None else sys.argv)
    node: Node | None = None
    try:
        try:
            node = factory()
        except EmbodiedRError as exc:
            print(f"[embodied_r_ros] start-up failed ({exc.code.name}): {exc}", file=sys.stderr,
                  flush=True)
            return 1
        executor = MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        try:
            executor.spin()
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        return 0
    finally:
        if node is not None:
            close = getattr(node, "close", None)
            if callable(close):
                close()
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
