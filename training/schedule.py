"""Reward weights that change with the training epoch (the paper's stage schedule).

The paper trains 12 epochs with format : accuracy : consistency weights
7:3:0 (epochs 1-2), 3:7:0 (epochs 3-4), 1:7:2 (epochs 5-12). The reference code instead
uses fixed 0.1 / 0.7 / 0.2 (docs/method.md §5). Both are defined here, once
(`PAPER_STAGE_WEIGHTS`, `REFERENCE_CODE_WEIGHTS`); the robot never weights rewards, so
they live in the training package, not in the core.

How TRL 1.16 uses the weights: `GRPOTrainer._generate_and_score_completions` multiplies
the per-function reward matrix by the tensor `trainer.reward_weights`, sums, and
normalises within each group to get the advantages (the logged `reward` uses the same
tensor). `RewardScheduleCallback` replaces that tensor at the start of every optimizer
step with the weights of the current epoch, so the advantages of every generation batch
use the stage the batch belongs to. Because generation happens at the first micro-step
of an optimizer step (steps_per_generation = gradient_accumulation_steps, the default),
the switch happens exactly at the epoch boundary; it is also correct after a resume,
because it is recomputed from `state.epoch` which the checkpoint restores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from transformers import TrainerCallback

# Order of the reward functions everywhere in this package.
REWARD_NAMES: tuple[str, ...] = ("format", "accuracy", "consistency")


@dataclass(frozen=True)
class RewardWeights:
    """Weights of the format, accuracy and consistency rewards in the total."""

    format: float
    accuracy: float
    consistency: float


# The fixed weights of the reference code's training scripts.
REFERENCE_CODE_WEIGHTS = RewardWeights(format=0.1, accuracy=0.7, consistency=0.2)

# The paper's schedule as (first epoch, weights), 1-based epochs: 7:3:0, 3:7:0, 1:7:2.
PAPER_STAGE_WEIGHTS: tuple[tuple[int, RewardWeights], ...] = (
    (1, RewardWeights(0.7, 0.3, 0.0)),
    (3, RewardWeights(0.3, 0.7, 0.0)),
    (5, RewardWeights(0.1, 0.7, 0.2)),
)


def paper_stage_weights(epoch: int) -> RewardWeights:
    """The paper's weights for a 1-based epoch (epochs 1-2, 3-4, then 5 onwards)."""
    chosen = PAPER_STAGE_WEIGHTS[0][1]
    for first_epoch, weights in PAPER_STAGE_WEIGHTS:
        if epoch >= first_epoch:
            chosen = weights
    return chosen


def total_reward(
    format_r: Sequence[float],
    accuracy_r: Sequence[float],
    consistency_r: Sequence[float],
    weights: RewardWeights = REFERENCE_CODE_WEIGHTS,
) -> list[float]:
    """Element-wise ``w_f*format + w_a*accuracy + w_c*consistency``."""
    if not len(format_r) == len(accuracy_r) == len(consistency_r):
        raise ValueError("the three reward lists must have the same length")
    return [
        weights.format * f + weights.accuracy * a + weights.consistency * c
        for f, a, c in zip(format_r, accuracy_r, consistency_r)
    ]


StageWeights = tuple[float, float, float]  # format, accuracy, consistency


@dataclass(frozen=True)
class Stage:
    """Weights used from `first_epoch` to `last_epoch` (1-based, inclusive)."""

    first_epoch: int
    last_epoch: int
    weights: StageWeights


@dataclass(frozen=True)
class RewardSchedule:
    """Weights per epoch. Epochs after the last stage keep the last stage's weights."""

    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a reward schedule needs at least one stage")
        expected = 1
        for stage in self.stages:
            if stage.first_epoch != expected or stage.last_epoch < stage.first_epoch:
                raise ValueError(
                    f"stages must cover epochs 1, 2, ... without gaps; got {self.stages}"
                )
            if len(stage.weights) != 3 or any(w < 0 for w in stage.weights):
                raise ValueError(f"weights must be three non-negative numbers: {stage}")
            expected = stage.last_epoch + 1

    def weights_for_epoch(self, epoch: int) -> tuple[float, float, float]:
        """Weights for a 1-based epoch number."""
        for stage in self.stages:
            if stage.first_epoch <= epoch <= stage.last_epoch:
                return stage.weights
        return self.stages[-1].weights

    def weights_at(self, state_epoch: float | None) -> tuple[float, float, float]:
        """Weights for the trainer's fractional `state.epoch` (0.0 = start of epoch 1)."""
        done = 0 if state_epoch is None else math.floor(state_epoch + 1e-6)
        return self.weights_for_epoch(done + 1)

    def uses(self, name: str) -> bool:
        """True when some stage gives the named reward a non-zero weight."""
        index = REWARD_NAMES.index(name)
        return any(stage.weights[index] > 0 for stage in self.stages)

    def to_dict(self) -> list[dict[str, Any]]:
        return [
            {"epochs": [s.first_epoch, s.last_epoch], **dict(zip(REWARD_NAMES, s.weights))}
            for s in self.stages
        ]

    @classmethod
    def fixed(cls, weights: Sequence[float]) -> RewardSchedule:
        # RewardSchedule checks that there are three
        w = cast(StageWeights, tuple(float(x) for x in weights))
        return cls((Stage(1, 1, w),))


PAPER_EPOCHS = 12


def paper_schedule(total_epochs: int = PAPER_EPOCHS) -> RewardSchedule:
    """The paper's stages, from `PAPER_STAGE_WEIGHTS` (7:3:0, 3:7:0, 1:7:2)."""
    firsts = [first for first, _ in PAPER_STAGE_WEIGHTS]
    stages = []
    for i, (first, w) in enumerate(PAPER_STAGE_WEIGHTS):
        last = firsts[i + 1] - 1 if i + 1 < len(firsts) else max(total_epochs, first)
        stages.append(Stage(first, last, (w.format, w.accuracy, w.consistency)))
    return RewardSchedule(tuple(stages))


def reference_code_schedule() -> RewardSchedule:
    """The reference code's fixed weights, `REFERENCE_CODE_WEIGHTS`."""
    w = REFERENCE_CODE_WEIGHTS
    return RewardSchedule.fixed((w.format, w.accuracy, w.consistency))


def schedule_from_config(cfg: Any) -> RewardSchedule:
    """Build a schedule from the `rewards.schedule` config value.

    Accepted: "paper"; "reference_code"; a mapping {format, accuracy, consistency}
    (fixed weights); or a list of stages [{epochs: [first, last], format, accuracy,
    consistency}, ...].
    """
    if cfg is None or cfg == "paper":
        return paper_schedule()
    if cfg == "reference_code":
        return reference_code_schedule()
    if isinstance(cfg, Mapping):
        return RewardSchedule.fixed([float(cfg.get(name, 0.0)) for name in REWARD_NAMES])
    if isinstance(cfg, Sequence) and not isinstance(cfg, str):
        stages = []
        for item in cfg:
            first, last = item["epochs"]
            # RewardSchedule checks that there are three
            weights = cast(StageWeights, tuple(float(item.get(name, 0.0)) for name in REWARD_NAMES))
            stages.append(Stage(int(first), int(last), weights))
        return RewardSchedule(tuple(stages))
    raise ValueError(f"unknown reward schedule: {cfg!r}")


class RewardScheduleCallback(TrainerCallback):
    """Sets `trainer.reward_weights` from the schedule at every epoch and step start.

    `names` are the trainer's reward functions in order (a subset of REWARD_NAMES: a
    reward never weighted is not computed at all). The callback needs the trainer, so
    call `attach(trainer)` after building it (`build_trainer` does).
    """

    def __init__(self, schedule: RewardSchedule, names: Sequence[str]) -> None:
        self.schedule = schedule
        self.names = list(names)
        self.trainer: Any = None
        self.applied: list[float] | None = None  # weights last put in force
        self.history: list[tuple[int, float, tuple[float, ...]]] = []

    def attach(self, trainer: Any) -> None:
        self.trainer = trainer
        self.applied = None  # force the first `_apply` to set and record its weights
        self._apply(trainer.state)

    def current(self, state_epoch: float | None) -> list[float]:
        full = self.schedule.weights_at(state_epoch)
        return [full[REWARD_NAMES.index(name)] for name in self.names]

    def _apply(self, state: Any) -> None:
        if self.trainer is None:
            return
        import torch

        weights = self.current(getattr(state, "epoch", None))
        if weights != self.applied:
            self.trainer.reward_weights = torch.tensor(weights, dtype=torch.float32)
            self.applied = weights
            self.history.append((int(state.global_step), float(state.epoch or 0.0), tuple(weights)))

    def on_train_begin(self, args, state, control, **kwargs):
        self._apply(state)

    def on_epoch_begin(self, args, state, control, **kwargs):
        self._apply(state)

    def on_step_begin(self, args, state, control, **kwargs):
        self._apply(state)

    def on_log(self, args, state, control, logs=None, **kwargs):
        # Record the weights in force beside the logged rewards (the trainer has already
        # appended its copy of `logs` to the history, so update that entry).
        if self.trainer is not None and state.log_history and "reward" in state.log_history[-1]:
            for name, weight in zip(self.names, self.applied or []):
                state.log_history[-1][f"reward_weight/{name}"] = weight
