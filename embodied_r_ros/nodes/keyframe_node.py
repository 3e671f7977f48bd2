"""Key-frame lifecycle node (split graph): camera -> sampled frames -> key frames.

Publishes embodied_r_ros/KeyFrame on `topics.keyframes` (plain images on
`<topic>/image` while someone watches) and embodied_r_ros/Episode on `topics.episode`.
Owns the episode: serves `reset_episode` (std_srvs/Trigger) and, for the reasoning node,
`split.keyframe_state_service` (embodied_r_ros/KeyFrameState: the current episode and its
newest key frame, after making the current view a key frame when asked).

A restarted key-frame node does not start a new episode on its own: on activate it reads
the history of the descriptions topic (transient-local, kept by the perception node, at
most `split.peer_timeout_s`) and, when the graph is running an episode, continues it,
numbering its key frames after the newest one described. Only a reset (or the episode
budget) starts a new episode. Known limit: after a reset whose new episode has no
description yet, a restart continues the episode before the reset.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from rclpy.callback_groups import ReentrantCallbackGroup
from std_srvs.srv import Trigger

from embodied_r_ros.core.health import HealthItem
from embodied_r_ros.core.keyframes.episode import EpisodeChange, KeyFrameEpisode
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.core.types import Frame
from embodied_r_ros.msg import Episode
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.nodes.common.camera_input import CameraInput
from embodied_r_ros.nodes.common.conversions import episode_msg
from embodied_r_ros.nodes.common.keyframe_publisher import KeyFramePublisher
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.nodes.common.node_runtime import run_node
from embodied_r_ros.nodes.common.qos import DESCRIPTION_QOS, EPISODE_QOS
from embodied_r_ros.srv import KeyFrameState


class KeyFrameNode(ManagedNode):
    # Seconds a (re)starting node waits for the descriptions topic's history once its
    # publisher is matched (Fast DDS resends it with the writer's heartbeat).
    HISTORY_WAIT_S = 4.0
    PARAMETER_GROUPS = ("camera", "keyframes", "episode", "qa.include_current_view", "topics",
                        "services.reset", "split.keyframe_state_service",
                        "split.peer_timeout_s", "perception.max_image_side")

    def __init__(self, name: str = "keyframe_selector") -> None:
        super().__init__(name)
        self.episode: KeyFrameEpisode | None = None
        self.publisher: KeyFramePublisher | None = None
        self.episode_pub: Any = None
        self.camera: CameraInput | None = None
        self._lock = threading.Lock()

    # -- lifecycle ------------------------------------------------------------------------------
    def configure_node(self, settings: Settings) -> None:
        self.episode = KeyFrameEpisode(settings.keyframes, settings.episode,
                                       image_max_side=settings.perception.max_image_side)
        self.publisher = KeyFramePublisher(self, settings.topics.keyframes)
        self.episode_pub = self.create_lifecycle_publisher(Episode, settings.topics.episode,
                                                           EPISODE_QOS)

    def activate_node(self) -> None:
        assert self.episode is not None
        self.camera = CameraInput(self, self.settings, self._offer, self._on_frame,
                                  wrap=self.tracked)
        self.entity(self.camera.subscription)
        group = ReentrantCallbackGroup()
        self.create_tracked_service(Trigger, self.settings.services.reset, "reset service",
                                    self._on_reset, callback_group=group)
        self.create_tracked_service(KeyFrameState, self.settings.split.keyframe_state_service,
                                    "key-frame state service", self._on_state,
                                    callback_group=group)
        running = self._running_episode()
        reason = "startup"
        if running is not None:
            episode_id, next_index = running
            self.episode.continue_episode(episode_id, next_index)
            reason = "continued"
            self.get_logger().info(
                f"continuing the running episode {episode_id} from key frame "
                f"{next_index} (the graph holds its descriptions; reset it to start anew)")
        self.episode_pub.publish(episode_msg(self, self.episode.episode_id, "", reason))

    def _running_episode(self) -> tuple[str, int] | None:
        """(episode id, next key-frame index) of the episode the rest of the graph is
        running, from the descriptions topic's history; None when nobody publishes it
        or it holds nothing (see the module docstring)."""
        seen: list[tuple[str, int]] = []

        def record(msg: FrameDescriptionMsg) -> None:
            seen.append((msg.episode_id, int(msg.keyframe_index)))

        # A callback group of its own: the executor may take the history itself, and must
        # then be free to run `record` while this (activate) callback is still running.
        subscription = self.create_subscription(
            FrameDescriptionMsg, self.settings.topics.descriptions, record, DESCRIPTION_QOS,
            callback_group=ReentrantCallbackGroup())
        try:
            # Wait up to split.peer_timeout_s for a publisher; once one is matched, up to
            # HISTORY_WAIT_S for its history (a reliable writer resends it on its next
            # heartbeat, seconds later), ending once the topic has been quiet a moment.
            deadline = time.monotonic() + self.settings.split.peer_timeout_s
            quiet_until: float | None = None
            count = 0
            while True:
                now = time.monotonic()
                if (quiet_until is None and now >= deadline) or (
                        quiet_until is not None and now >= quiet_until):
                    break
                with subscription.handle:
                    taken = subscription.handle.take_message(subscription.msg_type,
                                                             subscription.raw)
                if taken is not None:
                    record(taken[0])
                if len(seen) != count:  # taken here or by the executor (`record`)
                    count = len(seen)
                    quiet_until = now + 0.3
                elif quiet_until is None and subscription.get_publisher_count() > 0:
                    quiet_until = now + self.HISTORY_WAIT_S
                if taken is None:
                    time.sleep(0.02)
        finally:
            self.destroy_subscription(subscription)
        if not seen:
            return None
        episode = seen[-1][0]
        if not episode:
            return None
        return episode, 1 + max(index for ep, index in seen if ep == episode)

    def release(self) -> None:
        if self.publisher is not None:
            self.publisher.destroy()
        if self.episode_pub is not None:
            self.destroy_lifecycle_publisher(self.episode_pub)
        self.episode = self.publisher = self.episode_pub = self.camera = None

    def health_items(self) -> list[HealthItem]:
        if self.camera is None or self.episode is None:
            return []
        return [self.camera.health(self.get_fully_qualified_name(), self.state == "active",
                                   self.episode.tracker.n_keyframes, self.thresholds)]

    # -- callbacks ------------------------------------------------------------------------------
    def _offer(self, stamp_s: float) -> bool:
        episode = self.episode
        return episode is not None and episode.tracker.offer(stamp_s)

    def _on_frame(self, image: np.ndarray, stamp_s: float, index: int, frame_id: str) -> None:
        with self._lock:
            episode, publisher = self.episode, self.publisher
            if episode is None or publisher is None:
                return
            event, change = episode.push_sampled(Frame(image, stamp_s, index, frame_id))
            if change is not None:
                self._announce(change)
            if event is not None:
                publisher.publish(event, episode.episode_id)

    def _announce(self, change: EpisodeChange) -> None:
        """Announce a new episode (lock held)."""
        self.episode_pub.publish(episode_msg(self, change.new, change.old, change.reason))
        self.get_logger().info(f"new episode {change.new} ({change.reason})")

    def _on_state(self, request: KeyFrameState.Request,
                  response: KeyFrameState.Response) -> KeyFrameState.Response:
        with self._lock:
            episode, publisher = self.episode, self.publisher
            if episode is None or publisher is None:
                response.success, response.message = False, "the key-frame node is not active"
                return response
            tracker = episode.tracker
            if request.capture_current_view and self.settings.qa.include_current_view:
                event = tracker.force_current()
                if event is not None:
                    publisher.publish(event, episode.episode_id)
            response.success = True
            response.episode_id = episode.episode_id
            response.last_keyframe_index = tracker.last_keyframe_index
            response.frames_received = tracker.n_received
            response.frames_sampled = tracker.n_sampled
            response.keyframes = tracker.n_keyframes
        return response

    def _on_reset(self, _req: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        with self._lock:
            if self.episode is None:
                response.success, response.message = False, "the key-frame node is not active"
                return response
            if self.camera is not None:
                self.camera.reset()
            change = self.episode.new_episode("reset")
            self._announce(change)
        response.success, response.message = True, f"new episode {change.new}"
        return response


def main(args: list[str] | None = None) -> int:
    return run_node(KeyFrameNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
