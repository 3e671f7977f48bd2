"""All-in-one node (the default): camera -> key frames -> perception -> memory ->
questions, in one process, models loaded once. Publishes key frames, frame descriptions
and answers for visibility; serves AskSpatial, AnswerSpatial, reset and status."""

from __future__ import annotations

import json
from dataclasses import asdict

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from std_srvs.srv import Trigger

from embodied_r_ros.core.keyframe_tracker import KeyFrameEvent
from embodied_r_ros.core.pipeline import EmbodiedRPipeline, load_models
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.nodes.camera_input import CameraInput
from embodied_r_ros.nodes.conversions import description_to_msg, keyframe_event_to_msg
from embodied_r_ros.nodes.node_runtime import forward_python_logging, run_node
from embodied_r_ros.nodes.odometry_input import OdometryInput
from embodied_r_ros.nodes.qos import DESCRIPTION_QOS, KEYFRAME_QOS
from embodied_r_ros.nodes.question_server import QuestionServer
from embodied_r_ros.nodes.ros_params import declare_parameters


class EmbodiedRNode(Node):
    def __init__(self, name: str = "embodied_r") -> None:
        super().__init__(name)
        forward_python_logging(self)
        params = declare_parameters(self, ["camera", "keyframes", "perception", "reasoning",
                                           "qa", "topics", "services"])
        self.get_logger().info(
            f"loading models: perception {params['perception.backend']}:"
            f"{params['perception.model'] or '<unset>'}, reasoning "
            f"{params['reasoning.backend']}:{params['reasoning.model'] or '<unset>'}")
        perceiver, reasoner = load_models(params)
        self.keyframe_pub = self.create_publisher(KeyFrameMsg, params["topics.keyframes"],
                                                  KEYFRAME_QOS)
        self.description_pub = self.create_publisher(
            FrameDescriptionMsg, params["topics.descriptions"], DESCRIPTION_QOS)
        self.odometry = OdometryInput(self, params) if params["perception.use_odometry"] else None
        self.pipeline = EmbodiedRPipeline(
            params, perceiver, reasoner,
            motion_source=self.odometry.motion_label if self.odometry else None,
            on_keyframe=self._publish_keyframe, on_description=self._publish_description)
        self.camera = CameraInput(self, params, self._on_frame)
        self.questions = QuestionServer(
            self, self.pipeline.ask, service_name=params["services.ask"],
            action_name=params["services.answer_action"], answers_topic=params["topics.answers"])
        group = ReentrantCallbackGroup()
        self.create_service(Trigger, "reset_episode", self._on_reset, callback_group=group)
        self.create_service(Trigger, "status", self._on_status, callback_group=group)
        self.get_logger().info(f"ready (perception mode {params['perception.mode']}); episode "
                               f"{self.pipeline.episode_id}")

    def _on_frame(self, image, stamp_s: float, index: int, frame_id: str) -> None:  # type: ignore[no-untyped-def]
        self.pipeline.push_frame(image, stamp_s, index, frame_id)

    def _publish_keyframe(self, event: KeyFrameEvent, episode_id: str) -> None:
        self.keyframe_pub.publish(keyframe_event_to_msg(event, episode_id))
        self.get_logger().info(f"key frame {event.keyframe_index} (sampled frame "
                               f"{event.sampled_index}, {event.reason}, overlap "
                               f"{event.overlap:.2f})")

    def _publish_description(self, description: FrameDescription) -> None:
        self.description_pub.publish(description_to_msg(description, self.pipeline.episode_id))

    def _on_reset(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        episode = self.pipeline.reset()
        response.success, response.message = True, f"new episode {episode}"
        self.get_logger().info(response.message)
        return response

    def _on_status(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success = True
        response.message = json.dumps(asdict(self.pipeline.status()))
        return response

    def close(self) -> None:
        self.pipeline.close()


def main(args: list[str] | None = None) -> int:
    return run_node(EmbodiedRNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
