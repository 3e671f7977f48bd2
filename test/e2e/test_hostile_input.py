"""No input ends a node: malformed camera frames, broken stamps, bad key-frame messages and
abusive questions, sent over real DDS to the installed executables; afterwards every node
still answers, the drops are counted by cause, and /diagnostics reports them."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.srv import GetState
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from embodied_r_ros.client import GraphClient, spinning, wait_future
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.graph_processes import GraphProcesses
from embodied_r_ros.msg import KeyFrame
from embodied_r_ros.nodes.common.qos import KEYFRAME_QOS

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import PARAMS, tiny_overrides, wait_for

HOSTILE = {"camera.reliability": "reliable", "diagnostics.period_s": 0.5}
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)


class Hostile(GraphClient):
    def __init__(self) -> None:
        super().__init__("hostile_integrator")
        self.camera = self.create_publisher(Image, "/camera/image_raw", RELIABLE)
        self.keyframes = self.create_publisher(KeyFrame, "keyframes", KEYFRAME_QOS)
        self.diagnostics: list[DiagnosticArray] = []
        self.create_subscription(DiagnosticArray, "/diagnostics", self.diagnostics.append, 50)
        self.seq = 0

    def send(self, *, width: int, height: int, encoding: str = "rgb8", step: int | None = None,
             data: bytes | None = None, stamp: Time | None = None) -> None:
        self.seq += 1
        if step is None:
            step = width * 3
        if data is None:
            data = bytes(np.random.default_rng(self.seq).integers(
                0, 256, size=step * height, dtype=np.uint8))
        if stamp is None:
            stamp = Time(sec=1000 + self.seq * 2, nanosec=0)
        self.camera.publish(Image(header=Header(stamp=stamp, frame_id="cam"), width=width,
                                  height=height, encoding=encoding, step=step, data=data))

    def latest(self, name_part: str) -> dict[str, tuple[int, str, dict[str, str]]]:
        out = {}
        for array in self.diagnostics[-20:]:
            for status in array.status:
                if name_part in status.name:
                    out[status.name] = (status.level[0], status.message,
                                        {kv.key: kv.value for kv in status.values})
        return out


MALFORMED = [
    ("1x1 image", dict(width=1, height=1)),
    ("extreme aspect 2x4480", dict(width=4480, height=2)),
    ("0x0 image", dict(width=0, height=0, data=b"")),
    ("step smaller than a row", dict(width=64, height=48, step=10)),
    ("short data", dict(width=64, height=48, data=bytes(100))),
    ("unknown encoding", dict(width=16, height=16, encoding="no_such_format")),
    ("size claimed huge, data tiny", dict(width=100000, height=100000, data=bytes(30))),
    ("zero stamp", dict(width=32, height=32, stamp=Time(sec=0, nanosec=0))),
    ("negative stamp", dict(width=32, height=32, stamp=Time(sec=-5, nanosec=0))),
]


def send_malformed_and_check(graph, client, camera_node: str) -> None:  # type: ignore[no-untyped-def]
    for _label, kwargs in MALFORMED:
        client.send(**kwargs)
        time.sleep(0.15)
    client.send(width=3840, height=2160)  # a real 4K frame is fine
    time.sleep(1.0)
    graph.check_alive()
    assert client.status().lifecycle_state == "active"
    # The node answers: with only broken frames plus tiny ones, a typed result.
    reply = client.ask("What do you see?", timeout_s=60)
    assert reply.error_code in (ErrorCode.OK, ErrorCode.UNPARSEABLE_ANSWER,
                                ErrorCode.NO_KEYFRAMES), reply.message
    name = f"{camera_node}: camera"
    assert wait_for(lambda: int(client.latest(name).get(name, (0, "", {}))[2].get(
        "dropped: undecodable", "0")) >= 5, 10), client.latest(name)
    _level, _message, values = client.latest(name)[name]
    assert int(values["frames received"]) >= len(MALFORMED) + 1
    node_entries = client.latest(f"{camera_node}: node")
    assert node_entries[f"{camera_node}: node"][2]["lifecycle state"] == "active"
    graph.check_alive()


def test_malformed_frames_are_dropped_and_counted_split(tiny_models) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    with GraphProcesses("split", PARAMS, tiny_overrides(tiny_models, **HOSTILE), echo=None) as graph, \
            spinning(Hostile) as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        assert wait_for(lambda: client.camera.get_subscription_count() > 0)
        send_malformed_and_check(graph, client, "/keyframe_selector")


def test_perception_node_survives_a_bad_key_frame(tiny_models) -> None:  # type: ignore[no-untyped-def]
    fresh_ros_domain()
    graph = GraphProcesses("split", PARAMS, tiny_overrides(tiny_models, **HOSTILE), echo=None)
    graph.launches = [n for n in graph.launches if n.name == "perception"]
    with graph, spinning(Hostile) as client:
        get_state = client.create_client(GetState, "/perception/get_state")
        assert wait_for(lambda: get_state.service_is_ready(), 120)
        assert wait_for(lambda: client.keyframes.get_subscription_count() > 0, 60)
        bad = KeyFrame(episode_id="e1", keyframe_index=0,
                       image=Image(width=8, height=8, encoding="no_such_format", step=24,
                                   data=bytes(192)))
        client.keyframes.publish(bad)

        def undecodable() -> str | None:
            entry = client.latest("/perception: perception").get("/perception: perception")
            return entry[2].get("dropped: undecodable") if entry else None

        # (the node first waits up to split.peer_timeout_s for a reasoning node)
        assert wait_for(lambda: undecodable() == "1", 20), undecodable()
        graph.check_alive()
        state = wait_future(get_state.call_async(GetState.Request()), 10, "get_state")
        assert state.current_state.label == "active"


def test_diagnostics_levels_follow_the_thresholds(tiny_models) -> None:  # type: ignore[no-untyped-def]
    """An active node with no camera input is WARN (stale input); an unconfigured node
    whose configure failed is ERROR with the reason."""
    fresh_ros_domain()
    overrides = {**tiny_overrides(tiny_models, **HOSTILE), "diagnostics.stale_input_s": 1.0}
    with GraphProcesses("embedded", PARAMS, overrides, echo=None) as graph, \
            spinning(Hostile) as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        assert wait_for(lambda: client.latest("/embodied_r: camera")
                        and client.latest("/embodied_r: camera")["/embodied_r: camera"][0] == 1, 20)
        level, message, _ = client.latest("/embodied_r: camera")["/embodied_r: camera"]
        assert "no camera frame" in message
        levels = {name: entry[0] for name, entry in client.latest("/embodied_r").items()}
        assert levels["/embodied_r: node"] == 0 and levels["/embodied_r: questions"] == 0
    fresh_ros_domain()
    with GraphProcesses("embedded", PARAMS, {**tiny_overrides(tiny_models, **HOSTILE), "reasoning.model": "/nope"},
                        autostart=False, echo=None) as graph, spinning(Hostile) as client:
        get_state = client.create_client(GetState, "/embodied_r/get_state")
        assert wait_for(lambda: get_state.service_is_ready(), 120)
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        change = client.create_client(ChangeState, "/embodied_r/change_state")
        assert change.wait_for_service(timeout_sec=30)
        reply = wait_future(change.call_async(ChangeState.Request(
            transition=Transition(id=Transition.TRANSITION_CONFIGURE))), 120, "configure")
        assert not reply.success
        assert wait_for(lambda: client.latest("/embodied_r: node")
                        and client.latest("/embodied_r: node")["/embodied_r: node"][0] == 2, 20)
        level, message, _ = client.latest("/embodied_r: node")["/embodied_r: node"]
        assert "MODEL_UNAVAILABLE" in message and "/nope" in message


# The tests below share one embedded node (module fixture). They come last: the tests
# above start graphs of their own in fresh ROS domains, which needs this process's
# rclpy context to be new for each of them.
@pytest.fixture(scope="module")
def embedded(tiny_models):  # type: ignore[no-untyped-def]
    """One embedded node for the tests below; each starts with a reset (a fresh episode)."""
    fresh_ros_domain()
    overrides = tiny_overrides(tiny_models, **HOSTILE, **{"qa.max_waiting_questions": 1})
    with GraphProcesses("embedded", PARAMS, overrides, echo=None) as graph, \
            spinning(Hostile) as client:
        client.wait_for_graph(240, alive_check=graph.check_alive)
        assert wait_for(lambda: client.camera.get_subscription_count() > 0)
        yield graph, client


def test_malformed_frames_are_dropped_and_counted_embedded(embedded) -> None:  # type: ignore[no-untyped-def]
    graph, client = embedded
    assert client.reset().success
    send_malformed_and_check(graph, client, "/embodied_r")


def test_frozen_and_zero_stamps_fall_back_to_arrival_time(embedded) -> None:  # type: ignore[no-untyped-def]
    graph, client = embedded
    assert client.reset().success
    for _ in range(6):  # every frame stamped 0, one per 0.6 s of wall time
        client.send(width=64, height=48, stamp=Time(sec=0, nanosec=0))
        time.sleep(0.6)
    status = client.status()
    assert status.frames_received == 6
    assert status.frames_sampled >= 3, status  # not collapsed into one sampled frame
    graph.check_alive()
    assert "using arrival time instead" in graph.output()


def test_abusive_questions_are_typed_invalid_requests(embedded) -> None:  # type: ignore[no-untyped-def]
    graph, client = embedded
    assert client.reset().success
    cases = [
        ("x" * 100_000, [], "qa.max_question_chars"),
        ("word " * 390, [], "qa.max_question_tokens"),
        ("Which way?", ["left\nB. right", "back"], "line break"),
        ("Which way?", ["left B. right", "back"], "option marker"),
        ("Which way?", ["ok", "x" * 500], "qa.max_choice_chars"),
        ("Which way?", [str(i) for i in range(9)], "at most 8"),
        ("   ", [], "empty"),
    ]
    for question, choices, fragment in cases:
        start = time.monotonic()
        reply = client.ask(question, choices, timeout_s=30)
        assert reply.error_code == ErrorCode.INVALID_REQUEST, (fragment, reply.message)
        assert fragment in reply.message
        assert time.monotonic() - start < 5.0
    ok = client.ask("Which way?", ["A. left", "right"], timeout_s=30)
    assert ok.error_code == ErrorCode.NO_KEYFRAMES  # accepted: own letter is stripped
    graph.check_alive()


def test_concurrent_abuse_does_not_end_the_node(embedded) -> None:  # type: ignore[no-untyped-def]
    """Many callers at once: a bounded queue, BUSY beyond it, the node alive throughout."""
    graph, client = embedded
    assert client.reset().success
    replies: list = []
    threads = [threading.Thread(target=lambda: replies.append(
        client.ask("Where?", timeout_s=30))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    codes = {r.error_code for r in replies}
    assert len(replies) == 8 and codes <= {ErrorCode.NO_KEYFRAMES, ErrorCode.BUSY}
    graph.check_alive()
