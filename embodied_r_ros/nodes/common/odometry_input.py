"""Optional odometry subscription: measured motion between key frames replaces the
VLM's guessed action (perception.use_odometry)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from nav_msgs.msg import Odometry
from rclpy.node import Node

from embodied_r_ros.core.memory.store import StoredPose
from embodied_r_ros.core.perception.odometry import PoseHistory, measured_action, pose_from_odometry_msg
from embodied_r_ros.core.settings import Settings


class OdometryInput:
    """Keeps recent odometry poses; answers "what motion happened between two stamps"."""

    # Camera frames and odometry travel on separate topics: when a key frame is described
    # before the odometry of its stamp has arrived, wait up to this long for it (only while
    # odometry is flowing at all; with none received, the VLM's action is kept at once).
    CATCH_UP_S = 2.0

    def __init__(self, node: Node, settings: Settings, max_age_s: float = 600.0) -> None:
        self.node = node
        self.topic = settings.perception.odometry_topic
        self.history = PoseHistory(max_age_s=max_age_s)
        self._cond = threading.Condition()
        self.frame_id = ""

    def subscribe(self, wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]]) -> Any:
        """Create the subscription (on activate); the caller destroys it on deactivate."""
        return self.node.create_subscription(Odometry, self.topic,
                                             wrap("odometry", self._on_odometry), 1000)

    def _on_odometry(self, msg: Odometry) -> None:
        with self._cond:
            self.history.add(pose_from_odometry_msg(msg))
            self.frame_id = msg.header.frame_id
            self._cond.notify_all()

    def pose_at(self, stamp_s: float) -> StoredPose | None:
        """The pose at a stamp (interpolated; None without odometry near it), for the
        key-frame store. Never waits."""
        with self._cond:
            pose = self.history.at(stamp_s)
            frame_id = self.frame_id
        if pose is None:
            return None
        return StoredPose(float(pose.x), float(pose.y), float(pose.z), float(pose.yaw), frame_id)

    def motion_label(self, previous_stamp_s: float, stamp_s: float) -> str | None:
        deadline = time.monotonic() + self.CATCH_UP_S
        with self._cond:
            while True:
                newest = self.history.newest
                if newest is None or newest.stamp_s >= stamp_s:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return measured_action(self.history, previous_stamp_s, stamp_s)
