"""Start the node graph as child processes, without `ros2 launch`.

`ros2 launch embodied_r_ros embodied_r.launch.py` is the way on a robot. Where launch_ros
is not installed (the PyPI-wheel ROS used by CI and the demo), this module starts the same
node executables with the same parameter file and the same overrides, and stops them
cleanly. It only builds command lines and manages processes; it does not import rclpy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

# node module -> default node name (the launch file uses the same names)
EMBEDDED = [("embodied_r_ros.nodes.embedded", "embodied_r")]
SPLIT = [("embodied_r_ros.nodes.keyframe", "keyframe_selector"),
         ("embodied_r_ros.nodes.perception", "perception"),
         ("embodied_r_ros.nodes.reasoning", "reasoning")]


def _ros_value(value: Any) -> str:
    """A `-p name:=value` value: ROS parses it as YAML, so strings are double-quoted
    (JSON string syntax is valid YAML) to keep paths, numbers-as-text and JSON text as
    strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def node_command(module: str, name: str, params_file: Path | None,
                 overrides: Mapping[str, Any]) -> list[str]:
    cmd = [sys.executable, "-m", module, "--ros-args", "-r", f"__node:={name}"]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for key, value in overrides.items():
        cmd += ["-p", f"{key}:={_ros_value(value)}"]
    return cmd


@dataclass
class NodeProcess:
    name: str
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)


class GraphProcesses:
    """Context manager: the graph's node processes, their output echoed with a prefix."""

    def __init__(self, graph: str, params_file: Path | None, overrides: Mapping[str, Any],
                 *, env: Mapping[str, str] | None = None, echo: IO[str] | None = sys.stdout) -> None:
        if graph not in {"embedded", "split"}:
            raise ValueError(f"graph must be 'embedded' or 'split', not {graph!r}")
        self.specs = EMBEDDED if graph == "embedded" else SPLIT
        self.params_file = params_file
        self.overrides = dict(overrides)
        self.env = dict(os.environ if env is None else env)
        self.echo = echo
        self.nodes: list[NodeProcess] = []
        self._echo_lock = threading.Lock()

    def __enter__(self) -> GraphProcesses:
        for module, name in self.specs:
            proc = subprocess.Popen(node_command(module, name, self.params_file, self.overrides),
                                    env=self.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1)
            node = NodeProcess(name, proc)
            threading.Thread(target=self._pump, args=(node,), daemon=True).start()
            self.nodes.append(node)
        return self

    def _pump(self, node: NodeProcess) -> None:
        assert node.process.stdout is not None
        for line in node.process.stdout:
            node.lines.append(line.rstrip("\n"))
            if self.echo is not None:
                with self._echo_lock:
                    self.echo.write(f"  [{node.name}] {line}")
                    self.echo.flush()

    def check_alive(self) -> None:
        """Raise RuntimeError naming the node and its last output if one has exited."""
        for node in self.nodes:
            code = node.process.poll()
            if code is not None:
                tail = "\n".join(node.lines[-15:])
                raise RuntimeError(f"node {node.name} exited with code {code}:\n{tail}")

    def output(self) -> str:
        return "\n".join(f"[{n.name}] {line}" for n in self.nodes for line in n.lines)

    def stop(self, timeout_s: float = 10.0) -> None:
        for node in self.nodes:
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        for node in self.nodes:
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=5)

    def __exit__(self, *exc: object) -> None:
        self.stop()
