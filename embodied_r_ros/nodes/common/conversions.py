"""Conversions between ROS messages and core types.

Camera images: cv_bridge (the package's declared dependency) decodes them when it is
installed, as on any robot with ROS from apt; where it is missing (the PyPI-wheel ROS of
CI), and for any encoding cv_bridge refuses, the ROS-free `core.image_codec` does. Both
give RGB uint8 arrays; test/unit/core/test_image_codec.py checks they are identical wherever cv_bridge
exists. Outgoing images (key frames) are built by `core.image_codec`.
"""

from __future__ import annotations

import math
from typing import Any, Protocol, TypeVar

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from embodied_r_ros.core.image_codec import (
    check_frame_shape,
    image_from_compressed,
    image_from_raw,
    rgb_to_raw,
)
from embodied_r_ros.core.keyframes.tracker import KeyFrameEvent
from embodied_r_ros.core.memory.evidence import EvidenceItem
from embodied_r_ros.core.memory.store import StoredPose
from embodied_r_ros.core.qa.answerer import AnswerResult
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.msg import Episode, Evidence, SpatialAnswer
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg


def stamp_to_seconds(stamp: Time) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def seconds_to_stamp(seconds: float) -> Time:
    sec = int(seconds)
    return Time(sec=sec, nanosec=int(round((seconds - sec) * 1e9)) % 1_000_000_000)


try:  # cv_bridge is not on PyPI: present on apt ROS installs only
    from cv_bridge import CvBridge as _CvBridge

    _BRIDGE: _CvBridge | None = _CvBridge()
except ImportError:  # pragma: no cover - depends on the machine
    _BRIDGE = None

IMAGE_DECODER = "cv_bridge" if _BRIDGE is not None else "core.image_codec"


def _bridge_rgb(msg: Image | CompressedImage) -> np.ndarray | None:
    """RGB via cv_bridge, or None when it is missing or refuses the message."""
    if _BRIDGE is None:
        return None
    try:
        if isinstance(msg, CompressedImage):
            bgr = _BRIDGE.compressed_imgmsg_to_cv2(msg, desired_encoding="bgr8")
            rgb = bgr[:, :, ::-1]
        else:
            rgb = _BRIDGE.imgmsg_to_cv2(msg, desired_encoding="rgb8")
    except Exception:  # noqa: BLE001 - fall back to the project's codec
        return None
    if not isinstance(rgb, np.ndarray) or rgb.ndim != 3 or rgb.shape[2] != 3:
        return None
    return np.ascontiguousarray(rgb, dtype=np.uint8)


def image_msg_to_rgb(msg: Image | CompressedImage, *, use_bridge: bool = True) -> np.ndarray:
    """Decode a raw or compressed ROS image into an RGB uint8 array (cv_bridge when
    installed, else `core.image_codec`; InvalidRequestError when undecodable)."""
    if use_bridge:
        rgb = _bridge_rgb(msg)
        if rgb is not None:
            check_frame_shape(rgb.shape[1], rgb.shape[0])
            return rgb
    if isinstance(msg, CompressedImage):
        return image_from_compressed(bytes(msg.data), msg.format)
    return image_from_raw(bytes(msg.data), msg.width, msg.height, msg.encoding, msg.step,
                          msg.is_bigendian)


def rgb_to_image_msg(image: np.ndarray, header: Header) -> Image:
    data, step = rgb_to_raw(image, "rgb8")
    msg = Image()
    msg.header = header
    msg.height, msg.width = int(image.shape[0]), int(image.shape[1])
    msg.encoding = "rgb8"
    msg.step = step
    msg.data = data
    return msg


def keyframe_event_to_msg(event: KeyFrameEvent, episode_id: str) -> KeyFrameMsg:
    header = Header(stamp=seconds_to_stamp(event.frame.stamp_s), frame_id=event.frame.frame_id)
    return KeyFrameMsg(header=header, episode_id=episode_id,
                       keyframe_index=event.keyframe_index, sampled_index=event.sampled_index,
                       source_index=max(0, event.frame.index),
                       image=rgb_to_image_msg(event.frame.image, header),
                       overlap=float(event.overlap), reason=event.reason)


def description_to_msg(desc: FrameDescription,
                       pose: StoredPose | None = None) -> FrameDescriptionMsg:
    """The message of one description; its episode is the key frame's own."""
    msg = FrameDescriptionMsg(
        header=Header(stamp=seconds_to_stamp(desc.stamp_s)), episode_id=desc.episode_id,
        keyframe_index=desc.keyframe_index, action=desc.action or "",
        action_source=desc.action_source, observation=desc.observation,
        raw_text=desc.raw_text, mode=desc.mode, latency_s=float(desc.latency_s),
        has_pose=pose is not None)
    if pose is not None:
        msg.pose = pose_to_msg(pose, desc.stamp_s)
    return msg


def msg_to_description(msg: FrameDescriptionMsg) -> FrameDescription:
    return FrameDescription(keyframe_index=msg.keyframe_index, observation=msg.observation,
                            action=msg.action or None, raw_text=msg.raw_text,
                            action_source=msg.action_source, mode=msg.mode,
                            latency_s=msg.latency_s, stamp_s=stamp_to_seconds(msg.header.stamp),
                            episode_id=msg.episode_id)


def episode_msg(node: Any, episode_id: str, previous: str, reason: str) -> Episode:
    return Episode(header=Header(stamp=node.get_clock().now().to_msg()), episode_id=episode_id,
                   previous_episode_id=previous, reason=reason)


class AnswerFields(Protocol):
    """The fields an AskSpatial response, an AnswerSpatial result and a SpatialAnswer share
    (the generated message classes carry no type information; this names what is set)."""

    success: bool
    error_code: int
    message: str
    answer: str
    answer_text: str
    reasoning: str
    raw_output: str
    keyframes_used: int
    episode_id: str
    perception_s: float
    reasoning_s: float
    total_s: float
    self_check: str
    self_check_letter: str
    evidence: list[Evidence]
    has_goal_pose: bool
    goal_pose: PoseStamped


_Answer = TypeVar("_Answer", bound=AnswerFields)


def fill_result(target: _Answer, result: AnswerResult) -> _Answer:
    """Copy an AnswerResult into an AskSpatial response or AnswerSpatial result."""
    target.success = bool(result.success)
    target.error_code = int(result.error_code)
    target.message = result.message
    target.answer = result.answer
    target.answer_text = result.answer_text
    target.reasoning = result.reasoning
    target.raw_output = result.raw_output
    target.keyframes_used = int(result.keyframes_used)
    target.episode_id = result.episode_id
    target.perception_s = float(result.timing.perception_s)
    target.reasoning_s = float(result.timing.reasoning_s)
    target.total_s = float(result.timing.total_s)
    target.self_check = result.self_check
    target.self_check_letter = result.self_check_letter
    target.evidence = [evidence_to_msg(e) for e in result.evidence]
    goal = result.goal
    target.has_goal_pose = goal is not None and goal.pose is not None
    if goal is not None and goal.pose is not None:
        target.goal_pose = pose_to_msg(goal.pose, goal.stamp_s)
    return target


def pose_to_msg(pose: StoredPose, stamp_s: float) -> PoseStamped:
    """A stored pose (x, y, z, yaw) as a PoseStamped in its odometry frame."""
    msg = PoseStamped(header=Header(stamp=seconds_to_stamp(stamp_s), frame_id=pose.frame_id))
    msg.pose.position.x, msg.pose.position.y, msg.pose.position.z = pose.x, pose.y, pose.z
    msg.pose.orientation.z = math.sin(pose.yaw / 2.0)
    msg.pose.orientation.w = math.cos(pose.yaw / 2.0)
    return msg


def msg_to_pose(msg: PoseStamped) -> StoredPose:
    q = msg.pose.orientation
    yaw = math.atan2(2.0 * (q.w * q.z + q.x * q.y), 1.0 - 2.0 * (q.y * q.y + q.z * q.z))
    p = msg.pose.position
    return StoredPose(p.x, p.y, p.z, yaw, msg.header.frame_id)


def evidence_to_msg(item: EvidenceItem) -> Evidence:
    msg = Evidence(episode_id=item.episode_id, keyframe_index=int(item.keyframe_index),
                   stamp=seconds_to_stamp(item.stamp_s), position=int(item.position),
                   named=bool(item.named), relevance=float(item.relevance),
                   observation=item.observation, has_pose=item.pose is not None)
    if item.pose is not None:
        msg.pose = pose_to_msg(item.pose, item.stamp_s)
    return msg


def answer_record(result: AnswerResult, question: str, choices: list[str],
                  stamp: Time) -> SpatialAnswer:
    msg = SpatialAnswer(header=Header(stamp=stamp), question=question, choices=list(choices))
    fill_result(msg, result)
    return msg
