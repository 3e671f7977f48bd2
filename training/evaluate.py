"""Evaluate a reasoning model on cached records: accuracy per category, consistency, length.

Any model reachable through a core `ModelSpec` can be evaluated (transformers in-process,
vLLM in-process, or an OpenAI-compatible server); the records are those written by
`cache-perception` (their `prompt` is exactly what the model sees). Scoring reuses the
rewards (training/rewards.py), so "correct" and "well formed" mean the same here as in training:

* accuracy: core `accuracy_reward` (letter equals the ground truth), per category and
  overall. The overall number weights every question equally (the paper's "avg" is also
  question-weighted: its category mean differs from it); the unweighted category mean is
  reported too, as `macro_avg`;
* consistency rate: with a reference model given, the core `ConsistencyReward` (question +
  choices + <think> only, one-letter reply) over the correct answers; reported as the
  share of correct answers judged consistent and as the share of all answers;
* completion length: mean tokens when a tokenizer is available (the evaluated model's,
  or `--tokenizer`), otherwise mean whitespace-separated words; the unit is written out.

Two ways of summarising the same predictions:

* the paper's table (docs/method.md §7): the eight categories, the three relative-direction
  levels pooled into one, "avg" over all questions;
* VSI-Bench's own way, for the VSI-Bench questions: accuracy per question type, the
  relative-direction score the mean of its three levels' accuracies (easy, medium,
  hard), numeric questions (kept with `prepare --include-numeric`) scored by mean
  relative accuracy (`mean_relative_accuracy`), and the overall score the mean over the
  task scores present.

Outputs in `--out`: `predictions.jsonl`, `metrics.json` and `results.md` (both tables, the
paper's with the paper's rows beside ours), and `completions*.jsonl`, the raw completions
appended after every batch: a stopped run resumes where it stopped (the same command
again). Several machines: `--shard i/n` on each (split by video), copy the
`completions.shard*.jsonl` files into one `--out`, then run once without `--shard` to
score them all (no model call when every completion is there).

    embodied-r-train evaluate --config training/configs/eval_tiny.yaml \\
        --records artifacts/toy/cache/test.on_query.jsonl --out artifacts/eval_tiny
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.append_only import AppendOnlyJsonl, write_json_atomic
from embodied_r_ros.core.shards import shard_argument
from embodied_r_ros.core.types import OPTION_LETTERS
from embodied_r_training.categories import (
    CATEGORIES,
    CATEGORY_TITLES,
    PAPER_CONSISTENCY,
    PAPER_RESULTS,
    VSI_CHOICE_TYPES,
    VSI_DIRECTION_LEVELS,
    VSI_NUMERIC_TYPES,
    VSI_TYPE_TITLES,
)
from embodied_r_training.data import read_jsonl, write_jsonl_atomic

log = logging.getLogger("embodied_r_training.evaluate")


def completion_length(texts: Sequence[str], tokenizer: Any = None) -> tuple[list[int], str]:
    """Length of each text in tokens (with a tokenizer) or words; returns (lengths, unit)."""
    if tokenizer is not None:
        return [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts], "tokens"
    return [len(t.split()) for t in texts], "words"


# VSI-Bench's mean relative accuracy: confidence thresholds 0.50, 0.55, ..., 0.95 (ten
# values, computed as VSI-Bench's evaluation code does, with numpy's linspace).
MRA_THRESHOLDS: tuple[float, ...] = tuple(float(t) for t in __import__("numpy").linspace(0.5, 0.95, 10))
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)")
# VSI-Bench's task order (its own results table).
VSI_TASKS: tuple[str, ...] = (*VSI_NUMERIC_TYPES, "object_rel_distance", "object_rel_direction",
                              "route_planning", "obj_appearance_order")


def mean_relative_accuracy(prediction: float | None, target: float) -> float:
    """VSI-Bench's score for a numeric answer: the share of thresholds t in 0.50, 0.55,
    ..., 0.95 for which the relative error |prediction - target| / target is at most
    1 - t. No prediction (unparseable answer) scores 0, as in VSI-Bench."""
    if prediction is None or target == 0:
        return 0.0
    error = abs(prediction - target) / target
    return sum(1 for t in MRA_THRESHOLDS if error <= 1 - t) / len(MRA_THRESHOLDS)


def numeric_prediction(answer_text: str) -> float | None:
    """The first number in an answer text ("3", "about 12.5 m", "3."), or None."""
    match = _NUMBER.search(answer_text or "")
    return float(match.group(0)) if match else None


def vsi_bench_scores(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """VSI-Bench's own summary of scored rows (those whose `source_category` is a
    VSI-Bench question type); None when there are none.

    Each row needs `source_category` and `score` (1/0 for choice questions, MRA for
    numeric ones). Returns per-type scores (%), the relative-direction score as the mean
    of the levels present, the task scores in VSI-Bench's order and their mean.
    """
    per_type: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        qtype = row.get("source_category")
        if qtype in VSI_CHOICE_TYPES or qtype in VSI_NUMERIC_TYPES:
            per_type[str(qtype)].append(float(row["score"]))
    if not per_type:
        return None
    type_scores = {t: 100.0 * sum(v) / len(v) for t, v in per_type.items()}
    tasks: dict[str, float] = {}
    for task in VSI_TASKS:
        if task == "object_rel_direction":
            levels = [type_scores[t] for t in VSI_DIRECTION_LEVELS if t in type_scores]
            if levels:
                tasks[task] = sum(levels) / len(levels)
        elif task in type_scores:
            tasks[task] = type_scores[task]
    return {
        "overall": sum(tasks.values()) / len(tasks),
        "tasks": tasks,
        "per_type": {t: type_scores[t] for t in (*VSI_NUMERIC_TYPES, *VSI_CHOICE_TYPES) if t in type_scores},
        "count": {t: len(per_type[t]) for t in (*VSI_NUMERIC_TYPES, *VSI_CHOICE_TYPES) if t in per_type},
    }


def score(
    records: Sequence[Mapping[str, Any]],
    completions: Sequence[str],
    *,
    consistency: Any = None,
    tokenizer: Any = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Metrics and per-question rows for model outputs on cached records.

    Choice questions are scored by the core accuracy reward; numeric questions
    (`answer_type` "numeric") by mean relative accuracy of the first number in the answer
    block. The paper's table uses the choice questions of its eight categories; the
    VSI-Bench summary uses every VSI-Bench question.
    """
    from embodied_r_ros.core.prompts.reasoning import parse_choices
    from embodied_r_ros.core.qa.answer_parser import parse_reasoning_output
    from embodied_r_training.rewards import accuracy_reward, format_reward

    completions = list(completions)
    is_numeric = [r.get("answer_type") == "numeric" for r in records]
    choice_idx = [i for i, numeric in enumerate(is_numeric) if not numeric]
    solutions = [records[i]["solution"] for i in choice_idx]
    questions = [records[i]["question"] for i in choice_idx]
    choice_completions = [completions[i] for i in choice_idx]
    correct_choice = accuracy_reward(choice_completions, solution=solutions, question=questions)
    consistent_choice: list[float | None] = [None] * len(choice_idx)
    if consistency is not None:
        consistent_choice = list(consistency(choice_completions, solution=solutions, question=questions))
    correct: list[float] = [0.0] * len(records)
    consistent: list[float | None] = [None] * len(records)
    for j, i in enumerate(choice_idx):
        correct[i] = correct_choice[j]
        consistent[i] = consistent_choice[j]
    formatted = format_reward(completions)
    lengths, unit = completion_length(completions, tokenizer)

    rows = []
    per_cat: dict[str, list[float]] = defaultdict(list)
    for i, record in enumerate(records):
        letters = "".join(letter for letter, _ in parse_choices(record["question"])) or OPTION_LETTERS
        parsed = parse_reasoning_output(completions[i], valid_letters="" if is_numeric[i] else letters)
        row = {
            "Question_id": record.get("Question_id"),
            "question_category": record["question_category"],
            "source_category": record.get("source_category", record["question_category"]),
            "answer_type": "numeric" if is_numeric[i] else "choice",
            "solution": record["solution"],
            "letter": parsed.letter,
            "well_formed": bool(formatted[i]),
            "consistent": None if consistent[i] is None else bool(consistent[i]),
            "length": lengths[i],
            "completion": completions[i],
        }
        if is_numeric[i]:
            value = numeric_prediction(parsed.answer)
            row["prediction"] = value
            row["score"] = mean_relative_accuracy(value, float(record["solution"]))
            row["correct"] = None
        else:
            row["score"] = correct[i]
            row["correct"] = bool(correct[i])
            per_cat[record["question_category"]].append(correct[i])
        rows.append(row)
    n = len(choice_idx)
    accuracy = {c: 100.0 * sum(v) / len(v) for c, v in per_cat.items()}
    n_correct = int(sum(correct))
    metrics: dict[str, Any] = {
        "n": n,
        "n_numeric": len(records) - n,
        "accuracy_avg": 100.0 * n_correct / n if n else 0.0,
        "macro_avg": sum(accuracy.values()) / len(accuracy) if accuracy else 0.0,
        "accuracy": {c: accuracy[c] for c in CATEGORIES if c in accuracy},
        "count": {c: len(per_cat[c]) for c in CATEGORIES if c in per_cat},
        "format_rate": 100.0 * sum(formatted) / len(records) if records else 0.0,
        "mean_completion_length": sum(lengths) / len(records) if records else 0.0,
        "length_unit": unit,
    }
    extra = sorted(set(per_cat) - set(CATEGORIES))
    if extra:
        metrics["other_categories"] = {c: accuracy[c] for c in extra}
    vsi = vsi_bench_scores(rows)
    if vsi is not None:
        metrics["vsi_bench"] = vsi
    if consistency is not None:
        n_consistent = int(sum(1 for v in consistent if v))
        metrics["consistency"] = {
            "consistent": n_consistent,
            "correct": n_correct,
            "rate_of_correct": 100.0 * n_consistent / n_correct if n_correct else None,
            "rate_of_all": 100.0 * n_consistent / n if n else 0.0,
        }
    return metrics, rows


def vsi_markdown(vsi: Mapping[str, Any], name: str) -> list[str]:
    """VSI-Bench's own table (its task order; '-' for tasks without questions)."""
    head = "| method | avg | " + " | ".join(VSI_TYPE_TITLES[t] for t in VSI_TASKS) + " |"
    cells = [f"{vsi['overall']:.1f}"] + [
        f"{vsi['tasks'][t]:.1f}" if t in vsi["tasks"] else "-" for t in VSI_TASKS]
    counts = vsi["count"]
    n_task = [sum(counts.get(t, 0) for t in VSI_DIRECTION_LEVELS) if t == "object_rel_direction"
              else counts.get(t, 0) for t in VSI_TASKS]
    levels = ", ".join(f"{t.rsplit('_', 1)[1]} {vsi['per_type'][t]:.1f}" for t in VSI_DIRECTION_LEVELS
                       if t in vsi["per_type"])
    return [
        head,
        "|" + "---|" * (len(VSI_TASKS) + 2),
        f"| **{name} (ours)** | " + " | ".join(cells) + " |",
        f"| questions (ours) | {sum(counts.values())} | " + " | ".join(str(c) for c in n_task) + " |",
        "",
        "- VSI-Bench's way: rel. direction = mean of its levels' accuracies"
        + (f" ({levels})" if levels else "")
        + "; numeric tasks = mean relative accuracy (thresholds 0.50 .. 0.95); avg = mean of the task scores shown",
    ]


def results_markdown(metrics: Mapping[str, Any], name: str) -> str:
    """The paper's accuracy table (docs/method.md §7) with our row added, our other
    numbers, and the VSI-Bench-style table when VSI-Bench questions were scored."""
    cols = ["avg", *CATEGORIES]
    head = "| method | " + " | ".join(["avg"] + [CATEGORY_TITLES[c] for c in CATEGORIES]) + " |"
    lines = [head, "|" + "---|" * (len(cols) + 1)]

    def fmt(v: Any) -> str:
        return "-" if v is None else f"{v:.1f}"

    for method, row in PAPER_RESULTS.items():
        lines.append(f"| {method} | " + " | ".join(fmt(row.get(c)) for c in cols) + " |")
    ours = {"avg": metrics["accuracy_avg"], **metrics["accuracy"]}
    lines.append(f"| **{name} (ours)** | " + " | ".join(fmt(ours.get(c)) for c in cols) + " |")
    counts = metrics.get("count", {})
    lines.append("| questions (ours) | " + " | ".join(
        [str(metrics["n"])] + [str(counts.get(c, 0)) for c in CATEGORIES]) + " |")
    lines += [
        "",
        f"- questions: {metrics['n']}; overall accuracy is question-weighted; category mean "
        f"(macro): {metrics['macro_avg']:.1f}",
        f"- well-formed outputs: {metrics['format_rate']:.1f}%",
        f"- mean completion length: {metrics['mean_completion_length']:.1f} {metrics['length_unit']} "
        "(paper: about 200 -> 100 tokens during training)",
    ]
    cons = metrics.get("consistency")
    if cons:
        rate = cons["rate_of_correct"]
        lines.append(
            f"- think-answer consistency (reference model): {cons['consistent']}/{cons['correct']} correct "
            f"answers = {fmt(rate)}% ({cons['rate_of_all']:.1f}% of all answers); paper (GPT-4o judge): "
            f"{PAPER_CONSISTENCY['without consistency reward']}% without, "
            f"{PAPER_CONSISTENCY['with consistency reward']}% with the consistency reward"
        )
    else:
        lines.append("- think-answer consistency: not measured (no consistency_model given)")
    if metrics.get("vsi_bench"):
        lines += ["", "VSI-Bench questions scored the VSI-Bench way:", ""] + vsi_markdown(metrics["vsi_bench"], name)
    return "\n".join(lines) + "\n"


def generate(reasoner: Any, records: Sequence[Mapping[str, Any]], settings: Any, batch_size: int,
             progress: bool = True, on_batch: Any = None) -> list[str]:
    """The model's completion for every record's prompt, in batches, with a progress bar;
    `on_batch(records, completions)` is called after each batch (to store it)."""
    from tqdm import tqdm

    out: list[str] = []
    bar = tqdm(total=len(records), desc="evaluate", unit="question", disable=not progress)
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        texts = reasoner.generate_batch([r["prompt"] for r in chunk], settings)
        if on_batch is not None:
            on_batch(chunk, texts)
        out += texts
        bar.update(len(chunk))
    bar.close()
    return out


def question_key(record: Mapping[str, Any], position: int) -> str:
    """What keys a record's stored completion: its Question_id (else its position)."""
    qid = record.get("Question_id")
    return str(qid) if qid not in (None, "") else f"#{position}"


def shard_name(record: Mapping[str, Any]) -> str:
    """The unit shards are split by: the record's video (as perception caching splits)."""
    return str(record.get("video_path") or record.get("video_id") or record.get("Question_id"))


def stored_completions(out: Path) -> dict[str, str]:
    """Question key -> completion, from this folder's completion files of every shard."""
    done: dict[str, str] = {}
    for path in sorted(out.glob("completions*.jsonl")):
        for row in AppendOnlyJsonl(path).read():
            done[str(row["key"])] = row["completion"]
    return done


def evaluate(
    records: Sequence[Mapping[str, Any]],
    *,
    model_cfg: Mapping[str, Any],
    out: str | Path,
    name: str = "model",
    consistency_cfg: Mapping[str, Any] | None = None,
    consistency_options: Mapping[str, Any] | None = None,
    tokenizer_path: str | None = None,
    progress: bool = True,
    shard: Any = None,
) -> dict[str, Any]:
    """Generate, score and write predictions.jsonl, metrics.json and results.md.

    Completions are appended to `<out>/completions[.shard<i>of<n>].jsonl` after every
    batch, keyed by Question_id: a stopped run resumes without generating a stored one
    again, and the model is not even loaded when nothing is missing. With a shard of
    several, only that shard's records (split by video, as perception caching splits)
    are generated and nothing is scored; a run without a shard then scores everything,
    reading every shard's completion file found in `out` (copy them there from other
    machines).
    """
    from embodied_r_ros.core.backends.factory import make_reasoner
    from embodied_r_ros.core.backends.model_spec import ModelSpec
    from embodied_r_ros.core.shards import Shard
    from embodied_r_ros.core.types import GenerationSettings

    shard = shard or Shard(0, 1)
    spec = ModelSpec.from_dict(dict(model_cfg))
    settings = GenerationSettings(
        temperature=spec.temperature, max_new_tokens=spec.max_new_tokens, top_p=spec.top_p, seed=spec.seed
    )
    out = Path(out)
    keys = [question_key(r, i) for i, r in enumerate(records)]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"Question_id {dup!r} appears twice in the records; ids key the stored completions")
    done = stored_completions(out)
    mine = [(k, r) for k, r in zip(keys, records) if shard.owns(shard_name(r))]
    todo = [(k, r) for k, r in mine if k not in done]
    if todo:
        store = AppendOnlyJsonl(out / f"completions{shard.suffix}.jsonl")
        key_of = {id(r): k for k, r in todo}

        def keep(chunk: Sequence[Mapping[str, Any]], texts: Sequence[str]) -> None:
            rows = [{"key": key_of[id(r)], "completion": t} for r, t in zip(chunk, texts)]
            store.append_many(rows)
            done.update({row["key"]: row["completion"] for row in rows})

        log.info("%d of %d questions to generate (%d stored)", len(todo), len(mine), len(mine) - len(todo))
        reasoner = make_reasoner(spec)
        try:
            generate(reasoner, [r for _, r in todo], settings, spec.batch_size, progress, on_batch=keep)
        finally:
            reasoner.close()
    if shard.count > 1:
        return {"shard": str(shard), "n": len(mine), "generated": len(todo)}
    completions = [done[k] for k in keys]
    tokenizer = _load_tokenizer(tokenizer_path or (spec.model if spec.backend != "openai" else None))
    consistency = None
    if consistency_cfg:
        from embodied_r_training.reward_funcs import make_consistency_reward

        consistency = make_consistency_reward(consistency_cfg, consistency_options)
    metrics, rows = score(records, completions, consistency=consistency, tokenizer=tokenizer)
    if consistency is not None:
        consistency.close()
    metrics.update({"name": name, "model": spec.model, "backend": spec.backend,
                    "temperature": spec.temperature, "max_new_tokens": spec.max_new_tokens})
    write_jsonl_atomic(out / "predictions.jsonl", rows)
    write_json_atomic(out / "metrics.json", metrics)
    (out / "results.md").write_text(results_markdown(metrics, name), encoding="utf-8")
    return metrics


def _load_tokenizer(path: str | None) -> Any:
    """A tokenizer for length counting, or None (lengths then count words)."""
    if not path:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - any failure means: count words instead
        log.warning("no tokenizer from %s (%s); completion length is counted in words", path, exc)
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embodied-r-train evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True,
                        help="YAML with reasoning_model (ModelSpec) and optional consistency_model / consistency")
    parser.add_argument("--records", required=True, help="cached records JSONL (from cache-perception)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--name", default=None, help="row name in the results table")
    parser.add_argument("--tokenizer", default=None, help="tokenizer for completion length (default: the model's)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--shard", type=shard_argument, default=None, metavar="I/N",
                        help="generate only shard I of N (split by video); a run without --shard "
                        "scores all shards' completions found in --out")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-progress", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    from embodied_r_training.config import read_yaml_config

    args = build_parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("LOGLEVEL", "INFO"))
    cfg = read_yaml_config(args.config, args.overrides)
    records = read_jsonl(args.records)
    if args.limit:
        records = records[: args.limit]
    metrics = evaluate(
        records,
        model_cfg=cfg["reasoning_model"],
        out=args.out,
        name=args.name or cfg.get("name") or Path(str(cfg["reasoning_model"]["model"])).name,
        consistency_cfg=cfg.get("consistency_model"),
        consistency_options=cfg.get("consistency"),
        tokenizer_path=args.tokenizer,
        progress=not args.no_progress,
        shard=args.shard,
    )
    if args.shard is not None and args.shard.count > 1:
        print(json.dumps(metrics))
        return 0
    print((Path(args.out) / "results.md").read_text())
    print(json.dumps({k: metrics[k] for k in ("n", "accuracy_avg", "mean_completion_length", "length_unit")}))
    return 0
