"""The embedded (all-in-one) node over real DDS: the AnswerSpatial action with feedback
and cancellation, episode status and reset. Tiny local models; answers are noise."""

from __future__ import annotations

import json
import threading
import time

import pytest
from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient

from embodied_r_ros.action import AnswerSpatial
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.replay import QuestionItem, SpinningClient
from embodied_r_ros.sample_data.bag_io import read_image_bag, read_odometry

from helpers.env import REPO_ROOT, fresh_ros_domain

REPO = REPO_ROOT
PARAMS = REPO / "config" / "embodied_r.yaml"


def wait(future, timeout_s: float):  # type: ignore[no-untyped-def]
    done = threading.Event()
    future.add_done_callback(lambda _f: done.set())
    assert done.wait(timeout_s), "timed out waiting for a ROS future"
    return future.result()


@pytest.fixture(scope="module")
def embedded(tiny_models, sample_dir):  # type: ignore[no-untyped-def]
    overrides = {"perception.model": str(tiny_models.vlm), "reasoning.model": str(tiny_models.lm),
                 "perception.device": "cpu", "reasoning.device": "cpu",
                 "perception.dtype": "float32", "reasoning.dtype": "float32",
                 "perception.max_new_tokens": 16, "reasoning.max_new_tokens": 4000,
                 "perception.temperature": 0.0, "reasoning.temperature": 0.0,
                 "perception.use_odometry": True,
                 # a long, never-ending generation to cancel (random tiny models may
                 # otherwise stop early when they happen to emit their end token)
                 "reasoning.extra_json": json.dumps({"generate_kwargs": {"min_new_tokens": 3900}})}
    fresh_ros_domain()
    with GraphProcesses("embedded", PARAMS, overrides, echo=None) as graph, \
            SpinningClient() as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        frames = ((f.stamp_s, f.image, f.frame_id)
                  for f in read_image_bag(sample_dir / "sample.mcap"))
        client.play(frames, rate=8.0, poses=read_odometry(sample_dir / "sample.mcap"))
        yield graph, client


def test_action_streams_feedback_and_cancels(embedded) -> None:  # type: ignore[no-untyped-def]
    graph, client = embedded
    action = ActionClient(client, AnswerSpatial, "answer")
    assert action.wait_for_server(timeout_sec=30)
    # Feedback is a plain topic: a message published before the server's feedback writer
    # has matched this new client's reader is lost, and the first stage comes within
    # milliseconds of acceptance. wait_for_server covers only the action's services, so
    # wait until the writer is discovered here, and give the reverse match a moment.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not client.count_publishers("/answer/_action/feedback"):
        time.sleep(0.05)
    time.sleep(1.0)
    feedback: list[AnswerSpatial.Feedback] = []
    goal = AnswerSpatial.Goal(question="Describe the route back to the start.", timeout_s=300.0)
    handle = wait(action.send_goal_async(goal, feedback_callback=lambda f: feedback.append(
        f.feedback)), 30)
    assert handle.accepted
    # Wait until the reasoning model is streaming text, then cancel.
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(f.partial_text for f in feedback):
        graph.check_alive()
        time.sleep(0.1)
    assert any(f.partial_text for f in feedback), [f.stage for f in feedback]
    stages = [f.stage for f in feedback]
    assert "waiting_for_perception" in stages and "reasoning" in stages
    assert stages.index("waiting_for_perception") < stages.index("reasoning")
    wait(handle.cancel_goal_async(), 30)
    result = wait(handle.get_result_async(), 60)
    assert result.status == GoalStatus.STATUS_CANCELED
    assert result.result.error_code == ErrorCode.CANCELLED
    assert not result.result.success
    action.destroy()


def test_odometry_topic_sets_the_actions_between_key_frames(embedded, sample_dir) -> None:  # type: ignore[no-untyped-def]
    """With perception.use_odometry, the action of each key frame is the motion measured
    from the replayed /odom poses between it and the previous key frame."""
    from embodied_r_ros.core.perception.odometry import PoseHistory, measured_action
    from embodied_r_ros.nodes.common.conversions import stamp_to_seconds

    _graph, client = embedded
    history = PoseHistory(max_age_s=1e6)
    for pose in read_odometry(sample_dir / "sample.mcap"):
        history.add(pose)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(client.descriptions) < 4:
        time.sleep(0.2)
    by_index = {d.keyframe_index: d for d in client.descriptions if d.mode != "failed"}
    pairs = [(by_index[i - 1], by_index[i]) for i in sorted(by_index) if i - 1 in by_index]
    assert len(pairs) >= 2
    for previous, current in pairs:
        expected = measured_action(history, stamp_to_seconds(previous.header.stamp),
                                   stamp_to_seconds(current.header.stamp))
        assert expected is not None
        assert (current.action, current.action_source) == (expected, "odometry")


def test_status_and_reset_episode(embedded) -> None:  # type: ignore[no-untyped-def]
    _graph, client = embedded
    status = client.status()
    assert status.lifecycle_state == "active" and status.graph == "embedded"
    # Camera input is best-effort (sensor-data QoS): under CPU load some frames are
    # dropped by design, so only the ordering of the counts is exact.
    assert status.frames_received >= status.frames_sampled >= status.keyframes >= 1
    assert status.frames_received >= 10
    old_episode = status.episode_id
    reset = client.reset()
    assert reset.success and old_episode not in reset.message
    after = client.status()
    assert after.keyframes == 0 and after.episode_id != old_episode
    response = client.ask_item(QuestionItem("Where is the door?", []), timeout_s=60)
    assert response.error_code == ErrorCode.NO_KEYFRAMES


def test_missing_model_stops_the_node_with_a_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no_such_model"
    overrides = {"perception.model": str(missing), "reasoning.model": str(missing)}
    fresh_ros_domain()
    with GraphProcesses("embedded", PARAMS, overrides, echo=None) as graph:
        code = graph.nodes[0].process.wait(timeout=120)
        time.sleep(0.2)
        output = graph.output()
    assert code == 1
    assert "MODEL_UNAVAILABLE" in output and str(missing) in output
