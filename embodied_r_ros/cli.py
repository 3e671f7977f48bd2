"""The `embodied-r` command: one entry point, one module per subcommand.

Each subcommand lives in its own module exposing `main(argv: list[str]) -> int`; the
module is imported only when its subcommand runs, so `embodied-r keyframes` does not
import torch and `embodied-r demo` does not need a GPU.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "keyframes": (
        "embodied_r_ros.core.keyframes_cli",
        "print the key frames chosen from a video file (for tuning thresholds)",
    ),
    "tiny-models": (
        "embodied_r_ros.core.tiny_models",
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
        "replay a rosbag through the pipeline with a question file; accuracy and latency",
    ),
}


def _usage() -> str:
    lines = ["usage: embodied-r <command> [options]", "", "commands:"]
    width = max(len(name) for name in SUBCOMMANDS)
    for name, (_, help_text) in SUBCOMMANDS.items():
        lines.append(f"  {name.ljust(width)}  {help_text}")
    lines.append("")
    lines.append("Run `embodied-r <command> --help` for the options of one command.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"embodied-r: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
