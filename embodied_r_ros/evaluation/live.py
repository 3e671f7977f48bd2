"""Live replay: the node graph in its own processes, the bag published over DDS.

The graph is started from the installed executables with the parameter file and
overrides (`graph_processes.GraphProcesses`, what `ros2 launch` starts); a client node
(`replay.ReplayClient`) publishes the bag's frames on the camera topic with their stamps,
paced by `rate` over stream time, waits until the graph has counted every frame (and the
sampled ones, predicted with the same `FrameRateSampler` the node uses), then asks each
question through the AskSpatial service and records the reasoning prompt published on
``<answers topic>/prompt``. Between bags the episode is reset through the reset service.

This is the mode for timing as on the robot. Frames can be lost in transport: with the
default best-effort camera QoS, or a replay rate faster than the node takes frames. For
a lossless replay (the same answers as the fast mode) set `camera.reliability:
reliable`: the client then publishes reliably too, and never runs more than
`camera.depth` frames ahead of what the graph has received (it waits for a node that
falls behind instead of overflowing its queue). The episode record says how many frames
the graph received.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.errors import EmbodiedRError, ErrorCode
from embodied_r_ros.core.keyframes.rules import FrameRateSampler
from embodied_r_ros.core.settings import Settings
from embodied_r_ros.evaluation.episode import (
    DescriptionRecord,
    EpisodeRecord,
    KeyFrameRecord,
)
from embodied_r_ros.evaluation.fast import note_empty_bag
from embodied_r_ros.evaluation.questions import QuestionItem
from embodied_r_ros.evaluation.results import QuestionResult
from embodied_r_ros.sample_data.bag_io import (
    BagReadReport,
    iter_bag_frames,
    read_odometry,
)

LOG = logging.getLogger("embodied_r_ros.evaluation.live")

ResultCallback = Callable[[QuestionResult], None]


def _stamp_s(stamp: Any) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


class LiveReplay:
    """Context manager: the graph and a spinning client; `run_bag` per bag."""

    mode = "live"

    def __init__(self, settings: Settings, params_file: str | Path,
                 overrides: Mapping[str, Any], *, graph: str = "embedded", rate: float = 4.0,
                 startup_timeout_s: float = 180.0, echo: Any = sys.stdout) -> None:
        if settings.camera.compressed:
            raise EmbodiedRError("live replay publishes raw sensor_msgs/Image frames; set "
                                 "camera.compressed false (compressed bags are decoded first)",
                                 code=ErrorCode.INVALID_REQUEST)
        self.settings = settings
        self.params_file = params_file
        self.overrides = dict(overrides)
        self.graph_name = graph
        self.rate = rate
        self.startup_timeout_s = startup_timeout_s
        self.echo = echo
        self._stack: list[Any] = []
        self.graph: Any = None
        self.client: Any = None
        self._bags = 0

    def __enter__(self) -> LiveReplay:
        from embodied_r_ros.graph_processes import GraphProcesses
        from embodied_r_ros.replay import SpinningClient

        s = self.settings
        graph = GraphProcesses(self.graph_name, self.params_file, self.overrides, echo=self.echo)
        self.graph = graph.__enter__()
        self._stack.append(graph)
        try:
            session = SpinningClient(camera_topic=s.camera.topic, ask_service=s.services.ask,
                                     reset_service=s.services.reset,
                                     status_service=s.services.status,
                                     keyframes_topic=s.topics.keyframes,
                                     descriptions_topic=s.topics.descriptions,
                                     answers_topic=s.topics.answers,
                                     odometry_topic=s.perception.odometry_topic,
                                     camera_reliability=s.camera.reliability)
            self.client = session.__enter__()
            self._stack.append(session)
            started = time.monotonic()
            self.client.wait_for_graph(self.startup_timeout_s, alive_check=self.graph.check_alive)
            LOG.info("graph up in %.1fs", time.monotonic() - started)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        while self._stack:
            self._stack.pop().__exit__(*exc)

    def run_bag(self, bag_key: str, bag_path: Any, items: Sequence[QuestionItem], *,
                topic: str | None = None, stamps: str = "header", reorder_window: int = 16,
                timeout_s: float = 0.0, on_result: ResultCallback | None = None
                ) -> EpisodeRecord:
        client, s = self.client, self.settings
        reply = client.reset()
        episode_id = reply.message.rsplit(" ", 1)[-1] if reply.success else ""
        record = EpisodeRecord(bag=bag_key, mode=self.mode, episode_id=episode_id)
        report = BagReadReport(str(bag_path))
        sampler = FrameRateSampler(s.keyframes.sample_fps)
        expected_sampled = 0
        bag_index: dict[int, int] = {}  # header stamp (us) -> the frame's index in the bag

        def frames() -> Iterator[tuple[float, np.ndarray, str]]:
            nonlocal expected_sampled
            for frame in iter_bag_frames(bag_path, topic, stamps=stamps,
                                         reorder_window=reorder_window, report=report):
                try:
                    image = frame.image()
                except EmbodiedRError as exc:
                    record.undecodable += 1
                    LOG.warning("%s: frame %d cannot be decoded, not published (%s)", bag_path,
                                frame.index, exc)
                    continue
                report.saw_image(frame.index, image)
                bag_index.setdefault(round(frame.stamp_s * 1e6), frame.index)
                expected_sampled += bool(sampler.accept(frame.stamp_s))
                yield frame.stamp_s, image, frame.frame_id

        poses = []
        if s.perception.use_odometry:
            try:
                poses = read_odometry(bag_path, s.perception.odometry_topic)
            except EmbodiedRError as exc:
                LOG.warning("%s: no odometry, the VLM's actions are kept (%s)", bag_path, exc)
        started = time.monotonic()
        client.published = 0
        first_prompt = len(client.prompts)
        try:
            # A reliable camera subscription asks for a lossless replay: never run further
            # ahead of the graph than its queue holds.
            lossless = s.camera.reliability == "reliable"
            record.frames_published = client.play(
                frames(), rate=self.rate, poses=poses,
                max_ahead=int(s.camera.depth) if lossless else 0)
        finally:
            record.read = report.to_json()
        received, sampled = client.wait_for_frames(record.frames_published, expected_sampled,
                                                   timeout_s=30.0)
        record.frames_received = received
        if received < record.frames_published or sampled < expected_sampled:
            lost = (f"the graph received {received} of {record.frames_published} frames "
                    f"({sampled} of {expected_sampled} sampled): frames were lost in "
                    "transport, so key frames can differ from --mode fast; replay with "
                    "--camera-qos reliable (camera.reliability reliable) for a lossless run")
            LOG.warning("%s: %s", bag_path, lost)
            record.read.setdefault("warnings", []).append(f"{bag_path}: {lost}")
        self.graph.check_alive()
        prompts_seen = first_prompt
        for item in items:
            response = client.ask_item(item, timeout_s)
            prompt: list[dict[str, Any]] = []
            if response.raw_output or response.reasoning_s > 0:
                if client.wait_for_prompts(prompts_seen + 1):
                    prompt = client.prompts[prompts_seen]
                    prompts_seen += 1
            out = QuestionResult.make(
                item, bag_key, self.mode, success=response.success,
                error_code=response.error_code, answer=response.answer, prompt=prompt,
                message=response.message, answer_text=response.answer_text,
                reasoning=response.reasoning, raw_output=response.raw_output,
                keyframes_used=response.keyframes_used, episode_id=response.episode_id,
                perception_s=float(response.perception_s),
                reasoning_s=float(response.reasoning_s), total_s=float(response.total_s))
            note_empty_bag(out, record, bag_path)
            record.questions_asked += 1
            if on_result is not None:
                on_result(out)
        self._collect(record, bag_index)
        record.replay_s = time.monotonic() - started
        self._bags += 1
        return record

    def _collect(self, record: EpisodeRecord, bag_index: Mapping[int, int] | None = None,
                 settle_s: float = 10.0) -> None:
        """Key frames and descriptions of the episode, once every key frame is described
        (or after `settle_s`). A key frame's `source_index` is its frame's index in the bag
        (found by its header stamp), as in the fast mode, also when frames were lost on the
        way (the node itself only counts the frames it received)."""
        bag_index = bag_index or {}
        client = self.client
        deadline = time.monotonic() + settle_s
        while True:
            kfs = [k for k in list(client.keyframes) if k.episode_id == record.episode_id]
            descs = [d for d in list(client.descriptions) if d.episode_id == record.episode_id]
            done = {d.keyframe_index for d in descs}
            if all(k.keyframe_index in done for k in kfs) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        record.keyframes = sorted((KeyFrameRecord(int(k.keyframe_index), int(k.sampled_index),
                                                  int(bag_index.get(
                                                      round(_stamp_s(k.header.stamp) * 1e6),
                                                      k.source_index)),
                                                  _stamp_s(k.header.stamp),
                                                  k.reason, float(k.overlap)) for k in kfs),
                                  key=lambda k: k.index)
        record.descriptions = sorted((DescriptionRecord(int(d.keyframe_index), d.action,
                                                        d.action_source, d.observation,
                                                        d.raw_text, float(d.latency_s))
                                      for d in descs), key=lambda d: d.index)
