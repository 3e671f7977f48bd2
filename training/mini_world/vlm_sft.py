"""Supervised captions for the world's perception model (Qwen2.5-VL architecture).

Examples come from the training rooms: for training every frame of each clip (2 fps;
`measure` draws from the frames sampled once a second, as the key-frame rules sample
them). A single frame is paired with the robot's first-frame prompt and a caption of the
objects in view; two frames one to four seconds apart with the pair prompt and the
three-part reply (action from the camera poses, new objects,
objects in view). Captions are written from the renderer's per-pixel labels
(`sample_data.captions`), so no model and no human writes them. The images go through
the same JPEG encoding as on the robot (`core.backends.images.model_images`).

`measure` scores a model on held-out rooms: share of objects named correctly (recall and
precision of object names), of position words correct for correctly named objects, and
of actions correct.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.sample_data.captions import (
    POSITION_WORDS,
    SeenObject,
    first_caption,
    motion_action,
    pair_caption,
)

log = logging.getLogger("embodied_r_training.mini_world.vlm_sft")


@dataclass
class CaptionExample:
    images: list[np.ndarray]
    prompt: str
    caption: str


def read_frames(video: Path) -> list[np.ndarray]:
    import cv2

    cap = cv2.VideoCapture(str(video))
    frames = []
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(np.ascontiguousarray(frame[:, :, ::-1]))
    cap.release()
    return frames


def room_examples(world: Path, room: str, rng: random.Random, *, n_first: int | None, n_pair: int | None
                  ) -> list[CaptionExample]:
    """Caption examples of one room. With counts, `n_first` single frames and `n_pair`
    pairs drawn from the frames sampled at 1 Hz (as the key-frame rules sample); with
    None, every frame of the clip (2 fps) once as a single frame and once as the second
    frame of a pair whose first frame is one to four seconds earlier."""
    from embodied_r_ros.core.prompts.perception import first_frame_prompt, pair_prompt

    labels = json.loads((world / "labels" / f"{room}.json").read_text())
    frames = read_frames(world / "videos" / f"{room}.mp4")
    fps = max(int(labels["fps"]), 1)
    n = min(len(frames), len(labels["frames"]))
    pool = list(range(0, n, fps)) if n_first is not None else list(range(n))
    objs = {i: [SeenObject.from_json(o) for o in labels["frames"][i]["objects"]] for i in pool}
    firsts = rng.sample(pool, min(n_first, len(pool))) if n_first is not None else pool
    if n_pair is not None:
        pairs = []
        for _ in range(n_pair):
            a = rng.randrange(len(pool) - 1)
            pairs.append((pool[a], pool[min(a + rng.randint(1, 4), len(pool) - 1)]))
    else:
        pairs = [(max(j - rng.randint(1, 4) * fps, 0), j) for j in pool[1:]]
    out = [CaptionExample([frames[i]], first_frame_prompt(None), first_caption(objs[i])) for i in firsts]
    for i, j in pairs:
        action = motion_action(labels["frames"][i]["pose"], labels["frames"][j]["pose"])
        out.append(CaptionExample([frames[i], frames[j]], pair_prompt(None),
                                  pair_caption(action, objs[i], objs[j])))
    return out


def _batch(processor: Any, examples: Sequence[CaptionExample]) -> dict[str, Any]:
    """Inputs and labels: loss only on the caption and its end-of-turn token."""
    import torch

    from embodied_r_ros.core.backends.images import model_images

    texts, images, lengths = [], [], []
    tok = processor.tokenizer
    for ex in examples:
        content = [{"type": "text", "text": ex.prompt}] + [{"type": "image"} for _ in ex.images]
        prompt = processor.apply_chat_template([{"role": "user", "content": content}],
                                               tokenize=False, add_generation_prompt=True)
        answer = ex.caption + "<|im_end|>"
        texts.append(prompt + answer)
        lengths.append(len(tok(answer, add_special_tokens=False)["input_ids"]))
        images.extend(model_images(ex.images))
    tok.padding_side = "right"
    batch = processor(text=texts, images=images, padding=True, return_tensors="pt")
    labels = torch.full_like(batch["input_ids"], -100)
    real = batch["attention_mask"].sum(dim=1).tolist()
    for row, (end, n) in enumerate(zip(real, lengths)):
        labels[row, end - n : end] = batch["input_ids"][row, end - n : end]
    batch["labels"] = labels
    return dict(batch)


def _train_stage(model: Any, processor: Any, examples: list[CaptionExample], *, batch_size: int, lr: float,
                 steps: int, minutes: float, rng: random.Random, desc: str, progress: bool,
                 history: list[dict[str, Any]]) -> tuple[int, bool]:
    """`steps` AdamW steps over shuffled `examples` (passes repeat as needed); the learning
    rate warms up over 20 steps and falls linearly to 10% at the last step. `minutes`
    caps the time (0: no cap). Returns the steps made and whether the cap stopped them."""
    import torch
    from tqdm import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    start = time.monotonic()
    bar = tqdm(total=steps, desc=desc, disable=not progress)
    step = 0
    timed_out = False
    while step < steps and not timed_out:
        rng.shuffle(examples)
        for k in range(0, len(examples), batch_size):
            if step >= steps:
                break
            if minutes and time.monotonic() - start > minutes * 60:
                timed_out = True
                log.warning("%s stopped by its %g-minute limit at step %d of %d: its model depends on "
                            "this machine's speed", desc, minutes, step, steps)
                break
            for group in opt.param_groups:
                group["lr"] = lr * min(1.0, (step + 1) / 20) * (1.0 - 0.9 * step / steps)
            loss = model(**_batch(processor, examples[k : k + batch_size])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
            step += 1
            value = float(loss.detach())
            history.append({"stage": desc, "step": step, "loss": value})
            bar.update(1)
            bar.set_postfix(loss=f"{value:.3f}")
    bar.close()
    return step, timed_out


PLAIN_STEPS = 2369   # the shipped perception model's steps on images alone
PROMPT_STEPS = 806   # and with the robot's prompts


def train_vlm(
    model_dir: Path, world: Path, rooms: Sequence[str], *, lr: float = 2e-3, seed: int = 0,
    n_first: int | None = None, n_pair: int | None = None, progress: bool = True,
    plain_steps: int = PLAIN_STEPS, prompt_steps: int = PROMPT_STEPS,
    plain_minutes: float = 0.0, prompt_minutes: float = 0.0,
) -> dict[str, Any]:
    """Train the model in `model_dir` in place on caption examples of `rooms`, in two
    stages: (1) `plain_steps` steps with the images alone (no prompt text: short
    sequences, so cheap steps teach the vision tower colours, shapes and positions), then
    (2) `prompt_steps` with the robot's own prompts, so the model answers them. The
    `*_minutes` cap a stage's time (0: no cap)."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    for name, value in (("plain_steps", plain_steps), ("prompt_steps", prompt_steps)):
        if value < 1:
            raise ValueError(f"perception training: {name} must be at least 1, got {value}")
    rng = random.Random(seed)
    torch.manual_seed(seed)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    examples: list[CaptionExample] = []
    for room in rooms:
        examples.extend(room_examples(world, room, rng, n_first=n_first, n_pair=n_pair))
    if not examples:
        raise ValueError(f"perception training: no caption examples in rooms {list(rooms)[:5]} of {world}")
    plain = [CaptionExample(ex.images, "", ex.caption) for ex in examples]
    history: list[dict[str, Any]] = []
    start = time.monotonic()
    steps_plain, capped_plain = _train_stage(
        model, processor, plain, batch_size=16, lr=lr, steps=plain_steps, minutes=plain_minutes, rng=rng,
        desc="vlm captions (images only)", progress=progress, history=history)
    steps_prompt, capped_prompt = _train_stage(
        model, processor, examples, batch_size=8, lr=lr / 2, steps=prompt_steps, minutes=prompt_minutes,
        rng=rng, desc="vlm captions (robot prompts)", progress=progress, history=history)
    model.eval()
    model.save_pretrained(model_dir, safe_serialization=True)
    return {"examples": len(examples), "steps_images_only": steps_plain, "steps_robot_prompts": steps_prompt,
            "stopped_by_time_budget": capped_plain or capped_prompt,
            "seconds": round(time.monotonic() - start, 1),
            "loss_first": history[0]["loss"] if history else None,
            "loss_last": float(np.mean([h["loss"] for h in history[-20:]])) if history else None,
            "history": history}


_ITEM = re.compile(r"([a-z]+ (?:box|ball|pillar|cabinet|door)) (" + "|".join(
    sorted(POSITION_WORDS, key=len, reverse=True)) + r")\b")


def parse_objects(text: str) -> dict[str, str]:
    """Object name -> position word, from a caption's "in view" part (or all of it)."""
    part = text.split("in view:", 1)[1] if "in view:" in text else text
    return {m.group(1): m.group(2) for m in _ITEM.finditer(part)}


def measure(model_dir: Path, world: Path, rooms: Sequence[str], *, seed: int = 1, per_room: int = 3,
            progress: bool = True) -> dict[str, Any]:
    """Named-object recall/precision, position and action accuracy on held-out rooms,
    through the robot's own perceiver (`TransformersPerceiver`)."""
    from tqdm import tqdm

    from embodied_r_ros.core.backends.factory import make_perceiver
    from embodied_r_ros.core.backends.model_spec import ModelSpec

    spec = ModelSpec.from_dict({"backend": "transformers", "model": str(model_dir), "device": "cpu",
                                "dtype": "float32", "temperature": 0.0, "max_new_tokens": 64,
                                "batch_size": 8})
    perceiver = make_perceiver(spec)
    rng = random.Random(seed)
    examples: list[CaptionExample] = []
    for room in rooms:
        examples.extend(room_examples(world, room, rng, n_first=per_room, n_pair=per_room))
    texts: list[str] = []
    for k in tqdm(range(0, len(examples), 8), desc="vlm measure", disable=not progress):
        chunk = examples[k : k + 8]
        texts.extend(perceiver.describe_batch([(ex.images, ex.prompt) for ex in chunk]))
    perceiver.close()
    true_n = pred_n = hit = pos_ok = act_n = act_ok = 0
    samples: list[dict[str, str]] = []
    for ex, text in zip(examples, texts):
        truth, pred = parse_objects(ex.caption), parse_objects(text)
        true_n += len(truth)
        pred_n += len(pred)
        for name, where in pred.items():
            if name in truth:
                hit += 1
                pos_ok += truth[name] == where
        if ex.caption.startswith("1. "):
            act_n += 1
            act_ok += text.split("\n", 1)[0].strip() == ex.caption.split("\n", 1)[0].strip()
        if len(samples) < 6:
            samples.append({"truth": ex.caption, "model": text})
    return {
        "captions": len(examples),
        "object_recall": round(hit / max(true_n, 1), 4),
        "object_precision": round(hit / max(pred_n, 1), 4),
        "position_accuracy": round(pos_ok / max(hit, 1), 4),
        "action_accuracy": round(act_ok / max(act_n, 1), 4),
        "samples": samples,
    }
