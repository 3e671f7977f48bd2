"""Reasoning node (split graph): frame descriptions -> episode memory -> answers.

Subscribes to embodied_r_ros/FrameDescription, keeps the episode memory, and serves the
AskSpatial service and AnswerSpatial action. When a question arrives it asks the key-frame
node (`keyframes/sync`) for the current view and the last key-frame index, waits until
that frame is described, then runs the reasoning model.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence

from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from std_srvs.srv import Trigger

from embodied_r_ros.core.backends.factory import make_reasoner
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.config import model_spec_dict
from embodied_r_ros.core.errors import (
    CancelledError,
    NoKeyFramesError,
    PerceptionError,
    RequestTimeoutError,
)
from embodied_r_ros.core.memory import EpisodeMemory
from embodied_r_ros.core.pipeline import generation_settings
from embodied_r_ros.core.progress import ProcessedFrames
from embodied_r_ros.core.question_answering import (
    AnswerResult,
    QuestionAnswerer,
    QuestionGate,
)
from embodied_r_ros.core.reasoning_prompts import format_question
from embodied_r_ros.core.types import TimingInfo
from embodied_r_ros.msg import FrameDescription as FrameDescriptionMsg
from embodied_r_ros.nodes.conversions import msg_to_description
from embodied_r_ros.nodes.node_runtime import forward_python_logging, run_node
from embodied_r_ros.nodes.qos import DESCRIPTION_QOS
from embodied_r_ros.nodes.question_server import QuestionServer
from embodied_r_ros.nodes.ros_params import declare_parameters


class ReasoningNode(Node):
    def __init__(self, name: str = "reasoning") -> None:
        super().__init__(name)
        forward_python_logging(self)
        self.params = declare_parameters(self, ["reasoning", "keyframes", "qa", "topics",
                                                "services"])
        self.get_logger().info(f"loading reasoning model {self.params['reasoning.backend']}:"
                               f"{self.params['reasoning.model'] or '<unset>'}")
        reasoner = make_reasoner(ModelSpec.from_dict(model_spec_dict(self.params, "reasoning")))
        self.answerer = QuestionAnswerer(reasoner, generation_settings(self.params, "reasoning"),
                                         max_keyframes=self.params["keyframes.max_keyframes"])
        self.gate = QuestionGate(self.params["qa.default_timeout_s"])
        self.memory = EpisodeMemory("")
        self.progress = ProcessedFrames()
        self._lock = threading.Lock()
        group = ReentrantCallbackGroup()
        self.subscription = self.create_subscription(
            FrameDescriptionMsg, self.params["topics.descriptions"], self._on_description,
            DESCRIPTION_QOS, callback_group=group)
        self.sync_client = self.create_client(Trigger, "keyframes/sync", callback_group=group)
        self.questions = QuestionServer(
            self, self.ask, service_name=self.params["services.ask"],
            action_name=self.params["services.answer_action"],
            answers_topic=self.params["topics.answers"])
        self.get_logger().info("ready")

    def _on_description(self, msg: FrameDescriptionMsg) -> None:
        with self._lock:
            if msg.episode_id != self.memory.episode_id:
                self.memory.clear(msg.episode_id)
                self.progress.reset()
            if msg.mode == "failed":
                self.progress.mark_failed(msg.keyframe_index, msg.raw_text)
            else:
                self.memory.put(msg_to_description(msg))
                self.progress.mark_done(msg.keyframe_index)

    def _sync(self, deadline: float) -> tuple[str, int]:
        """Ask the key-frame node for the current episode and last key-frame index."""
        if not self.sync_client.wait_for_service(timeout_sec=max(0.0, min(5.0, deadline - time.monotonic()))):
            raise NoKeyFramesError("the key-frame node is not running (no keyframes/sync "
                                   "service); start keyframe_node or use embodied_r_node")
        done = threading.Event()
        future = self.sync_client.call_async(Trigger.Request())
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout=max(0.0, deadline - time.monotonic())):
            raise RequestTimeoutError("the key-frame node did not answer keyframes/sync in time")
        info = json.loads(future.result().message)
        return str(info["episode_id"]), int(info["last_keyframe_index"])

    def ask(self, question: str, choices: Sequence[str], *, timeout_s: float,
            on_text: Callable[[str], None] | None = None,
            on_stage: Callable[[str], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> AnswerResult:
        def handle(deadline: float, timing: TimingInfo) -> AnswerResult:
            question_text = format_question(question, list(choices) or None)
            episode_id, last = self._sync(deadline)
            if last < 0:
                raise NoKeyFramesError("no camera frame has been received in this episode; "
                                       "check that images arrive on the camera topic")
            if on_stage is not None:
                on_stage("waiting_for_perception")
            start = time.monotonic()
            # Descriptions of the new episode may still be in flight: wait for the episode
            # switch and for the last key frame together.
            while True:
                with self._lock:
                    same_episode = self.memory.episode_id == episode_id
                if same_episode and self.progress.wait_for(
                        last, min(0.2, max(0.0, deadline - time.monotonic())), should_stop):
                    break
                if should_stop is not None and should_stop():
                    raise CancelledError("cancelled while waiting for perception")
                if time.monotonic() > deadline:
                    raise RequestTimeoutError(
                        f"key frame {last} was not described in time; the perception node "
                        "may be down or slower than the key-frame rate")
            missing = self._wait_for_earlier(last, deadline, should_stop)
            timing.perception_s = time.monotonic() - start
            with self._lock:
                descriptions = self.memory.descriptions()
                failures = self.progress.failures
            if not descriptions and failures:
                raise PerceptionError("every key frame failed perception; last error: "
                                      + list(failures.values())[-1])
            if on_stage is not None:
                on_stage("reasoning")
            result = self.answerer.answer(question_text, descriptions, episode_id=episode_id,
                                          deadline=deadline, on_text=on_text,
                                          should_stop=should_stop, timing=timing)
            lost = len(failures) + len(missing)
            if lost and result.success:
                result.message += (f" ({lost} key frame(s) of this episode have no description "
                                   "and were left out)")
            return result

        return self.gate.run(timeout_s, handle, self.memory.episode_id)

    MISSING_GRACE_S = 2.0

    def _wait_for_earlier(self, last: int, deadline: float,
                          should_stop: Callable[[], bool] | None) -> list[int]:
        """After the last key frame is described, give earlier descriptions still in flight
        a short grace period; return the indices that never arrived (left out, reported)."""
        grace_end = min(deadline, time.monotonic() + self.MISSING_GRACE_S)
        missing = [i for i in range(last) if not self.progress.is_processed(i)]
        for index in missing:
            self.progress.wait_for(index, max(0.0, grace_end - time.monotonic()), should_stop)
        missing = [i for i in missing if not self.progress.is_processed(i)]
        if missing:
            self.get_logger().warning(
                f"descriptions of key frames {missing} never arrived; answering without them "
                "(check the perception node's log and the descriptions topic QoS)")
        return missing

    def close(self) -> None:
        self.answerer.reasoner.close()


def main(args: list[str] | None = None) -> int:
    return run_node(ReasoningNode, args)


if __name__ == "__main__":
    raise SystemExit(main())
