"""Start the node graph as child processes, where `ros2 launch` is not installed.

`ros2 launch embodied_r_ros embodied_r.launch.py` is the way on a robot. Where launch_ros
is missing (the PyPI-wheel ROS of CI and the demo), this module starts the SAME installed
executables (`<prefix>/lib/embodied_r_ros/<name>`, what `ros2 run` starts) with the same
arguments, both taken from the one graph definition in `embodied_r_ros.graph`, echoes
their output with a prefix, and stops them cleanly (SIGINT, then SIGKILL after a grace
period). It does not import rclpy. `embodied-r launch` is its command-line form.

The nodes run in sessions of their own (a Ctrl-C at the terminal reaches the launcher
only), so the launcher is what stops them: `embodied-r launch` stops the graph on SIGINT
and on SIGTERM (what `kill`, systemd and container runtimes send), as `ros2 launch` does,
also when it was started with SIGINT ignored (a background job of a script inherits
that). On Linux a node also gets SIGTERM when the process that started it dies without
stopping it (SIGKILL, the OOM killer), so no node outlives its launcher.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from embodied_r_ros.graph import (
    GraphDefinitionError,
    NodeLaunch,
    command_line,
    graph_launch,
    parse_launch_arguments,
)


@dataclass
class NodeProcess:
    launch: NodeLaunch
    process: subprocess.Popen[str]
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=5000))

    @property
    def name(self) -> str:
        return self.launch.name


class GraphProcesses:
    """Context manager: the graph's node processes, their output echoed with a prefix.

    `GraphProcesses("split", params_file, overrides)` starts the nodes of that graph with
    the parameter file and parameter overrides; any other launch argument of
    `embodied_r_ros.graph.graph_launch` can be passed by keyword.
    """

    def __init__(self, graph: str = "embedded", params_file: str | Path | None = None,
                 overrides: Mapping[str, Any] | None = None, *,
                 env: Mapping[str, str] | None = None, echo: IO[str] | None = sys.stdout,
                 **launch_arguments: Any) -> None:
        self.launches = graph_launch(graph, params_file=str(params_file or ""),
                                     overrides=dict(overrides or {}), **launch_arguments)
        self.env = dict(os.environ if env is None else env)
        self.echo = echo
        self.nodes: list[NodeProcess] = []
        self._echo_lock = threading.Lock()

    def __enter__(self) -> GraphProcesses:
        try:
            for launch in self.launches:
                self.start(launch)
        except BaseException:
            self.stop()
            raise
        return self

    def start(self, launch: NodeLaunch) -> NodeProcess:
        """Start (or restart) one node's process. On Linux the node gets SIGTERM when the
        thread that started it ends (the launcher killed, even by SIGKILL), so call this
        from a thread that lives as long as the graph (the main thread, as all callers do)."""
        proc = subprocess.Popen(command_line(launch), env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1,
                                start_new_session=True, preexec_fn=_stop_with_parent())
        node = NodeProcess(launch, proc)
        threading.Thread(target=self._pump, args=(node,), daemon=True).start()
        self.nodes = [n for n in self.nodes if n.name != launch.name] + [node]
        return node

    def node(self, name: str) -> NodeProcess:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

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
                tail = "\n".join(list(node.lines)[-15:])
                raise RuntimeError(f"node {node.name} exited with code {code}:\n{tail}")

    def output(self) -> str:
        return "\n".join(f"[{n.name}] {line}" for n in self.nodes for line in list(n.lines))

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

    def kill(self, name: str) -> None:
        """SIGKILL one node (tests: a peer that dies without saying goodbye)."""
        node = self.node(name)
        node.process.kill()
        node.process.wait(timeout=10)

    def __exit__(self, *exc: object) -> None:
        self.stop()


_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _stop_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that asks Linux to send the child SIGTERM (which the nodes handle as
    a clean shutdown) when the thread that started it ends, its whole process dying
    included, so a launcher killed without a chance to stop its nodes (SIGKILL, the OOM
    killer) does not leave them running; None where there is no prctl (not Linux). It
    runs in the child between fork and exec and does no more than call prctl, getppid
    and kill."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


@dataclass
class StopRequest:
    """What a stop signal left: the signal's name, None until one arrives. (A plain
    attribute: a signal handler must not take locks, such as a threading.Event's, that the
    interrupted main thread may hold.)"""

    reason: str | None = None


def install_stop_handlers() -> StopRequest:
    """SIGINT and SIGTERM record a stop request instead of ending the process at once, so
    the graph is always stopped on the way out (the nodes run in their own sessions and
    would otherwise be left running). Installed even where SIGINT is inherited as ignored."""
    request = StopRequest()

    def on_signal(signum: int, _frame: object) -> None:
        request.reason = signal.Signals(signum).name

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, on_signal)
    return request


def _truthy_text(value: str) -> bool:
    return value.strip().lower() not in {"false", "0", "no", "off"}


def _is_active(node: NodeProcess) -> bool:
    """The node logged its activation (ManagedNode logs "active" when it gets there)."""
    return any(line.rstrip().endswith("]: active") for line in list(node.lines))


def graph_up_message(namespace: str = "") -> str:
    """What `embodied-r launch` prints once every node is active: what to do next."""
    ns = f" --namespace {namespace}" if namespace else ""
    return (f"embodied-r launch: graph is up. Next, in another shell (`source scripts/env.sh`"
            f" first):\n"
            f"  embodied-r play BAG_OR_VIDEO    # feed camera frames (or run your camera driver)\n"
            f'  embodied-r ask "Is the door to my left or right?" --choice left --choice right{ns}\n'
            f"  embodied-r status{ns}\n"
            f"Ctrl-C here stops the graph.")


def main(argv: Sequence[str] | None = None) -> int:
    """`embodied-r launch [name:=value ...]`: start the graph like `ros2 launch` and run
    until SIGINT (Ctrl-C) or SIGTERM, then stop the nodes and return 0; or until a node
    exits, whose code is returned."""
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in {"-h", "--help"} for a in args):
        from embodied_r_ros import graph

        print("usage: embodied-r launch [name:=value ...]\n\nStarts the installed node "
              "executables exactly as `ros2 launch embodied_r_ros embodied_r.launch.py` "
              "does.\n" + graph.__doc__.split("Launch arguments", 1)[1])
        return 0
    try:
        arguments = parse_launch_arguments(args)
        # launch-argument names only (none is overrides, env or echo): all of them go to
        # GraphProcesses' **launch_arguments
        launch_arguments: dict[str, Any] = arguments
        graph_processes = GraphProcesses(arguments.pop("graph", "embedded"),
                                         arguments.pop("params_file", ""), **launch_arguments)
    except GraphDefinitionError as exc:
        print(f"embodied-r launch: {exc}", file=sys.stderr)
        return 2
    stop = install_stop_handlers()
    namespace = arguments.get("namespace", "").strip("/")
    print(f"embodied-r launch: starting {', '.join(n.name for n in graph_processes.launches)}"
          " (loading models can take minutes on first use)", file=sys.stderr, flush=True)
    announced = not _truthy_text(arguments.get("autostart", "true"))
    with graph_processes as running:
        while stop.reason is None:
            if not announced and all(_is_active(node) for node in running.nodes):
                announced = True
                print(graph_up_message(namespace), file=sys.stderr, flush=True)
            for node in running.nodes:
                code = node.process.poll()
                if code is not None:
                    print(f"embodied-r launch: node {node.name} exited with code {code}",
                          file=sys.stderr)
                    return code
            time.sleep(0.5)
        print(f"embodied-r launch: got {stop.reason}, stopping the nodes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
