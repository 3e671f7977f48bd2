"""Fast replay: the robot's core pipeline in this process, fed a bag as fast as the models
allow, no DDS.

The same component the embedded node runs (`core.pipeline.EmbodiedRPipeline`) gets the
bag's frames in stream-time order with their stamps, exactly as the node's camera
callback hands them on (the stamp decides sampling first; only sampled frames are decoded;
a frame that cannot be decoded is dropped after the sampler took it, as on the robot),
then the bag's questions, asked one by one after the last frame, as a client asks the
live graph after a replay. What differs from the live graph is only what DDS adds:
message transport, QoS and wall-clock pacing. So with greedy decoding both modes give
the same key frames, descriptions, reasoning prompts and answers (tested), and fast mode
is the one to run over a benchmark; live mode is for timing as on the robot.

Back-pressure: the perception worker's queue is bounded (`perception.max_queue`, oldest
dropped when full, as on a robot whose VLM falls behind). Replay waits while the queue is
half full, so no key frame is dropped for speed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from embodied_r_ros.core.errors import EmbodiedRError, ErrorCode, InvalidRequestError
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.evaluation.episode import (
    DescriptionRecord,
    EpisodeRecord,
    KeyFrameRecord,
)
from embodied_r_ros.evaluation.questions import QuestionItem
from embodied_r_ros.evaluation.results import QuestionResult
from embodied_r_ros.sample_data.bag_io import (
    BagReadReport,
    iter_bag_frames,
    read_odometry,
)

LOG = logging.getLogger("embodied_r_ros.evaluation.fast")

ResultCallback = Callable[[QuestionResult], None]


class FastReplay:
    """One pipeline (models loaded once) for any number of bags; one episode per bag."""

    mode = "fast"

    def __init__(self, settings: Settings, perceiver: Any = None, reasoner: Any = None,
                 ) -> None:
        from embodied_r_ros.core.perception.odometry import PoseHistory, measured_action
        from embodied_r_ros.core.pipeline import EmbodiedRPipeline, load_models

        self.settings = settings
        if perceiver is None or reasoner is None:
            perceiver, reasoner = load_models(settings)
        self._poses = PoseHistory(max_age_s=1e12)
        motion = None
        if self.settings.perception.use_odometry:
            def motion(previous_s: float, stamp_s: float) -> str | None:
                return measured_action(self._poses, previous_s, stamp_s)
        self._episode: EpisodeRecord | None = None
        self.pipeline = EmbodiedRPipeline(settings, perceiver, reasoner, motion_source=motion,
                                          on_keyframe=self._on_keyframe,
                                          on_description=self._on_description)

    # -- callbacks (perception runs on the pipeline's worker thread) --------------------------
    def _on_keyframe(self, event: Any, episode_id: str) -> None:
        ep = self._episode
        if ep is not None and episode_id == ep.episode_id:
            ep.keyframes.append(KeyFrameRecord(event.keyframe_index, event.sampled_index,
                                               event.frame.index, float(event.frame.stamp_s),
                                               event.reason, float(event.overlap)))

    def _on_description(self, d: Any) -> None:
        ep = self._episode
        if ep is not None and d.episode_id == ep.episode_id:
            ep.descriptions.append(DescriptionRecord(d.keyframe_index, d.action or "",
                                                     d.action_source, d.observation,
                                                     d.raw_text, float(d.latency_s)))

    # -- one bag --------------------------------------------------------------------------------
    def run_bag(self, bag_key: str, bag_path: Any, items: Sequence[QuestionItem], *,
                topic: str | None = None, stamps: str = "header", reorder_window: int = 16,
                timeout_s: float = 0.0, on_result: ResultCallback | None = None
                ) -> EpisodeRecord:
        """Replay one bag as a new episode, then ask `items`; each result goes to
        `on_result` as soon as it exists. Raises BagError when the bag cannot be read."""
        pipeline = self.pipeline
        episode_id = pipeline.reset(reason="replay")
        record = EpisodeRecord(bag=bag_key, mode=self.mode, episode_id=episode_id)
        self._episode = record
        report = BagReadReport(str(bag_path))
        self._poses.clear()
        if self.settings.perception.use_odometry:
            try:
                for pose in read_odometry(bag_path, self.settings.perception.odometry_topic):
                    self._poses.add(pose)
            except InvalidRequestError as exc:
                LOG.warning("%s: no odometry, the VLM's actions are kept (%s)", bag_path, exc)
        half_queue = max(1, self.settings.perception.max_queue // 2)
        started = time.monotonic()
        try:
            for frame in iter_bag_frames(bag_path, topic, stamps=stamps,
                                         reorder_window=reorder_window, report=report):
                record.frames_published += 1
                if not pipeline.offer_frame(frame.stamp_s):
                    continue
                try:
                    image = frame.image()
                except EmbodiedRError as exc:
                    record.undecodable += 1
                    LOG.warning("%s: frame %d cannot be decoded, dropped (%s)", bag_path,
                                frame.index, exc)
                    continue
                report.saw_image(frame.index, image)
                pipeline.push_sampled(image, frame.stamp_s, frame.index, frame.frame_id)
                while pipeline.worker.pending() >= half_queue:
                    pipeline.worker.check_alive()
                    time.sleep(0.005)
        finally:
            record.read = report.to_json()
        record.frames_received = pipeline.status().frames_received
        for item in items:
            result = pipeline.ask(item.question, item.choices, timeout_s=timeout_s)
            out = QuestionResult.from_answer(item, bag_key, self.mode, result)
            note_empty_bag(out, record, bag_path)
            record.questions_asked += 1
            if on_result is not None:
                on_result(out)
        # Descriptions still being made (none are needed by an answered question) finish
        # before the episode record is written.
        deadline = time.monotonic() + 60.0
        while pipeline.worker.pending() and time.monotonic() < deadline:
            time.sleep(0.01)
        record.replay_s = time.monotonic() - started
        record.keyframes.sort(key=lambda k: k.index)
        record.descriptions.sort(key=lambda d: d.index)
        self._episode = None
        return record

    def close(self) -> None:
        self.pipeline.close()


def note_empty_bag(result: QuestionResult, record: EpisodeRecord, bag_path: Any) -> None:
    """Say in a NO_KEYFRAMES failure that the bag itself had no camera frame."""
    if result.error_code == ErrorCode.NO_KEYFRAMES and record.frames_published == 0:
        topic = record.read.get("topic", "")
        result.message = (f"{bag_path}: the bag has no camera frames on {topic} (a zero-length "
                          f"bag), so there is nothing to answer from ({result.message})")
