"""GRPO training of the reasoning LM with TRL's `GRPOTrainer`, from one YAML config.

    embodied-r-train grpo --config training/configs/tiny_cpu.yaml [--resume [CKPT]]
                          [--set grpo.max_steps=3 ...]

The trainer reads cached records (from `cache-perception`): `prompt` (the chat messages
built by the core's `build_reasoning_messages`), `solution` (the answer letter) and
`question` (question + choices, used by the consistency reward). Numeric questions
(`prepare --include-numeric`) are left out of training and counted. With `data.eval`
(the 5% validation split) and `grpo.eval_strategy: steps`, TRL samples completions for
every validation question every `eval_steps` and logs their rewards as `eval_*` entries
(the reference evaluates its validation set every 100 steps the same way); `plots`
draws them beside the training curves. `model.language_model_of_vlm` trains the language
model of a Qwen2.5-VL checkpoint (see `policy`). Rewards come from the
core through `reward_funcs`; their weights follow the configured schedule through
`RewardScheduleCallback` (see `schedule`). Multi-GPU / multi-node runs go through
`accelerate launch` with the configs under training/configs/ (DeepSpeed ZeRO-3), and
rollouts through vLLM when `grpo.use_vllm` is set (server or colocate mode).

TRL 1.16 no longer truncates prompts, so `data.max_prompt_tokens` (the paper's 6144)
drops longer prompts before training and counts them, instead of silently cutting the
video description.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.append_only import write_json_atomic
from embodied_r_training.config import load_config
from embodied_r_training.data import read_jsonl
from embodied_r_training.policy import resolve_policy
from embodied_r_training.reward_funcs import NamedReward, build_reward_funcs, initial_weights
from embodied_r_training.schedule import RewardScheduleCallback, schedule_from_config

log = logging.getLogger("embodied_r_training.grpo")

# Columns the trainer and the rewards need from each cached record.
TRAIN_COLUMNS = ("prompt", "solution", "question", "question_category", "Question_id")


def load_records_dataset(
    path: str | Path,
    *,
    tokenizer: Any = None,
    max_prompt_tokens: int | None = None,
    max_samples: int | None = None,
) -> tuple[Any, dict[str, int]]:
    """A `datasets.Dataset` of the training columns, with over-long prompts dropped.

    Returns (dataset, stats) where stats counts read, kept, too_long and numeric (answer
    is a number, not an option letter: evaluation-only) records.
    """
    from datasets import Dataset

    rows = read_jsonl(path)
    if max_samples:
        rows = rows[: int(max_samples)]
    missing = [c for c in ("prompt", "solution") if rows and c not in rows[0]]
    if missing:
        raise ValueError(
            f"{path}: records lack {missing}; train on the output of "
            "`embodied-r-train cache-perception`, not on raw question records"
        )
    stats = {"read": len(rows), "too_long": 0, "numeric": 0}
    kept = []
    for row in rows:
        if row.get("answer_type") == "numeric":
            stats["numeric"] += 1
            continue
        if tokenizer is not None and max_prompt_tokens:
            ids = tokenizer.apply_chat_template(
                row["prompt"], add_generation_prompt=True, tokenize=True
            )
            if hasattr(ids, "keys"):
                ids = ids["input_ids"]
            if len(ids) > int(max_prompt_tokens):
                stats["too_long"] += 1
                continue
        kept.append({c: row.get(c, "") for c in TRAIN_COLUMNS})
    stats["kept"] = len(kept)
    if not kept:
        raise ValueError(f"{path}: no usable records ({stats})")
    return Dataset.from_list(kept), stats


# transformers 5 renamed these TrainingArguments (old name -> new name) and, when both are
# given, silently uses the new one: `--set grpo.gradient_checkpointing=false` over a config
# that says `activation_checkpointing: true` would change nothing.
RENAMED_GRPO_KEYS = {
    "gradient_checkpointing": "activation_checkpointing",
    "gradient_checkpointing_kwargs": "activation_checkpointing_kwargs",
}


def resolve_renamed_keys(grpo: dict[str, Any], fields: Mapping[str, Any]) -> None:
    """Give each key of RENAMED_GRPO_KEYS the one name the installed GRPOConfig (whose
    dataclass `fields` are passed) reads, in place; ConfigError when both names are set
    to different values. Where the new name exists and checkpointing is left unset, TRL's
    own default is written under the new name, so transformers has no old name to warn of."""
    from embodied_r_training.errors import ConfigError

    for old, new in RENAMED_GRPO_KEYS.items():
        if old in grpo and new in grpo and grpo[old] != grpo[new]:
            raise ConfigError(
                f"grpo.{old} = {grpo[old]!r} and grpo.{new} = {grpo[new]!r} disagree "
                f"({old} is the older name of {new}); set only one of them (the config "
                f"files use grpo.{new})."
            )
        keep, drop = (new, old) if new in fields else (old, new)
        if drop in grpo:
            grpo[keep] = grpo.pop(drop)
    if "activation_checkpointing" in fields and "gradient_checkpointing" in fields:
        grpo.setdefault("activation_checkpointing", fields["gradient_checkpointing"].default)


def build_grpo_config(cfg: Mapping[str, Any], reward_weights: Sequence[float]) -> Any:
    """A `trl.GRPOConfig` from the `grpo` section plus model loading arguments."""
    from trl import GRPOConfig

    grpo = dict(cfg.get("grpo") or {})
    resolve_renamed_keys(grpo, GRPOConfig.__dataclass_fields__)
    model_cfg = dict(cfg.get("model") or {})
    init_kwargs = dict(grpo.pop("model_init_kwargs", None) or {})
    if model_cfg.get("dtype"):
        init_kwargs.setdefault("dtype", model_cfg["dtype"])
    if model_cfg.get("attn_implementation"):
        init_kwargs.setdefault("attn_implementation", model_cfg["attn_implementation"])
    grpo.setdefault("report_to", "none")
    for key, value in list(grpo.items()):
        # YAML reads a bare `no` as False: `--set grpo.eval_strategy=no` means "no".
        if key.endswith("_strategy") and value is False:
            grpo[key] = "no"
    grpo["reward_weights"] = list(reward_weights)
    return GRPOConfig(model_init_kwargs=init_kwargs or None, **grpo)


def build_peft_config(lora_cfg: Mapping[str, Any]) -> Any:
    """A `peft.LoraConfig` when `lora.enabled`, else None."""
    if not lora_cfg or not lora_cfg.get("enabled", False):
        return None
    from peft import LoraConfig

    options = {k: v for k, v in lora_cfg.items() if k != "enabled"}
    options.setdefault("task_type", "CAUSAL_LM")
    return LoraConfig(**options)


def build_trainer(
    cfg: Mapping[str, Any],
    *,
    reward_funcs: Sequence[Any] | None = None,
    reward_names: Sequence[str] | None = None,
    train_dataset: Any = None,
    extra_callbacks: Sequence[Any] = (),
) -> tuple[Any, RewardScheduleCallback, dict[str, Any]]:
    """Build the GRPOTrainer for a loaded config.

    `reward_funcs`/`reward_names` replace the rewards of rewards.py (tests use this to train on a
    toy reward); `train_dataset` replaces `data.train`. Returns (trainer, schedule
    callback, info).
    """
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    model_cfg = dict(cfg.get("model") or {})
    output_dir = (cfg.get("grpo") or {}).get("output_dir") or "outputs/grpo"
    model_path = resolve_policy(model_cfg, output_dir)
    schedule = schedule_from_config((cfg.get("rewards") or {}).get("schedule"))
    if reward_funcs is None:
        reward_funcs, reward_names = build_reward_funcs(cfg.get("rewards") or {}, schedule)
    if reward_names is None or len(reward_names) != len(reward_funcs):
        raise ValueError("custom reward_funcs need one name each in reward_names")
    # TRL names metrics after `__name__`; give every function the schedule's name.
    reward_funcs = [
        f if getattr(f, "__name__", None) == n else NamedReward(n, f)
        for f, n in zip(reward_funcs, reward_names)
    ]
    weights = initial_weights(schedule, reward_names)
    args = build_grpo_config(cfg, weights)
    tokenizer = AutoTokenizer.from_pretrained(
        model_path, trust_remote_code=bool(model_cfg.get("trust_remote_code", False))
    )
    info: dict[str, Any] = {"reward_names": list(reward_names), "schedule": schedule.to_dict(),
                            "policy": str(model_path)}
    data_cfg = dict(cfg.get("data") or {})
    if train_dataset is None:
        train_dataset, info["train_data"] = load_records_dataset(
            data_cfg["train"],
            tokenizer=tokenizer,
            max_prompt_tokens=data_cfg.get("max_prompt_tokens"),
            max_samples=data_cfg.get("max_samples"),
        )
    eval_dataset = None
    if data_cfg.get("eval"):
        eval_dataset, info["eval_data"] = load_records_dataset(
            data_cfg["eval"], tokenizer=tokenizer,
            max_prompt_tokens=data_cfg.get("max_prompt_tokens"),
        )
    callback = RewardScheduleCallback(schedule, reward_names)
    trainer = GRPOTrainer(
        model=str(model_path),
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=build_peft_config(cfg.get("lora") or {}),
        callbacks=[callback, *extra_callbacks],
    )
    callback.attach(trainer)
    return trainer, callback, info


def latest_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoint-N` folder in output_dir, or None."""
    folders = [p for p in Path(output_dir).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    if not folders:
        return None
    return str(max(folders, key=lambda p: int(p.name.split("-")[-1])))


def train(cfg: Mapping[str, Any], resume: str | bool | None = None, **build_kwargs: Any) -> dict[str, Any]:
    """Build, train (optionally resuming), save the final model; return a summary.

    `resume`: True = newest checkpoint in the output folder (error if there is none),
    a path = that checkpoint, None/False = start fresh.
    """
    trainer, callback, info = build_trainer(cfg, **build_kwargs)
    output_dir = Path(trainer.args.output_dir)
    checkpoint: str | None = None
    if resume is True:
        checkpoint = latest_checkpoint(output_dir)
        if checkpoint is None:
            raise FileNotFoundError(f"--resume: no checkpoint-* folder in {output_dir}")
    elif resume:
        checkpoint = str(resume)
    result = trainer.train(resume_from_checkpoint=checkpoint)
    final_dir = output_dir / "final"
    trainer.save_model(str(final_dir))  # every rank takes part (ZeRO-3 gathers the weights)
    is_main = bool(trainer.args.should_save)
    if is_main:
        trainer.state.save_to_json(str(output_dir / "trainer_state.json"))
    summary = {
        "output_dir": str(output_dir),
        "final_model": str(final_dir),
        "resumed_from": checkpoint,
        "global_step": trainer.state.global_step,
        "epoch": trainer.state.epoch,
        "train_loss": getattr(result, "training_loss", None),
        "is_main_process": is_main,
        "weight_changes": [
            {"global_step": s, "epoch": e, "weights": dict(zip(info["reward_names"], w))}
            for s, e, w in callback.history
        ],
        **info,
    }
    if is_main:
        write_json_atomic(output_dir / "run_summary.json", summary)
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embodied-r-train grpo",
        description="GRPO training of the reasoning LM (TRL GRPOTrainer) from a YAML config.",
    )
    parser.add_argument("--config", required=True, help="YAML config (path or packaged name)")
    parser.add_argument(
        "--resume", nargs="?", const=True, default=None,
        help="resume from the newest checkpoint in grpo.output_dir, or from the given one",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="override a config value (YAML-parsed), e.g. --set grpo.max_steps=3",
    )
    parser.add_argument("--plots", action="store_true", help="write training curves after training")
    return parser


LIBRARIES = ("transformers", "trl", "torch", "accelerate", "peft", "datasets", "deepspeed")


def quiet_libraries() -> None:
    """Keep a GRPO run's console readable: the libraries' FutureWarning and
    DeprecationWarning notes (about their own future APIs, nothing a user of this package
    can act on) and their nested progress bars (weights loading, dataset maps, hub
    downloads) are left out; the trainer's own progress bar and logs stay. Set
    EMBODIED_R_LIBRARY_WARNINGS=1 to see everything."""
    if os.environ.get("EMBODIED_R_LIBRARY_WARNINGS") == "1":
        return
    import warnings

    for library in LIBRARIES:
        for category in (FutureWarning, DeprecationWarning):
            warnings.filterwarnings("ignore", category=category, module=rf"{library}(\.|$)")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        import transformers

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers is a training dependency
        pass
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:  # pragma: no cover
        pass


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"))
    quiet_libraries()
    cfg = load_config(args.config, args.overrides)
    summary = train(cfg, resume=args.resume)
    if args.plots and summary["is_main_process"]:
        from embodied_r_training.plots import plot_training

        summary["plots"] = [str(p) for p in plot_training(Path(summary["output_dir"]) / "trainer_state.json")]
    print(json.dumps(summary, indent=2, default=str))
    return 0
