"""GRPO training with TRL on the CPU: staged reward weights, checkpoints, resume, learning."""

from __future__ import annotations

import glob
import hashlib
import json

import pandas as pd
import pytest
import torch

from embodied_r_training import data
from embodied_r_training.config import load_config
from embodied_r_training.grpo import latest_checkpoint, train
from embodied_r_training.perception_cache import build_record
from embodied_r_training.schedule import (
    PAPER_STAGE_WEIGHTS,
    REFERENCE_CODE_WEIGHTS,
    RewardSchedule,
    RewardWeights,
    Stage,
    paper_schedule,
    paper_stage_weights,
    schedule_from_config,
    total_reward,
)
from embodied_r_training.toy import make_published_tree

pytestmark = pytest.mark.slow  # trains, builds or pushes long loads


# --------------------------------------------------------------------------- schedule
def test_paper_schedule_by_epoch():
    schedule = paper_schedule()
    expected = {1: (0.7, 0.3, 0.0), 2: (0.7, 0.3, 0.0), 3: (0.3, 0.7, 0.0), 4: (0.3, 0.7, 0.0)}
    expected.update({e: (0.1, 0.7, 0.2) for e in range(5, 13)})
    assert {e: schedule.weights_for_epoch(e) for e in range(1, 13)} == expected
    # Trainer epochs are fractional and 0-based: 1.999 is still the 2nd epoch.
    assert schedule.weights_at(0.0) == expected[1]
    assert schedule.weights_at(1.999) == expected[2]
    assert schedule.weights_at(2.0) == expected[3]
    assert schedule.weights_at(4.0) == expected[5]
    assert schedule.weights_at(11.5) == expected[12]


def test_weights_and_total():
    assert REFERENCE_CODE_WEIGHTS == RewardWeights(format=0.1, accuracy=0.7, consistency=0.2)
    got = total_reward([1, 1, 0], [1, 0, 0], [1, 0, 0], REFERENCE_CODE_WEIGHTS)
    assert got == pytest.approx([1.0, 0.1, 0.0])
    with pytest.raises(ValueError):
        total_reward([1], [1, 0], [1], REFERENCE_CODE_WEIGHTS)
    assert [paper_stage_weights(e) for e in (1, 2, 3, 4, 5, 12)] == [
        RewardWeights(0.7, 0.3, 0.0), RewardWeights(0.7, 0.3, 0.0),
        RewardWeights(0.3, 0.7, 0.0), RewardWeights(0.3, 0.7, 0.0),
        RewardWeights(0.1, 0.7, 0.2), RewardWeights(0.1, 0.7, 0.2),
    ]
    assert [first for first, _ in PAPER_STAGE_WEIGHTS] == [1, 3, 5]
    with pytest.raises(Exception):
        REFERENCE_CODE_WEIGHTS.format = 1.0  # type: ignore[misc]


def test_reward_rules_choose_the_functions():
    from embodied_r_training.reward_funcs import build_reward_funcs
    from embodied_r_training.rewards import (
        accuracy_reward,
        format_reward,
        reference_accuracy_reward,
        reference_format_reward,
    )

    schedule = schedule_from_config({"format": 0.5, "accuracy": 0.5})
    funcs, names = build_reward_funcs({}, schedule)
    assert names == ["format", "accuracy"] and [f.func for f in funcs] == [format_reward, accuracy_reward]
    funcs, _ = build_reward_funcs({"rules": {"format": "reference", "accuracy": "reference"}}, schedule)
    assert [f.func for f in funcs] == [reference_format_reward, reference_accuracy_reward]
    # The two rules really score differently: trailing newline, letter in the reasoning.
    text = "<think>B. is out</think><answer>A</answer>\n"
    assert [f(completions=[text], solution=["A"]) for f in funcs] == [[0.0], [0.0]]
    project, _ = build_reward_funcs({}, schedule)
    assert [f(completions=[text], solution=["A"]) for f in project] == [[1.0], [1.0]]
    from embodied_r_ros.core.errors import ConfigError

    with pytest.raises(ConfigError):
        build_reward_funcs({"rules": {"consistency": "reference"}}, schedule)


def test_schedule_config_forms():
    assert schedule_from_config("reference_code").weights_for_epoch(7) == (0.1, 0.7, 0.2)
    fixed = schedule_from_config({"format": 0.2, "accuracy": 0.8})
    assert fixed.weights_for_epoch(3) == (0.2, 0.8, 0.0) and not fixed.uses("consistency")
    staged = schedule_from_config([{"epochs": [1, 2], "format": 1.0}, {"epochs": [3, 3], "accuracy": 1.0}])
    assert staged.weights_for_epoch(2) == (1.0, 0.0, 0.0) and staged.weights_for_epoch(9) == (0.0, 1.0, 0.0)
    with pytest.raises(ValueError):
        RewardSchedule((Stage(1, 1, (1, 0, 0)), Stage(3, 3, (0, 1, 0))))  # gap at epoch 2


def _hash_reward(salt):
    def reward(completions, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [int(hashlib.md5((salt + t).encode()).hexdigest(), 16) % 100 / 100 for t in texts]

    return reward


def _tiny_dataset(n):
    from datasets import Dataset

    prompts = [[{"role": "user", "content": f"Frame {i}: After move forward, Observe: a box."}] for i in range(n)]
    return Dataset.from_list([{"prompt": p, "solution": "A", "question": "Q"} for p in prompts])


def test_schedule_switches_the_weights_used_for_advantages(tiny_models, tmp_path):
    """Three epochs of two steps; each epoch weights a different reward. The advantages
    TRL logged per completion must be the group-normalised sum under that epoch's
    weights."""
    stages = [{"epochs": [1, 1], "format": 1.0, "accuracy": 0.0},
              {"epochs": [2, 2], "format": 0.0, "accuracy": 1.0},
              {"epochs": [3, 3], "format": 0.5, "accuracy": 0.5}]
    cfg = {"model": {"name_or_path": str(tiny_models.lm)}, "rewards": {"schedule": stages},
           "grpo": {"output_dir": str(tmp_path), "learning_rate": 1e-3, "per_device_train_batch_size": 8,
                    "num_generations": 4, "max_completion_length": 8, "num_train_epochs": 3,
                    "logging_steps": 1, "save_strategy": "no", "use_cpu": True, "seed": 0,
                    "log_completions": True, "num_completions_to_print": 0}}
    summary = train(cfg, reward_funcs=[_hash_reward("f"), _hash_reward("a")],
                    reward_names=["format", "accuracy"], train_dataset=_tiny_dataset(4))
    assert summary["global_step"] == 6
    changes = [(c["global_step"], c["weights"]) for c in summary["weight_changes"]]
    assert changes == [(0, {"format": 1.0, "accuracy": 0.0}), (2, {"format": 0.0, "accuracy": 1.0}),
                       (4, {"format": 0.5, "accuracy": 0.5})]
    weights_by_step = {1: (1, 0), 2: (1, 0), 3: (0, 1), 4: (0, 1), 5: (0.5, 0.5), 6: (0.5, 0.5)}
    files = sorted(glob.glob(str(tmp_path / "completions" / "*.parquet")))
    assert len(files) == 6
    for path in files:
        table = pd.read_parquet(path)
        step = int(table["step"].iloc[0])
        wf, wa = weights_by_step[step]
        total = torch.tensor((wf * table["format"] + wa * table["accuracy"]).to_numpy(), dtype=torch.float32)
        groups = total.view(-1, 4)
        expected = (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-4)
        assert torch.allclose(torch.tensor(table["advantage"].to_numpy(), dtype=torch.float32),
                              expected.flatten(), atol=1e-3), f"step {step}"
        # The other epochs' weights would give different advantages for this batch.
        other = (1, 0) if (wf, wa) != (1, 0) else (0, 1)
        alt = torch.tensor((other[0] * table["format"] + other[1] * table["accuracy"]).to_numpy(),
                           dtype=torch.float32).view(-1, 4)
        alt = ((alt - alt.mean(1, keepdim=True)) / (alt.std(1, keepdim=True) + 1e-4)).flatten()
        assert not torch.allclose(alt, expected.flatten(), atol=1e-3)
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    logged = [(h["step"], h["reward_weight/format"]) for h in state["log_history"] if "reward" in h]
    assert logged == [(1, 1.0), (2, 1.0), (3, 0.0), (4, 0.0), (5, 0.5), (6, 0.5)]


# --------------------------------------------------------------------------- tiny_cpu
@pytest.fixture(scope="module")
def cached_train(tmp_path_factory):
    """Cached records (prompt + solution) for the toy questions, with canned descriptions."""
    root = tmp_path_factory.mktemp("grpo_data")
    toy = make_published_tree(root / "download", vsi_scenes=4, seed=0, videos=False)
    data.prepare(vsi=[toy["vsi_parquet"]], urban=[toy["urban"]], out=root / "prep", seed=0, ratios=(1, 0, 0),
                 check_videos=False, include_numeric=True)
    texts = ["A red chair ahead-left, a door ahead.", "1. move forward\n2. A lamp appears on the right.\n3. none"]
    rows = [build_record(r, "on_query", {"source_frames": [0, 4]}, texts)
            for r in data.read_jsonl(root / "prep" / "train.jsonl")]
    numeric = [r for r in rows if r["answer_type"] == "numeric"]
    choice = [r for r in rows if r["answer_type"] == "choice"]
    # Numeric questions first: training must skip them (counted), not choke on them.
    data.write_jsonl_atomic(root / "train.on_query.jsonl", numeric[:2] + choice)
    data.write_jsonl_atomic(root / "val.on_query.jsonl", choice[-2:])
    return root / "train.on_query.jsonl"


def test_tiny_cpu_checkpoints_and_resumes(tiny_models, cached_train, tmp_path):
    from embodied_r_training.cli import main

    out = tmp_path / "run"
    common = ["--config", "tiny_cpu.yaml",
              "--set", f"model.name_or_path={tiny_models.lm}",
              "--set", f"rewards.consistency_model.model={tiny_models.lm}",
              "--set", f"data.train={cached_train}", "--set", "data.max_samples=10",
              "--set", f"data.eval={cached_train.parent / 'val.on_query.jsonl'}",
              "--set", f"grpo.output_dir={out}", "--set", "grpo.save_steps=2",
              "--set", "grpo.eval_steps=2", "--set", "grpo.max_completion_length=12"]
    assert main(["grpo", *common, "--set", "grpo.max_steps=2"]) == 0
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()
    assert (out / "final" / "config.json").is_file()
    first = json.loads((out / "run_summary.json").read_text())
    assert first["reward_names"] == ["format", "accuracy", "consistency"]
    assert first["train_data"] == {"read": 10, "too_long": 0, "numeric": 2, "kept": 8}
    assert first["eval_data"] == {"read": 2, "too_long": 0, "numeric": 0, "kept": 2}

    assert main(["grpo", *common, "--set", "grpo.max_steps=4", "--resume"]) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-2")
    assert summary["global_step"] == 4
    assert latest_checkpoint(out).endswith("checkpoint-4")
    state = json.loads((out / "trainer_state.json").read_text())
    steps = [h["step"] for h in state["log_history"] if "reward" in h]
    assert steps == [1, 2, 3, 4]  # history carried over from the checkpoint, then extended
    # 8 prompts, 2 per step -> 4 steps per epoch: all in the first stage (7:3:0).
    assert {h["reward_weight/format"] for h in state["log_history"] if "reward" in h} == {0.7}
    assert all("rewards/format/mean" in h and "kl" in h for h in state["log_history"] if "reward" in h)
    # Validation on the val split every eval_steps (2): logged beside the training entries.
    evals = [h for h in state["log_history"] if "eval_reward" in h]
    assert [h["step"] for h in evals] == [2, 4]
    assert all(0.0 <= h["eval_rewards/accuracy/mean"] <= 1.0 and "eval_completions/mean_length" in h for h in evals)


def test_over_long_prompts_are_dropped_and_counted(tiny_models, cached_train):
    from transformers import AutoTokenizer

    from embodied_r_training.grpo import load_records_dataset

    tok = AutoTokenizer.from_pretrained(tiny_models.lm)
    rows = data.read_jsonl(cached_train)

    def n_tokens(prompt):
        ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return len(ids["input_ids"] if hasattr(ids, "keys") else ids)

    lengths = sorted(n_tokens(r["prompt"]) for r in rows if r["answer_type"] == "choice")
    limit = lengths[-1] - 1  # the longest prompts are over the limit
    dataset, stats = load_records_dataset(cached_train, tokenizer=tok, max_prompt_tokens=limit)
    assert 0 < stats["too_long"] == sum(1 for n in lengths if n > limit) < len(lengths)
    assert stats["numeric"] == 2
    assert len(dataset) == stats["kept"] == len(lengths) - stats["too_long"]
    assert set(dataset.column_names) >= {"prompt", "solution", "question"}


# The paper's values (docs/method.md §6) and, where it is silent, those of the trainer the
# reference scripts ran (ms-swift, April 2025); TRL's own defaults differ for most of them.
PAPER_GRPO = {
    "learning_rate": 5e-7, "warmup_steps": 0.05, "lr_scheduler_type": "cosine", "weight_decay": 0.1,
    "optim": "adamw_torch", "adam_beta1": 0.9, "adam_beta2": 0.95, "adam_epsilon": 1e-8, "max_grad_norm": 1.0,
    "temperature": 1.0, "top_k": 50, "top_p": 0.9, "repetition_penalty": 1.0, "num_generations": 8,
    "beta": 0.001, "epsilon": 0.2, "num_iterations": 1, "loss_type": "grpo", "scale_rewards": "group",
    "max_completion_length": 2048, "num_train_epochs": 12, "bf16": True, "activation_checkpointing": True,
    "eval_strategy": "steps", "eval_steps": 100, "num_generations_eval": 8, "use_vllm": True,
    "vllm_importance_sampling_correction": False, "mask_truncated_completions": False,
}


def _num_processes(name="accelerate_zero3.yaml"):
    import yaml

    from embodied_r_training.config import packaged_config

    return yaml.safe_load(packaged_config(name).read_text())["num_processes"]


def test_paper_config_sets_every_generation_and_optimiser_value():
    from transformers import get_scheduler
    from trl import GRPOConfig

    from embodied_r_training.grpo import build_grpo_config

    paper = load_config("paper_8gpu.yaml")
    g = paper["grpo"]
    gpus = _num_processes()
    assert gpus == 8
    # One CPU process stands in for the 8 GPUs: per-device batches scaled by 8, the rest as written.
    args = build_grpo_config(dict(paper, grpo=dict(g, use_cpu=True,
                                                   per_device_train_batch_size=g["per_device_train_batch_size"] * gpus,
                                                   per_device_eval_batch_size=g["per_device_eval_batch_size"] * gpus)),
                             [0.7, 0.3, 0.0])
    assert isinstance(args, GRPOConfig)
    got = {k: getattr(args, k) for k in PAPER_GRPO}
    got["lr_scheduler_type"] = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    got["optim"] = str(getattr(args.optim, "value", args.optim))
    got["eval_strategy"] = str(getattr(args.eval_strategy, "value", args.eval_strategy))
    assert got == PAPER_GRPO
    defaults = GRPOConfig(output_dir="/tmp/unused", use_cpu=True, report_to="none",
                          activation_checkpointing=True)
    differs = [k for k in ("top_k", "top_p", "weight_decay", "adam_beta2", "loss_type")
               if getattr(defaults, k) != got[k]]
    assert differs == ["top_k", "top_p", "weight_decay", "adam_beta2", "loss_type"]  # why the YAML sets them
    # Global batch: 32 completions per optimizer step = 4 questions x 8 generations.
    assert g["per_device_train_batch_size"] * gpus * g["gradient_accumulation_steps"] == 32
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps == 32
    assert args.generation_batch_size == 32 and args.generation_batch_size // args.num_generations == 4
    assert paper["data"]["max_prompt_tokens"] == 6144 and paper["data"]["eval"].endswith("val.on_query.jsonl")
    assert paper["rewards"]["schedule"] == "paper" and not paper["lora"]["enabled"]  # full parameters
    assert args.model_init_kwargs["dtype"] == "bfloat16" and args.reward_weights == [0.7, 0.3, 0.0]
    # The schedule those values give: linear warm-up over 5% of the steps, then cosine to 0.
    import torch

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=args.learning_rate)
    total = 1000
    sched = get_scheduler(args.lr_scheduler_type, opt, num_warmup_steps=args.get_warmup_steps(total),
                          num_training_steps=total)
    lrs = []
    for _ in range(total):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    assert args.get_warmup_steps(total) == 50
    assert lrs[0] == 0.0 and lrs[25] == pytest.approx(2.5e-7) and lrs[50] == pytest.approx(5e-7)
    assert lrs[525] == pytest.approx(2.5e-7, rel=1e-3)  # halfway through the cosine decay
    assert lrs[-1] < 1e-9


def test_checkpointing_is_set_under_the_name_transformers_reads():
    """transformers 5 renamed gradient_checkpointing to activation_checkpointing and, when
    both are given, uses only the new name: the old name from a user's config or --set must
    still take effect, and a contradiction must be an error, not silently ignored."""
    import warnings

    from embodied_r_training.errors import ConfigError
    from embodied_r_training.grpo import build_grpo_config, resolve_renamed_keys

    # A transformers 5 release from before the rename (no activation_checkpointing field):
    # the new name is written back under the old one.
    grpo = {"activation_checkpointing": False, "activation_checkpointing_kwargs": {"a": 1}}
    resolve_renamed_keys(grpo, {"gradient_checkpointing": None, "gradient_checkpointing_kwargs": None})
    assert grpo == {"gradient_checkpointing": False, "gradient_checkpointing_kwargs": {"a": 1}}
    base = {"output_dir": "/tmp/unused", "use_cpu": True, "bf16": False}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # The older name alone takes effect.
        args = build_grpo_config({"grpo": dict(base, gradient_checkpointing=False)}, [1.0, 0.0, 0.0])
        assert args.activation_checkpointing is False and args.gradient_checkpointing is False
        # Neither name: TRL's default (on), set under the new name.
        args = build_grpo_config({"grpo": dict(base)}, [1.0, 0.0, 0.0])
        assert args.activation_checkpointing is True
    assert [str(w.message) for w in caught if "gradient_checkpointing" in str(w.message)] == []
    # The paper config says activation_checkpointing: true; the old name set to the same
    # value agrees, set to the opposite contradicts it.
    on_cpu = ["grpo.use_vllm=false", "grpo.use_cpu=true", "grpo.bf16=false",
              "grpo.per_device_train_batch_size=8", "grpo.per_device_eval_batch_size=8"]
    paper = load_config("paper_8gpu.yaml", ["grpo.gradient_checkpointing=true", *on_cpu])
    assert build_grpo_config(paper, [1.0, 0.0, 0.0]).activation_checkpointing is True
    paper = load_config("paper_8gpu.yaml", ["grpo.gradient_checkpointing=false"])
    with pytest.raises(ConfigError, match="grpo.gradient_checkpointing = False and "
                       "grpo.activation_checkpointing = True disagree"):
        build_grpo_config(paper, [1.0, 0.0, 0.0])
    paper = load_config("paper_8gpu.yaml", ["grpo.activation_checkpointing=false", *on_cpu])
    assert build_grpo_config(paper, [1.0, 0.0, 0.0]).activation_checkpointing is False


def test_vl3b_config_is_the_paper_config_with_the_reference_policy():
    paper = load_config("paper_8gpu.yaml")
    vl = load_config("paper_8gpu_vl3b.yaml")
    assert {k: v for k, v in vl.items() if k not in ("model", "grpo")} == \
        {k: v for k, v in paper.items() if k not in ("model", "grpo")}
    assert dict(vl["grpo"], output_dir=None) == dict(paper["grpo"], output_dir=None)
    assert vl["model"]["name_or_path"] == "Qwen/Qwen2.5-VL-3B-Instruct" and vl["model"]["language_model_of_vlm"]
    assert paper["model"]["name_or_path"] == "Qwen/Qwen2.5-3B-Instruct"


def test_single_gpu_lora_config():
    from embodied_r_training.grpo import build_peft_config

    lora = load_config("single_gpu_lora.yaml")
    assert lora["lora"]["enabled"] and lora["grpo"]["per_device_train_batch_size"] * lora["grpo"][
        "gradient_accumulation_steps"] == 32
    assert build_peft_config(lora["lora"]).r == 64
    from embodied_r_training.config import packaged_config

    ds = json.loads(packaged_config("ds_zero3.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3


def test_language_model_of_a_qwen2_5_vl_is_the_same_model_on_text(tiny_models, tmp_path):
    """The extracted decoder is a plain Qwen2ForCausalLM whose logits and greedy output on
    text equal those of the Qwen2.5-VL it came from (padded batch included)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    from embodied_r_training.cli import main
    from embodied_r_training.policy import is_extracted

    out = tmp_path / "lm"
    assert main(["extract-lm", str(tiny_models.vlm), str(out)]) == 0
    assert is_extracted(out)
    vl = AutoModelForImageTextToText.from_pretrained(tiny_models.vlm).eval()
    lm = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(lm).__name__ == "Qwen2ForCausalLM"
    assert not any("visual" in k for k in lm.state_dict())
    tok = AutoTokenizer.from_pretrained(out)
    tok.padding_side = "left"
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True, tokenize=False)
               for t in ("Frame 0: Observe: a red box on the left.",
                         "Question: which way?\nChoices:\nA. left\nB. right")]
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.no_grad():
        a, b = vl(**batch).logits, lm(**batch).logits
    mask = batch["attention_mask"].bool()
    assert torch.allclose(a[mask], b[mask], atol=1e-5)
    ga = vl.generate(**batch, max_new_tokens=10, do_sample=False)
    gb = lm.generate(**batch, max_new_tokens=10, do_sample=False)
    assert torch.equal(ga, gb)


def test_grpo_trains_the_language_model_of_a_vlm(tiny_models, cached_train, tmp_path):
    from embodied_r_training.cli import main
    from embodied_r_training.policy import is_extracted

    out = tmp_path / "run"
    rc = main(["grpo", "--config", "paper_8gpu_vl3b.yaml",
               "--set", f"model.name_or_path={tiny_models.vlm}", "--set", "model.dtype=float32",
               "--set", "model.attn_implementation=null", "--set", f"model.extracted_dir={tmp_path / 'policy'}",
               "--set", f"data.train={cached_train}", "--set", "data.eval=null", "--set", "data.max_samples=6",
               "--set", "rewards.schedule={format: 0.5, accuracy: 0.5}",
               "--set", f"grpo.output_dir={out}", "--set", "grpo.use_vllm=false", "--set", "grpo.bf16=false",
               "--set", "grpo.use_cpu=true", "--set", "grpo.per_device_train_batch_size=8",
               "--set", "grpo.gradient_accumulation_steps=1", "--set", "grpo.num_generations=4",
               "--set", "grpo.max_completion_length=8", "--set", "grpo.max_steps=1",
               "--set", "grpo.eval_strategy=no", "--set", "grpo.save_strategy=no",
               "--set", "grpo.activation_checkpointing=false", "--set", "grpo.report_to=none"])
    assert rc == 0
    assert is_extracted(tmp_path / "policy")
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["policy"] == str(tmp_path / "policy") and summary["global_step"] == 1
    assert json.loads((out / "final" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]


# --------------------------------------------------------------------------- learning
def test_grpo_learns_a_simple_reward(tiny_models, tmp_path):
    """Reward = share of completion tokens with id < 64 (about 1/8 for the random tiny LM).
    30 GRPO steps must lift the mean reward far above its start."""
    torch.manual_seed(0)

    def low_ids(completion_ids=None, **kwargs):
        return [sum(1 for t in ids if t < 64) / max(1, len(ids)) for ids in completion_ids]

    cfg = {"model": {"name_or_path": str(tiny_models.lm)}, "rewards": {"schedule": {"format": 1.0}},
           "grpo": {"output_dir": str(tmp_path), "learning_rate": 1e-2, "per_device_train_batch_size": 8,
                    "num_generations": 8, "max_completion_length": 12, "max_steps": 30, "logging_steps": 1,
                    "save_strategy": "no", "use_cpu": True, "seed": 0, "beta": 0.0,
                    "lr_scheduler_type": "constant", "temperature": 1.0}}
    train(cfg, reward_funcs=[low_ids], reward_names=["format"], train_dataset=_tiny_dataset(8))
    state = json.loads((tmp_path / "trainer_state.json").read_text())
    rewards = [h["reward"] for h in state["log_history"] if "reward" in h]
    assert len(rewards) == 30
    start, end = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    assert start < 0.3, rewards
    assert end > start + 0.4, rewards
