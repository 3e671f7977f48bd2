"""Dataset preparation: the benchmarks as published -> question records -> scene splits.

Inputs, each flag repeatable (training/README.md shows the download layout):

* VSI-Bench (`--vsi`): `test-00000-of-00001.parquet` (first release) or `test.jsonl` /
  `test_debiased.parquet` / `test_pruned.parquet` (newer revision). Columns id, dataset,
  scene_name, question_type, question, options (list of "A. ..." strings; null for the
  numeric question types), ground_truth (a letter, or a number for numeric types), and in
  the newer files a boolean `pruned` (True for questions removed by the debiasing).
  `--vsi-subset debiased` keeps the rows with pruned False, `pruned` those with pruned
  True, `all` (default, the paper's setting) every row. The video of a row is
  `<dataset>/<scene_name>.mp4` under `--vsi-video-root`: the extracted tree or the folder
  with `arkitscenes.zip`, `scannet.zip`, `scannetpp.zip` (read without unpacking).
* UrbanVideo-Bench (`--urban`): `MCQ.parquet`, columns Question_id, video_id,
  question_category, question (choices inside the text), answer (a letter). The video is
  `<video_id>` under `--urban-video-root` (default: the `videos/` folder beside the file).
* Records (`--records`): a JSON list or JSONL of questions in the dataset's record format
  (Question_id, video_id, question_category, question, answer, optional scene_name,
  videos, dataset; see docs/method.md §6). Videos are looked for under
  `--records-video-root` (default: the file's folder), by `video_path`, `videos`,
  `<dataset>/<video_id>`, `<video_id>`, then by bare file name.

Each kept question becomes one record::

    {"Question_id", "video_id", "question_category", "question", "answer", "scene_name",
     "dataset", "video_path", "video", "source_category", "answer_type"}

`question` is always "Question: ...\\nChoices:\\nA. ..." (the core's `format_question`),
`answer` an option letter (or the number, for numeric questions), `video_path` the video's
path inside its dataset root (the identity of the video), `video` where it was found
(`videos.VideoRef` as JSON), `answer_type` "choice" or "numeric".

Scene of a question (the unit of the split): VSI-Bench's `scene_name`; for UrbanVideo-Bench
the flight the clip was cut from, derived from `video_id` as the reference does
(`urban_scene_name`), so clips of one flight never land in two splits. The split is
75/5/20 by scene from a seeded shuffle of the sorted scene names; sizes are the
reference's (`int(n * 0.75)` train, `int(n * 0.05)` val, the rest test), except that a
non-empty val share gets at least one scene when at least two scenes remain after train.

Only the paper's eight categories are kept (three relative-direction levels merged);
`--include-numeric` also keeps VSI-Bench's numeric questions, for evaluating the VSI-Bench
way. Every dropped question is counted by reason in `summary.json`; a wrong file, a
missing column or a missing video root is a typed error naming the file and what was
expected (`embodied_r_training.errors`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from embodied_r_ros.core.append_only import write_json_atomic
from embodied_r_training.categories import (
    CATEGORIES,
    VSI_NUMERIC_TYPES,
    canonical_category,
)
from embodied_r_training.errors import DatasetFileError, MissingColumnError, VideoSourceError
from embodied_r_training.videos import VideoRef, VideoRoot

Record = dict[str, Any]
_Row = TypeVar("_Row", bound=Mapping[str, Any])

SPLITS: tuple[str, ...] = ("train", "val", "test")
DEFAULT_RATIOS: tuple[float, float, float] = (0.75, 0.05, 0.20)
VSI_SUBSETS: tuple[str, ...] = ("all", "debiased", "pruned")

# Published columns of each input kind (training/README.md, docs/method.md §6).
VSI_COLUMNS: tuple[str, ...] = (
    "id", "dataset", "scene_name", "question_type", "question", "options", "ground_truth",
)
VSI_PRUNED_COLUMN = "pruned"
# The newer revision's list of pruned question ids (one per line), from which its
# debiased/pruned parquet files are made; used when a file lacks the `pruned` column.
VSI_PRUNED_IDS = "pruned_ids.txt"
URBAN_COLUMNS: tuple[str, ...] = ("Question_id", "video_id", "question_category", "question", "answer")
RECORD_COLUMNS: tuple[str, ...] = URBAN_COLUMNS

# Label used for UrbanVideo clips whose name matches none of the reference's patterns:
# the reference gives them all the same (empty) scene, so they share one split.
URBAN_UNMATCHED_SCENE = "UrbanVideo_unmatched"

_LETTER_RE = re.compile(r"^\s*\(?([A-Ha-h])\s*(?:[.):]|$|\s)")
_OPTION_PREFIX_RE = re.compile(r"^\s*\(?([A-Ha-h])[.):]\s*")


# --------------------------------------------------------------------------- answers
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


# --------------------------------------------------------------------------- questions
# Labels that introduce the options in UrbanVideo-Bench questions ("Choices:", "Options:",
# and also "Choice:", "Option:", "Choose:", "Please choose:").
_ANY_CHOICE_LABEL = re.compile(r"(?:\bplease\s+)?\b(?:choices|choice|options|option|choose)\s*:", re.IGNORECASE)
# An option marker "A." / "A)" / "(A)" at a line start or after white space.
_OPTION_MARK = re.compile(r"(?:^|(?<=\s))\(?([A-H])[.)]\s+")


def _option_run(text: str) -> tuple[int, list[str]] | None:
    """(start, texts) of the first run of options A, B, C ... in `text` (on separate
    lines or inline on one line); None when no run of at least two options exists."""
    marks = list(_OPTION_MARK.finditer(text))
    for first, mark in enumerate(marks):
        if mark.group(1) != "A":
            continue
        run = [mark]
        for nxt in marks[first + 1:]:
            if ord(nxt.group(1)) == ord(run[-1].group(1)) + 1:
                run.append(nxt)
        if len(run) >= 2:
            ends = [m.start() for m in run[1:]] + [len(text)]
            return run[0].start(), [text[m.end():end].strip() for m, end in zip(run, ends)]
    return None


def normalise_question(text: str, choices: Sequence[str] | None = None) -> tuple[str, list[str]]:
    """Canonical question text (core `format_question`) and its choice texts.

    Choices come from `choices` or from the text itself: a "Choices:"/"Options:" block
    (read by the core), the other labels UrbanVideo-Bench uses ("Choice:", "Option:",
    "Choose:"), option lines without a label, or options written inline on one line.
    Returns (question_text, choice_texts); the list is empty when no choices are found.
    """
    from embodied_r_ros.core.prompts.reasoning import format_question, parse_choices

    text = str(text)
    question = format_question(text, list(choices) if choices else None)
    pairs = parse_choices(question)
    if choices or (len(pairs) >= 2 and "\nChoices:\n" in question):
        return question, [choice for _, choice in pairs]
    label = _ANY_CHOICE_LABEL.search(text)
    region = text[label.end():] if label else text
    found = _option_run(region)
    if found is None:
        return question, []
    start, options = found
    stem = (text[: label.start()] + " " + region[:start]) if label else text[:start]
    question = format_question(stem, options)
    return question, [choice for _, choice in parse_choices(question)]


# --------------------------------------------------------------------------- scenes
def urban_scene_name(video_id: str) -> str | None:
    """The flight an UrbanVideo-Bench clip belongs to, by the reference's rule.

    * ``EmbodiedCity...``: the name up to (not including) its second underscore; with a
      single underscore, the name up to its first dot.
    * ``AerialVLN...``: the first three underscore-separated fields (up to the third
      underscore); with exactly two underscores, the name up to its first dot.
    * ``RealWorld...``: with a single underscore, the name up to its first dot; otherwise
      ``RealWorld_<n>`` with n the first number that follows an underscore.
    * Anything else (or a name these rules cannot cut): None.
    """
    name = str(video_id)
    underscores = [i for i, ch in enumerate(name) if ch == "_"]
    before_dot = name.split(".")[0]
    if name.startswith("EmbodiedCity"):
        if len(underscores) >= 2:
            return name[: underscores[1]]
        return before_dot if len(underscores) == 1 else None
    if name.startswith("AerialVLN"):
        if len(underscores) >= 3:
            return name[: underscores[2]]
        return before_dot if len(underscores) == 2 else None
    if name.startswith("RealWorld"):
        if len(underscores) == 1:
            return before_dot
        number = re.search(r"_(\d+)", name)
        return f"RealWorld_{number.group(1)}" if number else None
    return None


# --------------------------------------------------------------------------- files in
def _describe_start(head: bytes) -> str:
    text = head[:40].decode("utf-8", "replace").replace("\n", "\\n")
    return repr(text)


def read_table(path: str | Path, *, expected: str, flag: str) -> list[dict[str, Any]]:
    """Rows of a parquet, JSON-list or JSONL file, recognised by content, not by name.

    `expected` says in words what the file should be and `flag` which option passes it;
    both appear in the `DatasetFileError` raised for a missing, empty, wrong or damaged
    file (a Git LFS pointer, a zip archive, HTML, a broken JSON line ...).
    """
    path = Path(path)
    where = f"{path} (given with {flag}; expected {expected})"
    if not path.is_file():
        raise DatasetFileError(f"{where}: the file does not exist")
    with open(path, "rb") as handle:
        head = handle.read(512)
    if not head.strip():
        raise DatasetFileError(f"{where}: the file is empty; download it again")
    if head.startswith(b"version https://git-lfs"):
        raise DatasetFileError(
            f"{where}: this is a Git LFS pointer, not the data; fetch the real file "
            "(`git lfs pull` in the clone, or `huggingface-cli download ... --repo-type dataset`)"
        )
    if head.startswith(b"PK\x03\x04"):
        raise DatasetFileError(
            f"{where}: this is a zip archive (videos?), not a question table; pass the question "
            "file here and the folder holding the archives as the video root"
        )
    if head.startswith(b"PAR1"):
        import pyarrow.parquet as pq

        try:
            table_rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises many kinds
            raise DatasetFileError(f"{where}: unreadable parquet file ({exc}); download it again") from exc
        return table_rows
    if path.suffix.lower() == ".parquet":
        raise DatasetFileError(
            f"{where}: the name ends in .parquet but the content is not parquet (it starts with "
            f"{_describe_start(head)}); download it again or pass the file under its real name"
        )
    stripped = head.lstrip()
    if stripped[:1] not in (b"{", b"["):
        raise DatasetFileError(
            f"{where}: not a parquet, JSON or JSON-lines file (it starts with {_describe_start(head)})"
        )
    text = path.read_text(encoding="utf-8")
    rows: list[Any]
    try:
        obj = json.loads(text)
        if isinstance(obj, list):
            rows = obj
        elif isinstance(obj, dict) and isinstance(obj.get("records"), list):
            rows = obj["records"]
        else:
            rows = [obj]
    except ValueError:
        rows = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise DatasetFileError(f"{where}: line {number} is not valid JSON ({exc})") from exc
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DatasetFileError(f"{where}: entry {number} is {type(row).__name__}, expected an object")
    return rows


_KNOWN_SCHEMAS: dict[str, tuple[tuple[str, ...], str]] = {
    "VSI-Bench": (VSI_COLUMNS, "--vsi"),
    "UrbanVideo-Bench MCQ.parquet": (URBAN_COLUMNS, "--urban (or --records)"),
}


def require_columns(
    rows: Sequence[Mapping[str, Any]], path: str | Path, columns: Sequence[str], *, expected: str, flag: str
) -> None:
    """Raise `MissingColumnError` unless every row has every column (the message names
    the file, the missing and the present columns, and a flag that would fit better)."""
    if not rows:
        raise DatasetFileError(f"{path} (given with {flag}; expected {expected}): the file holds no rows")
    for number, row in enumerate(rows, 1):
        missing = [c for c in columns if c not in row]
        if not missing:
            continue
        present = sorted(row)
        hint = ""
        for name, (other, other_flag) in _KNOWN_SCHEMAS.items():
            if other != tuple(columns) and set(other) <= set(row):
                hint = f"; it looks like {name}: pass it with {other_flag}"
        where = "" if number == 1 else f" (row {number})"
        raise MissingColumnError(
            f"{path} (given with {flag}; expected {expected}){where} lacks column(s) {missing}; "
            f"it has {present}{hint}"
        )


# --------------------------------------------------------------------------- records
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
    """Build one multiple-choice record, or count why it was dropped and return None."""
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
        "answer_type": "choice",
    }


def _numeric_record(row: Mapping[str, Any], drops: Counter) -> Record | None:
    """A VSI-Bench numeric question (no options; the answer is a number)."""
    from embodied_r_ros.core.errors import InvalidRequestError
    from embodied_r_ros.core.prompts.reasoning import format_question

    answer = str(row["ground_truth"]).strip()
    try:
        float(answer)
        question = format_question(str(row["question"]))
    except (TypeError, ValueError, InvalidRequestError):
        drops["bad_numeric_question"] += 1
        return None
    return {
        "Question_id": f"vsi_{row['id']}",
        "video_id": f"{row['scene_name']}.mp4",
        "question_category": str(row["question_type"]),
        "question": question,
        "answer": answer,
        "scene_name": str(row["scene_name"]),
        "dataset": str(row["dataset"]),
        "video_path": f"{row['dataset']}/{row['scene_name']}.mp4",
        "source_category": str(row["question_type"]),
        "answer_type": "numeric",
    }


def _as_list(value: Any) -> list[str]:
    """Options column -> list of strings (lists, numpy arrays, JSON strings; None -> [])."""
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


def _pruned_flag(value: Any, path: Path, number: int) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "1", "0"):
        return value.strip().lower() in ("true", "1")
    raise DatasetFileError(
        f"{path}: row {number} has pruned={value!r}; the column must be boolean (True = removed "
        "by VSI-Bench's debiasing)"
    )


def _attach_video(
    record: Record, root: VideoRoot | None, candidates: Sequence[str | None], drops: Counter
) -> Record | None:
    """Set `video` (and the found `video_path`) from the root, or count a missing video."""
    if root is None:
        return record
    ref = root.find(*candidates)
    if ref is None:
        drops["missing_video"] += 1
        return None
    record["video"] = ref.to_json()
    if ref.member is not None:
        record["video_path"] = str(PurePosixPath(ref.member.replace("\\", "/")))
    elif root.folder is not None:
        try:
            record["video_path"] = Path(ref.file).relative_to(root.folder).as_posix()
        except ValueError:
            pass
    return record


def load_vsi(
    path: str | Path,
    drops: Counter,
    *,
    subset: str = "all",
    include_numeric: bool = False,
    root: VideoRoot | None = None,
) -> list[Record]:
    """Read a VSI-Bench question file (parquet or JSONL) into records."""
    if subset not in VSI_SUBSETS:
        raise ValueError(f"subset must be one of {VSI_SUBSETS}, got {subset!r}")
    path = Path(path)
    expected = "VSI-Bench test-00000-of-00001.parquet, test.jsonl, test_debiased.parquet or test_pruned.parquet"
    rows = read_table(path, expected=expected, flag="--vsi")
    require_columns(rows, path, VSI_COLUMNS, expected=expected, flag="--vsi")
    if subset != "all" and any(VSI_PRUNED_COLUMN not in r for r in rows):
        ids_file = path.parent / VSI_PRUNED_IDS
        if not ids_file.is_file():
            raise MissingColumnError(
                f"{path} has no '{VSI_PRUNED_COLUMN}' column and there is no {VSI_PRUNED_IDS} beside it, so "
                f"--vsi-subset {subset} cannot be applied; use the newer VSI-Bench revision's test.jsonl "
                f"(with {VSI_PRUNED_IDS}) or test_debiased.parquet / test_pruned.parquet, or --vsi-subset all"
            )
        pruned_ids = {line.strip() for line in ids_file.read_text(encoding="utf-8").splitlines() if line.strip()}
        rows = [dict(r, **{VSI_PRUNED_COLUMN: str(r["id"]) in pruned_ids}) if VSI_PRUNED_COLUMN not in r else r
                for r in rows]
    records = []
    for number, row in enumerate(rows, 1):
        if subset != "all":
            pruned = _pruned_flag(row[VSI_PRUNED_COLUMN], path, number)
            if pruned != (subset == "pruned"):
                drops[f"not_in_subset:{subset}"] += 1
                continue
        qtype = str(row["question_type"])
        if qtype in VSI_NUMERIC_TYPES or row.get("options") is None:
            if not include_numeric or qtype not in VSI_NUMERIC_TYPES:
                drops[f"category:{qtype}"] += 1
                continue
            record = _numeric_record(row, drops)
        else:
            options = _as_list(row.get("options"))
            record = _make_record(
                question_id=f"vsi_{row['id']}",
                video_id=f"{row['scene_name']}.mp4",
                source_category=qtype,
                question=str(row["question"]),
                choices=[strip_option_prefix(o) for o in options] or None,
                answer=row.get("ground_truth"),
                scene_name=str(row["scene_name"]),
                dataset=str(row["dataset"]),
                video_path=f"{row['dataset']}/{row['scene_name']}.mp4",
                drops=drops,
            )
        if record is not None:
            record = _attach_video(record, root, [record["video_path"]], drops)
        if record is not None:
            records.append(record)
    return records


def load_urban(
    path: str | Path, drops: Counter, *, root: VideoRoot | None = None, notes: Counter | None = None
) -> list[Record]:
    """Read UrbanVideo-Bench's MCQ.parquet into records; scenes are flights
    (`urban_scene_name`)."""
    path = Path(path)
    expected = "UrbanVideo-Bench MCQ.parquet"
    rows = read_table(path, expected=expected, flag="--urban")
    require_columns(rows, path, URBAN_COLUMNS, expected=expected, flag="--urban")
    notes = notes if notes is not None else Counter()
    records = []
    for row in rows:
        video_id = str(row["video_id"])
        scene = urban_scene_name(video_id)
        if scene is None:
            notes["urban_scene_unmatched"] += 1
            scene = URBAN_UNMATCHED_SCENE
        record = _make_record(
            question_id=f"urban_{row['Question_id']}",
            video_id=video_id,
            source_category=str(row["question_category"]),
            question=str(row["question"]),
            choices=None,
            answer=row.get("answer"),
            scene_name=scene,
            dataset="urbanvideo",
            video_path=video_id,
            drops=drops,
        )
        if record is not None:
            record = _attach_video(record, root, [video_id], drops)
        if record is not None:
            records.append(record)
    return records


def load_records(path: str | Path, drops: Counter, *, root: VideoRoot | None = None) -> list[Record]:
    """Read questions in the dataset's record format (a JSON list or JSONL)."""
    path = Path(path)
    expected = "question records (Question_id, video_id, question_category, question, answer)"
    rows = read_table(path, expected=expected, flag="--records")
    require_columns(rows, path, RECORD_COLUMNS, expected=expected, flag="--records")
    records = []
    for row in rows:
        video_id = str(row["video_id"])
        urban_scene = urban_scene_name(video_id)
        scene = str(row.get("scene_name") or urban_scene or Path(video_id).stem)
        dataset = str(row.get("dataset") or ("urbanvideo" if urban_scene else "records"))
        nested = f"{row['dataset']}/{video_id}" if row.get("dataset") else None
        record = _make_record(
            question_id=str(row["Question_id"]),
            video_id=video_id,
            source_category=str(row["question_category"]),
            question=str(row["question"]),
            choices=None,
            answer=row.get("answer"),
            scene_name=scene,
            dataset=dataset,
            video_path=str(row.get("video_path") or nested or video_id),
            drops=drops,
        )
        if record is not None:
            candidates = [row.get("video_path"), row.get("videos"), nested, video_id]
            record = _attach_video(record, root, [str(c) for c in candidates if c], drops)
        if record is not None:
            records.append(record)
    return records


def read_json_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON list, of a JSON object with a "records" list, or of a JSONL file."""
    return read_table(path, expected="JSON records", flag="--records")


# --------------------------------------------------------------------------- split
def scene_key(record: Record) -> str:
    """The unit of the split: the scene name (VSI-Bench scene ids are unique across its
    three source datasets; UrbanVideo scenes are flights)."""
    return str(record["scene_name"])


def split_sizes(n_scenes: int, ratios: Sequence[float] = DEFAULT_RATIOS) -> tuple[int, int, int]:
    """(train, val, test) scene counts: floor of the train and val shares, test the rest
    (the reference's arithmetic, done exactly with fractions); a non-empty val share gets
    at least one scene when two or more scenes remain after train."""
    if len(ratios) != 3 or any(r < 0 for r in ratios) or sum(ratios) <= 0:
        raise ValueError(f"ratios must be three non-negative numbers, got {list(ratios)}")
    parts = [Fraction(str(r)) for r in ratios]
    total = sum(parts)
    n_train = int(n_scenes * parts[0] / total)
    n_val = int(n_scenes * parts[1] / total)
    if parts[1] > 0 and n_val == 0 and n_scenes - n_train >= 2:
        n_val = 1
    n_val = min(n_val, n_scenes - n_train)
    return n_train, n_val, n_scenes - n_train - n_val


def split_by_scene(
    records: Sequence[Record],
    seed: int = 0,
    ratios: Sequence[float] = DEFAULT_RATIOS,
) -> dict[str, list[Record]]:
    """Assign whole scenes to train/val/test with a seeded shuffle of the sorted scenes.
    Records keep their input order within a split."""
    scenes = sorted({scene_key(r) for r in records})
    n_train, n_val, _ = split_sizes(len(scenes), ratios)
    random.Random(seed).shuffle(scenes)
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


# --------------------------------------------------------------------------- files out
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


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a JSONL file."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --------------------------------------------------------------------------- prepare
def _video_root(
    given: str | Path | None, default: Path, *, label: str, flag: str, check: bool
) -> VideoRoot | None:
    """The dataset's video root (given, or the published place), or None unchecked."""
    if not check:
        return None
    root = VideoRoot(given if given is not None else default, label=label, flag=flag)
    if root.count() == 0:
        raise VideoSourceError(
            f"{label} video root {root.path} holds no videos (no video files and no zip archive "
            f"with videos); set {flag} to the folder with the videos, or pass --no-video-check "
            "to prepare the questions alone"
        )
    return root


def prepare(
    *,
    vsi: Sequence[str | Path] = (),
    urban: Sequence[str | Path] = (),
    records: Sequence[str | Path] = (),
    out: str | Path,
    vsi_video_root: str | Path | None = None,
    urban_video_root: str | Path | None = None,
    records_video_root: str | Path | None = None,
    vsi_subset: str = "all",
    include_numeric: bool = False,
    check_videos: bool = True,
    seed: int = 0,
    ratios: Sequence[float] = DEFAULT_RATIOS,
) -> dict[str, Any]:
    """Load, filter, locate videos, split and write `<out>/{train,val,test}.jsonl` and
    `summary.json`; returns the summary.

    Video roots default to where the downloads put them: the VSI-Bench file's folder (its
    zips or extracted `<dataset>/` folders), `videos/` beside MCQ.parquet, and the records
    file's folder. With `check_videos` (default) a question whose video is not found is
    dropped and counted as `missing_video`; without it no `video` field is written (then
    `cache-perception --video-root` must say where the videos are).
    """
    drops: Counter = Counter()
    notes: Counter = Counter()
    loaded: list[Record] = []
    inputs: list[dict[str, Any]] = []
    roots: dict[str, str | None] = {}

    def account(kind: str, path: str | Path, before_drops: int, got: list[Record]) -> None:
        inputs.append({"kind": kind, "file": str(path), "kept": len(got),
                       "dropped": int(sum(drops.values())) - before_drops})

    for path in vsi:
        root = _video_root(vsi_video_root, Path(path).resolve().parent, label="VSI-Bench",
                           flag="--vsi-video-root", check=check_videos)
        roots["vsi"] = str(root.path) if root else None
        before = int(sum(drops.values()))
        got = load_vsi(path, drops, subset=vsi_subset, include_numeric=include_numeric, root=root)
        account("vsi", path, before, got)
        loaded += got
    for path in urban:
        root = _video_root(urban_video_root, Path(path).resolve().parent / "videos", label="UrbanVideo-Bench",
                           flag="--urban-video-root", check=check_videos)
        roots["urban"] = str(root.path) if root else None
        before = int(sum(drops.values()))
        got = load_urban(path, drops, root=root, notes=notes)
        account("urban", path, before, got)
        loaded += got
    for path in records:
        root = _video_root(records_video_root, Path(path).resolve().parent, label="records",
                           flag="--records-video-root", check=check_videos)
        roots["records"] = str(root.path) if root else None
        before = int(sum(drops.values()))
        got = load_records(path, drops, root=root)
        account("records", path, before, got)
        loaded += got
    kept = list(dedupe_ids(loaded, drops))
    splits = split_by_scene(kept, seed=seed, ratios=ratios)
    out = Path(out)
    per_split: dict[str, Any] = {}
    for name, rows in splits.items():
        write_jsonl_atomic(out / f"{name}.jsonl", rows)
        per_category = Counter(r["question_category"] for r in rows)
        per_split[name] = {
            "questions": len(rows),
            "scenes": len({scene_key(r) for r in rows}),
            "videos": len({r["video_path"] for r in rows}),
            "per_category": {c: per_category.get(c, 0) for c in CATEGORIES},
            "numeric": sum(1 for r in rows if r.get("answer_type") == "numeric"),
        }
    summary = {
        "seed": seed,
        "ratios": list(ratios),
        "vsi_subset": vsi_subset,
        "include_numeric": include_numeric,
        "inputs": inputs,
        "video_roots": roots,
        "kept": len(kept),
        "dropped": dict(sorted(drops.items())),
        "dropped_total": int(sum(drops.values())),
        "notes": dict(sorted(notes.items())),
        "splits": per_split,
    }
    write_json_atomic(out / "summary.json", summary)
    return summary


def group_by_video(records: Sequence[_Row]) -> dict[str, list[_Row]]:
    """Records keyed by video path, in first-seen order."""
    groups: dict[str, list[_Row]] = defaultdict(list)
    for record in records:
        groups[record["video_path"]].append(record)
    return dict(groups)


def record_video(record: Mapping[str, Any], video_root: str | Path | None = None) -> VideoRef:
    """Where a record's video is: `video_root / video_path` when a root is given,
    else the `video` field written by `prepare`."""
    if video_root is not None:
        return VideoRef(str(Path(video_root) / str(record["video_path"])))
    if record.get("video") is None:
        raise VideoSourceError(
            f"question {record.get('Question_id')}: the record has no 'video' field (prepared with "
            "--no-video-check?); give --video-root, or prepare again with the video roots"
        )
    return VideoRef.from_json(record["video"])


# --------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="embodied-r-train prepare",
        description="Keep the paper's 8 categories of VSI-Bench / UrbanVideo-Bench (files as "
        "published), find every question's video, and split by scene into train/val/test JSONL.",
    )
    parser.add_argument("--vsi", action="append", default=[],
                        help="VSI-Bench question file: test-00000-of-00001.parquet, test.jsonl, "
                        "test_debiased.parquet or test_pruned.parquet (repeatable)")
    parser.add_argument("--vsi-subset", choices=VSI_SUBSETS, default="all",
                        help="all rows (default, as the paper), only 'debiased' rows (pruned False) "
                        "or only 'pruned' rows; needs the newer files' 'pruned' column")
    parser.add_argument("--vsi-video-root", default=None,
                        help="folder with arkitscenes.zip / scannet.zip / scannetpp.zip or the extracted "
                        "<dataset>/<scene_name>.mp4 tree (default: the --vsi file's folder)")
    parser.add_argument("--urban", action="append", default=[], help="UrbanVideo-Bench MCQ.parquet (repeatable)")
    parser.add_argument("--urban-video-root", default=None,
                        help="folder holding <video_id> files (default: videos/ beside MCQ.parquet)")
    parser.add_argument("--records", action="append", default=[],
                        help="questions in the record format, JSON list or JSONL (repeatable)")
    parser.add_argument("--records-video-root", default=None,
                        help="where the records' videos are, folder or zips (default: the records file's folder)")
    parser.add_argument("--include-numeric", action="store_true",
                        help="also keep VSI-Bench's numeric questions (counting, sizes, distances) for "
                        "VSI-Bench-style evaluation; training skips them")
    parser.add_argument("--no-video-check", action="store_true",
                        help="do not look for the videos (records get no 'video' field)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--seed", type=int, default=0, help="seed of the scene shuffle")
    parser.add_argument("--ratios", type=float, nargs=3, default=list(DEFAULT_RATIOS),
                        metavar=("TRAIN", "VAL", "TEST"), help="scene shares (default 0.75 0.05 0.20)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not (args.vsi or args.urban or args.records):
        parser.error("give at least one of --vsi, --urban, --records")
    summary = prepare(
        vsi=args.vsi,
        urban=args.urban,
        records=args.records,
        out=args.out,
        vsi_video_root=args.vsi_video_root,
        urban_video_root=args.urban_video_root,
        records_video_root=args.records_video_root,
        vsi_subset=args.vsi_subset,
        include_numeric=args.include_numeric,
        check_videos=not args.no_video_check,
        seed=args.seed,
        ratios=args.ratios,
    )
    print(json.dumps(summary, indent=2))
    return 0
