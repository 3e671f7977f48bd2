"""Optional odometry subscription: measured motion between key frames replaces the
VLM's guessed action (perception.use_odometry)."""

from __future__ import annotations

from typing import Any

from nav_msgs.msg import Odometry
from rclpy.node import Node

from embodied_r_ros.core.odometry import (
    PoseHistory,
    measured_action,
    pose_from_odometry_msg,
)


class OdometryInput:
    def __init__(self, node: Node, params: dict[str, Any], max_age_s: float = 600.0) -> None:
        self.history = PoseHistory(max_age_s=max_age_s)
        self.subscription = node.create_subscription(
            Odometry, params["perception.odometry_topic"], self._on_odometry, 50)

    def _on_odometry(self, msg: Odometry) -> None:
        self.history.add(pose_from_odometry_msg(msg))

    def motion_label(self, previous_stamp_s: float, stamp_s: float) -> str | None:
        return measured_action(self.history, previous_stamp_s, stamp_s)
