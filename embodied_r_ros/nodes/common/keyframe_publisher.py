"""Publishing key frames: embodied_r_ros/KeyFrame on the key-frames topic, and the plain
sensor_msgs/Image on `<topic>/image` for viewers such as rqt_image_view, the latter only
while someone subscribes (no conversion cost otherwise)."""

from __future__ import annotations

from sensor_msgs.msg import Image

from embodied_r_ros.core.keyframes.tracker import KeyFrameEvent
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.nodes.common.conversions import keyframe_event_to_msg
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.nodes.common.qos import KEYFRAME_IMAGE_QOS, KEYFRAME_QOS


class KeyFramePublisher:
    def __init__(self, node: ManagedNode, topic: str) -> None:
        self.node = node
        self.keyframe_pub = node.create_lifecycle_publisher(KeyFrameMsg, topic, KEYFRAME_QOS)
        self.image_pub = node.create_lifecycle_publisher(Image, topic.rstrip("/") + "/image",
                                                         KEYFRAME_IMAGE_QOS)
        self.published = 0

    def publish(self, event: KeyFrameEvent, episode_id: str) -> None:
        msg = keyframe_event_to_msg(event, episode_id)
        self.keyframe_pub.publish(msg)
        if self.image_pub.get_subscription_count() > 0:
            self.image_pub.publish(msg.image)
        self.published += 1
        self.node.get_logger().info(f"key frame {event.keyframe_index} (sampled frame "
                                    f"{event.sampled_index}, {event.reason}, overlap "
                                    f"{event.overlap:.2f})")

    def destroy(self) -> None:
        self.node.destroy_lifecycle_publisher(self.keyframe_pub)
        self.node.destroy_lifecycle_publisher(self.image_pub)
