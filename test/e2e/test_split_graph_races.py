"""The split graph under the races a robot meets, over real DDS with the installed
executables: resets while a question waits, peers that die or restart, a full question
queue, a model that runs past the question's time limit."""

from __future__ import annotations

import threading
import time

from action_msgs.msg import GoalStatus

from embodied_r_ros.action import AnswerSpatial
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.core.settings import LOSSLESS_CAMERA, LOSSLESS_DEPTH
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.replay import SpinningClient

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import PARAMS, bag_frames, long_generation, tiny_overrides, wait_for


def overrides(tiny_models, *, slow_perception: bool = False, slow_reasoning: bool = False,
              **extra) -> dict:  # type: ignore[no-untyped-def]
    out = tiny_overrides(tiny_models)
    if slow_perception:  # every key frame takes seconds to describe, one at a time
        out.update(long_generation("perception", 3000))
        out["perception.batch_size"] = 1  # a batch of 4 costs about one frame's time
    if slow_reasoning:  # a generation that runs until stopped
        out.update(long_generation("reasoning", 4000))
    out.update(extra)
    return out


def ask_in_background(client, question: str, timeout_s: float = 240.0):  # type: ignore[no-untyped-def]
    box: dict = {}

    def run() -> None:
        box["reply"] = client.ask(question, timeout_s=timeout_s)
        box["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


def test_reset_and_a_dead_perception_node_end_waiting_questions_at_once(tiny_models, sample_dir) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    with GraphProcesses("split", PARAMS, overrides(tiny_models, slow_perception=True),
                        echo=None) as graph, SpinningClient() as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        client.play(bag_frames(sample_dir), rate=4.0)
        assert wait_for(lambda: len(client.keyframes) >= 4, 60), len(client.keyframes)
        # 1. A reset while the question waits for perception: EPISODE_RESET at once.
        thread, box = ask_in_background(client, "What is ahead?")
        time.sleep(2.0)
        assert "reply" not in box  # still waiting for the slow perception
        reset_at = time.monotonic()
        assert client.reset().success
        thread.join(timeout=30)
        assert box["reply"].error_code == ErrorCode.EPISODE_RESET, box["reply"].message
        assert box["at"] - reset_at < 5.0
        # 2. The perception node dies (SIGKILL) while a question waits: noticed within
        #    seconds, reported as a perception failure naming the node.
        client.play(bag_frames(sample_dir)[:80], rate=4.0)
        assert wait_for(lambda: client.status().keyframes >= 2, 60)
        thread, box = ask_in_background(client, "What is ahead now?")
        time.sleep(2.0)
        assert "reply" not in box
        killed_at = time.monotonic()
        graph.kill("perception")
        thread.join(timeout=60)
        reply = box["reply"]
        assert reply.error_code == ErrorCode.PERCEPTION_FAILED, reply.message
        assert "'perception'" in reply.message and "does not answer" in reply.message
        assert box["at"] - killed_at < 10.0
        status = client.status()
        assert not status.perception_node_alive and "perception" in status.last_error


def test_restarted_perception_node_does_not_describe_again(tiny_models, sample_dir) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    # A lossless replay (as the demo's): sensor-data QoS on a loaded machine drops most
    # frames of a burst, and the key frames it leaves are chance.
    with GraphProcesses("split", PARAMS, overrides(tiny_models, **LOSSLESS_CAMERA),
                        echo=None) as graph, \
            SpinningClient(camera_reliability="reliable") as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        clip = bag_frames(sample_dir)
        client.play(clip[: len(clip) // 2], rate=0, max_ahead=LOSSLESS_DEPTH)

        def settled() -> bool:  # every key frame so far described, and the client has them all
            s = client.status()
            return s.keyframes >= 2 and s.described == s.keyframes \
                and len(client.descriptions) >= s.described

        # The key-frame node may still be working through the played frames (it lags under
        # load): wait until no new key frame has come for 3 s.
        deadline = time.monotonic() + 180
        while True:
            assert wait_for(settled, 120)
            seen = client.status().keyframes
            time.sleep(3.0)
            if client.status().keyframes == seen and settled():
                break
            assert time.monotonic() < deadline, "key frames kept coming after the clip was played"
        described = {(d.episode_id, d.keyframe_index) for d in client.descriptions}
        count_before = len(client.descriptions)
        perception = graph.node("perception")
        graph.kill("perception")
        restarted = graph.start(perception.launch)
        assert wait_for(lambda: any("described already" in line for line in restarted.lines), 120), \
            "\n".join(restarted.lines)
        time.sleep(3.0)
        # Only key frames described before the kill count: under load the key-frame node may
        # still publish a key frame of the played frames after the kill, and the restarted
        # node describes that one for the first time.
        again = [(d.episode_id, d.keyframe_index) for d in client.descriptions[count_before:]
                 if (d.episode_id, d.keyframe_index) in described]
        assert not again, f"described again after the restart: {again}"
        # New key frames after the restart are described, and a question uses them all.
        client.play(clip[len(clip) // 2:], rate=0, max_ahead=LOSSLESS_DEPTH)
        reply = client.ask("Where did I start?", timeout_s=240)
        graph.check_alive()
        assert reply.success, reply.message
        assert "left out" not in reply.message
        new = {(d.episode_id, d.keyframe_index) for d in client.descriptions[count_before:]}
        assert new and not (new & described)


def test_full_queue_rejects_goals_and_timeouts_free_the_caller(tiny_models, sample_dir) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    with GraphProcesses("split", PARAMS, overrides(tiny_models, slow_reasoning=True,
                                                   **{"qa.max_waiting_questions": 0}),
                        echo=None) as graph, SpinningClient() as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        client.play(bag_frames(sample_dir)[:40], rate=0)
        assert wait_for(lambda: client.status().described >= 1, 120)
        # A service call with a short limit returns TIMEOUT on time, whatever the model does
        # (the tiny LM writes its 4000 tokens in about 2.6 s on an idle machine: the limit
        # must be well below that).
        start = time.monotonic()
        late = client.ask("Tell me everything.", timeout_s=1.0)
        assert late.error_code == ErrorCode.TIMEOUT, late.message
        assert time.monotonic() - start < 8.0
        # While the stopped generation winds down and another question runs, a second goal
        # is rejected at goal time (not accepted and then aborted).
        assert wait_for(lambda: client.status().questions_in_progress == 0, 60)
        feedback: list = []
        first = threading.Thread(target=lambda: feedback.append(client.ask_streaming(
            "Describe the route.", timeout_s=60.0)), daemon=True)
        first.start()
        assert wait_for(lambda: client.status().questions_in_progress == 1, 30)
        handle = client.answer_client.send_goal_async(AnswerSpatial.Goal(question="Me too?"))
        done = threading.Event()
        handle.add_done_callback(lambda _f: done.set())
        assert done.wait(30)
        assert not handle.result().accepted
        busy = client.ask("And me?", timeout_s=30)
        assert busy.error_code == ErrorCode.BUSY and "max_waiting_questions" in busy.message
        first.join(timeout=120)
        status, result = feedback[0]
        assert status in (GoalStatus.STATUS_ABORTED, GoalStatus.STATUS_SUCCEEDED)
        graph.check_alive()
