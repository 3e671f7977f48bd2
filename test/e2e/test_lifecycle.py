"""Lifecycle (managed) nodes over real DDS, started through the installed executables:
transitions in the orders a user or a lifecycle manager tries, what each state serves,
configure failures with their reason, parameter changes, shutdown from every state."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from sensor_msgs.msg import Image

from embodied_r_ros.client import GraphClient, spinning, wait_future
from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.graph_processes import GraphProcesses

from helpers.env import fresh_ros_domain
from helpers.graph_helpers import PARAMS, long_generation, tiny_overrides, wait_for


class Driver(GraphClient):
    """Test client: the graph's services plus lifecycle and parameter services of a node."""

    def __init__(self, target: str) -> None:
        super().__init__("lifecycle_driver")
        self.target = target
        self.change = self.create_client(ChangeState, f"/{target}/change_state")
        self.get = self.create_client(GetState, f"/{target}/get_state")
        self.params = self.create_client(SetParameters, f"/{target}/set_parameters")

    def wait_up(self, timeout_s: float = 120.0, alive=None) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while not self.get.service_is_ready():
            if alive is not None:
                alive()
            assert time.monotonic() < deadline, f"{self.target} did not come up"
            time.sleep(0.1)

    def state(self) -> str:
        return wait_future(self.get.call_async(GetState.Request()), 30, "get_state").current_state.label

    def transition(self, transition_id: int, timeout_s: float = 120.0) -> bool:
        request = ChangeState.Request(transition=Transition(id=transition_id))
        return wait_future(self.change.call_async(request), timeout_s, "change_state").success

    def set_string(self, name: str, value: str) -> tuple[bool, str]:
        param = Parameter(name=name, value=ParameterValue(type=ParameterType.PARAMETER_STRING,
                                                          string_value=value))
        reply = wait_future(self.params.call_async(SetParameters.Request(parameters=[param])),
                            30, "set_parameters")
        return reply.results[0].successful, reply.results[0].reason

    def has_service(self, name: str) -> bool:
        """A server (not just a client, like this node's own) offers `name`."""
        return self.count_services(name) > 0

    def camera_subscribers(self) -> int:
        return self.count_subscribers("/camera/image_raw")


def test_embedded_node_transitions_in_every_order(tiny_models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no_such_model"
    fresh_ros_domain()
    overrides = {**tiny_overrides(tiny_models), "reasoning.model": str(missing)}
    with GraphProcesses("embedded", PARAMS, overrides, autostart=False, echo=None) as graph, \
            spinning(lambda: Driver("embodied_r")) as driver:
        driver.wait_up(alive=graph.check_alive)
        assert driver.state() == "unconfigured"
        # Unconfigured: nothing is served but the status; activation is refused.
        assert driver.status().lifecycle_state == "unconfigured"
        assert not driver.has_service("/ask") and driver.camera_subscribers() == 0
        assert not driver.transition(Transition.TRANSITION_ACTIVATE)
        # A missing model fails configure with the reason; the node stays unconfigured.
        assert not driver.transition(Transition.TRANSITION_CONFIGURE)
        assert driver.state() == "unconfigured"
        status = driver.status()
        assert "MODEL_UNAVAILABLE" in status.last_error and str(missing) in status.last_error
        graph.check_alive()
        # Fix the parameter (allowed while unconfigured) and configure again.
        assert driver.set_string("reasoning.model", str(tiny_models.lm)) == (True, "")
        assert driver.transition(Transition.TRANSITION_CONFIGURE)
        assert driver.state() == "inactive" and driver.status().last_error == ""
        # Inactive: camera frames are not read.
        camera = driver.create_publisher(Image, "/camera/image_raw", 10)
        for _ in range(5):
            camera.publish(Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(12)))
            time.sleep(0.05)
        time.sleep(0.5)
        assert driver.status().frames_received == 0
        ok, reason = driver.set_string("reasoning.model", "/elsewhere")
        assert not ok and "only change while it is unconfigured" in reason
        assert not driver.has_service("/ask") and driver.camera_subscribers() == 0
        # Active: questions and camera; deactivate stops both; activate again works.
        for _ in range(2):
            assert driver.transition(Transition.TRANSITION_ACTIVATE)
            assert wait_for(lambda: driver.has_service("/ask") and driver.camera_subscribers() == 1)
            reply = driver.ask("Where am I?", timeout_s=30)
            assert reply.error_code == ErrorCode.NO_KEYFRAMES
            assert driver.transition(Transition.TRANSITION_DEACTIVATE)
            assert wait_for(lambda: not driver.has_service("/ask")
                            and driver.camera_subscribers() == 0)
        # Cleanup releases the models; cleanup is refused while active.
        assert driver.transition(Transition.TRANSITION_ACTIVATE)
        assert not driver.transition(Transition.TRANSITION_CLEANUP)
        assert driver.transition(Transition.TRANSITION_DEACTIVATE)
        assert driver.transition(Transition.TRANSITION_CLEANUP)
        status = driver.status()
        assert status.lifecycle_state == "unconfigured" and not status.reasoning_ready
        assert driver.transition(Transition.TRANSITION_CONFIGURE)
        assert driver.status().reasoning_ready
        # Shutdown from inactive: finalized, and the process ends cleanly.
        assert driver.transition(Transition.TRANSITION_INACTIVE_SHUTDOWN)
        assert graph.nodes[0].process.wait(timeout=30) == 0


@pytest.mark.parametrize("state, transitions, shutdown", [
    ("unconfigured", [], Transition.TRANSITION_UNCONFIGURED_SHUTDOWN),
    ("inactive", [Transition.TRANSITION_CONFIGURE], Transition.TRANSITION_INACTIVE_SHUTDOWN),
    ("active", [Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE],
     Transition.TRANSITION_ACTIVE_SHUTDOWN),
])
def test_shutdown_from_any_state(state: str, transitions: list[int], shutdown: int) -> None:
    fresh_ros_domain()
    graph = GraphProcesses("split", PARAMS, {}, autostart=False, echo=None)
    graph.launches = graph.launches[:1]  # the key-frame node alone (it needs no model)
    with graph, spinning(lambda: Driver("keyframe_selector")) as driver:
        driver.wait_up(alive=graph.check_alive)
        for transition in transitions:
            assert driver.transition(transition)
        assert driver.state() == state
        assert driver.transition(shutdown)
        assert graph.node("keyframe_selector").process.wait(timeout=30) == 0


def test_autostart_failure_exits_with_the_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "no_such_model"
    fresh_ros_domain()
    with GraphProcesses("embedded", PARAMS, {"perception.model": str(missing),
                                             "reasoning.model": str(missing)}, echo=None) as graph:
        code = graph.nodes[0].process.wait(timeout=120)
        time.sleep(0.2)
        output = graph.output()
    assert code == 1
    assert "configure failed (MODEL_UNAVAILABLE)" in output and str(missing) in output


@contextmanager
def _long_question_in_progress(tiny_models, sample_dir):  # type: ignore[no-untyped-def]
    """The installed embedded node, 40 sample frames played, and a question whose answer
    takes minutes (4000 tokens) asked by the service on a thread; yields (graph, driver,
    outcome list, asker thread) once the node counts the question in progress. The
    outcome list receives the reply, or the exception `ask` raised."""
    from embodied_r_ros.replay import SpinningClient
    from embodied_r_ros.sample_data.bag_io import read_image_bag

    overrides = tiny_overrides(tiny_models, **long_generation("reasoning", 4000))
    fresh_ros_domain()
    with GraphProcesses("embedded", PARAMS, overrides, echo=None) as graph, \
            SpinningClient() as client, spinning(lambda: Driver("embodied_r")) as driver:
        client.wait_for_graph(180, alive_check=graph.check_alive)
        frames = [(f.stamp_s, f.image, f.frame_id) for f in read_image_bag(sample_dir / "sample.mcap")]
        client.play(frames[:40], rate=0)
        outcome: list = []

        def ask() -> None:
            try:
                outcome.append(client.ask("Long story?", timeout_s=120))
            except Exception as exc:  # noqa: BLE001 - the outcome under test
                outcome.append(exc)

        asker = threading.Thread(target=ask)
        asker.start()
        assert wait_for(lambda: driver.status().questions_in_progress == 1, 60)
        yield graph, driver, outcome, asker


def test_deactivate_fails_a_question_in_progress(tiny_models, sample_dir) -> None:  # type: ignore[no-untyped-def]
    with _long_question_in_progress(tiny_models, sample_dir) as (graph, driver, results, asker):
        time.sleep(1.0)
        start = time.monotonic()
        assert driver.transition(Transition.TRANSITION_DEACTIVATE)
        asker.join(timeout=30)
        assert time.monotonic() - start < 10
        assert results and results[0].error_code == ErrorCode.CANCELLED
        assert "deactivated" in results[0].message
        graph.check_alive()


def test_a_caller_is_told_at_once_when_the_node_dies_mid_question(tiny_models, sample_dir) -> None:  # type: ignore[no-untyped-def]
    """A node killed while it answers never replies; the client notices the server is gone
    and raises GraphUnavailableError within seconds, not after the question's time limit."""
    from embodied_r_ros.client import GraphUnavailableError

    with _long_question_in_progress(tiny_models, sample_dir) as (graph, _driver, outcome, asker):
        start = time.monotonic()
        graph.nodes[0].process.kill()
        asker.join(timeout=60)
        assert outcome and isinstance(outcome[0], GraphUnavailableError), outcome
        assert "went away" in str(outcome[0])
        assert time.monotonic() - start < 30  # not the 120 s limit + 30 s
