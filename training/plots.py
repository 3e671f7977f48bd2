"""Training curves from a trainer's log history (`trainer_state.json`), as one PNG.

Six panels over optimizer steps: reward components (mean format / accuracy / consistency
reward, the weighted total, and the weights in force as dashed lines); accuracy reward on
the training batches and on the validation split; validation rewards (total, format,
accuracy: TRL's `eval_*` entries, logged every `eval_steps`); KL to the reference policy;
mean completion length in tokens (training and validation); learning rate (warm-up and
cosine decay). Panels whose metric was never logged (e.g. KL when beta = 0, validation
without `data.eval`) say so instead of staying blank.

    embodied-r-train plots artifacts/dry_run/grpo/trainer_state.json [--out curves.png]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.schedule import REWARD_NAMES


def series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one logged metric, skipping entries without it."""
    steps, values = [], []
    for entry in history:
        value = entry.get(key)
        if isinstance(value, (int, float)) and "step" in entry:
            steps.append(int(entry["step"]))
            values.append(float(value))
    return steps, values


def plot_training(state_path: str | Path, out: str | Path | None = None) -> list[Path]:
    """Write the curves PNG next to the state file (or to `out`); returns its path(s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    state_path = Path(state_path)
    history = json.loads(state_path.read_text())["log_history"]
    out = Path(out) if out else state_path.parent / "training_curves.png"
    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5), constrained_layout=True)
    (ax_r, ax_a, ax_v), (ax_kl, ax_len, ax_lr) = axes

    colors = {"format": "tab:blue", "accuracy": "tab:green", "consistency": "tab:purple"}
    for name in REWARD_NAMES:
        steps, values = series(history, f"rewards/{name}/mean")
        if steps:
            ax_r.plot(steps, values, label=f"{name} reward", color=colors[name])
        w_steps, w_values = series(history, f"reward_weight/{name}")
        if w_steps:
            ax_r.plot(w_steps, w_values, "--", color=colors[name], alpha=0.6, label=f"{name} weight")
    steps, values = series(history, "reward")
    if steps:
        ax_r.plot(steps, values, color="black", linewidth=2, label="weighted total")
    ax_r.set_title("reward components (training, mean per step)")
    _finish(ax_r, "reward")

    _lines(ax_a, history, [("rewards/accuracy/mean", "training batches", "tab:green", "-"),
                           ("eval_rewards/accuracy/mean", "validation split", "tab:red", "o-")],
           "accuracy reward", "accuracy")
    _lines(ax_v, history, [("eval_reward", "weighted total", "black", "o-"),
                           ("eval_rewards/format/mean", "format", "tab:blue", "o-"),
                           ("eval_rewards/accuracy/mean", "accuracy", "tab:green", "o-"),
                           ("eval_rewards/consistency/mean", "consistency", "tab:purple", "o-")],
           "validation split (every eval_steps)", "reward")
    _lines(ax_kl, history, [("kl", "training", "tab:red", "-")], "KL to the reference policy", "KL")
    _lines(ax_len, history, [("completions/mean_length", "training", "tab:orange", "-"),
                             ("eval_completions/mean_length", "validation", "tab:brown", "o-")],
           "mean completion length", "tokens")
    _lines(ax_lr, history, [("learning_rate", "learning rate", "tab:gray", "-")], "learning rate", "lr")
    fig.suptitle(f"GRPO training: {state_path.parent.name}")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return [out]


def _lines(ax: Any, history: Sequence[Mapping[str, Any]], keys: Sequence[tuple[str, str, str, str]],
           title: str, ylabel: str) -> None:
    """One line per logged key; a note in the panel when none of them was logged."""
    drawn = False
    for key, label, color, style in keys:
        steps, values = series(history, key)
        if steps:
            ax.plot(steps, values, style, color=color, label=label, markersize=4)
            drawn = True
    if not drawn:
        names = ", ".join(f"'{k}'" for k, *_ in keys)
        ax.text(0.5, 0.5, f"{names} not logged", ha="center", va="center", transform=ax.transAxes,
                wrap=True, fontsize=8)
    ax.set_title(title)
    _finish(ax, ylabel)


def _finish(ax: Any, ylabel: str) -> None:
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="embodied-r-train plots", description=__doc__.split("\n\n")[0])
    parser.add_argument("state", help="trainer_state.json (in the output folder or a checkpoint)")
    parser.add_argument("--out", default=None, help="PNG path (default: training_curves.png beside the state)")
    args = parser.parse_args(argv)
    for path in plot_training(args.state, args.out):
        print(path)
    return 0
