"""Camera subscription shared by the embedded node and the key-frame node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CompressedImage, Image

from embodied_r_ros.core.errors import EmbodiedRError
from embodied_r_ros.nodes.conversions import image_msg_to_rgb, stamp_to_seconds

# (rgb image, stamp seconds, index of the frame on the topic, frame_id)
FrameHandler = Callable[[np.ndarray, float, int, str], None]


class CameraInput:
    """Subscribes to the camera (sensor-data QoS), decodes frames and hands them on in
    arrival order, on one callback group so frames are never processed concurrently."""

    def __init__(self, node: Node, params: dict[str, Any], handler: FrameHandler) -> None:
        self.node = node
        self.handler = handler
        self.received = 0
        self.bad_frames = 0
        msg_type = CompressedImage if params["camera.compressed"] else Image
        self.topic = params["camera.topic"]
        self.subscription = node.create_subscription(
            msg_type, self.topic, self._on_image, qos_profile_sensor_data,
            callback_group=MutuallyExclusiveCallbackGroup())
        node.get_logger().info(f"listening for {msg_type.__name__} frames on {self.topic}")

    def _on_image(self, msg: Image | CompressedImage) -> None:
        index = self.received
        self.received += 1
        try:
            image = image_msg_to_rgb(msg)
        except EmbodiedRError as exc:
            self.bad_frames += 1
            self.node.get_logger().warning(
                f"dropped frame {index} from {self.topic}: {exc}", throttle_duration_sec=5.0)
            return
        stamp = stamp_to_seconds(msg.header.stamp)
        self.handler(image, stamp, index, msg.header.frame_id)
