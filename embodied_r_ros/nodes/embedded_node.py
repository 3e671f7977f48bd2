"""All-in-one lifecycle node (the default graph): camera -> key frames -> perception ->
memory -> questions, in one process, models loaded once.

configure loads both models (failing with the reason); activate subscribes to the camera
(and odometry) and serves `ask` (AskSpatial), `answer` (AnswerSpatial), `reset_episode`
(std_srvs/Trigger); `status` (GetStatus) is served in every state. Key frames,
descriptions, answers and episodes are published for visibility.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from std_srvs.srv import Trigger

from embodied_r_ros.core.health import HealthItem
from embodied_r_ros.core.keyframes.tracker import KeyFrameEvent
from embodied_r_ros.core.memory.long_term import LongTermMemory, MemorySettings
from embodied_r_ros.core.model_settings import model_settings_line
from embodied_r_ros.core.pipeline import EmbodiedRPipeline, load_models
from embodied_r_ros.core.prompts.prompt_set import load_prompt_set
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.msg import Episode, NodeStatus
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.nodes.common.camera_input import CameraInput
from embodied_r_ros.nodes.common.conversions import description_to_msg, episode_msg
from embodied_r_ros.nodes.common.keyframe_publisher import KeyFramePublisher
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.nodes.common.memory_services import MemoryServices
from embodied_r_ros.nodes.common.node_runtime import run_node
from embodied_r_ros.nodes.common.odometry_input import OdometryInput
from embodied_r_ros.nodes.common.qos import DESCRIPTION_QOS, EPISODE_QOS
from embodied_r_ros.nodes.common.question_server import QuestionServer
from embodied_r_ros.nodes.common.status import StatusService
from embodied_r_ros.srv import GetStatus


class EmbodiedRNode(ManagedNode):
    PARAMETER_GROUPS = ("camera", "keyframes", "perception", "reasoning", "prompts", "episode",
                        "qa", "topics", "services", "memory")

    def __init__(self, name: str = "embodied_r") -> None:
        super().__init__(name)
        self.pipeline: EmbodiedRPipeline | None = None
        self.odometry: OdometryInput | None = None
        self.camera: CameraInput | None = None
        self.questions: QuestionServer | None = None
        self.keyframes: KeyFramePublisher | None = None
        self.memory: MemoryServices | None = None
        self.description_pub: Any = None
        self.episode_pub: Any = None
        self.status = StatusService(self, "embedded", self._fill_status,
                                    self.get_parameter("services.status").value)

    # -- lifecycle ------------------------------------------------------------------------------
    def configure_node(self, settings: Settings) -> None:
        self.executor_threads = settings.qa.max_waiting_questions + 6
        self.get_logger().info(
            f"loading models: perception {settings.perception.backend}:"
            f"{settings.perception.model or '<unset>'}, reasoning "
            f"{settings.reasoning.backend}:{settings.reasoning.model or '<unset>'}")
        self.get_logger().info(model_settings_line(settings, ("perception", "reasoning"),
                                                   sys.argv, self.get_name()))
        load_prompt_set(settings.prompts.file)  # a bad prompt file fails configure first
        perceiver, reasoner = load_models(settings)
        self.keyframes = KeyFramePublisher(self, settings.topics.keyframes)
        self.description_pub = self.create_lifecycle_publisher(
            FrameDescriptionMsg, settings.topics.descriptions, DESCRIPTION_QOS)
        self.episode_pub = self.create_lifecycle_publisher(Episode, settings.topics.episode,
                                                           EPISODE_QOS)
        self.odometry = OdometryInput(self, settings) if settings.perception.use_odometry else None
        # The key-frame store (docs/memory.md): reopened here, the stored episode continues.
        long_term = LongTermMemory(MemorySettings.from_settings(settings),
                                   namespace=self.get_namespace(),
                                   pose_source=self.odometry.pose_at if self.odometry else None)
        self.memory = MemoryServices(self, long_term)
        for warning in long_term.store.warnings:
            self.get_logger().warning(warning)
        self.pipeline = EmbodiedRPipeline(
            settings, perceiver, reasoner,
            motion_source=self.odometry.motion_label if self.odometry else None,
            on_keyframe=self._publish_keyframe, on_description=self._publish_description,
            on_episode=self._publish_episode, long_term=long_term)
        if self.pipeline.resumed_keyframes:
            self.get_logger().info(
                f"memory store {long_term.path}: continuing episode {self.pipeline.episode_id} "
                f"({self.pipeline.resumed_keyframes} key frame(s) stored)")
        self.questions = QuestionServer(
            self, self.pipeline.ask, self.pipeline.questions, service_name=settings.services.ask,
            action_name=settings.services.answer_action, answers_topic=settings.topics.answers)
        self.get_logger().info(f"perception mode {settings.perception.mode}; episode "
                               f"{self.pipeline.episode_id}")

    def activate_node(self) -> None:
        assert self.pipeline is not None and self.questions is not None
        pipeline = self.pipeline
        self.camera = CameraInput(self, self.settings, pipeline.offer_frame, self._on_frame,
                                  wrap=self.tracked)
        self.entity(self.camera.subscription)
        if self.odometry is not None:
            self.entity(self.odometry.subscribe(self.tracked))
        group = ReentrantCallbackGroup()
        self.create_tracked_service(Trigger, self.settings.services.reset, "reset service",
                                    self._on_reset, callback_group=group)
        if self.memory is not None:
            self.memory.serve(self.settings.services.recall, group)
        self.questions.serve()
        self.episode_pub.publish(episode_msg(self, pipeline.episode_id, "", "startup"))

    def deactivate_node(self) -> None:
        if self.questions is not None:
            self.questions.withdraw()  # fails the questions in progress (CANCELLED)

    def release(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        for pub in (self.description_pub, self.episode_pub):
            if pub is not None:
                self.destroy_lifecycle_publisher(pub)
        if self.keyframes is not None:
            self.keyframes.destroy()
        if self.questions is not None:
            self.questions.destroy()
        self.pipeline = self.odometry = self.camera = self.questions = self.keyframes = None
        self.memory = None
        self.description_pub = self.episode_pub = None

    # -- callbacks ------------------------------------------------------------------------------
    def _on_frame(self, image: np.ndarray, stamp_s: float, index: int, frame_id: str) -> None:
        pipeline = self.pipeline
        if pipeline is not None:
            pipeline.push_sampled(image, stamp_s, index, frame_id)

    def _publish_keyframe(self, event: KeyFrameEvent, episode_id: str) -> None:
        if self.keyframes is not None:
            self.keyframes.publish(event, episode_id)

    def _publish_description(self, description: FrameDescription) -> None:
        if self.description_pub is not None:
            odometry = self.odometry
            pose = odometry.pose_at(description.stamp_s) if odometry is not None else None
            self.description_pub.publish(description_to_msg(description, pose))

    def _publish_episode(self, episode: str, previous: str, reason: str) -> None:
        if self.episode_pub is not None:
            self.episode_pub.publish(episode_msg(self, episode, previous, reason))
        if reason == "budget":
            self.get_logger().info(f"episode budget reached: new episode {episode} "
                                   "(episode.policy restart)")

    def _on_reset(self, _request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        pipeline = self.pipeline
        if pipeline is None:
            response.success, response.message = False, "the node is not configured"
            return response
        episode = pipeline.reset()
        if self.camera is not None:
            self.camera.reset()
        response.success, response.message = True, f"new episode {episode}"
        self.get_logger().info(response.message)
        return response

    def health_items(self) -> list[HealthItem]:
        name, items = self.get_fully_qualified_name(), []
        pipeline = self.pipeline
        if self.camera is not None and pipeline is not None:
            items.append(self.camera.health(name, self.state == "active",
                                            pipeline.tracker.n_keyframes, self.thresholds))
        if pipeline is not None:
            items.append(pipeline.worker.health(name, self.settings.perception.model, True,
                                                self.thresholds))
        if self.questions is not None:
            items.append(self.questions.health(self.settings.reasoning.model, True))
        if self.memory is not None:
            items.append(self.memory.health(name))
        return items

    def _fill_status(self, status: NodeStatus) -> None:
        self.fill_model_status(status)
        status.keyframe_node_alive = status.perception_node_alive = True
        pipeline = self.pipeline
        if pipeline is None:
            return
        st = pipeline.status()
        status.episode_id = st.episode_id
        status.frames_received = st.frames_received
        status.frames_sampled = st.frames_sampled
        status.keyframes = st.keyframes
        status.described = st.described
        status.perception_pending = st.pending_perception
        status.perception_failed = st.failed_perception
        status.questions_in_progress = st.questions_in_progress
        status.reasoning_ready = True
        failing = pipeline.perception_error()  # the same rule as /diagnostics' ERROR
        status.perception_ready = not failing
        if failing:
            status.last_error = status.last_error or f"perception is failing: {failing}"


def main(args: list[str] | None = None) -> int:
    return run_node(EmbodiedRNode, args)


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["EmbodiedRNode", "GetStatus", "main"]
