"""Reading curriculum of the reasoning model: text episodes before the worked examples.

Trained only on the worked examples of the world's rooms, the tiny reasoning model learns
the form of the reasoning but not to look up the asked object in the descriptions (it
names other objects and an unrelated letter, at chance). Copying facts out of a long
prompt is what it must learn first, and that is learned on many short prompts. Rendering
is the slow part of the world, so the curriculum's episodes are made without it:

* a **text episode** is a 2-D room (five objects and a door at random places) and a
  camera script (forward moves, turns of 40-60 degrees, side steps); each key frame names
  the objects within the 70-degree view, by the label captions' rules (the position word
  from the bearing), in the caption form the perception model writes;
* its **questions** use the world's wording (`questions.QUESTION_TEXTS`) for the kinds the
  rule-based reading handles (appearance order, relative direction now and at a first
  sighting, landmark position, next turn, route planning; progress evaluation in the
  stages `progress_questions` names), and their **answer is the
  option that reading reaches** (`worked.read`), with the reading as the worked `<think>`;
  so every example is a reading the model can follow in its own prompt (the answers are
  those of the descriptions, not of the room's geometry: the curriculum teaches reading,
  the warm-up on the world's rooms and GRPO teach the world).

Two stages: short prompts (the frame lines and the question only, 2-4 key frames), then
the robot's whole reasoning prompt with as many key frames as the world's clips (2-10),
with the consistency judge's prompt beside it.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("embodied_r_training.mini_world.curriculum")

HFOV_DEG = 70.0
SHORT_FRAMES = (2, 4)
LONG_FRAMES = (2, 10)


def text_episode(rng: random.Random, n_frames: int) -> tuple[list[str], list[str], list[str]]:
    """(object names, one caption per key frame, the action before each key frame: "" for
    the first) of a random 2-D room and camera script."""
    from embodied_r_ros.sample_data.captions import SeenObject, first_caption, pair_caption
    from embodied_r_ros.sample_data.world import COLOURS, SHAPES

    colours = rng.sample(list(COLOURS), 6)
    names = [f"{c} {rng.choice(list(SHAPES))}" for c in colours[:5]] + [f"{colours[5]} door"]
    where: dict[str, tuple[float, float]] = {}
    for name in names:
        for _ in range(100):
            p = (rng.uniform(-4.0, 4.0), rng.uniform(-3.5, 3.5))
            if all(math.dist(p, q) > 1.4 for q in where.values()):
                break
        where[name] = p
    x, y, heading = rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0), rng.uniform(-math.pi, math.pi)
    poses, actions = [(x, y, heading)], [""]
    while len(poses) < n_frames:
        r = rng.random()
        if r < 0.45:
            action = "move forward"
            x, y = x + math.cos(heading), y + math.sin(heading)
        elif r < 0.9:
            action = rng.choice(["rotate left", "rotate right"])
            heading += math.radians(rng.choice([40, 45, 50, 60])) * (1 if action == "rotate left" else -1)
        else:
            action = rng.choice(["move left", "move right"])
            s = 0.8 if action == "move left" else -0.8
            x, y = x - s * math.sin(heading), y + s * math.cos(heading)
        poses.append((x, y, heading))
        actions.append(action)

    def in_view(pose: tuple[float, float, float]) -> list[SeenObject]:
        seen = []
        for name, (ox, oy) in where.items():
            bearing = (math.degrees(math.atan2(oy - pose[1], ox - pose[0]) - pose[2]) + 180.0) % 360.0 - 180.0
            if abs(bearing) < HFOV_DEG / 2 - 2 and 0.5 < math.dist((ox, oy), pose[:2]) < 9.0 and rng.random() > 0.1:
                seen.append(SeenObject(name, 1000, 0.5 - bearing / HFOV_DEG))
        return sorted(seen, key=lambda o: o.centre)

    objs = [in_view(p) for p in poses]
    texts = [first_caption(objs[0])] + [pair_caption(actions[k], objs[k - 1], objs[k]) for k in range(1, n_frames)]
    return names, texts, actions


def _options(rng: random.Random, kind: str, answer: str) -> list[str]:
    """The options of a question of `kind` whose reading answers `answer`, shuffled."""
    from embodied_r_ros.sample_data.questions import NO_TURN, route_choices

    if kind == "appearance_order":
        order = answer.split(", ")
        perms = [", ".join(p) for p in itertools.permutations(order) if list(p) != order]
        options = [answer, *rng.sample(perms, 3)]
    elif kind in ("direction_now", "direction_then"):
        options = ["left", "right", "back"]
    elif kind == "landmark_position":
        options = ["ahead", "left", "right", "behind"]
    elif kind == "next_turn":
        options = ["rotate left", "rotate right", NO_TURN]
    else:  # route: "rotate <side> about <deg> degrees"
        words = answer.split()
        correct, distractors = route_choices(words[1], int(words[3]), rng.uniform(1.0, 5.0))
        options = [correct, *distractors]
    rng.shuffle(options)
    return options


_CATEGORY = {"appearance_order": "appearance_order", "direction_now": "object_rel_direction",
             "direction_then": "object_rel_direction", "landmark_position": "landmark_position",
             "next_turn": "action_generation", "route": "route_planning", "progress": "progress_evaluation"}


def episode_records(rng: random.Random, n_frames: int, episode_id: str, per_episode: int = 2,
                    progress: bool = False) -> list[dict[str, Any]]:
    """Up to `per_episode` questions of one text episode as cached records (the robot's
    reasoning prompt over its captions, as `perception_cache.build_record` writes them)
    with the worked reasoning in "think". With `progress`, progress evaluation ("which list
    gives the first N movements") is among the kinds asked, with the world's options
    (`questions.progress_choices`) on the episode's first three or four actions."""
    from embodied_r_ros.sample_data.questions import LETTERS, QUESTION_TEXTS, format_question, progress_choices
    from embodied_r_training.mini_world import worked
    from embodied_r_training.perception_cache import build_record

    names, texts, actions = text_episode(rng, n_frames)
    keyframes = {"source_frames": list(range(n_frames))}
    frames = worked.parse_frames(build_record({"answer": "", "question": ""}, "streaming", keyframes, texts)["frames"])
    first = {n: k for n in names if (k := next((j for j, f in enumerate(frames) if n in f.seen), None)) is not None}
    named = list(first)
    if not named:
        return []
    asks: list[tuple[str, str]] = []
    distinct = list({first[n]: n for n in reversed(named)}.values())
    if len(distinct) >= 3:
        listed = sorted(rng.sample(distinct, min(4, len(distinct))))
        asks.append(("appearance_order", QUESTION_TEXTS["appearance_order"].format(names=", ".join(listed))))
    for kind in ("direction_now", "landmark_position", "next_turn", "route"):
        asks.append((kind, QUESTION_TEXTS[kind].format(name=rng.choice(named))))
    later = [n for n in named if first[n]]
    if later:
        anchor = rng.choice(later)
        before = [n for n in named if n != anchor and first[n] <= first[anchor]]
        if before:
            asks.append(("direction_then", QUESTION_TEXTS["direction_then"].format(anchor=anchor,
                                                                                   name=rng.choice(before))))
    # Progress evaluation's reading chooses among the options, so they are made first.
    progress_options: list[str] = []
    moves = actions[1:5]
    made = progress_choices(moves) if progress and len(moves) >= 3 else None
    if made is not None and any(a.startswith("rotate") for a in moves):
        progress_options = [made[0], *made[1]]
        rng.shuffle(progress_options)
        asks.append(("progress", QUESTION_TEXTS["progress"].format(count=len(moves))))
    rng.shuffle(asks)
    out: list[dict[str, Any]] = []
    for kind, text in asks:
        is_progress = kind == "progress"
        got = worked.read(format_question(text, progress_options) if is_progress else "Question: " + text, frames)
        if got is None:
            continue
        options = progress_options if is_progress else _options(rng, kind, got[1])
        question = format_question(text, options)
        index = worked.match_option(got[1], options)
        if index is None:
            continue
        base = {"Question_id": f"{episode_id}_q{len(out)}", "video_id": episode_id,
                "question_category": _CATEGORY[kind], "question": question,
                "answer": LETTERS[index], "scene_name": episode_id}
        record = build_record(base, "streaming", keyframes, texts)
        record["think"] = worked.with_scan(got[0], options, index)
        out.append(record)
        if len(out) >= per_episode:
            break
    return out


def make_records(seed: int, count: int, frames: tuple[int, int], progress: bool = False) -> list[dict[str, Any]]:
    """`count` curriculum records of episodes with frames[0]..frames[1] key frames (with
    `progress`, progress-evaluation questions among them)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    while len(out) < count:
        out += episode_records(rng, rng.randint(*frames), f"text{seed}_{len(out)}", progress=progress)
    return out[:count]


def short_messages(record: Mapping[str, Any]) -> list[dict[str, str]]:
    """The first stage's prompt: the frame lines and the question, no system prompt or
    preamble (three times fewer tokens than the robot's prompt)."""
    text = str(record["video_text"])
    start = text.find("Frame 0:")
    return [{"role": "user", "content": text[max(start, 0):] + "\n" + str(record["question"])}]


def completion(record: Mapping[str, Any]) -> str:
    return f"<think>{record['think']}</think><answer>{record['answer']}</answer>"


def stage_pairs(records: Sequence[Mapping[str, Any]], *, short: bool, judge: bool = False,
                ) -> list[tuple[list[dict[str, str]], str]]:
    """(messages, completion) pairs of one stage; with `judge`, also the consistency
    judge's prompt (question and reasoning -> letter) of every record."""
    from embodied_r_ros.core.prompts.reasoning import build_consistency_messages

    pairs = []
    for r in records:
        pairs.append((short_messages(r) if short else list(r["prompt"]), completion(r)))
        if judge:
            pairs.append((build_consistency_messages(r["question"], r["think"]), str(r["answer"])))
    return pairs


def progress_stages(setting: str) -> tuple[str, ...]:
    """The stages that ask progress-evaluation questions, by the run's
    `--curriculum-progress` setting: "none", "long" (the robot's whole prompt) or "both"."""
    stages = {"none": (), "long": ("long",), "both": ("short", "long")}
    if setting not in stages:
        raise ValueError(f"curriculum progress setting must be one of {sorted(stages)}, got {setting!r}")
    return stages[setting]


SHORT_STEPS = 7500  # the shipped run's first stage: one pass over its 60,000 short records
LONG_STEPS = 1300   # and its second stage (the robot's prompt), as the shipped run made them
SHORT_RECORDS = 60000  # the records the shipped run made for those stages
LONG_RECORDS = 12000
BATCH = 8  # examples a curriculum step


def stage_record_count(steps: int, *, short: bool) -> int:
    """How many records a stage of `steps` steps makes: the shipped run's SHORT_RECORDS or
    LONG_RECORDS at its steps or more, proportionally fewer for fewer steps (the stream's
    first records are the same whatever the count), and never fewer than one pass needs
    (a short record is one example, a long one two: the robot's prompt and the judge's)."""
    shipped_records, shipped_steps = (SHORT_RECORDS, SHORT_STEPS) if short else (LONG_RECORDS, LONG_STEPS)
    proportional = min(shipped_records, -(-shipped_records * steps // shipped_steps))
    return max(proportional, -(-steps * BATCH // (1 if short else 2)))


def train_curriculum(model_dir: Path, *, short_steps: int = SHORT_STEPS, long_steps: int = LONG_STEPS,
                     short_minutes: float = 0.0, long_minutes: float = 0.0, seed: int = 0,
                     lr: float = 2e-3, threads: int = 1, progress: bool = True,
                     progress_questions: str = "none") -> dict[str, Any]:
    """Both stages on the causal LM in `model_dir`, in place: `short_steps` steps (batch
    BATCH) on short prompts, then `long_steps` on the robot's prompt (0 skips a stage),
    each on the records `stage_record_count` says; `*_minutes`
    caps a stage's time (0: no cap; a capped stage's report says it was stopped).
    `progress` shows a progress bar; `progress_questions` (`progress_stages`) says which
    stages also ask progress-evaluation questions."""
    import torch

    from embodied_r_training.mini_world import lm_sft

    with_progress = progress_stages(progress_questions)
    torch.set_num_threads(threads)
    report: dict[str, Any] = {}
    for name, frames, steps, minutes, short in (
            ("short", SHORT_FRAMES, short_steps, short_minutes, True),
            ("long", LONG_FRAMES, long_steps, long_minutes, False)):
        if steps <= 0:
            continue
        count = stage_record_count(steps, short=short)
        records = make_records(seed * 1000 + len(report) + 1, count, frames, progress=name in with_progress)
        pairs = stage_pairs(records, short=short, judge=not short)
        res = lm_sft.train_lm(model_dir, pairs, epochs=1, batch_size=BATCH, lr=lr, seed=seed, progress=progress,
                              max_steps=steps, max_minutes=minutes or None, desc=f"reading curriculum ({name})")
        report[name] = {k: v for k, v in res.items() if k != "history"}
        report[name]["loss_by_tenth"] = _tenths([h["loss"] for h in res["history"]])
        log.info("reading curriculum (%s): %s steps, loss %.3f -> %.3f", name, res["steps"],
                 res["loss_first"], res["loss_last"])
    return report


def _tenths(values: Sequence[float]) -> list[float]:
    n = len(values)
    return [round(sum(values[i * n // 10:(i + 1) * n // 10]) / max(1, (i + 1) * n // 10 - i * n // 10), 4)
            for i in range(10)] if n >= 10 else [round(v, 4) for v in values]
