"""The `embodied-r` command: one entry point, one module per subcommand.

Each subcommand lives in its own module exposing `main(argv: list[str]) -> int`; the
module is imported only when its subcommand runs, so `embodied-r keyframes` does not
import torch and `embodied-r demo` does not need a GPU.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "launch": (
        "embodied_r_ros.graph_processes",
        "start the node graph like `ros2 launch embodied_r_ros embodied_r.launch.py`",
    ),
    "play": (
        "embodied_r_ros.play",
        "publish a rosbag's or a video's frames onto a running graph's camera topic",
    ),
    "ask": ("embodied_r_ros.client_cli:ask", "ask a running graph a question"),
    "reset": ("embodied_r_ros.client_cli:reset", "start a new episode on a running graph"),
    "status": ("embodied_r_ros.client_cli:status", "print a running graph's status"),
    "keyframes": (
        "embodied_r_ros.core.keyframes.cli",
        "print the key frames chosen from a video file (for tuning thresholds)",
    ),
    "memory": (
        "embodied_r_ros.core.memory.cli",
        "the robot's key-frame store: import, search, select, export (JSONL, HTML), stats",
    ),
    "tiny-models": (
        "embodied_r_ros.testing.tiny_models",
        "build tiny random Qwen2.5-VL and Qwen2 models into a folder (no download)",
    ),
    "make-sample": (
        "embodied_r_ros.sample_data.cli",
        "render the synthetic sample clip, write it as a rosbag2 MCAP file plus questions",
    ),
    "demo": (
        "embodied_r_ros.demo",
        "run the node graph on the sample bag and ask the sample questions",
    ),
    "replay-eval": (
        "embodied_r_ros.replay_eval",
        "replay rosbags through the pipeline (fast or live) with a question file; accuracy, "
        "latency, resumable",
    ),
    "video2bag": (
        "embodied_r_ros.video2bag",
        "convert benchmark videos (mp4 ...) into rosbag2 camera bags for replay-eval",
    ),
}


def usage(prog: str, subcommands: dict[str, tuple[str, str]]) -> str:
    width = max(len(name) for name in subcommands)
    lines = [f"usage: {prog} <command> [options]", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {help_text}" for name, (_, help_text) in subcommands.items()]
    lines += ["", f"Run `{prog} <command> --help` for the options of one command."]
    return "\n".join(lines)


def dispatch(prog: str, subcommands: dict[str, tuple[str, str]], argv: list[str] | None) -> int:
    """Run `<prog> <command> ...`: import the command's module, call its main(rest)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(usage(prog, subcommands))
        return 0
    name, rest = args[0], args[1:]
    if name not in subcommands:
        print(f"{prog}: unknown command {name!r}\n\n{usage(prog, subcommands)}", file=sys.stderr)
        return 2
    target = subcommands[name][0]
    module_name, _, function = target.partition(":")
    module = importlib.import_module(module_name)
    return int(getattr(module, function or "main")(rest) or 0)


def main(argv: list[str] | None = None) -> int:
    return dispatch("embodied-r", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
