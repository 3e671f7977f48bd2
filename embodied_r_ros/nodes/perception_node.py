"""Perception lifecycle node (split graph): key frames -> VLM descriptions (streaming).

Subscribes to embodied_r_ros/KeyFrame and embodied_r_ros/Episode, describes each key
frame in order (the first of an episode alone, later ones paired with the previous key
frame) and publishes embodied_r_ros/FrameDescription, carrying the episode of the key
frame described. Failures are published too (mode "failed", the error in raw_text), so
the reasoning node never waits for a frame that will not come.

On activation the node first learns which key frames the reasoning node already holds
descriptions for (`split.described_service`, waiting at most `split.peer_timeout_s`) and
only then works through the key-frame history it receives (transient-local): after a
restart it describes only what is new, pairing the first new key frame with the last one
described before.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from typing import Any

from rclpy.callback_groups import ReentrantCallbackGroup

from embodied_r_ros.client import call_service
from embodied_r_ros.core.backends.factory import make_perceiver
from embodied_r_ros.core.errors import ConfigError, EmbodiedRError
from embodied_r_ros.core.health import HealthItem
from embodied_r_ros.core.model_settings import model_settings_line, model_spec
from embodied_r_ros.core.perception.worker import PerceptionJob, PerceptionWorker
from embodied_r_ros.core.prompts.prompt_set import load_prompt_set
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.core.types import FrameDescription
from embodied_r_ros.msg import Episode
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.msg import KeyFrame as KeyFrameMsg
from embodied_r_ros.nodes.common.conversions import description_to_msg, image_msg_to_rgb, stamp_to_seconds
from embodied_r_ros.nodes.common.managed_node import ManagedNode
from embodied_r_ros.nodes.common.node_runtime import run_node
from embodied_r_ros.nodes.common.odometry_input import OdometryInput
from embodied_r_ros.nodes.common.qos import DESCRIPTION_QOS, EPISODE_QOS, KEYFRAME_QOS
from embodied_r_ros.srv import DescribedFrames


class PerceptionNode(ManagedNode):
    PARAMETER_GROUPS = ("perception", "prompts", "topics.keyframes", "topics.descriptions",
                        "topics.episode", "split.described_service", "split.peer_timeout_s")

    def __init__(self, name: str = "perception") -> None:
        super().__init__(name)
        self.worker: PerceptionWorker | None = None
        self.odometry: OdometryInput | None = None
        self.publisher: Any = None
        self._lock = threading.Lock()
        self._syncing = False
        self._held: list[KeyFrameMsg] = []
        self._known: dict[str, set[int]] = {}
        self._current_episode = ""
        self.skipped = 0
        self.drops: Counter[str] = Counter()

    # -- lifecycle ------------------------------------------------------------------------------
    def configure_node(self, settings: Settings) -> None:
        if settings.perception.mode != "streaming":
            raise ConfigError("perception.mode 'on_query' needs the question at perception "
                              "time and is served by the embedded node (embodied_r_node); "
                              "the split graph supports 'streaming'")
        prompts = load_prompt_set(settings.prompts.file)
        self.get_logger().info(f"loading perception model {settings.perception.backend}:"
                               f"{settings.perception.model or '<unset>'}")
        self.get_logger().info(model_settings_line(settings, ("perception",), sys.argv,
                                                   self.get_name()))
        perceiver = make_perceiver(model_spec(settings, "perception"))
        self.odometry = OdometryInput(self, settings) if settings.perception.use_odometry else None
        self.publisher = self.create_lifecycle_publisher(
            FrameDescriptionMsg, settings.topics.descriptions, DESCRIPTION_QOS)
        self.worker = PerceptionWorker(
            perceiver, None, settings=settings.perception.generation(),
            motion_source=self.odometry.motion_label if self.odometry else None,
            on_description=self._publish, max_queue=settings.perception.max_queue,
            episode_id="", prompts=prompts, batch_size=settings.perception.batch_size)

    def activate_node(self) -> None:
        with self._lock:
            self._syncing = True
            self._held.clear()
            self._known.clear()
            self._current_episode = ""
        group = ReentrantCallbackGroup()
        if self.odometry is not None:
            self.entity(self.odometry.subscribe(self.tracked))
        self.described_client = self.entity(self.create_client(
            DescribedFrames, self.settings.split.described_service, callback_group=group))
        self.entity(self.create_subscription(Episode, self.settings.topics.episode,
                                             self.tracked("episode", self._on_episode),
                                             EPISODE_QOS, callback_group=group))
        self.entity(self.create_subscription(KeyFrameMsg, self.settings.topics.keyframes,
                                             self.tracked("key frame", self._on_keyframe),
                                             KEYFRAME_QOS, callback_group=group))
        threading.Thread(target=self._sync_with_reasoning, name="perception-sync",
                         daemon=True).start()

    def deactivate_node(self) -> None:
        with self._lock:
            self._syncing = False
            self._held.clear()

    def release(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker.perceiver.close()
        if self.publisher is not None:
            self.destroy_lifecycle_publisher(self.publisher)
        self.worker = self.odometry = self.publisher = None

    def health_items(self) -> list[HealthItem]:
        worker = self.worker
        if worker is None:
            return []
        item = worker.health(self.get_fully_qualified_name(), self.settings.perception.model,
                             True, self.thresholds)
        item.values.update({f"dropped: {k}": str(v) for k, v in sorted(self.drops.items())})
        item.values["skipped (described before a restart)"] = str(self.skipped)
        return [item]

    # -- start-up synchronisation ---------------------------------------------------------------
    def _sync_with_reasoning(self) -> None:
        """Learn what is described already, then release the held key frames (always,
        even when the reasoning node cannot be asked)."""
        try:
            self._ask_what_is_described()
        except Exception as exc:  # noqa: BLE001 - describing everything is the safe side
            self.guard.record("start-up sync", exc)
        finally:
            with self._lock:
                self._syncing = False
                held, self._held = self._held, []
            for msg in held:
                self.guard.wrap("key frame", self._handle)(msg)

    def _ask_what_is_described(self) -> None:
        timeout = self.settings.split.peer_timeout_s
        deadline = time.monotonic() + timeout
        episode = ""
        while time.monotonic() < deadline and not episode:
            with self._lock:
                held = list(self._held)
            episode = held[0].episode_id if held else (self.worker.episode_id if self.worker else "")
            if not episode:
                time.sleep(0.05)
        if not episode:
            return
        reply = call_service(self.described_client, DescribedFrames.Request(episode_id=episode),
                             max(0.1, deadline - time.monotonic()))
        if reply is not None and reply.known_episode:
            with self._lock:
                self._known[episode] = set(int(i) for i in reply.keyframe_indices)
            self.get_logger().info(
                f"{len(reply.keyframe_indices)} key frame(s) of episode {episode} are "
                "described already; they are not described again")

    # -- callbacks ------------------------------------------------------------------------------
    def _on_episode(self, msg: Episode) -> None:
        worker = self.worker
        self._current_episode = msg.episode_id
        if worker is not None and msg.episode_id != worker.episode_id:
            worker.reset(msg.episode_id)
            self.get_logger().info(f"episode {msg.episode_id} ({msg.reason})")

    def _on_keyframe(self, msg: KeyFrameMsg) -> None:
        with self._lock:
            if self._syncing:
                self._held.append(msg)
                return
        self._handle(msg)

    def _handle(self, msg: KeyFrameMsg) -> None:
        worker = self.worker
        if worker is None:
            return
        if self._current_episode and msg.episode_id != self._current_episode:
            self.drops["old_episode"] += 1  # history of an episode that has ended
            return
        if msg.episode_id != worker.episode_id:
            worker.reset(msg.episode_id)
        try:
            image = image_msg_to_rgb(msg.image)
        except EmbodiedRError as exc:
            self.drops["undecodable"] += 1
            self.get_logger().warning(f"key frame {msg.keyframe_index} dropped: {exc}",
                                      throttle_duration_sec=5.0)
            worker.progress.mark_failed(msg.keyframe_index, f"undecodable key frame: {exc}")
            self._publish(FrameDescription(keyframe_index=msg.keyframe_index, observation="",
                                           raw_text=f"undecodable key frame image: {exc}",
                                           mode="failed", episode_id=msg.episode_id,
                                           stamp_s=stamp_to_seconds(msg.header.stamp)))
            return
        job = PerceptionJob(msg.episode_id, msg.keyframe_index, image,
                            stamp_to_seconds(msg.header.stamp))
        with self._lock:
            known = msg.keyframe_index in self._known.get(msg.episode_id, ())
        if known:
            self.skipped += 1
            worker.skip(job)
        else:
            worker.submit(job)

    def _publish(self, description: FrameDescription) -> None:
        if self.publisher is not None:
            # The pose at the key frame goes with it: the reasoning node stores it.
            odometry = self.odometry
            pose = odometry.pose_at(description.stamp_s) if odometry is not None else None
            self.publisher.publish(description_to_msg(description, pose))


def main(args: list[str] | None = None) -> int:
    return run_node(PerceptionNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
