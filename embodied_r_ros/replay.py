"""Replay a rosbag onto the camera topic of a running graph and ask questions over ROS.

The client side of the demo, of `embodied-r replay-eval` and of the end-to-end tests:
a small rclpy node that publishes the bag's frames (with their recorded stamps, paced by
`rate`), listens to key frames, descriptions, answers and reasoning prompts, and calls
the AskSpatial service.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rclpy
from rclpy.qos import qos_profile_sensor_data
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Image
from std_msgs.msg import Header, String
from std_srvs.srv import Trigger

from embodied_r_ros.client import GraphClient, spinning, wait_future
from embodied_r_ros.msg import FrameDescription, KeyFrame, SpatialAnswer
from embodied_r_ros.nodes.conversions import rgb_to_image_msg, seconds_to_stamp
from embodied_r_ros.nodes.qos import DESCRIPTION_QOS, EVENT_QOS, KEYFRAME_QOS
from embodied_r_ros.srv import AskSpatial


@dataclass
class QuestionItem:
    """One question to ask: text, options (may be empty), ground truth if known."""

    question: str
    choices: list[str]
    answer: str = ""
    category: str = ""
    question_id: str = ""


def load_questions(path: Path) -> list[QuestionItem]:
    """Read a JSON list of question records: either {question_text, choices, answer} or the
    datasets' own format {question (with a Choices: block), answer, question_category}."""
    records = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(records, dict):
        records = records.get("questions", [])
    items = []
    for i, rec in enumerate(records):
        text = rec.get("question_text") or rec.get("question")
        if not text:
            raise ValueError(f"{path}: record {i} has no question text")
        items.append(QuestionItem(
            question=text,
            choices=list(rec.get("choices", [])) if rec.get("question_text") else [],
            answer=str(rec.get("answer", "")),
            category=str(rec.get("question_category", rec.get("category", ""))),
            question_id=str(rec.get("Question_id", rec.get("id", i)))))
    return items


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
                 name: str = "embodied_r_replay", **client_kwargs: Any) -> None:
        super().__init__(name, ask_service=ask_service, **client_kwargs)
        self.camera_pub = self.create_publisher(Image, camera_topic, qos_profile_sensor_data)
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
             poses: Sequence[Any] = ()) -> int:
        """Publish (stamp_s, rgb image, frame_id) tuples, paced by their stamps / rate
        (rate <= 0: as fast as possible), with the odometry `poses` (core.odometry.Pose3D)
        interleaved by stamp. With poses, waits (up to 10 s) for an odometry subscriber to
        be matched first, so the earliest poses are not lost to discovery. Returns the
        number of frames published."""
        if poses:
            deadline = time.monotonic() + 10.0
            while self.odometry_pub.get_subscription_count() == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        wall0: float | None = None
        stamp0 = 0.0
        pending = sorted(poses, key=lambda p: p.stamp_s)
        next_pose = 0
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
            header = Header(stamp=seconds_to_stamp(stamp_s), frame_id=frame_id)
            self.camera_pub.publish(rgb_to_image_msg(image, header))
            self.published += 1
        for pose in pending[next_pose:]:
            self.odometry_pub.publish(odometry_msg(pose))
        return self.published

    def wait_for_graph(self, timeout_s: float, alive_check=None) -> None:  # type: ignore[no-untyped-def]
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

    def call_trigger(self, service: str, timeout_s: float = 10.0) -> Trigger.Response:
        client = self.create_client(Trigger, service)
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


@dataclass
class QuestionOutcome:
    item: QuestionItem
    response: Any  # AskSpatial.Response
    correct: bool | None  # None when the question has no ground truth or no choices


@dataclass
class ReplaySummary:
    outcomes: list[QuestionOutcome] = field(default_factory=list)

    def accuracy_by_category(self) -> dict[str, float]:
        groups: dict[str, list[bool]] = defaultdict(list)
        for o in self.outcomes:
            if o.correct is not None:
                groups[o.item.category or "all"].append(o.correct)
        table = {k: 100.0 * sum(v) / len(v) for k, v in sorted(groups.items())}
        scored = [o.correct for o in self.outcomes if o.correct is not None]
        if scored:
            table["average"] = 100.0 * sum(scored) / len(scored)
        return table

    def latency(self) -> dict[str, float]:
        def med(values: Sequence[float]) -> float:
            return float(statistics.median(values)) if values else 0.0

        rs = [o.response for o in self.outcomes]
        return {"total_s_median": med([r.total_s for r in rs]),
                "perception_s_median": med([r.perception_s for r in rs]),
                "reasoning_s_median": med([r.reasoning_s for r in rs]),
                "total_s_max": max((r.total_s for r in rs), default=0.0)}

    def to_json(self) -> dict[str, Any]:
        return {
            "accuracy": self.accuracy_by_category(),
            "latency": self.latency(),
            "questions": [{
                "id": o.item.question_id, "category": o.item.category,
                "question": o.item.question, "choices": o.item.choices,
                "ground_truth": o.item.answer, "answer": o.response.answer,
                "correct": o.correct, "success": o.response.success,
                "error_code": o.response.error_code, "message": o.response.message,
                "reasoning": o.response.reasoning, "keyframes_used": o.response.keyframes_used,
                "perception_s": o.response.perception_s, "reasoning_s": o.response.reasoning_s,
                "total_s": o.response.total_s} for o in self.outcomes],
        }


def ask_all(client: ReplayClient, items: Sequence[QuestionItem],
            timeout_s: float = 300.0) -> ReplaySummary:
    summary = ReplaySummary()
    for item in items:
        response = client.ask_item(item, timeout_s)
        has_letters = bool(item.choices) or "choices:" in item.question.lower()
        correct = (response.success and response.answer.strip().upper() == item.answer.strip().upper()
                   ) if item.answer and has_letters else None
        summary.outcomes.append(QuestionOutcome(item, response, correct))
    return summary

