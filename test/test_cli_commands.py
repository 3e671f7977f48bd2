"""The commands a user types where the ros2 CLI is missing: `embodied-r launch` starts the
graph (the installed executables), `embodied-r ask | reset | status` query it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("rclpy", reason="needs the ROS 2 wheels (make setup)")

from embodied_r_ros.core.errors import ErrorCode  # noqa: E402
from embodied_r_ros.replay import SpinningClient  # noqa: E402
from embodied_r_ros.sample_data.bag_io import read_image_bag  # noqa: E402

from conftest import fresh_ros_domain  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PARAMS = REPO / "config" / "embodied_r.yaml"


def embodied_r(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "embodied_r_ros.cli", *args], text=True,
                          capture_output=True, timeout=timeout, env=os.environ.copy())


@pytest.fixture(scope="module")
def launched(tiny_models, tmp_path_factory):  # type: ignore[no-untyped-def]
    models = tmp_path_factory.mktemp("setup") / "tiny_models.yaml"
    models.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "perception": {"model": str(tiny_models.vlm), "device": "cpu", "max_new_tokens": 8},
        # The reasoning model writes 200 tokens (a fraction of a second): the streamed
        # "reasoning" stage then always leaves well before the result. With a near-instant
        # answer the result can overtake it (feedback is a topic, the result a service, and
        # rclpy drops feedback that arrives after the result).
        "reasoning": {"model": str(tiny_models.lm), "device": "cpu", "max_new_tokens": 200,
                      "extra_json": json.dumps({"generate_kwargs": {"min_new_tokens": 200}})}}}}))
    fresh_ros_domain()
    proc = subprocess.Popen([sys.executable, "-m", "embodied_r_ros.cli", "launch",
                             "graph:=split", f"params_file:={PARAMS}", f"models:={models}",
                             "namespace:=robot7"], text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=os.environ.copy())
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            probe = embodied_r("status", "--namespace", "robot7", "--json", "--wait", "2")
            if probe.returncode == 0 and json.loads(probe.stdout)["lifecycle_state"] == "active":
                break
            time.sleep(1.0)
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=60)
        assert code == 0, proc.stdout.read() if proc.stdout else ""


def test_status_reset_and_ask_from_the_command_line(launched, sample_dir) -> None:  # type: ignore[no-untyped-def]
    status = json.loads(embodied_r("status", "--namespace", "robot7", "--json").stdout)
    assert status["graph"] == "split" and status["node"] == "/robot7/reasoning"
    assert status["keyframe_node_alive"] and status["perception_node_alive"]

    empty = embodied_r("ask", "Where is the door?", "--namespace", "robot7", "--json")
    assert empty.returncode == 1
    assert json.loads(empty.stdout)["error_code"] == ErrorCode.NO_KEYFRAMES

    with SpinningClient(camera_topic="/camera/image_raw") as client:
        client.play(((f.stamp_s, f.image, f.frame_id)
                     for f in read_image_bag(sample_dir / "sample.mcap")), rate=4.0)
    streamed = embodied_r("ask", "What did I see last?", "--namespace", "robot7", "--stream",
                          timeout=300)
    assert streamed.returncode == 0, streamed.stderr
    assert "[waiting_for_perception]" in streamed.stderr and "[reasoning]" in streamed.stderr
    assert streamed.stdout.startswith("answer: ")

    reset = embodied_r("reset", "--namespace", "robot7")
    assert reset.returncode == 0 and reset.stdout.startswith("new episode ")
    after = json.loads(embodied_r("status", "--namespace", "robot7", "--json").stdout)
    assert after["episode_id"] != status["episode_id"] and after["keyframes"] == 0


def test_commands_say_when_no_graph_is_there() -> None:
    fresh_ros_domain()
    missing = embodied_r("status", "--namespace", "nobody_here", "--wait", "1")
    assert missing.returncode == 3 and "not available" in missing.stderr
    bad = embodied_r("launch", "graph:=triangle")
    assert bad.returncode == 2 and "graph must be one of" in bad.stderr
    assert embodied_r("ask").returncode == 2
