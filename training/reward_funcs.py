"""TRL reward functions for GRPO, built from rewards.py (one copy of each reward).

TRL calls every reward function as `f(prompts=..., completions=..., completion_ids=...,
**dataset_columns, trainer_state=..., log_extra=..., log_metric=...)` and names it by its
`__name__`; the core functions take the same keyword form (ground truth in the column
`solution`, question text in `question`). `NamedReward` only gives each a stable name
("format", "accuracy", "consistency") so the logs read `rewards/<name>/mean`.

The consistency reward asks a frozen reference model; it is built from a `ModelSpec`
(transformers in-process or any OpenAI-compatible server such as `vllm serve`). While the
schedule gives it weight 0 it returns None for every completion (TRL stores NaN and its
weighted `nansum` skips it), so no reference-model calls are spent in those epochs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from embodied_r_training.schedule import REWARD_NAMES, RewardSchedule

RewardFunc = Callable[..., list[float | None]]


class NamedReward:
    """A reward function with a fixed `__name__` (TRL uses it for its metric names)."""

    def __init__(self, name: str, func: RewardFunc) -> None:
        self.__name__ = name
        self.func = func

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        return list(self.func(completions=completions, prompts=prompts, **kwargs))


class GatedReward(NamedReward):
    """Skips the wrapped reward (returns None per completion) while its weight is 0."""

    def __init__(self, name: str, func: RewardFunc, schedule: RewardSchedule) -> None:
        super().__init__(name, func)
        self.schedule = schedule
        self.index = REWARD_NAMES.index(name)
        self.skipped_batches = 0

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        state = kwargs.get("trainer_state")
        epoch = getattr(state, "epoch", None) if state is not None else None
        if self.schedule.weights_at(epoch)[self.index] == 0.0:
            self.skipped_batches += 1
            return [None] * len(completions)
        return super().__call__(prompts=prompts, completions=completions, **kwargs)


def make_consistency_reward(
    model_cfg: Mapping[str, Any], options: Mapping[str, Any] | None = None
) -> Any:
    """The core `ConsistencyReward` over a reference model given as a ModelSpec mapping.

    `options` may set max_workers, timeout_s, cache_size, temperature, max_new_tokens and
    prompts_file (a prompt templates file; its consistency.* templates build the judge's
    prompt). The judge decodes with `options`' temperature and max_new_tokens, else those
    of `model_cfg` when it sets them, else the reference settings (0.1, 10 new tokens).
    """
    from embodied_r_ros.core.backends.factory import make_reasoner
    from embodied_r_ros.core.backends.model_spec import ModelSpec
    from embodied_r_ros.core.types import GenerationSettings
    from embodied_r_training.rewards import ConsistencyReward

    opts = dict(options or {})
    spec = ModelSpec.from_dict(dict(model_cfg))
    reasoner = make_reasoner(spec)
    kwargs: dict[str, Any] = {}
    for key in ("max_workers", "timeout_s", "cache_size"):
        if key in opts:
            kwargs[key] = opts.pop(key)
    decoding = {k: model_cfg[k] for k in ("temperature", "max_new_tokens") if k in model_cfg}
    decoding.update({k: opts.pop(k) for k in ("temperature", "max_new_tokens") if k in opts})
    if decoding:
        kwargs["settings"] = GenerationSettings(
            temperature=float(decoding.get("temperature", 0.1)),
            max_new_tokens=int(decoding.get("max_new_tokens", 10)),
        )
    if "prompts_file" in opts:  # the judge's prompt from the same file the robot reads
        from embodied_r_ros.core.prompts.prompt_set import load_prompt_set

        kwargs["prompts"] = load_prompt_set(opts.pop("prompts_file"))
    if opts:
        raise ValueError(f"unknown consistency option(s): {sorted(opts)}")
    return ConsistencyReward(reasoner, **kwargs)


def build_reward_funcs(
    rewards_cfg: Mapping[str, Any], schedule: RewardSchedule
) -> tuple[list[NamedReward], list[str]]:
    """The reward functions the schedule ever weights, in REWARD_NAMES order.

    `rewards_cfg` keys: `consistency_model` (ModelSpec mapping, needed when the schedule
    uses consistency), `consistency` (options for `make_consistency_reward`) and `rules`
    ({format: project|reference, accuracy: project|reference}; default project for both,
    see the rewards module for what differs). Returns (functions, names).
    """
    from embodied_r_ros.core.errors import ConfigError
    from embodied_r_training.rewards import accuracy_reward_for, format_reward_for

    rules = dict(rewards_cfg.get("rules") or {})
    unknown = sorted(set(rules) - {"format", "accuracy"})
    if unknown:
        raise ConfigError(f"rewards.rules: unknown key(s) {unknown}; allowed: format, accuracy")
    format_reward = format_reward_for(str(rules.get("format", "project")))
    accuracy_reward = accuracy_reward_for(str(rules.get("accuracy", "project")))
    funcs: list[NamedReward] = []
    names: list[str] = []
    for name in REWARD_NAMES:
        if not schedule.uses(name):
            continue
        if name == "format":
            funcs.append(NamedReward(name, format_reward))
        elif name == "accuracy":
            funcs.append(NamedReward(name, accuracy_reward))
        else:
            model_cfg = rewards_cfg.get("consistency_model")
            if not model_cfg:
                raise ValueError(
                    "the reward schedule weights consistency, so rewards.consistency_model "
                    "(a model spec: backend, model, base_url ...) must be set"
                )
            reward = make_consistency_reward(model_cfg, rewards_cfg.get("consistency"))
            funcs.append(GatedReward(name, reward, schedule))
        names.append(name)
    return funcs, names


def initial_weights(schedule: RewardSchedule, names: Sequence[str]) -> list[float]:
    """Weights of the first epoch for the given reward names (GRPOConfig.reward_weights)."""
    first = schedule.weights_for_epoch(1)
    return [first[REWARD_NAMES.index(n)] for n in names]
