"""Perception node (split graph): key frames -> VLM descriptions (streaming mode).

Subscribes to embodied_r_ros/KeyFrame, describes each key frame in order (the first of an
episode alone, later ones paired with the previous key frame) and publishes
embodied_r_ros/FrameDescription; failures are published too, with mode "failed" and the
error in raw_text, so the reasoning node never waits for a frame that will not come.
"""

from __future__ import annotations

from rclpy.node import Node

from embodied_r_ros.core.backends.factory import make_perceiver
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.config import model_spec_dict
from embodied_r_ros.core.errors import ConfigError
from embodied_r_ros.core.memory import EpisodeMemory
from embodied_r_ros.core.perception_worker import PerceptionJob, PerceptionWorker
from embodied_r_ros.core.pipeline import generation_settings
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.nodes.conversions import (
    description_to_msg,
    image_msg_to_rgb,
    stamp_to_seconds,
)
from embodied_r_ros.nodes.node_runtime import forward_python_logging, run_node
from embodied_r_ros.nodes.odometry_input import OdometryInput
from embodied_r_ros.nodes.qos import DESCRIPTION_QOS, KEYFRAME_QOS
from embodied_r_ros.nodes.ros_params import declare_parameters


class PerceptionNode(Node):
    def __init__(self, name: str = "perception") -> None:
        super().__init__(name)
        forward_python_logging(self)
        params = declare_parameters(self, ["perception", "topics"])
        if params["perception.mode"] != "streaming":
            raise ConfigError("perception.mode 'on_query' needs the question at perception "
                              "time and is served by the embedded node (embodied_r_node); "
                              "the split graph supports 'streaming'")
        self.get_logger().info(f"loading perception model {params['perception.backend']}:"
                               f"{params['perception.model'] or '<unset>'}")
        perceiver = make_perceiver(ModelSpec.from_dict(model_spec_dict(params, "perception")))
        self.odometry = OdometryInput(self, params) if params["perception.use_odometry"] else None
        self.memory = EpisodeMemory("")
        self.publisher = self.create_publisher(FrameDescriptionMsg,
                                               params["topics.descriptions"], DESCRIPTION_QOS)
        self.worker = PerceptionWorker(
            perceiver, self.memory, settings=generation_settings(params, "perception"),
            motion_source=self.odometry.motion_label if self.odometry else None,
            on_description=self._publish)
        self.episode_id = ""
        self.subscription = self.create_subscription(KeyFrameMsg, params["topics.keyframes"],
                                                     self._on_keyframe, KEYFRAME_QOS)
        self.get_logger().info("ready")

    def _on_keyframe(self, msg: KeyFrameMsg) -> None:
        if msg.episode_id != self.episode_id:
            self.episode_id = msg.episode_id
            self.worker.reset(msg.episode_id)
        self.worker.submit(PerceptionJob(msg.episode_id, msg.keyframe_index,
                                         image_msg_to_rgb(msg.image),
                                         stamp_to_seconds(msg.header.stamp)))

    def _publish(self, description: FrameDescription) -> None:
        self.publisher.publish(description_to_msg(description, self.episode_id))

    def close(self) -> None:
        self.worker.stop()
        self.worker.perceiver.close()


def main(args: list[str] | None = None) -> int:
    return run_node(PerceptionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
