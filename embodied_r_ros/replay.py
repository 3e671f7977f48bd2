"""Replay a rosbag onto the camera topic of a running graph and ask questions over ROS.

The client side of the demo, of `embodied-r replay-eval --mode live` and of the
end-to-end tests: a small rclpy node that publishes the bag's frames (with their recorded
stamps, paced by `rate`), listens to key frames, descriptions, answers and reasoning
prompts, and calls the AskSpatial service. Question files and evaluation results are
ROS-free and live in `embodied_r_ros.evaluation` (`QuestionItem` and `load_questions`
are re-exported here).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nav_msgs.msg import Odometry
from rclpy.client import Client
from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)
from sensor_msgs.msg import Image
from std_msgs.msg import Header, String
from std_srvs.srv import Trigger

from embodied_r_ros.client import GraphClient, spinning, wait_future
from embodied_r_ros.evaluation.questions import QuestionItem, load_questions
from embodied_r_ros.msg import FrameDescription, KeyFrame, SpatialAnswer
from embodied_r_ros.nodes.common.conversions import rgb_to_image_msg, seconds_to_stamp
from embodied_r_ros.nodes.common.qos import DESCRIPTION_QOS, EVENT_QOS, KEYFRAME_QOS
from embodied_r_ros.srv import AskSpatial

__all__ = ["QuestionItem", "ReplayClient", "SpinningClient", "camera_publisher_qos",
           "load_questions", "odometry_msg"]

# A reliable camera publisher keeps this many frames for a subscriber that lags behind.
RELIABLE_PUBLISHER_DEPTH = 200


def camera_publisher_qos(reliability: str = "best_effort") -> QoSProfile:
    """QoS of the replayed camera topic: sensor-data QoS (best effort, what camera drivers
    offer) or reliable, which a `camera.reliability: reliable` subscription needs (a
    best-effort publisher does not match it)."""
    if reliability == "best_effort":
        return qos_profile_sensor_data
    if reliability != "reliable":
        raise ValueError(f"camera reliability must be best_effort or reliable, got {reliability!r}")
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=RELIABLE_PUBLISHER_DEPTH,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def odometry_msg(pose: Any) -> Odometry:
    """nav_msgs/Odometry for a core.odometry.Pose3D."""
    msg = Odometry()
    msg.header = Header(stamp=seconds_to_stamp(pose.stamp_s), frame_id="odom")
    msg.child_frame_id = "base_link"
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = float(pose.x), float(pose.y), float(pose.z)
    q.x, q.y, q.z, q.w = float(pose.qx), float(pose.qy), float(pose.qz), float(pose.qw)
    return msg


class ReplayClient(GraphClient):
    """Publishes frames and odometry, asks questions; records what the graph publishes."""

    def __init__(self, camera_topic: str = "/camera/image_raw", *, ask_service: str = "ask",
                 keyframes_topic: str = "keyframes",
                 descriptions_topic: str = "frame_descriptions",
                 answers_topic: str = "answers", odometry_topic: str = "/odom",
                 name: str = "embodied_r_replay", camera_reliability: str = "best_effort",
                 **client_kwargs: Any) -> None:
        super().__init__(name, ask_service=ask_service, **client_kwargs)
        self.camera_pub = self.create_publisher(Image, camera_topic,
                                                camera_publisher_qos(camera_reliability))
        self.odometry_pub = self.create_publisher(Odometry, odometry_topic, 1000)
        self.keyframes: list[KeyFrame] = []
        self.descriptions: list[FrameDescription] = []
        self.answers: list[SpatialAnswer] = []
        self.prompts: list[list[dict[str, Any]]] = []
        self.create_subscription(KeyFrame, keyframes_topic, self.keyframes.append, KEYFRAME_QOS)
        self.create_subscription(FrameDescription, descriptions_topic,
                                 self.descriptions.append, DESCRIPTION_QOS)
        self.create_subscription(SpatialAnswer, answers_topic, self.answers.append, EVENT_QOS)
        self.create_subscription(String, answers_topic + "/prompt",
                                 lambda m: self.prompts.append(json.loads(m.data)), EVENT_QOS)
        self.published = 0

    # -- frames ---------------------------------------------------------------------------
    def play(self, frames: Iterable[tuple[float, Any, str]], rate: float = 1.0,
             poses: Sequence[Any] = (), max_ahead: int = 0) -> int:
        """Publish (stamp_s, rgb image, frame_id) tuples, paced by their stamps / rate
        (rate <= 0: as fast as possible), with the odometry `poses` (core.odometry.Pose3D)
        interleaved by stamp. With poses, waits (up to 10 s) for an odometry subscriber to
        be matched first, so the earliest poses are not lost to discovery. With
        `max_ahead` > 0, never more than that many frames are published that the graph
        has not yet counted (its status' frames_received, this episode): with a reliable
        camera subscription of at least that depth no frame is lost however far the node
        falls behind (the replay waits for it; after 60 s with no progress the rest is
        published without waiting). The wait compares the graph's count with `published`,
        the frames published since that count began: set it to the graph's count when the
        count starts again (a new episode, a restarted key-frame node). Returns
        `published`."""
        if poses:
            deadline = time.monotonic() + 10.0
            while self.odometry_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        wall0: float | None = None
        stamp0 = 0.0
        pending = sorted(poses, key=lambda p: p.stamp_s)
        next_pose = 0
        counted = 0  # frames the graph was last seen to have received
        for stamp_s, image, frame_id in frames:
            if wall0 is None:
                wall0, stamp0 = time.monotonic(), stamp_s
            elif rate > 0:
                delay = (stamp_s - stamp0) / rate - (time.monotonic() - wall0)
                if delay > 0:
                    time.sleep(delay)
            while next_pose < len(pending) and pending[next_pose].stamp_s <= stamp_s:
                self.odometry_pub.publish(odometry_msg(pending[next_pose]))
                next_pose += 1
            needed = self.published - max_ahead + 1
            if max_ahead > 0 and counted < needed:
                counted = self.wait_for_frames(needed, timeout_s=math.inf, settle_s=60.0)[0]
                if counted < needed:
                    self.get_logger().warning(
                        f"the graph has counted no new camera frame for 60 s ({counted} of "
                        f"{self.published} published); the rest of the replay is published "
                        "without waiting for it, and frames may be lost")
                    max_ahead = 0
            header = Header(stamp=seconds_to_stamp(stamp_s), frame_id=frame_id)
            self.camera_pub.publish(rgb_to_image_msg(image, header))
            self.published += 1
        for pose in pending[next_pose:]:
            self.odometry_pub.publish(odometry_msg(pose))
        return self.published

    def wait_for_graph(self, timeout_s: float,
                       alive_check: Callable[[], None] | None = None) -> None:
        """Wait until the graph serves questions and subscribes to the camera topic."""
        deadline = time.monotonic() + timeout_s
        super().wait_for_graph(timeout_s, alive_check)
        while self.camera_pub.get_subscription_count() == 0:
            if alive_check is not None:
                alive_check()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the graph did not subscribe to the camera topic within "
                                   f"{timeout_s:.0f}s")
            time.sleep(0.1)

    def ask_item(self, item: QuestionItem, timeout_s: float = 300.0) -> AskSpatial.Response:
        return self.ask(item.question, item.choices, timeout_s)

    def wait_for_frames(self, received: int, sampled: int | None = None,
                        timeout_s: float = 30.0, settle_s: float = 3.0) -> tuple[int, int]:
        """Wait until the graph's status counts `received` camera frames (and `sampled`
        sampled ones, when given) in the current episode, so a question asked next sees
        the whole replay. Gives up after `timeout_s`, or when the counts have not moved
        for `settle_s` (frames lost in transport never arrive). Returns the counts last
        seen."""
        deadline = time.monotonic() + timeout_s
        last: tuple[int, int] | None = None
        moved = time.monotonic()
        while True:
            status = self.status()
            counts = (int(status.frames_received), int(status.frames_sampled))
            if counts[0] >= received and (sampled is None or counts[1] >= sampled):
                return counts
            now = time.monotonic()
            if counts != last:
                last, moved = counts, now
            if now > deadline or now - moved > settle_s:
                return counts
            time.sleep(0.05)

    def wait_for_prompts(self, count: int, timeout_s: float = 5.0) -> bool:
        """Wait until `count` reasoning prompts were received (they travel on their own
        topic, so one may arrive just after its answer)."""
        deadline = time.monotonic() + timeout_s
        while len(self.prompts) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def call_trigger(self, service: str, timeout_s: float = 10.0) -> Trigger.Response:
        client: Client[Trigger.Request, Trigger.Response] = self.create_client(Trigger, service)
        if not client.wait_for_service(timeout_sec=timeout_s):
            raise TimeoutError(f"service {service} not available")
        return wait_future(client.call_async(Trigger.Request()), timeout_s, service)


class SpinningClient:
    """Context manager: rclpy init + ReplayClient spinning on a background executor."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self._session: Any = None

    def __enter__(self) -> ReplayClient:
        self._session = spinning(lambda: ReplayClient(**self.kwargs))
        return self._session.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._session.__exit__(*exc)


if __name__ == "__main__":  # a library module; the command that plays a bag is `embodied-r play`
    from embodied_r_ros.play import main

    raise SystemExit(main())
