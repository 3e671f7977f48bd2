"""The `embodied-r-train` command: one subcommand per module, imported only when run."""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("embodied_r_training.data", "filter the benchmarks to the paper's categories and split by scene"),
    "cache-perception": ("embodied_r_training.perception_cache", "key frames + VLM descriptions per video, cached and resumable"),
    "grpo": ("embodied_r_training.grpo", "GRPO training of the reasoning LM (TRL) from a YAML config"),
    "evaluate": ("embodied_r_training.evaluate", "accuracy per category, consistency rate, completion length"),
    "plots": ("embodied_r_training.plots", "training curves (PNG) from trainer_state.json"),
    "toy-data": ("embodied_r_training.toy", "write a small synthetic benchmark in the real file formats"),
}


def _usage() -> str:
    width = max(len(n) for n in SUBCOMMANDS)
    lines = ["usage: embodied-r-train <command> [options]", "", "commands:"]
    lines += [f"  {n.ljust(width)}  {h}" for n, (_, h) in SUBCOMMANDS.items()]
    lines += ["", "Run `embodied-r-train <command> --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help", "help"}:
        print(_usage())
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"embodied-r-train: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
