"""The commands a user types where the ros2 CLI is missing: `embodied-r launch` starts the
graph (the installed executables), `embodied-r ask | reset | status` query it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from embodied_r_ros.core.errors import ErrorCode
from embodied_r_ros.replay import SpinningClient
from embodied_r_ros.sample_data.bag_io import read_image_bag

from helpers.env import REPO_ROOT, fresh_ros_domain

REPO = REPO_ROOT
PARAMS = REPO / "config" / "embodied_r.yaml"


def embodied_r(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "embodied_r_ros.cli", *args], text=True,
                          capture_output=True, timeout=timeout, env=os.environ.copy())


def _exited(pid: int) -> bool:
    """Gone, or a zombie waiting for whoever adopted it to reap it."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


class Launcher:
    """`embodied-r launch ...` as a user's shell starts it; its output is drained all the
    time (a chatty graph never blocks on a full pipe) and kept for failure messages."""

    def __init__(self, *arguments: str, namespace: str, sigint_ignored: bool = False) -> None:
        command = [sys.executable, "-m", "embodied_r_ros.cli", "launch", *arguments,
                   f"namespace:={namespace}"]
        if sigint_ignored:
            # What a background job of a script (`embodied-r launch ... &`) inherits.
            command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
        self.namespace = namespace
        self.lines: list[str] = []
        self.proc = subprocess.Popen(command, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=os.environ.copy())
        self._drain = threading.Thread(target=self._read, daemon=True)
        self._drain.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    def wait_active(self, timeout_s: float = 240) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.output()
            probe = embodied_r("status", "--namespace", self.namespace, "--json", "--wait", "2")
            if probe.returncode == 0 and json.loads(probe.stdout)["lifecycle_state"] == "active":
                return
            time.sleep(1.0)
        raise AssertionError(f"graph not active after {timeout_s} s:\n{self.output()}")

    def node_pids(self) -> list[int]:
        """The launcher's child processes: the node executables."""
        pid = self.proc.pid
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]

    def stop(self, signum: int) -> int:
        """Send `signum`; the launcher's exit code (fails if it is still running after 60 s,
        after killing it and its nodes)."""
        nodes = self.node_pids()
        self.proc.send_signal(signum)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            for pid in [self.proc.pid, *nodes]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            raise AssertionError(f"launcher still running 60 s after {signal.Signals(signum).name}:"
                                 f"\n{self.output()}") from None
        self._drain.join(timeout=10)
        left = [pid for pid in nodes if not _exited(pid)]
        for pid in left:  # do not leave them to the next tests
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert not left, f"node processes left running: {left}\n{self.output()}"
        return code


def tiny_models_file(tiny_models, folder: Path, reasoning_tokens: int = 8) -> Path:  # type: ignore[no-untyped-def]
    models = folder / "tiny_models.yaml"
    models.write_text(yaml.safe_dump({"/**": {"ros__parameters": {
        "perception": {"model": str(tiny_models.vlm), "device": "cpu", "max_new_tokens": 8},
        "reasoning": {"model": str(tiny_models.lm), "device": "cpu",
                      "max_new_tokens": reasoning_tokens,
                      "extra_json": json.dumps({"generate_kwargs": {"min_new_tokens": reasoning_tokens}})}}}}))
    return models


@pytest.fixture(scope="module")
def launched(tiny_models, tmp_path_factory):  # type: ignore[no-untyped-def]
    # The reasoning model writes 200 tokens (a fraction of a second): the streamed
    # "reasoning" stage then always leaves well before the result. With a near-instant
    # answer the result can overtake it (feedback is a topic, the result a service, and
    # rclpy drops feedback that arrives after the result).
    models = tiny_models_file(tiny_models, tmp_path_factory.mktemp("setup"), reasoning_tokens=200)
    fresh_ros_domain()
    # Started as a script's background job would be (SIGINT ignored): Ctrl-C / SIGINT must
    # still stop the launcher and its nodes.
    launcher = Launcher("graph:=split", f"params_file:={PARAMS}", f"models:={models}",
                        namespace="robot7", sigint_ignored=True)
    try:
        launcher.wait_active()
        yield launcher.proc
    finally:
        code = launcher.stop(signal.SIGINT)
        assert code == 0, launcher.output()
        assert "got SIGINT, stopping the nodes" in launcher.output()


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


def test_sigterm_stops_the_graph_and_its_nodes(tiny_models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`kill`, systemd and container runtimes stop with SIGTERM: the launcher must stop its
    nodes (they run in sessions of their own and would be left running) and exit 0."""
    fresh_ros_domain()
    launcher = Launcher(f"params_file:={PARAMS}", f"models:={tiny_models_file(tiny_models, tmp_path)}",
                        namespace="robot8")
    launcher.wait_active()
    assert len(launcher.node_pids()) == 1  # the embedded graph: one node
    assert launcher.stop(signal.SIGTERM) == 0
    assert "got SIGTERM, stopping the nodes" in launcher.output()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux's")
def test_nodes_do_not_outlive_a_killed_launcher(tiny_models, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL (or the OOM killer) gives the launcher no chance to stop its nodes: each node
    must then get SIGTERM from the kernel and shut down on its own."""
    fresh_ros_domain()
    launcher = Launcher(f"params_file:={PARAMS}", f"models:={tiny_models_file(tiny_models, tmp_path)}",
                        namespace="robot9")
    launcher.wait_active()
    nodes = launcher.node_pids()
    assert len(nodes) == 1
    launcher.proc.kill()
    launcher.proc.wait(timeout=10)
    deadline = time.monotonic() + 60
    while not all(_exited(pid) for pid in nodes) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in nodes if not _exited(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, "a node kept running after its launcher was killed"
