"""A small synthetic benchmark laid out exactly like the two published downloads.

Writes, under one folder (the same names and column types as the real files; see
training/README.md for the real layout)::

    VSI-Bench/
      test-00000-of-00001.parquet   first release: id, dataset, scene_name, question_type,
                                    question, ground_truth, options (null for numeric types)
      test.jsonl                    newer revision: the same rows plus a boolean `pruned`
      test_debiased.parquet         newer revision: the rows with pruned False
      test_pruned.parquet           newer revision: the rows with pruned True
      arkitscenes.zip, scannet.zip, scannetpp.zip
                                    members <dataset>/<scene_name>.mp4
                                    (or, with extracted=True, the folders themselves)
    UrbanVideo-Bench/
      MCQ.parquet                   Question_id, video_id, question_category, question, answer
      videos/<video_id>             clips named as the benchmark names them; several clips
                                    per flight (EmbodiedCity_1_0_0.mp4, EmbodiedCity_1_0_1.mp4 ...)
    records/questions.json          two questions in the dataset's record format (as the
                                    reference's demo file: "<video>" tag, role preamble,
                                    "videos" field, no scene_name), videos in VSI-Bench's zips

VSI rows mix the kept question types (relative direction at three levels, relative
distance, route planning, appearance order) with numeric ones (counting, room size);
UrbanVideo rows mix the four kept categories, written with the labels the benchmark uses
("Choices:", "Options:", "Choose:", options inline), with a dropped one. Every clip is a
real H.264/MPEG-4 video of a camera panning over a random texture, so key-frame selection
sees real motion.

    embodied-r-train toy-data --out artifacts/toy [--vsi-scenes 4] [--seed 0] [--extracted]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

VSI_KEPT = (
    "object_rel_direction_easy",
    "object_rel_direction_medium",
    "object_rel_direction_hard",
    "object_rel_distance",
    "route_planning",
    "obj_appearance_order",
)
VSI_NUMERIC = ("object_counting", "room_size_estimation")
VSI_DATASETS = ("arkitscenes", "scannet", "scannetpp")
URBAN_KEPT = ("Landmark Position", "Counterfactual", "Progress Evaluation", "Action Generation")
URBAN_DROPPED = ("Object Recall",)
# Clip names in the benchmark's styles; the flight each belongs to (reference rule).
URBAN_CLIPS: tuple[tuple[str, str], ...] = (
    ("EmbodiedCity_1_0_0.mp4", "EmbodiedCity_1"),
    ("EmbodiedCity_1_0_1.mp4", "EmbodiedCity_1"),
    ("EmbodiedCity_2.mp4", "EmbodiedCity_2"),
    ("AerialVLN_3_1WQ7_0.mp4", "AerialVLN_3_1WQ7"),
    ("AerialVLN_3_1WQ7_2.mp4", "AerialVLN_3_1WQ7"),
    ("RealWorld_4_0.mp4", "RealWorld_4"),
    ("RealWorld_4_1.mp4", "RealWorld_4"),
    ("RealWorld_5.mp4", "RealWorld_5"),
)
OBJECTS = ("chair", "table", "door", "lamp", "sofa", "window", "plant", "bed")
MOVES = ("fly up", "turn left", "land", "go ahead")


def vsi_schema(pruned: bool = False) -> Any:
    """Arrow schema of VSI-Bench's question files (with the newer `pruned` column)."""
    import pyarrow as pa

    fields = [
        ("id", pa.int64()),
        ("dataset", pa.string()),
        ("scene_name", pa.string()),
        ("question_type", pa.string()),
        ("question", pa.string()),
        ("ground_truth", pa.string()),
        ("options", pa.list_(pa.string())),
    ]
    if pruned:
        fields.append(("pruned", pa.bool_()))
    return pa.schema(fields)


def urban_schema() -> Any:
    """Arrow schema of UrbanVideo-Bench's MCQ.parquet."""
    import pyarrow as pa

    return pa.schema([
        ("Question_id", pa.int64()),
        ("video_id", pa.string()),
        ("question_category", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
    ])


def write_parquet(rows: list[dict[str, Any]], path: str | Path, schema: Any) -> Path:
    """Rows written as parquet with exactly `schema` (no pandas index column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema)
    pq.write_table(table, path)
    return path


def write_jsonl(rows: list[dict[str, Any]], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_clip(path: Path, *, seed: int, seconds: int = 6, fps: int = 4, size: tuple[int, int] = (160, 120)) -> None:
    """A clip of a camera panning across a random texture (mp4v, `seconds` long)."""
    import cv2

    w, h = size
    rng = np.random.default_rng(seed)
    world = cv2.resize(
        rng.integers(0, 255, (h // 4, w, 3), dtype=np.uint8), (w * 4, h), interpolation=cv2.INTER_NEAREST
    )
    world = cv2.GaussianBlur(world, (3, 3), 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), fps, (w, h))
    if not writer.isOpened():
        raise RuntimeError(f"cannot write video {path}")
    n = seconds * fps
    for i in range(n):
        x = int((w * 3) * i / max(1, n - 1))
        writer.write(np.ascontiguousarray(world[:, x : x + w]))
    writer.release()


def vsi_rows(scenes: int, seed: int) -> list[dict[str, Any]]:
    """VSI-Bench question rows (first-release columns) for `scenes` scenes."""
    rng = random.Random(seed)
    rows = []
    qid = 0
    for s in range(scenes):
        dataset = VSI_DATASETS[s % len(VSI_DATASETS)]
        scene = ("scene%04d_00" % s) if dataset == "scannet" else f"{4100000 + s}" if dataset == "arkitscenes" \
            else f"{s:02d}a5c0134"
        for qtype in VSI_KEPT + VSI_NUMERIC:
            if qtype in VSI_NUMERIC:
                question = "How many chair(s) are in this room?" if qtype == "object_counting" else \
                    "What is the size of this room (in square meters)?"
                rows.append(dict(id=qid, dataset=dataset, scene_name=scene, question_type=qtype,
                                 question=question, ground_truth=str(rng.randint(2, 30)), options=None))
            else:
                objs = rng.sample(OBJECTS, 4)
                n_options = 3 if qtype.startswith("object_rel_direction") else 4
                options = [f"{'ABCD'[i]}. {o}" for i, o in enumerate(objs[:n_options])]
                rows.append(dict(id=qid, dataset=dataset, scene_name=scene, question_type=qtype,
                                 question=f"Which object is nearest to the {rng.choice(OBJECTS)}?",
                                 ground_truth="ABCD"[rng.randrange(n_options)], options=options))
            qid += 1
    return rows


def urban_rows(seed: int) -> list[dict[str, Any]]:
    """UrbanVideo-Bench MCQ rows for the clips of `URBAN_CLIPS`."""
    rng = random.Random(seed + 7)
    rows = []
    qid = 0
    styles = (
        lambda body, opts: f"Question: {body}\nChoices:\n" + "\n".join(opts),
        lambda body, opts: f"{body}\nOptions:\n" + "\n".join(opts),
        lambda body, opts: f"{body} Choose: " + " ".join(opts),
        lambda body, opts: f"{body}\n" + "\n".join(opts),
    )
    for video_id, _ in URBAN_CLIPS:
        for c, category in enumerate(URBAN_KEPT + URBAN_DROPPED):
            options = [f"{'ABCD'[i]}. {m}" for i, m in enumerate(MOVES)]
            text = styles[(qid + c) % len(styles)]("Where is the tall tower relative to you?", options)
            rows.append(dict(Question_id=qid, video_id=video_id, question_category=category,
                             question=text, answer="ABCD"[rng.randrange(4)]))
            qid += 1
    return rows


def demo_records(vsi: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two questions in the dataset's record format about the first VSI scene."""
    scene = vsi[0]["scene_name"]
    preamble = ("Please assume the role of an agent. The video represents your egocentric "
                "observations from the past to the present. ")
    return [
        {"Question_id": "record_direction", "video_id": f"{scene}.mp4", "question_category": "object_rel_direction",
         "question": preamble + "Question: Standing next to the sofa and looking at the lamp, do I have "
         "the door on my left, on my right, or behind me?\nBehind me means I would need to turn by 135 "
         "degrees or more to face it.\n\nChoices: \nA. left\nB. right\nC. back\n",
         "answer": "C"},
        {"Question_id": "record_distance", "video_id": f"{scene}.mp4", "question_category": "object_rel_distance",
         "question": "<video>" + preamble + "Question: Measuring from the closest point of each object, which "
         "of these objects (sofa, chair, lamp, bed) is the closest to the door?\n\nChoices: \nA. sofa\n"
         "B. chair\nC. lamp\nD. bed\n",
         "answer": "B", "videos": f"DataPath/{scene}.mp4"},
    ]


def make_published_tree(
    out: str | Path, *, vsi_scenes: int = 4, seed: int = 0, videos: bool = True, extracted: bool = False
) -> dict[str, Any]:
    """Write the synthetic download tree; returns its paths and the expected counts."""
    out = Path(out)
    vsi_dir, urban_dir, records_dir = out / "VSI-Bench", out / "UrbanVideo-Bench", out / "records"
    vsi = vsi_rows(vsi_scenes, seed)
    newer = [dict(r, pruned=(r["id"] % 3 == 2)) for r in vsi]
    write_parquet(vsi, vsi_dir / "test-00000-of-00001.parquet", vsi_schema())
    write_jsonl(newer, vsi_dir / "test.jsonl")
    write_parquet([r for r in newer if not r["pruned"]], vsi_dir / "test_debiased.parquet", vsi_schema(True))
    write_parquet([r for r in newer if r["pruned"]], vsi_dir / "test_pruned.parquet", vsi_schema(True))
    urban = urban_rows(seed)
    write_parquet(urban, urban_dir / "MCQ.parquet", urban_schema())
    records = demo_records(vsi)
    records_dir.mkdir(parents=True, exist_ok=True)
    (records_dir / "questions.json").write_text(json.dumps(records, indent=4), encoding="utf-8")
    if videos:
        scenes = sorted({(r["dataset"], r["scene_name"]) for r in vsi})
        with tempfile.TemporaryDirectory() as tmp:
            archives: dict[str, zipfile.ZipFile] = {}
            try:
                for i, (dataset, scene) in enumerate(scenes):
                    member = f"{dataset}/{scene}.mp4"
                    if extracted:
                        write_clip(vsi_dir / member, seed=seed * 1000 + i)
                        continue
                    clip = Path(tmp) / member
                    write_clip(clip, seed=seed * 1000 + i)
                    if dataset not in archives:
                        archives[dataset] = zipfile.ZipFile(vsi_dir / f"{dataset}.zip", "w", zipfile.ZIP_STORED)
                    archives[dataset].write(clip, member)
            finally:
                for archive in archives.values():
                    archive.close()
        for j, (video_id, _) in enumerate(URBAN_CLIPS):
            write_clip(urban_dir / "videos" / video_id, seed=seed * 1000 + 500 + j)
    kept_vsi = sum(1 for r in vsi if r["question_type"] in VSI_KEPT)
    kept_urban = sum(1 for r in urban if r["question_category"] in URBAN_KEPT)
    return {
        "root": out,
        "vsi_parquet": vsi_dir / "test-00000-of-00001.parquet",
        "vsi_jsonl": vsi_dir / "test.jsonl",
        "vsi_debiased": vsi_dir / "test_debiased.parquet",
        "vsi_pruned": vsi_dir / "test_pruned.parquet",
        "vsi_dir": vsi_dir,
        "urban": urban_dir / "MCQ.parquet",
        "urban_videos": urban_dir / "videos",
        "records": records_dir / "questions.json",
        "n_vsi": len(vsi),
        "n_urban": len(urban),
        "n_records": len(records),
        "kept_vsi": kept_vsi,
        "kept_urban": kept_urban,
        "vsi_scenes": len({r["scene_name"] for r in vsi}),
        "urban_flights": len({f for _, f in URBAN_CLIPS}),
        "urban_flight_of": dict(URBAN_CLIPS),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="embodied-r-train toy-data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder to write VSI-Bench/, UrbanVideo-Bench/, records/ into")
    parser.add_argument("--vsi-scenes", type=int, default=4, help="number of VSI-Bench scenes (one clip each)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic questions and clips")
    parser.add_argument("--no-videos", action="store_true", help="question files only")
    parser.add_argument("--extracted", action="store_true",
                        help="VSI-Bench videos as the extracted <dataset>/<scene>.mp4 tree instead of zips")
    args = parser.parse_args(argv)
    info = make_published_tree(args.out, vsi_scenes=args.vsi_scenes, seed=args.seed,
                               videos=not args.no_videos, extracted=args.extracted)
    print(json.dumps({k: str(v) if isinstance(v, Path) else v for k, v in info.items()}, indent=2))
    return 0
