"""Warm-up of the reasoning model: worked examples in the think/answer format.

A worked example is a cached training record (the robot's reasoning prompt over the
perception model's descriptions) with a completion ``<think>...</think><answer>B</answer>``
whose reasoning is the rule-based reading of those descriptions (`worked.read`) when it
reaches the graded answer, else one sentence naming the graded answer, followed by the
option scan up to the answer (`worked.option_scan`). The same model also learns the consistency
judge's prompt (question, choices and a reasoning -> the letter that reasoning supports);
the consistency reward's frozen reference model (`judge.py`) is then trained from a copy
of the warm-up model to find that letter from the reasoning's decision.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("embodied_r_training.mini_world.lm_sft")

# How a worked reasoning opens, per question kind (then the answer text follows).
_LEADS = {
    "obj_appearance_order": "Listing each object by the frame where it first appears gives",
    "appearance_order": "Listing each object by the frame where it first appears gives",
    "object_rel_direction": "Following my moves and turns through the frames, that object is to my",
    "landmark_position": "Following my moves and turns through the frames, it is now",
    "object_rel_distance": "Comparing where the objects stand, the closest is the",
    "action_generation": "After that frame the next turn in the frames is",
    "route_planning": "From my current view and heading, the way there is to",
    "progress_evaluation": "The actions between the frames, in order, are",
}


def worked_think(category: str, answer_text: str) -> str:
    lead = _LEADS.get(category, "From the frames, the answer is")
    return f"{lead} {answer_text}."


def worked_completion(category: str, answer_text: str, letter: str) -> str:
    return f"<think>{worked_think(category, answer_text)}</think><answer>{letter}</answer>"


def worked_reasoning(record: Mapping[str, Any], truth: Mapping[str, Any]) -> tuple[str, bool]:
    """(think text, read) for a cached record: the rule-based reading of its descriptions
    (`worked.read`) when that reading reaches the graded answer, else the one sentence
    naming the answer (read=False); either ends with the option scan (`worked.option_scan`)
    that reaches the answer's letter."""
    from embodied_r_ros.core.prompts.reasoning import parse_choices
    from embodied_r_training.mini_world import worked

    options = parse_choices(record["question"])
    choices = [text for _, text in options]
    letters = [letter for letter, _ in options]
    answer = letters.index(record["answer"]) if record["answer"] in letters else None
    got = worked.read(record["question"], worked.parse_frames(record.get("frames") or []))
    if got is not None:
        k = worked.match_option(got[1], choices)
        if k is not None and choices[k] == truth["answer_text"]:
            return worked.with_scan(got[0], choices, k), True
    think = worked_think(record["question_category"], truth["answer_text"])
    return (think if answer is None else worked.with_scan(think, choices, answer)), False


def sft_pairs(records: Sequence[Mapping[str, Any]], truth: Mapping[str, Mapping[str, Any]],
              ) -> list[tuple[list[dict[str, str]], str]]:
    """(messages, completion) pairs: worked answers and consistency-judge replies."""
    from embodied_r_ros.core.prompts.reasoning import build_consistency_messages

    pairs = []
    for r in records:
        think, _ = worked_reasoning(r, truth[r["Question_id"]])
        pairs.append((list(r["prompt"]), f"<think>{think}</think><answer>{r['answer']}</answer>"))
        pairs.append((build_consistency_messages(r["question"], think), r["answer"]))
    return pairs


def _batch(tokenizer: Any, pairs: Sequence[tuple[list[dict[str, str]], str]]) -> dict[str, Any]:
    import torch

    rows, masks = [], []
    for messages, completion in pairs:
        prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        p_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        c_ids = tokenizer(completion + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append(p_ids + c_ids)
        masks.append(len(p_ids))
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    att = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, : len(r)] = torch.tensor(r)
        att[i, : len(r)] = 1
        labels[i, m : len(r)] = torch.tensor(r[m:])
    return {"input_ids": ids, "attention_mask": att, "labels": labels}


def learning_rate(peak: float, done: float, warmup: float = 0.05) -> float:
    """Learning rate at fraction `done` of a run: linear rise to `peak` over `warmup`, then
    a cosine to zero."""
    if done < warmup:
        return peak * max(done, 1e-3) / warmup
    return peak * 0.5 * (1.0 + math.cos(math.pi * min((done - warmup) / (1.0 - warmup), 1.0)))


def train_lm(model_dir: Path, pairs: Sequence[tuple[list[dict[str, str]], str]], *, epochs: int = 3,
             batch_size: int = 8, lr: float = 1e-3, seed: int = 0, progress: bool = True,
             max_steps: int | None = None, max_minutes: float | None = None,
             desc: str = "lm warm-up") -> dict[str, Any]:
    """Supervised training of the causal LM in `model_dir`, in place, for `epochs` over
    `pairs` or `max_steps` steps, whichever is fewer (the run's length in steps). The
    learning rate rises over the first 5% of those steps and falls on a cosine to zero at
    the last, so the same steps train the same model on any machine. `max_minutes` is only
    an upper limit on the time: a run it stops ends early (the result's
    `stopped_by_time_budget`), with a warning, since its model then depends on the
    machine's speed."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if max_steps is not None and max_steps < 1:
        raise ValueError(f"{desc}: max_steps must be at least 1, got {max_steps}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    data = list(pairs)
    steps = epochs * ((len(data) + batch_size - 1) // batch_size)
    if max_steps is not None:
        steps = min(steps, max_steps)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    history: list[dict[str, float]] = []
    start = time.monotonic()
    bar = tqdm(total=steps, desc=desc, disable=not progress)
    step = 0
    timed_out = False
    for _ in range(epochs):
        if step >= steps or timed_out:
            break
        rng.shuffle(data)
        for k in range(0, len(data), batch_size):
            if step >= steps:
                break
            if max_minutes and time.monotonic() - start > max_minutes * 60:
                timed_out = True
                break
            for group in opt.param_groups:
                group["lr"] = learning_rate(lr, step / steps)
            loss = model(**_batch(tokenizer, data[k : k + batch_size])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            step += 1
            value = float(loss.detach())
            history.append({"step": step, "loss": value})
            bar.update(1)
            bar.set_postfix(loss=f"{value:.3f}")
            if not progress and step % max(1, steps // 10) == 0 and step < steps:
                # No bar (a side process): a line every tenth of the run instead.
                spent = time.monotonic() - start
                log.info("%s: step %d of %d, loss %.3f, %.1f min so far, about %.1f min left", desc, step,
                         steps, value, spent / 60, spent / step * (steps - step) / 60)
    if timed_out:
        log.warning("%s stopped by its %g-minute limit at step %d of %d: its model depends on this "
                    "machine's speed; raise the limit (or set it to 0, none) to train all the steps",
                    desc, max_minutes, step, steps)
    bar.close()
    model.eval()
    model.save_pretrained(model_dir, safe_serialization=True)
    return {"pairs": len(data), "steps": step, "planned_steps": steps, "stopped_by_time_budget": timed_out,
            "seconds": round(time.monotonic() - start, 1),
            "loss_first": history[0]["loss"] if history else None,
            "loss_last": float(np.mean([h["loss"] for h in history[-20:]])) if history else None,
            "history": history}
