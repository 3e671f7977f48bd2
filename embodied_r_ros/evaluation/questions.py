"""Question files for replay evaluation, and which bag each question belongs to.

A question file is JSON (a list of records, or an object with a ``questions`` list) or
JSON lines (one record per line, as `embodied-r-train prepare` writes). A record is one
of two shapes:

* the robot's: ``question_text`` (the question without choices) and ``choices`` (a list
  of option texts, lettered A, B, ... in order; empty for an open question);
* the datasets': ``question`` holding the choices in a ``Choices:`` block
  (``"Question: ...\\nChoices:\\nA. ...\\nB. ..."``, docs/method.md §6).

Optional fields: ``answer`` (the ground-truth letter, or "B. right" style: the letter is
what counts), ``question_category`` (or ``category``), and an id: ``Question_id``,
``question_id`` or ``id`` (else ``q<position>``). Ids must be unique within a file: they
key the resumable results file.

With a folder of bags, each record names its bag by the first of these fields it has:
``bag`` (the bag folder's path relative to the folder, e.g. ``"run1.mcap"`` or
``"day2/run1.db3"``), ``video_id`` (UrbanVideo-Bench, e.g. ``"EmbodiedCity_17_3.mp4"``)
or ``video_path`` (prepared records, e.g. ``"scannet/scene0011_00.mp4"``). A name
matches a bag whose relative path equals it, or, failing that, the one bag whose name
without suffixes (``.mp4``, ``.mcap``, ``.db3`` ...) equals the name's: `embodied-r
video2bag` writes ``<video stem>.mcap`` (or ``.db3``), so the benchmarks' own
``video_id`` / ``video_path`` fields find the converted bags unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from embodied_r_ros.core.errors import InvalidRequestError

BAG_FIELDS = ("bag", "video_id", "video_path")
ID_FIELDS = ("Question_id", "question_id", "id")
# Suffixes stripped when a name is matched by its stem.
NAME_SUFFIXES = (".mp4", ".mov", ".avi", ".mkv", ".webm", ".mcap", ".db3", ".bag")


@dataclass
class QuestionItem:
    """One question to ask: text, options (may be empty), ground truth if known."""

    question: str
    choices: list[str]
    answer: str = ""
    category: str = ""
    question_id: str = ""
    bag: str = ""  # the bag it is asked about (folder mode), as the record names it

    @property
    def scored(self) -> bool:
        """Whether a correct/wrong verdict exists: a ground truth and lettered options."""
        return bool(self.answer) and (bool(self.choices) or "choices:" in self.question.lower())


def _records(path: Path) -> list[Any]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark is accepted
    except UnicodeDecodeError as exc:
        raise InvalidRequestError(
            f"question file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
            f"offset {exc.start}); convert it, e.g. `iconv -f latin1 -t utf-8 {path.name} > "
            f"{path.stem}.utf8{path.suffix}`") from exc
    except OSError as exc:
        raise InvalidRequestError(f"cannot read the question file {path}: {exc}") from exc
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        records = json.loads(text)
    except ValueError as exc:
        raise InvalidRequestError(f"question file {path} is not valid JSON ({exc})") from exc
    if isinstance(records, dict):
        records = records.get("questions", [])
    if not isinstance(records, list):
        raise InvalidRequestError(f"question file {path} must hold a list of records or an "
                                  "object with a 'questions' list")
    return records


def ground_truth_letter(answer: Any) -> str:
    """"B", "b", "B. right", "(B)" -> "B"; anything else is kept stripped."""
    text = str(answer or "").strip()
    core = text.lstrip("(").strip()
    if core[:1].isalpha() and (len(core) == 1 or not core[1:2].isalnum()):
        return core[0].upper()
    return text


def load_questions(path: str | Path) -> list[QuestionItem]:
    """Read a question file (see the module docstring)."""
    path = Path(path)
    items: list[QuestionItem] = []
    seen: set[str] = set()
    for i, rec in enumerate(_records(path)):
        if not isinstance(rec, dict):
            raise InvalidRequestError(f"{path}: record {i} is not an object")
        text = rec.get("question_text") or rec.get("question")
        if not text or not isinstance(text, str):
            raise InvalidRequestError(f"{path}: record {i} has no question text "
                                      "('question_text' or 'question')")
        choices = rec.get("choices", []) if rec.get("question_text") else []
        if not isinstance(choices, list):
            raise InvalidRequestError(f"{path}: record {i}: 'choices' must be a list of texts")
        qid = next((str(rec[k]) for k in ID_FIELDS if rec.get(k) not in (None, "")), f"q{i}")
        if qid in seen:
            raise InvalidRequestError(f"{path}: question id {qid!r} appears twice; ids key the "
                                      "resumable results, so each must be unique")
        seen.add(qid)
        bag = next((str(rec[k]) for k in BAG_FIELDS if rec.get(k)), "")
        items.append(QuestionItem(
            question=text, choices=[str(c) for c in choices],
            answer=ground_truth_letter(rec.get("answer", "")),
            category=str(rec.get("question_category", rec.get("category", "")) or ""),
            question_id=qid, bag=bag))
    return items


def name_stem(name: str) -> str:
    """A bag or video name without its folder and suffixes: "a/b/x.mp4" -> "x"."""
    base = PurePosixPath(name.replace("\\", "/")).name
    changed = True
    while changed:
        changed = False
        for suffix in NAME_SUFFIXES:
            if base.lower().endswith(suffix) and len(base) > len(suffix):
                base, changed = base[: -len(suffix)], True
    return base


def find_bags(folder: str | Path) -> dict[str, Path]:
    """Every rosbag2 bag (a folder with a metadata.yaml) under `folder`, keyed by its path
    relative to `folder` (posix form), sorted; folders whose name starts with "." are
    skipped."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidRequestError(f"bag folder {root} does not exist or is not a folder")
    bags = {}
    for meta in sorted(root.rglob("metadata.yaml")):
        bag = meta.parent
        if any(part.startswith(".") for part in bag.relative_to(root).parts):
            continue  # hidden: e.g. bags that video2bag is still writing
        rel = "." if bag == root else bag.relative_to(root).as_posix()
        bags[rel] = bag
    if not bags:
        raise InvalidRequestError(f"no rosbag2 bag (a folder with metadata.yaml) under {root}; "
                                  "convert videos with `embodied-r video2bag`")
    return bags


def assign_to_bags(items: Sequence[QuestionItem], bags: dict[str, Path], *,
                   allow_missing: bool = False) -> tuple[dict[str, list[QuestionItem]], list[str]]:
    """Group questions by the bag they name (module docstring): returns ({bag key: items},
    names that matched no bag). Unknown names raise unless `allow_missing`; a question
    without a bag field, or a name that matches several bags, always raises."""
    by_stem: dict[str, list[str]] = {}
    for key in bags:
        by_stem.setdefault(name_stem(key), []).append(key)
    groups: dict[str, list[QuestionItem]] = {}
    missing: list[str] = []
    for item in items:
        if not item.bag:
            raise InvalidRequestError(
                f"question {item.question_id!r} names no bag; with a folder of bags every "
                f"record needs one of the fields {', '.join(BAG_FIELDS)}")
        key = item.bag.replace("\\", "/").strip("/")
        if key not in bags:
            hits = by_stem.get(name_stem(key), [])
            if len(hits) > 1:
                raise InvalidRequestError(
                    f"question {item.question_id!r}: {item.bag!r} matches several bags "
                    f"({', '.join(hits)}); name the bag by its relative path in a 'bag' field")
            if not hits:
                if item.bag not in missing:
                    missing.append(item.bag)
                continue
            key = hits[0]
        groups.setdefault(key, []).append(item)
    if missing and not allow_missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise InvalidRequestError(
            f"{len(missing)} bag name(s) in the question file match no bag in the folder "
            f"({shown}); known bags: {', '.join(list(bags)[:5])}{' ...' if len(bags) > 5 else ''}. "
            "Convert the missing videos, or pass --allow-missing to skip their questions")
    return {k: groups[k] for k in bags if k in groups}, missing
