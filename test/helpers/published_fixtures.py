"""Builders of test inputs laid out like the published benchmark downloads.

The whole download tree comes from the package's `toy-data` writer
(`embodied_r_training.toy.make_published_tree`, also used by the dry run); the schema
test pins what it writes against the published column names and types. The helpers here
add single rows and the broken files a user can end up with (a Git LFS pointer instead
of the data, a file under the wrong name, a zip missing a member).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

from embodied_r_training.toy import (
    make_published_tree,
    urban_schema,
    vsi_schema,
    write_clip,
    write_jsonl,
    write_parquet,
)

__all__ = [
    "make_published_tree",
    "vsi_row",
    "urban_row",
    "write_vsi",
    "write_urban",
    "write_jsonl",
    "write_clip",
    "write_lfs_pointer",
    "drop_zip_member",
    "copy_tree",
]


def vsi_row(id: int, question_type: str, *, dataset: str = "scannet", scene_name: str = "scene0001_00",
            question: str = "Which is closest to the bed?", options: list[str] | None = None,
            ground_truth: str = "A", **extra: Any) -> dict[str, Any]:
    """One VSI-Bench row (first-release columns, plus any `extra` such as pruned)."""
    return dict(id=id, dataset=dataset, scene_name=scene_name, question_type=question_type,
                question=question, ground_truth=ground_truth, options=options, **extra)


def urban_row(qid: int, video_id: str, category: str, question: str, answer: str) -> dict[str, Any]:
    """One UrbanVideo-Bench MCQ row."""
    return dict(Question_id=qid, video_id=video_id, question_category=category, question=question, answer=answer)


def write_vsi(rows: list[dict[str, Any]], path: Path) -> Path:
    """VSI rows as parquet with the published schema (the `pruned` column when present)."""
    return write_parquet(rows, path, vsi_schema(pruned=any("pruned" in r for r in rows)))


def write_urban(rows: list[dict[str, Any]], path: Path) -> Path:
    """UrbanVideo rows as MCQ.parquet with the published schema."""
    return write_parquet(rows, path, urban_schema())


def write_lfs_pointer(path: Path) -> Path:
    """What a clone without git-lfs leaves in place of a data file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "version https://git-lfs.github.com/spec/v1\n"
        "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
        "size 161234\n"
    )
    return path


def drop_zip_member(archive: Path, member: str) -> None:
    """Rewrite `archive` without `member` (a download missing one video)."""
    tmp = archive.with_suffix(".tmp.zip")
    with zipfile.ZipFile(archive) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            if info.filename != member:
                dst.writestr(info, src.read(info.filename))
    tmp.replace(archive)


def copy_tree(src: Path, dst: Path) -> Path:
    """A private copy of a built tree (tests that break files work on their own copy)."""
    shutil.copytree(src, dst)
    return dst


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())
