"""Key-frame node (split graph): camera -> sampled frames -> key frames.

Publishes embodied_r_ros/KeyFrame on `topics.keyframes`. Services:
  reset_episode (std_srvs/Trigger)   start a new episode (new id on later key frames)
  keyframes/sync (std_srvs/Trigger)  called by the reasoning node when a question
      arrives: makes the current view a key frame (qa.include_current_view) and replies
      with JSON {"episode_id", "last_keyframe_index"} (-1 when nothing was seen yet).
"""

from __future__ import annotations

import json
import threading
import uuid

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from std_srvs.srv import Trigger

from embodied_r_ros.core.keyframe_tracker import KeyFrameEvent, KeyFrameTracker
from embodied_r_ros.core.pipeline import keyframe_params
from embodied_r_ros.core.types import Frame
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.nodes.camera_input import CameraInput
from embodied_r_ros.nodes.conversions import keyframe_event_to_msg
from embodied_r_ros.nodes.node_runtime import forward_python_logging, run_node
from embodied_r_ros.nodes.qos import KEYFRAME_QOS
from embodied_r_ros.nodes.ros_params import declare_parameters


class KeyFrameNode(Node):
    def __init__(self, name: str = "keyframe_selector") -> None:
        super().__init__(name)
        forward_python_logging(self)
        self.params = declare_parameters(self, ["camera", "keyframes", "qa", "topics"])
        self.tracker = KeyFrameTracker(keyframe_params(self.params),
                                       ring_size=self.params["keyframes.ring_size"],
                                       max_image_side=self.params["camera.max_image_side"])
        self.episode_id = uuid.uuid4().hex[:12]
        self.last_index = -1
        self._lock = threading.Lock()
        self.publisher = self.create_publisher(KeyFrameMsg, self.params["topics.keyframes"],
                                               KEYFRAME_QOS)
        self.camera = CameraInput(self, self.params, self._on_frame)
        group = ReentrantCallbackGroup()
        self.create_service(Trigger, "reset_episode", self._on_reset, callback_group=group)
        self.create_service(Trigger, "keyframes/sync", self._on_sync, callback_group=group)

    def _on_frame(self, image, stamp_s: float, index: int, frame_id: str) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            event = self.tracker.push(Frame(image, stamp_s, index, frame_id))
            if event is not None:
                self._publish(event)

    def _publish(self, event: KeyFrameEvent) -> None:
        self.last_index = event.keyframe_index
        self.publisher.publish(keyframe_event_to_msg(event, self.episode_id))
        self.get_logger().info(f"key frame {event.keyframe_index} (sampled frame "
                               f"{event.sampled_index}, {event.reason}, overlap "
                               f"{event.overlap:.2f})")

    def _on_sync(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            if self.params["qa.include_current_view"]:
                event = self.tracker.force_current()
                if event is not None:
                    self._publish(event)
            response.success = True
            response.message = json.dumps({"episode_id": self.episode_id,
                                           "last_keyframe_index": self.last_index})
        return response

    def _on_reset(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            self.tracker.reset()
            self.episode_id = uuid.uuid4().hex[:12]
            self.last_index = -1
        response.success, response.message = True, f"new episode {self.episode_id}"
        self.get_logger().info(response.message)
        return response


def main(args: list[str] | None = None) -> int:
    return run_node(KeyFrameNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
