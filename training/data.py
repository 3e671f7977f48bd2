"""Dataset preparation: benchmark files -> question records -> scene-level splits.

Inputs (any mix, each option may repeat):

* VSI-Bench parquet: columns id, dataset, scene_name, question_type, question, options
  (["A. left", "B. right"] or plain texts), ground_truth (letter or option text). The
  video is `<dataset>/<scene_name>.mp4` under the video root.
* UrbanVideo-Bench MCQ parquet: columns Question_id, video_id, question_category,
  question (choices already inside the text), answer. The video is `<video_id>`.
* Records already in the project format (JSON list or JSONL), like
  shared/data/data_demo.json.

Every kept question becomes one record (FACTS §6 format plus bookkeeping fields)::

    {"Question_id", "video_id", "question_category", "question", "answer",
     "scene_name", "dataset", "video_path", "source_category"}

`question` is always "Question: ...\\nChoices:\\nA. ...", built by the core's
`format_question`, and `answer` is always an option letter. Only the paper's eight
categories are kept (the three relative-direction levels merged); every dropped question
is counted by reason. The split is by scene, 75/5/20 by default, from a seeded shuffle of
the sorted scene list, so the same inputs and seed always give the same split and no scene
is in two splits.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.categories import CATEGORIES, canonical_category

Record = dict[str, Any]

SPLITS: tuple[str, ...] = ("train", "val", "test")
DEFAULT_RATIOS: tuple[float, float, float] = (0.75, 0.05, 0.20)

_LETTER_RE = re.compile(r"^\s*\(?([A-Ha-h])\s*(?:[.):]|$|\s)")
_OPTION_PREFIX_RE = re.compile(r"^\s*\(?([A-Ha-h])[.):]\s*")


# --------------------------------------------------------------------------- helpers
def strip_option_prefix(option: str) -> str:
    """'A. left' -> 'left'; a plain text is returned stripped."""
    return _OPTION_PREFIX_RE.sub("", str(option), count=1).strip()


def answer_letter(answer: Any, choices: Sequence[str]) -> str | None:
    """The option letter for a ground truth given as a letter ('B', 'B.', '(b)', 'B. right')
    or as the option text ('right'); None when it matches nothing."""
    if answer is None:
        return None
    text = str(answer).strip()
    letters = [chr(ord("A") + i) for i in range(len(choices))]
    match = _LETTER_RE.match(text)
    if match and match.group(1).upper() in letters:
        letter = match.group(1).upper()
        rest = text[match.end():].strip()
        # "B. right" must agree with option B when both are given
        if not rest or rest.lower() == choices[letters.index(letter)].strip().lower():
            return letter
    wanted = strip_option_prefix(text).lower()
    for letter, choice in zip(letters, choices):
        if choice.strip().lower() == wanted:
            return letter
    return None


_INLINE_OPTION_RE = re.compile(r"(?:^|\s)\(?([A-H])[.)]\s+")


def _inline_options_to_lines(text: str) -> str:
    """'... ? A. x B. y C. z' -> the same with each option on its own line, when the
    options run A, B, C ... in order; otherwise the text is returned unchanged."""
    marks = list(_INLINE_OPTION_RE.finditer(text))
    start = next((i for i, m in enumerate(marks) if m.group(1) == "A"), None)
    if start is None:
        return text
    run = [marks[start]]
    for m in marks[start + 1:]:
        if ord(m.group(1)) == ord(run[-1].group(1)) + 1:
            run.append(m)
    if len(run) < 2:
        return text
    head = text[: run[0].start()].rstrip()
    options = []
    for i, m in enumerate(run):
        end = run[i + 1].start() if i + 1 < len(run) else len(text)
        options.append(f"{m.group(1)}. {text[m.end():end].strip()}")
    return head + "\nChoices:\n" + "\n".join(options)


def normalise_question(text: str, choices: Sequence[str] | None = None) -> tuple[str, list[str]]:
    """Canonical question text (core `format_question`) and its choice texts.

    Choices come from `choices` or from the text itself ("Choices:" lines, option lines,
    or options written inline on one line). Returns (question_text, choice_texts); the
    list is empty when no choices could be found.
    """
    from embodied_r_ros.core.reasoning_prompts import format_question, parse_choices

    question = format_question(str(text), list(choices) if choices else None)
    pairs = parse_choices(question)
    if not pairs and not choices:
        question = format_question(_inline_options_to_lines(str(text)))
        pairs = parse_choices(question)
    return question, [choice for _, choice in pairs]


def _make_record(
    *,
    question_id: str,
    video_id: str,
    source_category: str,
    question: str,
    choices: Sequence[str] | None,
    answer: Any,
    scene_name: str,
    dataset: str,
    video_path: str,
    drops: Counter,
) -> Record | None:
    """Build one normalised record, or count why it was dropped and return None."""
    from embodied_r_ros.core.errors import InvalidRequestError

    category = canonical_category(source_category)
    if category is None:
        drops[f"category:{source_category}"] += 1
        return None
    try:
        question_text, choices = normalise_question(question, choices)
    except InvalidRequestError:
        drops["bad_question"] += 1
        return None
    if len(choices) < 2:
        drops["no_choices"] += 1
        return None
    letter = answer_letter(answer, choices)
    if letter is None:
        drops["unmatched_answer"] += 1
        return None
    return {
        "Question_id": str(question_id),
        "video_id": str(video_id),
        "question_category": category,
        "question": question_text,
        "answer": letter,
        "scene_name": str(scene_name),
        "dataset": str(dataset),
        "video_path": str(video_path),
        "source_category": str(source_category),
    }


def _as_list(value: Any) -> list[str]:
    """Options column -> list of strings (parquet gives numpy arrays or lists)."""
    if value is None:
        return []
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
            if isinstance(parsed, list):
                return [str(v) for v in parsed]
        except ValueError:
            pass
        return [line for line in value.splitlines() if line.strip()]
    return [str(v) for v in list(value)]


# --------------------------------------------------------------------------- loaders
def load_vsi(path: str | Path, drops: Counter) -> list[Record]:
    """Read a VSI-Bench parquet file into records (unused categories dropped)."""
    import pandas as pd

    frame = pd.read_parquet(path)
    records = []
    for row in frame.to_dict(orient="records"):
        options = _as_list(row.get("options"))
        record = _make_record(
            question_id=f"vsi_{row['id']}",
            video_id=f"{row['scene_name']}.mp4",
            source_category=str(row["question_type"]),
            question=str(row["question"]),
            choices=[strip_option_prefix(o) for o in options] or None,
            answer=row.get("ground_truth"),
            scene_name=str(row["scene_name"]),
            dataset=str(row["dataset"]),
            video_path=f"{row['dataset']}/{row['scene_name']}.mp4",
            drops=drops,
        )
        if record is not None:
            records.append(record)
    return records


def load_urban(path: str | Path, drops: Counter, video_dir: str = "") -> list[Record]:
    """Read an UrbanVideo-Bench MCQ parquet file into records.

    Each drone video is its own scene (the benchmark gives no finer scene id).
    `video_dir` is prefixed to `video_id` to form the path under the video root.
    """
    import pandas as pd

    frame = pd.read_parquet(path)
    records = []
    for row in frame.to_dict(orient="records"):
        video_id = str(row["video_id"])
        record = _make_record(
            question_id=f"urban_{row['Question_id']}",
            video_id=video_id,
            source_category=str(row["question_category"]),
            question=str(row["question"]),
            choices=None,
            answer=row.get("answer"),
            scene_name=Path(video_id).stem,
            dataset="urbanvideo",
            video_path=str(Path(video_dir) / video_id) if video_dir else video_id,
            drops=drops,
        )
        if record is not None:
            records.append(record)
    return records


def read_json_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON list, of a JSON object with a "records" list, or of a JSONL file."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        obj = json.loads(text)
    except ValueError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    if isinstance(obj, list):
        return obj
    if isinstance(obj, dict) and isinstance(obj.get("records"), list):
        return obj["records"]
    return [obj]


def load_records(path: str | Path, drops: Counter) -> list[Record]:
    """Read records already in the project format (Question_id, video_id,
    question_category, question, answer[, scene_name, dataset, video_path])."""
    records = []
    for row in read_json_records(path):
        video_id = str(row["video_id"])
        scene = str(row.get("scene_name") or Path(video_id).stem)
        dataset = str(row.get("dataset") or "records")
        record = _make_record(
            question_id=str(row["Question_id"]),
            video_id=video_id,
            source_category=str(row["question_category"]),
            question=str(row["question"]),
            choices=None,
            answer=row.get("answer"),
            scene_name=scene,
            dataset=dataset,
            video_path=str(row.get("video_path") or video_id),
            drops=drops,
        )
        if record is not None:
            records.append(record)
    return records


# --------------------------------------------------------------------------- split
def scene_key(record: Record) -> str:
    """The unit of the split. Benchmark scene names are unique across their source
    datasets (ScanNet, ARKitScenes, ScanNet++ ids; one drone clip per UrbanVideo scene),
    so the bare scene name is used: a question given both as a record and in a parquet
    file lands in the same split."""
    return str(record["scene_name"])


def split_by_scene(
    records: Sequence[Record],
    seed: int = 0,
    ratios: Sequence[float] = DEFAULT_RATIOS,
) -> dict[str, list[Record]]:
    """Assign whole scenes to train/val/test with a seeded shuffle of the sorted scenes.

    Scene counts are rounded; test takes the remainder. Records keep their input order
    within a split.
    """
    if len(ratios) != 3 or any(r < 0 for r in ratios) or sum(ratios) <= 0:
        raise ValueError(f"ratios must be three non-negative numbers, got {ratios}")
    total = float(sum(ratios))
    scenes = sorted({scene_key(r) for r in records})
    random.Random(seed).shuffle(scenes)
    n_train = round(len(scenes) * ratios[0] / total)
    n_val = round(len(scenes) * ratios[1] / total)
    n_val = min(n_val, len(scenes) - n_train)
    which: dict[str, str] = {}
    for i, scene in enumerate(scenes):
        which[scene] = "train" if i < n_train else "val" if i < n_train + n_val else "test"
    out: dict[str, list[Record]] = {name: [] for name in SPLITS}
    for record in records:
        out[which[scene_key(record)]].append(record)
    return out


def dedupe_ids(records: Iterable[Record], drops: Counter) -> Iterator[Record]:
    """Drop later records whose Question_id was already seen (counted)."""
    seen: set[str] = set()
    for record in records:
        if record["Question_id"] in seen:
            drops["duplicate_id"] += 1
            continue
        seen.add(record["Question_id"])
        yield record


# --------------------------------------------------------------------------- files
def write_jsonl_atomic(path: str | Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write rows as JSONL through a temporary file and a rename; returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                count += 1
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def write_json_atomic(path: str | Path, obj: Any) -> None:
    """Write one JSON document through a temporary file and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(obj, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a JSONL file."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def prepare(
    *,
    vsi: Sequence[str | Path] = (),
    urban: Sequence[str | Path] = (),
    records: Sequence[str | Path] = (),
    video_root: str | Path | None = None,
    out: str | Path,
    seed: int = 0,
    ratios: Sequence[float] = DEFAULT_RATIOS,
    urban_video_dir: str = "",
    require_videos: bool = False,
) -> dict[str, Any]:
    """Load, filter, split and write `<out>/{train,val,test}.jsonl` and `summary.json`.

    With `require_videos`, questions whose video file is missing under `video_root`
    are dropped (counted as "missing_video"). Returns the summary.
    """
    drops: Counter = Counter()
    loaded: list[Record] = []
    for path in vsi:
        loaded += load_vsi(path, drops)
    for path in urban:
        loaded += load_urban(path, drops, urban_video_dir)
    for path in records:
        loaded += load_records(path, drops)
    kept = list(dedupe_ids(loaded, drops))
    if require_videos:
        if video_root is None:
            raise ValueError("require_videos needs a video_root")
        present = []
        for record in kept:
            if (Path(video_root) / record["video_path"]).is_file():
                present.append(record)
            else:
                drops["missing_video"] += 1
        kept = present
    splits = split_by_scene(kept, seed=seed, ratios=ratios)
    out = Path(out)
    per_split: dict[str, Any] = {}
    for name, rows in splits.items():
        write_jsonl_atomic(out / f"{name}.jsonl", rows)
        per_category = Counter(r["question_category"] for r in rows)
        per_split[name] = {
            "questions": len(rows),
            "scenes": len({scene_key(r) for r in rows}),
            "videos": len({(r["dataset"], r["video_path"]) for r in rows}),
            "per_category": {c: per_category.get(c, 0) for c in CATEGORIES},
        }
    summary = {
        "seed": seed,
        "ratios": list(ratios),
        "kept": len(kept),
        "dropped": dict(sorted(drops.items())),
        "dropped_total": int(sum(drops.values())),
        "video_root": str(video_root) if video_root is not None else None,
        "splits": per_split,
    }
    write_json_atomic(out / "summary.json", summary)
    return summary


def group_by_video(records: Sequence[Record]) -> dict[str, list[Record]]:
    """Records keyed by video path, in first-seen order."""
    groups: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        groups[record["video_path"]].append(record)
    return dict(groups)


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embodied-r-train prepare",
        description="Keep the paper's 8 categories and split VSI-Bench / UrbanVideo-Bench "
        "questions by scene into train/val/test JSONL files.",
    )
    parser.add_argument("--vsi", action="append", default=[], help="VSI-Bench parquet (repeatable)")
    parser.add_argument("--urban", action="append", default=[], help="UrbanVideo-Bench MCQ parquet (repeatable)")
    parser.add_argument("--records", action="append", default=[], help="records JSON/JSONL in the project format (repeatable)")
    parser.add_argument("--video-root", default=None, help="folder the video paths are relative to")
    parser.add_argument("--urban-video-dir", default="", help="sub-folder of the video root holding the UrbanVideo-Bench videos")
    parser.add_argument("--require-videos", action="store_true", help="drop questions whose video file is missing")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ratios", type=float, nargs=3, default=list(DEFAULT_RATIOS), metavar=("TRAIN", "VAL", "TEST"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not (args.vsi or args.urban or args.records):
        build_parser().error("give at least one of --vsi, --urban, --records")
    summary = prepare(
        vsi=args.vsi,
        urban=args.urban,
        records=args.records,
        video_root=args.video_root,
        out=args.out,
        seed=args.seed,
        ratios=args.ratios,
        urban_video_dir=args.urban_video_dir,
        require_videos=args.require_videos,
    )
    print(json.dumps(summary, indent=2))
    return 0
