"""Conversions between ROS messages and core types. Pixel work is done by the ROS-free
`core.image_codec` (so the same conversions run in tests, bag replay and on robots
without cv_bridge)."""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from embodied_r_ros.core.image_codec import (
    image_from_compressed,
    image_from_raw,
    rgb_to_raw,
)
from embodied_r_ros.core.keyframe_tracker import KeyFrameEvent
from embodied_r_ros.core.question_answering import AnswerResult
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.msg import SpatialAnswer


def stamp_to_seconds(stamp: Time) -> float:
    return float(stamp.sec) + float(stamp.nanosec) * 1e-9


def seconds_to_stamp(seconds: float) -> Time:
    sec = int(seconds)
    return Time(sec=sec, nanosec=int(round((seconds - sec) * 1e9)) % 1_000_000_000)


def image_msg_to_rgb(msg: Image | CompressedImage) -> np.ndarray:
    """Decode a raw or compressed ROS image into an RGB uint8 array."""
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


def description_to_msg(desc: FrameDescription, episode_id: str) -> FrameDescriptionMsg:
    return FrameDescriptionMsg(
        header=Header(stamp=seconds_to_stamp(desc.stamp_s)), episode_id=episode_id,
        keyframe_index=desc.keyframe_index, action=desc.action or "",
        action_source=desc.action_source, observation=desc.observation,
        raw_text=desc.raw_text, mode=desc.mode, latency_s=float(desc.latency_s))


def msg_to_description(msg: FrameDescriptionMsg) -> FrameDescription:
    return FrameDescription(keyframe_index=msg.keyframe_index, observation=msg.observation,
                            action=msg.action or None, raw_text=msg.raw_text,
                            action_source=msg.action_source, mode=msg.mode,
                            latency_s=msg.latency_s, stamp_s=stamp_to_seconds(msg.header.stamp))


def fill_result(target: object, result: AnswerResult) -> object:
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
    return target


def answer_record(result: AnswerResult, question: str, choices: list[str],
                  stamp: Time) -> SpatialAnswer:
    msg = SpatialAnswer(header=Header(stamp=stamp), question=question, choices=list(choices))
    fill_result(msg, result)
    return msg
