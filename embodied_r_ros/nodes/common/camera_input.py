"""Camera subscription shared by the embedded node and the key-frame node.

Per frame: header stamp -> stream time (`core.stamps.StampClock`, arrival-time fallback
for zero or frozen stamps) -> sampler decision from the stamp alone -> decode only the
sampled frames -> hand on. Frames are processed one at a time, in arrival order (one
mutually exclusive callback group). Every frame that is not handed on is counted by
cause in `drops`; bad input is logged at most once per 5 s per cause and never raises.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage, Image

from embodied_r_ros.core.errors import EmbodiedRError
from embodied_r_ros.core.health import EventWindow, HealthItem, camera_item
from embodied_r_ros.core.keyframes.stamps import StampClock
from embodied_r_ros.core.settings import DiagnosticsSettings, Settings
from embodied_r_ros.nodes.common.conversions import image_msg_to_rgb, stamp_to_seconds

# (rgb image, stream time seconds, index of the frame on the topic, frame_id)
FrameHandler = Callable[[np.ndarray, float, int, str], None]
# stream time -> whether the frame is sampled (decoded and handed on)
SampleGate = Callable[[float], bool]

DROP_CAUSES = ("bad_stamp", "undecodable", "rejected")


def camera_qos(settings: Settings) -> QoSProfile:
    reliability = (ReliabilityPolicy.RELIABLE if settings.camera.reliability == "reliable"
                   else ReliabilityPolicy.BEST_EFFORT)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=settings.camera.depth,
                      reliability=reliability, durability=DurabilityPolicy.VOLATILE)


class CameraInput:
    """See the module docstring. `subscription` is created at once; the owner destroys
    it on deactivate."""

    LOG_PERIOD_S = 5.0

    def __init__(self, node: Node, settings: Settings, sample: SampleGate,
                 handler: FrameHandler,
                 wrap: Callable[[str, Callable[..., Any]], Callable[..., Any]] | None = None
                 ) -> None:
        self.node = node
        self.sample = sample
        self.handler = handler
        self.received = 0
        self.sampled = 0
        self.skipped = 0
        window = settings.diagnostics.window_s
        self.received_window = EventWindow(window)
        self.sampled_window = EventWindow(window)
        self.dropped_window = EventWindow(window)
        self.drops: Counter[str] = Counter()
        self.clock = StampClock()
        self._last_log: dict[str, float] = {}
        msg_type = CompressedImage if settings.camera.compressed else Image
        self.topic = settings.camera.topic
        self.subscription = node.create_subscription(
            msg_type, self.topic, wrap("camera", self._on_image) if wrap else self._on_image,
            camera_qos(settings),
            callback_group=MutuallyExclusiveCallbackGroup())
        node.get_logger().info(
            f"listening for {msg_type.__name__} frames on {node.resolve_topic_name(self.topic)} "
            f"({settings.camera.reliability}, depth {settings.camera.depth})")

    def reset(self) -> None:
        self.clock.reset()

    def _drop(self, cause: str) -> None:
        self.drops[cause] += 1
        self.dropped_window.add()

    def health(self, node: str, active: bool, keyframes: int,
               thresholds: DiagnosticsSettings) -> HealthItem:
        return camera_item(node, active=active, received=self.received_window,
                           sampled=self.sampled_window, keyframes=keyframes, drops=self.drops,
                           dropped_recent=self.dropped_window.count(), thresholds=thresholds)

    def _warn(self, cause: str, text: str) -> None:
        now = time.monotonic()
        if now - self._last_log.get(cause, -1e9) >= self.LOG_PERIOD_S:
            self._last_log[cause] = now
            self.node.get_logger().warning(f"{text} ({self.drops[cause]} dropped so far for "
                                           f"this cause)")

    def _on_image(self, msg: Image | CompressedImage) -> None:
        index = self.received
        self.received += 1
        self.received_window.add()
        try:
            stream_s = self.clock.stream_time(stamp_to_seconds(msg.header.stamp))
            if self.clock.fallback_started:
                self.clock.fallback_started = False
                self.node.get_logger().warning(
                    f"camera stamps on {self.topic} are unusable ({self.clock.last_reason}); "
                    "using arrival time instead until they advance again. Fix the camera "
                    "driver's header stamps for exact 1 Hz sampling")
            if not self.sample(stream_s):
                self.skipped += 1  # normal: between two samples
                return
        except EmbodiedRError as exc:
            self._drop("bad_stamp")
            self._warn("bad_stamp", f"dropped frame {index} from {self.topic}: {exc}")
            return
        try:
            image = image_msg_to_rgb(msg)
        except EmbodiedRError as exc:
            self._drop("undecodable")
            self._warn("undecodable", f"dropped frame {index} from {self.topic}: {exc}")
            return
        self.sampled += 1
        self.sampled_window.add()
        try:
            self.handler(image, stream_s, index, msg.header.frame_id)
        except EmbodiedRError as exc:
            self._drop("rejected")
            self._warn("rejected", f"frame {index} from {self.topic} was rejected: {exc}")
