"""`embodied-r-train mini-world --out DIR`: the whole method on the mini world, one command.

Steps (each skipped when its output exists, so a stopped run resumes):

1. world: rooms, clips, graded questions (`embodied_r_ros.sample_data.world`), split by room;
2. prepare: the published-format records read by `data.load_records` (videos found);
3. tokenizer + fresh tiny models (Qwen2.5-VL perception, Qwen2 reasoning);
4. perception model: supervised captions from the renderer's labels; measured on test rooms;
5. perception cache (`perception_cache.cache_split`, streaming mode, the robot's key-frame
   rules and prompts) with the trained perception model, for the warm-up, GRPO and test
   questions; and for row (e) the same key frames described from the labels instead;
6. reasoning: a reading curriculum on text episodes (`curriculum.py`; in a second process
   while the perception model trains, each on one core), then the warm-up (worked
   examples of the world's rooms + the consistency judge's prompt);
7. GRPO (`grpo.train`, TRL) with the paper's three rewards and staged weights: stages 1-2
   here while the consistency judge (`judge.py`, trained from the warm-up model to find the
   letter the reasoning's decision names) trains in a second process; then stage 3 twice at
   once, with the consistency reward (the frozen judge as its reference model) in a second
   process and without it here;
8. evaluation (`evaluate.evaluate`) on the test rooms: the results table;
9. with `--ship`, the perception model and the GRPO model are copied to
   `embodied_r_ros/sample_data/models/` (weights, config, tokenizer, processor).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.evaluation.models import MINI_WORLD_MAX_NEW_TOKENS
from embodied_r_training.mini_world.curriculum import LONG_STEPS, SHORT_STEPS
from embodied_r_training.mini_world.judge import JUDGE_STEPS, JUDGE_TOKENS
from embodied_r_training.mini_world.vlm_sft import PLAIN_STEPS, PROMPT_STEPS

log = logging.getLogger("embodied_r_training.mini_world")

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIP_DIR = REPO_ROOT / "embodied_r_ros" / "sample_data" / "models"
SHIP_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json", "chat_template.jinja", "processor_config.json",
              "preprocessor_config.json", "video_preprocessor_config.json", "special_tokens_map.json")
KEYFRAMES: dict[str, Any] = {"sample_fps": 1.0, "min_keyframes": 4, "max_keyframes": 32}
WARMUP_STEPS = 816  # the shipped reasoning warm-up's steps
# Every training stage runs a fixed number of steps, so a slower machine takes longer but
# trains the same model; its minutes option is only an upper limit.
CAP_HELP = ("upper limit in minutes on {} (0: none); a stage it stops trains a weaker model that "
            "depends on the machine's speed, and its report says so")
PERCEPTION_TOKENS = MINI_WORLD_MAX_NEW_TOKENS["perception"]
REASONING_TOKENS = MINI_WORLD_MAX_NEW_TOKENS["reasoning"]


def _spec(model: Path | str, max_new_tokens: int, temperature: float = 0.0, batch_size: int = 8) -> dict[str, Any]:
    return {"backend": "transformers", "model": str(model), "device": "cpu", "dtype": "float32",
            "temperature": temperature, "max_new_tokens": max_new_tokens, "batch_size": batch_size}


class Stopwatch:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.times: dict[str, float] = json.loads(path.read_text()) if path.exists() else {}

    def run(self, name: str, func: Any) -> Any:
        start = time.monotonic()
        log.info("== %s", name)
        value = func()
        self.times[name] = round(self.times.get(name, 0.0) + time.monotonic() - start, 1)
        self.path.write_text(json.dumps(self.times, indent=1) + "\n")
        return value


def _write_jsonl(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    from embodied_r_training.data import write_jsonl_atomic

    write_jsonl_atomic(path, rows)


def prepare_world(world: Path, out: Path) -> dict[str, int]:
    """Published-format records -> prepared JSONL with each question's video found."""
    from embodied_r_training.data import load_records
    from embodied_r_training.videos import VideoRoot

    root = VideoRoot(world / "videos", label="mini world", flag="--world")
    counts = {}
    for split in ("train", "val", "test"):
        drops: Counter = Counter()
        records = load_records(world / "records" / f"{split}.json", drops, root=root)
        if drops:
            raise RuntimeError(f"{split}: records dropped while loading: {dict(drops)}")
        _write_jsonl(out / f"{split}.jsonl", records)
        counts[split] = len(records)
    return counts


def label_records(cache_records: Sequence[Mapping[str, Any]], world: Path, keyframes: Mapping[str, Any],
                  motion: Any = None) -> list[dict[str, Any]]:
    """Row (e): the same questions and key frames, described from the renderer's labels;
    the actions from `motion` (odometry, as in the other rows) when given, else from the
    camera poses by the captions' rule."""
    from embodied_r_ros.sample_data.captions import SeenObject, first_caption, motion_action, pair_caption
    from embodied_r_training.perception_cache import build_record

    out = []
    texts_of: dict[str, list[str]] = {}
    for r in cache_records:
        room = r["scene_name"]
        known = keyframes[r["video_path"]]
        if room not in texts_of:
            labels = json.loads((world / "labels" / f"{room}.json").read_text())
            frames = known["source_frames"]
            measured = motion(r, known) if motion else None
            objs = [[SeenObject.from_json(o) for o in labels["frames"][i]["objects"]] for i in frames]
            texts = [first_caption(objs[0])]
            for k in range(1, len(frames)):
                action = (measured[k] if measured else None) or motion_action(
                    labels["frames"][frames[k - 1]]["pose"], labels["frames"][frames[k]]["pose"])
                texts.append(pair_caption(action, objs[k - 1], objs[k]))
            texts_of[room] = texts
        derived = ("mode", "solution", "prompt", "video_text", "frames", "keyframes")
        base = {k: v for k, v in r.items() if k not in derived}
        out.append(build_record(base, "streaming", known, texts_of[room]))
    return out


def odometry_motion(world: Path) -> Any:
    """`motion` for `perception_cache.cache_split`: the action between consecutive key frames
    measured from the clip's camera track (what the robot's /odom gives, written into the
    world's bags), with the robot's own `core.perception.odometry.measured_action`."""
    from embodied_r_ros.core.perception.odometry import Pose2D, PoseHistory, measured_action

    tracks: dict[str, tuple[PoseHistory, list[float]]] = {}

    def motion(record: Mapping[str, Any], keyframes: Mapping[str, Any]) -> list[str | None]:
        room = record["scene_name"]
        if room not in tracks:
            frames = json.loads((world / "labels" / f"{room}.json").read_text())["frames"]
            history = PoseHistory(max_age_s=1e12)
            for f in frames:
                p = f["pose"]
                history.add(Pose2D(p["x"], p["y"], p["yaw"], stamp_s=float(f["stamp_s"])))
            tracks[room] = (history, [float(f["stamp_s"]) for f in frames])
        history, stamps = tracks[room]
        src = list(keyframes["source_frames"])
        return [None] + [measured_action(history, stamps[a], stamps[b]) for a, b in zip(src, src[1:])]

    return motion


def question_only(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Row (f): the same questions with no video description at all (what the question
    text alone gives away)."""
    from embodied_r_ros.core.memory.episode import render_video_text
    from embodied_r_ros.core.prompts.reasoning import build_reasoning_messages

    empty = render_video_text([])
    return [{**r, "video_text": empty, "frames": [], "prompt": build_reasoning_messages(empty, r["question"])}
            for r in records]


def chance(records: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Expected accuracy (%) of a uniform guess, per category and averaged over categories."""
    from embodied_r_ros.core.prompts.reasoning import parse_choices

    per: dict[str, list[float]] = {}
    for r in records:
        per.setdefault(r["question_category"], []).append(1.0 / len(parse_choices(r["question"])))
    cats = {k: 100.0 * sum(v) / len(v) for k, v in per.items()}
    cats["avg"] = sum(cats.values()) / len(cats)
    cats["overall"] = 100.0 * sum(sum(v) for v in per.values()) / sum(len(v) for v in per.values())
    return cats


def reading_row(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Row (h): the worked reasoning's rule-based reading (`worked.read`) applied as rules,
    no model; a question it cannot read counts as a uniform guess."""
    from embodied_r_ros.core.prompts.reasoning import parse_choices
    from embodied_r_training.mini_world import worked

    per: dict[str, list[float]] = {}
    for r in records:
        choices = [text for _, text in parse_choices(r["question"])]
        got = worked.read(r["question"], worked.parse_frames(r.get("frames") or []))
        k = worked.match_option(got[1], choices) if got else None
        score = (1.0 / len(choices)) if k is None else float("ABCDEFGH"[k] == r["answer"])
        per.setdefault(r["question_category"], []).append(score)
    cats = {c: 100.0 * sum(v) / len(v) for c, v in per.items()}
    n = sum(len(v) for v in per.values())
    return {"overall": 100.0 * sum(sum(v) for v in per.values()) / max(n, 1),
            "avg": sum(cats.values()) / max(len(cats), 1), "per_category": cats, "n": n}


def grpo_config(out_dir: Path, policy: Path, judge: Path, train: Path, *, stages: Sequence[Mapping[str, Any]],
                epochs: int, seed: int, learning_rate: float = 5e-5, batch: int = 8, group: int = 4
                ) -> dict[str, Any]:
    """A GRPO run of the project's training/grpo.py: the paper's objective and sampling,
    sizes for a 2-core CPU (`batch` completions a step, `group` of each question); `judge`
    is the consistency reward's model (`judge.py`)."""
    return {
        "model": {"name_or_path": str(policy), "dtype": "float32"},
        "data": {"train": str(train), "max_prompt_tokens": 4096},
        "rewards": {
            "schedule": [dict(s) for s in stages],
            "rules": {"format": "project", "accuracy": "project"},
            "consistency_model": _spec(judge, JUDGE_TOKENS, temperature=0.1),
            "consistency": {"max_workers": 1, "timeout_s": 120},
        },
        "lora": {"enabled": False},
        "grpo": {
            "output_dir": str(out_dir), "use_cpu": True, "bf16": False, "seed": seed,
            "optim": "adamw_torch", "learning_rate": learning_rate, "lr_scheduler_type": "cosine",
            "warmup_steps": 0.05, "weight_decay": 0.1, "adam_beta2": 0.95,
            "per_device_train_batch_size": batch, "gradient_accumulation_steps": 1,
            "num_generations": group, "num_train_epochs": epochs, "loss_type": "grpo", "beta": 0.001,
            "epsilon": 0.2, "scale_rewards": "group", "temperature": 1.0, "top_k": 50, "top_p": 0.9,
            "max_completion_length": REASONING_TOKENS, "eval_strategy": "no", "logging_steps": 1,
            "save_strategy": "no", "report_to": "none", "activation_checkpointing": False,
        },
    }


def staged_runs(epochs_per_stage: int, final_epochs: int) -> dict[str, tuple[str | None, list[dict[str, Any]], int]]:
    """The paper's three stages (format:accuracy:consistency 7:3:0, 3:7:0, 1:7:2). Stages 1
    and 2 give consistency no weight, so both arms share them (one run, "grpo_stages12");
    stage 3 then runs twice from it: with the consistency reward (1:7:2) and without (1:7:0).
    name -> (start from, schedule, epochs)."""
    e = epochs_per_stage
    shared = [{"epochs": [1, e], "format": 0.7, "accuracy": 0.3, "consistency": 0.0},
              {"epochs": [e + 1, 2 * e], "format": 0.3, "accuracy": 0.7, "consistency": 0.0}]
    last = [1, final_epochs]
    return {
        "grpo_stages12": (None, shared, 2 * e),
        "grpo": ("grpo_stages12", [{"epochs": last, "format": 0.1, "accuracy": 0.7, "consistency": 0.2}],
                 final_epochs),
        "grpo_no_consistency": ("grpo_stages12", [{"epochs": last, "format": 0.1, "accuracy": 0.7,
                                                   "consistency": 0.0}], final_epochs),
    }


class TimeBudget:
    """A trainer callback that ends training after `minutes` (an upper limit on a run's
    time; its steps are set by its epochs)."""

    def __new__(cls, minutes: float) -> Any:  # noqa: D102 - built lazily on transformers
        from transformers import TrainerCallback

        class _Budget(TrainerCallback):
            def __init__(self) -> None:
                self.start = time.monotonic()
                self.hit = False

            def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, D102
                if time.monotonic() - self.start > minutes * 60:
                    control.should_training_stop = True
                    self.hit = True
                return control

        return _Budget()


def train_arm(config: Mapping[str, Any], minutes: float = 0.0) -> dict[str, Any]:
    """One GRPO run (`grpo.train`) for its epochs; `minutes` (0: none) caps its time, and
    its result says whether the cap stopped it (`stopped_by_time_budget`)."""
    from embodied_r_training.grpo import train as grpo_train_run

    budget = TimeBudget(minutes) if minutes > 0 else None
    res = grpo_train_run(config, extra_callbacks=[budget] if budget is not None else [])
    res["stopped_by_time_budget"] = bool(budget is not None and budget.hit)
    if res["stopped_by_time_budget"]:
        log.warning("GRPO run %s stopped by its %g-minute limit at step %s: its model depends on this "
                    "machine's speed", config["grpo"]["output_dir"], minutes, res.get("global_step"))
    return res


def _side_process(stage: str, done: str, kwargs: dict[str, Any]) -> None:
    """Body of a side job's process: run one stage, then write `done` (its report)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if stage == "curriculum":
        from embodied_r_training.mini_world.curriculum import train_curriculum

        res = train_curriculum(progress=False, **kwargs)
    elif stage == "judge":
        from embodied_r_training.mini_world.judge import train_judge

        res = train_judge(progress=False, **kwargs)
    elif stage == "grpo":
        import torch

        torch.set_num_threads(kwargs.pop("threads", 1))
        res = train_arm(kwargs["config"], kwargs.get("minutes", 0.0))
    else:
        raise ValueError(f"unknown side stage {stage!r}")
    Path(done).write_text(json.dumps(res, default=str) + "\n")


class SideJob:
    """One training stage in a process of its own (torch on one thread there too), so two
    stages train at once on a 2-core machine; `wait` joins it and raises when it failed."""

    def __init__(self, label: str, stage: str, done: Path, kwargs: Mapping[str, Any]) -> None:
        import multiprocessing

        self.label = label
        self.done = done
        self.process = multiprocessing.get_context("spawn").Process(
            target=_side_process, name=label.replace(" ", "-"), daemon=True,  # ends with the run
            args=(stage, str(done), dict(kwargs)))
        self.process.start()
        log.info("%s started in process %s", label, self.process.pid)

    def wait(self) -> None:
        self.process.join()
        if self.process.exitcode != 0 or not self.done.exists():
            raise RuntimeError(f"the {self.label} failed (exit code {self.process.exitcode}); its traceback "
                               "is above; rerun the same command to retry (finished steps are kept)")


def curriculum_job(model_dir: Path, done: Path, args: argparse.Namespace) -> SideJob:
    """The reading curriculum beside the perception model."""
    return SideJob("reading curriculum", "curriculum", done, {
        "model_dir": Path(model_dir), "short_steps": args.curriculum_steps,
        "long_steps": args.curriculum_long_steps, "short_minutes": args.curriculum_minutes,
        "long_minutes": args.curriculum_long_minutes, "lr": args.curriculum_lr, "seed": args.seed,
        "progress_questions": args.curriculum_progress})


def _fresh_copy(src: Path, dst: Path) -> None:
    """`dst` becomes a copy of the model folder `src` (a stage that trains a model in place
    starts from it; an unfinished earlier attempt is replaced)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def _copy_model(src: Path, dst: Path) -> None:
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for name in SHIP_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, dst / name)


def results_table(rows: Mapping[str, Mapping[str, Any]], order: Sequence[str]) -> str:
    """The markdown table: accuracy overall, averaged over kinds and per kind; the judge's
    consistency rate; and how often the letter is the option the reasoning names."""
    from embodied_r_training.categories import CATEGORIES, CATEGORY_TITLES

    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    cats = [c for c in CATEGORIES if any(c in r.get("per_category", {}) for r in rows.values())]
    head = ("| row | overall | avg of kinds | " + " | ".join(CATEGORY_TITLES[c] for c in cats)
            + " | consistent | letter = reasoning's option |")
    lines = [head, "|" + "---|" * (len(cats) + 5)]
    for name in order:
        r = rows[name]
        per = r.get("per_category", {})
        cells = [pct(per.get(c)) for c in cats]
        lines.append(f"| {name} | {r['overall']:.1f} | {r['avg']:.1f} | " + " | ".join(cells)
                     + f" | {pct(r.get('consistency_rate'))} | {pct(r.get('follows_reasoning'))} |")
    return "\n".join(lines)


def _row(metrics: Mapping[str, Any], predictions: Sequence[Mapping[str, Any]],
         questions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A table row from an evaluation's predictions. With the questions' texts (by
    Question_id), also the rule-based view of think-answer agreement (`worked.named_option`):
    `names_option`, the share of answers whose reasoning's decision (its last sentence
    before any option scan) names an option;
    `follows_reasoning`, the share of those whose letter is that option's."""
    from embodied_r_ros.core.prompts.reasoning import parse_choices
    from embodied_r_ros.core.qa.answer_parser import parse_reasoning_output
    from embodied_r_training.mini_world import worked

    per: dict[str, list[float]] = {}
    cons_num = cons_den = named = follows = 0
    for p in predictions:
        per.setdefault(p["question_category"], []).append(float(p["score"]))
        if p.get("correct"):
            cons_den += 1
            cons_num += bool(p.get("consistent"))
        if questions is not None and p["Question_id"] in questions:
            choices = [text for _, text in parse_choices(questions[p["Question_id"]])]
            agrees = worked.letter_follows(parse_reasoning_output(str(p.get("completion") or "")).think,
                                           choices, p.get("letter"))
            if agrees is not None:
                named += 1
                follows += agrees
    cats = {k: 100.0 * sum(v) / len(v) for k, v in per.items()}
    n = sum(len(v) for v in per.values())
    row = {"overall": 100.0 * sum(sum(v) for v in per.values()) / max(n, 1),
           "avg": sum(cats.values()) / max(len(cats), 1), "per_category": cats, "n": n,
           "consistency_rate": 100.0 * cons_num / cons_den if cons_den else None,
           "well_formed": 100.0 * sum(bool(p.get("well_formed")) for p in predictions) / max(n, 1)}
    if questions is not None:
        row["names_option"] = 100.0 * named / max(n, 1)
        row["follows_reasoning"] = 100.0 * follows / named if named else None
    return row


def paired_changes(new: Sequence[Mapping[str, Any]], old: Sequence[Mapping[str, Any]]
                   ) -> dict[str, dict[str, float]]:
    """Two models' predictions on the same questions (matched by Question_id), per kind and
    over all ("all"): `gained`, the questions `new` answers right and `old` wrong; `lost`,
    the reverse; `p`, the exact two-sided sign test (McNemar) of gained against lost, the
    chance of a split at least this uneven if neither model were better. A question both
    answer alike says nothing about which is better, so only the changes count."""
    import math

    before = {q["Question_id"]: q["score"] > 0 for q in old}
    counts: dict[str, Counter[str]] = {}
    for q in new:
        if q["Question_id"] not in before or (q["score"] > 0) == before[q["Question_id"]]:
            continue
        change = "gained" if q["score"] > 0 else "lost"
        for kind in (q["question_category"], "all"):
            counts.setdefault(kind, Counter())[change] += 1
    out: dict[str, dict[str, float]] = {}
    for kind, c in sorted(counts.items()):
        n, k = c["gained"] + c["lost"], min(c["gained"], c["lost"])
        tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
        out[kind] = {"gained": c["gained"], "lost": c["lost"], "p": min(1.0, 2 * tail)}
    return out


def paired_table(comparisons: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """Markdown: one line per comparison, "+gained/-lost" per kind, p over all."""
    from embodied_r_training.categories import CATEGORIES, CATEGORY_TITLES

    cats = [c for c in CATEGORIES if any(c in v for v in comparisons.values())]
    lines = ["| comparison | all (p) | " + " | ".join(CATEGORY_TITLES[c] for c in cats) + " |",
             "|" + "---|" * (len(cats) + 2)]
    for name, per in comparisons.items():
        cells = ["+0/-0" if (c := per.get(kind)) is None else f"+{c['gained']:.0f}/-{c['lost']:.0f}"
                 for kind in ("all", *cats)]
        if "all" in per:
            cells[0] += f" ({per['all']['p']:.2f})"
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def room_roles(summary: Mapping[str, Any], seed: int, warmup: int, grpo: int, captions: int
               ) -> dict[str, list[str]]:
    """Which training rooms (of the world's `world.json` summary) feed the warm-up, GRPO and
    the captions: the train split shuffled by `seed`, then the first `warmup`, the next
    `grpo`, the next `captions`. The reasoning model reads descriptions of rooms the
    perception model never saw in training (as the paper's frozen VLM never saw its
    questions' videos)."""
    rooms = list(summary["rooms"]["train"])
    random.Random(seed).shuffle(rooms)
    if warmup + grpo + captions > len(rooms):
        raise ValueError(f"{warmup} warm-up + {grpo} GRPO + {captions} caption rooms: the world has only "
                         f"{len(rooms)} training rooms")
    return {"warmup": rooms[:warmup], "grpo": rooms[warmup : warmup + grpo],
            "captions": rooms[warmup + grpo : warmup + grpo + captions]}


def evaluate_row(name: str, model: Path, records: Sequence[Mapping[str, Any]], out: Path, judge: Path | None
                 ) -> dict[str, Any]:
    """A table row of the reasoning model `model` (greedy) on cached `records`; `judge`
    (None: no consistency rate) checks the reasoning of the right answers."""
    from embodied_r_training.data import read_jsonl
    from embodied_r_training.evaluate import evaluate

    judged: dict[str, Any] = {} if judge is None else {
        "consistency_cfg": _spec(judge, JUDGE_TOKENS, temperature=0.1),
        "consistency_options": {"max_workers": 1, "timeout_s": 120}}
    metrics = evaluate(records, model_cfg=_spec(model, REASONING_TOKENS), out=out, name=name, **judged)
    return _row(metrics, read_jsonl(out / "predictions.jsonl"), {r["Question_id"]: r["question"] for r in records})


def _without_history(path: Path) -> dict[str, Any]:
    return {k: v for k, v in json.loads(path.read_text()).items() if k != "history"}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from embodied_r_ros.sample_data.world import WorldConfig, write_world
    from embodied_r_training.data import read_jsonl
    from embodied_r_training.mini_world import curriculum, lm_sft, models, vlm_sft, worked

    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clock = Stopwatch(out / "wall_times.json")
    cfg = WorldConfig(seed=args.seed, n_train=args.train_rooms, n_val=args.val_rooms, n_test=args.test_rooms)
    world = out / "world"
    if not (world / "world.json").exists():
        clock.run("world", lambda: write_world(world, cfg))
    summary = json.loads((world / "world.json").read_text())
    prepared = out / "prepared"
    if not (prepared / "test.jsonl").exists():
        clock.run("prepare", lambda: prepare_world(world, prepared))
    truth: dict[str, Any] = {}
    for split in ("train", "val", "test"):
        truth.update(json.loads((world / "truth" / f"{split}.json").read_text()))

    test_rooms = list(summary["rooms"]["test"])
    roles = room_roles(summary, args.seed, args.warmup_rooms, args.grpo_rooms, args.caption_rooms)
    warm_rooms, grpo_rooms = set(roles["warmup"]), set(roles["grpo"])
    caption_rooms = roles["captions"]

    mdir = out / "models"
    vlm_dir, lm_init = mdir / "vlm", mdir / "lm_init"
    if not (lm_init / "model.safetensors").exists():
        def build() -> None:
            if (vlm_dir / "model.safetensors").exists():  # a resumed run keeps its perception model
                from transformers import AutoTokenizer

                tok = AutoTokenizer.from_pretrained(vlm_dir)
            else:
                train_q = read_jsonl(prepared / "train.jsonl")
                texts = [q["question"] for q in train_q]
                texts += [lm_sft.worked_completion(q["question_category"],
                                                   truth[q["Question_id"]]["answer_text"], q["answer"])
                          for q in train_q]
                texts += worked.vocabulary()
                tok = models.build_world_tokenizer(texts)
                models.new_vlm(vlm_dir, tok, seed=args.seed)
            models.new_lm(lm_init, tok, seed=args.seed, hidden=args.lm_hidden, layers=args.lm_layers,
                          heads=args.lm_heads, kv_heads=args.lm_kv_heads)
        clock.run("build models", build)
    # The reading curriculum needs no perception: it trains in a second process meanwhile.
    curriculum_dir, curriculum_done = mdir / "lm_curriculum", mdir / "lm_curriculum.done.json"
    job = None
    if not curriculum_done.exists():
        _fresh_copy(lm_init, curriculum_dir)
        job = curriculum_job(curriculum_dir, curriculum_done, args)
    report: dict[str, Any] = {"world": summary["counts"], "settings": vars(args)}
    perception_now = not (mdir / "vlm.done.json").exists()
    if perception_now:
        res = clock.run("perception captions", lambda: vlm_sft.train_vlm(
            vlm_dir, world, caption_rooms, seed=args.seed,
            plain_steps=args.vlm_steps, prompt_steps=args.vlm_prompt_steps,
            plain_minutes=args.vlm_minutes, prompt_minutes=args.vlm_prompt_minutes))
        (mdir / "vlm.done.json").write_text(json.dumps(res) + "\n")
    report["vlm_training"] = _without_history(mdir / "vlm.done.json")
    if not (out / "vlm_measure.json").exists():
        m = clock.run("perception measure", lambda: vlm_sft.measure(vlm_dir, world, test_rooms[:10], per_room=2))
        (out / "vlm_measure.json").write_text(json.dumps(m, indent=1) + "\n")
    report["vlm_heldout"] = json.loads((out / "vlm_measure.json").read_text())
    val_rooms = list(summary["rooms"]["val"])
    if not (out / "vlm_measure_val.json").exists():
        m = clock.run("perception measure val", lambda: vlm_sft.measure(vlm_dir, world, val_rooms, per_room=2))
        (out / "vlm_measure_val.json").write_text(json.dumps(m, indent=1) + "\n")
    report["vlm_val"] = json.loads((out / "vlm_measure_val.json").read_text())

    # Perception cache with the trained model (streaming: the robot's default mode).
    from embodied_r_ros.core.backends.factory import make_perceiver
    from embodied_r_ros.core.backends.model_spec import ModelSpec
    from embodied_r_ros.core.keyframes.rules import KeyFrameParams
    from embodied_r_training.perception_cache import cache_split, load_keyframes

    cache = out / "cache"
    spec = ModelSpec.from_dict(_spec(vlm_dir, PERCEPTION_TOKENS))
    lm_train = [r for r in read_jsonl(prepared / "train.jsonl") if r["scene_name"] in warm_rooms | grpo_rooms]
    eval_rooms = set(test_rooms[: args.eval_rooms])
    test = [r for r in read_jsonl(prepared / "test.jsonl") if r["scene_name"] in eval_rooms]
    val = read_jsonl(prepared / "val.jsonl")
    # Actions between key frames come from odometry (the robot's perception.use_odometry),
    # as in the mini-world model setup; "test_vlm_actions" keeps the perception model's own
    # guesses for row (g).
    motion = odometry_motion(world)
    for split, recs, with_odometry in (("train", lm_train, True), ("val", val, True), ("test", test, True),
                                       ("test_vlm_actions", test, False)):
        if not (cache / f"{split}.streaming.jsonl").exists():
            clock.run(f"perception cache {split}", lambda recs=recs, split=split, odo=with_odometry: cache_split(
                recs, perceiver=lambda: make_perceiver(spec), out=cache, split=split, mode="streaming",
                keyframe_params=KeyFrameParams(**KEYFRAMES), batch_size=8, workers=1,
                motion=motion if odo else None))
    train_cache = read_jsonl(cache / "train.streaming.jsonl")
    test_cache = read_jsonl(cache / "test.streaming.jsonl")
    test_vlm_actions = read_jsonl(cache / "test_vlm_actions.streaming.jsonl")
    labels_path = out / "cache_labels" / "test.streaming.jsonl"
    if not labels_path.exists():
        _write_jsonl(labels_path, label_records(test_cache, world, load_keyframes(cache), motion))
    test_labels = read_jsonl(labels_path)

    # Reasoning: curriculum (above), warm-up, then GRPO with and without the consistency reward.
    if job is not None:
        # A resumed run whose perception model is done waits for the whole curriculum.
        clock.run("reasoning curriculum (beyond perception)" if perception_now
                  else "reasoning curriculum (alone: perception from an earlier run)", job.wait)
    report["lm_curriculum"] = json.loads(curriculum_done.read_text())
    warm_dir = mdir / "lm_warmup"
    warm = [r for r in train_cache if r["scene_name"] in warm_rooms]
    grpo_records = [r for r in train_cache if r["scene_name"] in grpo_rooms]
    if not (mdir / "lm_warmup.done.json").exists():
        _fresh_copy(curriculum_dir, warm_dir)
        # Text episodes beside the world's worked examples keep the curriculum's reading.
        pairs = lm_sft.sft_pairs(warm, truth) + curriculum.stage_pairs(
            curriculum.make_records(args.seed * 1000 + 7, args.warmup_text_episodes, curriculum.LONG_FRAMES,
                                    progress="long" in curriculum.progress_stages(args.curriculum_progress)),
            short=False, judge=True)
        res = clock.run("reasoning warm-up", lambda: lm_sft.train_lm(
            warm_dir, pairs, epochs=args.lm_epochs, seed=args.seed, max_steps=args.lm_steps,
            max_minutes=args.lm_minutes or None))
        (mdir / "lm_warmup.done.json").write_text(json.dumps(res) + "\n")
    report["lm_warmup"] = _without_history(mdir / "lm_warmup.done.json")
    grpo_train = out / "grpo_train.jsonl"
    _write_jsonl(grpo_train, grpo_records)
    report["grpo_questions"] = len(grpo_records)

    # The consistency judge trains from the warm-up model in a second process while GRPO's
    # stages 1-2 (which give consistency no weight) train here.
    judge_dir, judge_done = mdir / "judge", mdir / "judge.done.json"
    judge_job = None
    if not judge_done.exists():
        _fresh_copy(warm_dir, judge_dir)
        items = [(r["question"], lm_sft.worked_reasoning(r, truth[r["Question_id"]])[0], r["answer"]) for r in warm]
        judge_job = SideJob("consistency judge", "judge", judge_done, {
            "model_dir": judge_dir, "items": items, "steps": args.judge_steps, "minutes": args.judge_minutes,
            "seed": args.seed,
            "text_episodes": args.judge_text_episodes})
    runs = staged_runs(args.grpo_stage_epochs, args.grpo_final_epochs)

    def arm_config(name: str) -> dict[str, Any]:
        start_from, stages, epochs = runs[name]
        policy = warm_dir if start_from is None else out / start_from / "final"
        return grpo_config(out / name, policy, judge_dir, grpo_train, stages=stages, epochs=epochs, seed=args.seed,
                           learning_rate=args.grpo_lr, batch=args.grpo_batch, group=args.grpo_group)

    def train_here(name: str) -> None:
        if (out / name / "final" / "model.safetensors").exists():
            return
        res = clock.run(name, lambda: train_arm(arm_config(name), args.grpo_minutes))
        (out / name / "done.json").write_text(json.dumps(res, indent=1, default=str) + "\n")

    train_here("grpo_stages12")
    if judge_job is not None:
        clock.run("consistency judge (beyond GRPO stages 1-2)", judge_job.wait)
    report["judge"] = json.loads(judge_done.read_text())
    # Stage 3 twice from stages 1-2, at once: with the consistency reward in a second
    # process, without it here.
    side = None
    if not (out / "grpo" / "final" / "model.safetensors").exists():
        (out / "grpo").mkdir(parents=True, exist_ok=True)
        side = SideJob("GRPO stage 3 with consistency", "grpo", out / "grpo" / "done.json",
                       {"config": arm_config("grpo"), "minutes": args.grpo_minutes, "threads": args.threads})
    train_here("grpo_no_consistency")
    if side is not None:
        clock.run("grpo (beyond the arm without consistency)", side.wait)
    for name in runs:
        done = json.loads((out / name / "done.json").read_text())
        report[name] = {k: done.get(k) for k in ("global_step", "epoch", "train_loss", "weight_changes",
                                                 "stopped_by_time_budget")}

    # The table on held-out rooms.
    rows: dict[str, Any] = {}
    rows["(a) chance"] = {**{"per_category": {k: v for k, v in chance(test_cache).items()
                                              if k not in ("avg", "overall")}},
                          "overall": chance(test_cache)["overall"], "avg": chance(test_cache)["avg"]}
    evals = {
        "(b) warm-up": (warm_dir, test_cache),
        "(c) GRPO": (out / "grpo" / "final", test_cache),
        "(d) GRPO, no consistency reward": (out / "grpo_no_consistency" / "final", test_cache),
        "(e) GRPO, label descriptions (upper bound)": (out / "grpo" / "final", test_labels),
        "(f) GRPO, no descriptions (question only)": (out / "grpo" / "final", question_only(test_cache)),
        "(g) GRPO, the perception model's actions (no odometry)": (out / "grpo" / "final", test_vlm_actions),
    }
    row_dirs = {name: out / "eval" / f"row{i}" for i, name in enumerate(evals)}
    for name, (model, recs) in evals.items():
        done_row = row_dirs[name] / "row.json"
        if not done_row.exists():
            row = clock.run(f"evaluate {name}", lambda model=model, recs=recs, name=name: evaluate_row(
                name, model, recs, row_dirs[name], judge_dir))
            done_row.write_text(json.dumps(row, indent=1) + "\n")
        rows[name] = json.loads(done_row.read_text())
    rows["(h) rule-based reading, no model"] = reading_row(test_cache)
    report["rows"] = rows
    report["table"] = results_table(rows, list(rows))
    # Which answers each change of training changed, per kind, with a sign test.
    warm, grpo, no_cons = (read_jsonl(row_dirs[name] / "predictions.jsonl") for name in
                           ("(b) warm-up", "(c) GRPO", "(d) GRPO, no consistency reward"))
    report["paired"] = {"(c) GRPO vs (b) warm-up": paired_changes(grpo, warm),
                        "(d) no consistency vs (b) warm-up": paired_changes(no_cons, warm),
                        "(c) GRPO vs (d) no consistency": paired_changes(grpo, no_cons)}
    report["paired_table"] = paired_table(report["paired"])
    report["wall_times_s"] = clock.times
    report["wall_total_s"] = round(sum(clock.times.values()), 1)
    (out / "results.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    (out / "results.md").write_text(report["table"] + "\n\nAnswers changed (right in the first, wrong in the "
                                    "second: +; the reverse: -):\n\n" + report["paired_table"] + "\n")
    print(report["table"])
    print(report["paired_table"])
    if args.ship:
        _copy_model(vlm_dir, SHIP_DIR / "mini_world_vlm")
        _copy_model(out / "grpo" / "final", SHIP_DIR / "mini_world_lm")
        (SHIP_DIR / "mini_world_results.json").write_text(json.dumps(
            {k: report[k] for k in ("world", "vlm_heldout", "rows", "paired", "wall_times_s", "wall_total_s",
                                    "settings")},
            indent=1, default=str) + "\n")
        print(f"shipped to {SHIP_DIR}")
    return report


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default (a required option has none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        return action.help if action.required else super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="embodied-r-train mini-world", description=__doc__.split("\n\n")[0],
                                formatter_class=_HelpWithDefaults)
    p.add_argument("--out", required=True, help="the run's folder (a run with an existing folder resumes)")
    p.add_argument("--seed", type=int, default=0, help="seed of the world, the models and the room split")
    p.add_argument("--train-rooms", type=int, default=200, help="rooms of the training split")
    p.add_argument("--val-rooms", type=int, default=10, help="rooms of the validation split")
    p.add_argument("--test-rooms", type=int, default=40, help="rooms of the held-out test split")
    p.add_argument("--caption-rooms", type=int, default=130,
                   help="training rooms whose frames teach captions (none of the reasoning model's rooms)")
    p.add_argument("--warmup-rooms", type=int, default=45, help="training rooms of the worked examples")
    p.add_argument("--grpo-rooms", type=int, default=25, help="training rooms GRPO trains on")
    p.add_argument("--vlm-steps", type=int, default=PLAIN_STEPS,
                   help="steps (batch 16) of the caption training on images alone")
    p.add_argument("--vlm-prompt-steps", type=int, default=PROMPT_STEPS,
                   help="steps (batch 8) of the caption training with the robot's prompts")
    p.add_argument("--vlm-minutes", type=float, default=0.0, help=CAP_HELP.format("--vlm-steps"))
    p.add_argument("--vlm-prompt-minutes", type=float, default=0.0, help=CAP_HELP.format("--vlm-prompt-steps"))
    p.add_argument("--lm-hidden", type=int, default=128, help="hidden size of the reasoning model")
    p.add_argument("--lm-layers", type=int, default=3, help="layers of the reasoning model")
    p.add_argument("--lm-heads", type=int, default=8, help="attention heads of the reasoning model")
    p.add_argument("--lm-kv-heads", type=int, default=8, help="key/value heads of the reasoning model")
    p.add_argument("--curriculum-steps", type=int, default=SHORT_STEPS,
                   help="steps (batch 8) of the reading curriculum's first stage (short prompts)")
    p.add_argument("--curriculum-long-steps", type=int, default=LONG_STEPS,
                   help="steps of its second stage (the robot's prompt and the judge's)")
    p.add_argument("--curriculum-minutes", type=float, default=0.0, help=CAP_HELP.format("--curriculum-steps"))
    p.add_argument("--curriculum-long-minutes", type=float, default=0.0,
                   help=CAP_HELP.format("--curriculum-long-steps"))
    p.add_argument("--curriculum-lr", type=float, default=2e-3, help="peak learning rate of the curriculum")
    p.add_argument("--curriculum-progress", choices=("none", "long", "both"), default="none",
                   help="curriculum stages that also ask progress-evaluation questions (with 'long' or "
                        "'both', so do the text episodes mixed into the warm-up)")
    p.add_argument("--warmup-text-episodes", type=int, default=600,
                   help="curriculum questions mixed into the warm-up's worked examples")
    p.add_argument("--lm-steps", type=int, default=WARMUP_STEPS,
                   help="steps (batch 8) of the reasoning warm-up (at most --lm-epochs passes)")
    p.add_argument("--lm-epochs", type=int, default=8, help="most passes of the reasoning warm-up")
    p.add_argument("--lm-minutes", type=float, default=0.0, help=CAP_HELP.format("--lm-steps"))
    p.add_argument("--grpo-stage-epochs", type=int, default=1, help="epochs of each of stages 1 and 2")
    p.add_argument("--grpo-final-epochs", type=int, default=2, help="epochs of stage 3 (each arm)")
    p.add_argument("--grpo-minutes", type=float, default=0.0,
                   help=CAP_HELP.format("each GRPO run's epochs (100 steps an epoch with the defaults)"))
    p.add_argument("--grpo-lr", type=float, default=5e-5, help="peak learning rate of GRPO")
    p.add_argument("--grpo-batch", type=int, default=8,
                   help="completions per GRPO step, --grpo-group of each question (the paper's global batch "
                        "is 32; docs/mini_world.md compares settings)")
    p.add_argument("--grpo-group", type=int, default=4,
                   help="completions per question in a GRPO step (the paper: 8); divides --grpo-batch")
    p.add_argument("--judge-steps", type=int, default=JUDGE_STEPS,
                   help="steps (batch 8) of the consistency judge's training (beside GRPO stages 1-2)")
    p.add_argument("--judge-minutes", type=float, default=0.0, help=CAP_HELP.format("--judge-steps"))
    p.add_argument("--judge-text-episodes", type=int, default=6000,
                   help="reading-curriculum questions in the judge's training, beside the worked examples")
    p.add_argument("--eval-rooms", type=int, default=40,
                   help="test rooms of the results table (the first N of the test split)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: on a shared 2-core machine more threads were 7x slower)")
    p.add_argument("--ship", action="store_true", help="copy the trained models into the package")
    return p


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.grpo_group < 2:
        parser.error(f"--grpo-group {args.grpo_group}: must be at least 2 (GRPO compares completions of a question)")
    if args.grpo_batch < args.grpo_group or args.grpo_batch % args.grpo_group:
        parser.error(f"--grpo-batch {args.grpo_batch}: must be a positive multiple of {args.grpo_group} "
                     "(--grpo-group): each question gets a whole group of completions")
    for name in ("vlm_steps", "vlm_prompt_steps", "lm_steps", "judge_steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    for name in ("curriculum_steps", "curriculum_long_steps"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be 0 (skip the stage) or more")
    for name in ("vlm_minutes", "vlm_prompt_minutes", "curriculum_minutes", "curriculum_long_minutes",
                 "lm_minutes", "judge_minutes", "grpo_minutes"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be 0 (no limit) or more")
    if args.grpo_lr <= 0:
        parser.error(f"--grpo-lr {args.grpo_lr}: must be positive")
    if args.warmup_rooms + args.grpo_rooms + args.caption_rooms > args.train_rooms:
        parser.error(f"--warmup-rooms {args.warmup_rooms} + --grpo-rooms {args.grpo_rooms} + --caption-rooms "
                     f"{args.caption_rooms}: more than the {args.train_rooms} --train-rooms")
    if not 1 <= args.eval_rooms <= args.test_rooms:
        parser.error(f"--eval-rooms {args.eval_rooms}: must be 1..--test-rooms ({args.test_rooms})")
    run(args)
    return 0
