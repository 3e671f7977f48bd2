"""The `embodied-r-train` command: one subcommand per module, imported only when run."""

from __future__ import annotations

import sys

from embodied_r_ros.cli import dispatch

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "prepare": ("embodied_r_training.data", "filter the benchmarks to the paper's categories and split by scene"),
    "cache-perception": ("embodied_r_training.perception_cache",
                         "key frames + VLM descriptions per video, cached and resumable"),
    "grpo": ("embodied_r_training.grpo", "GRPO training of the reasoning LM (TRL) from a YAML config"),
    "evaluate": ("embodied_r_training.evaluate", "accuracy per category, consistency rate, completion length"),
    "plots": ("embodied_r_training.plots", "training curves (PNG) from trainer_state.json"),
    "extract-lm": ("embodied_r_training.policy", "write the language model of a Qwen2.5-VL checkpoint as a Qwen2 LM"),
    "mini-world": ("embodied_r_training.mini_world.run",
                   "train and measure both models on the mini world (one command; --ship to ship them)"),
    "toy-data": ("embodied_r_training.toy", "write a small synthetic benchmark laid out like the published downloads"),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("embodied-r-train", SUBCOMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
