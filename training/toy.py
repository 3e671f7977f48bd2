"""A small synthetic benchmark in the real file formats, for tests and the CPU demo.

Writes, under one folder:

* `vsi.parquet`: VSI-Bench columns (id, dataset, scene_name, question_type, question,
  options, ground_truth), mixing kept categories (relative direction at three levels,
  relative distance, route planning, appearance order) with dropped ones (counting,
  room size), ground truth sometimes as a letter and sometimes as option text;
* `urban.parquet`: UrbanVideo-Bench MCQ columns (Question_id, video_id,
  question_category, question with its choices inside, answer), with a dropped category;
* `records.json`: two questions already in the project's record format;
* `videos/<dataset>/<scene>.mp4` and `videos/<video_id>`: short clips of a camera sliding
  over a random texture (so key-frame selection finds real motion).

    embodied-r-train toy-data --out artifacts/toy [--scenes 8] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
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
VSI_DROPPED = ("object_counting", "room_size_estimation")
URBAN_KEPT = ("Landmark Position", "Counterfactual", "Progress Evaluation", "Action Generation")
URBAN_DROPPED = ("Object Recall",)
OBJECTS = ("chair", "table", "door", "lamp", "sofa", "window", "plant", "bed")


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
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    if not writer.isOpened():
        raise RuntimeError(f"cannot write video {path}")
    n = seconds * fps
    for i in range(n):
        x = int((w * 3) * i / max(1, n - 1))
        writer.write(np.ascontiguousarray(world[:, x : x + w]))
    writer.release()


def make_toy_benchmark(out: str | Path, *, scenes: int = 8, seed: int = 0, videos: bool = True) -> dict[str, Any]:
    """Write the synthetic benchmark; returns the paths and the expected counts."""
    import pandas as pd

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    vsi_rows, urban_rows = [], []
    expected_kept = 0
    qid = 0
    for s in range(scenes):
        dataset = ("scannet", "arkitscenes")[s % 2]
        scene = f"scene{s:03d}"
        for qtype in VSI_KEPT + VSI_DROPPED:
            objs = rng.sample(OBJECTS, 4)
            truth = rng.randrange(4)
            options = [f"{'ABCD'[i]}. {o}" for i, o in enumerate(objs)]
            ground_truth = "ABCD"[truth] if qid % 2 == 0 else objs[truth]
            if qtype in VSI_DROPPED:
                options, ground_truth = [], str(rng.randrange(1, 9))
            else:
                expected_kept += 1
            vsi_rows.append(dict(
                id=qid, dataset=dataset, scene_name=scene, question_type=qtype,
                question=f"Which object is nearest to the {rng.choice(OBJECTS)}?",
                options=options, ground_truth=ground_truth,
            ))
            qid += 1
        if videos:
            write_clip(out / "videos" / dataset / f"{scene}.mp4", seed=seed * 1000 + s)
    for v in range(max(1, scenes // 2)):
        video_id = f"drone_{v:03d}.mp4"
        for c, category in enumerate(URBAN_KEPT + URBAN_DROPPED):
            letters = "ABCD"
            choices = "\n".join(f"{letters[i]}. {t}" for i, t in enumerate(("fly up", "turn left", "land", "go ahead")))
            inline = c % 2 == 1
            body = (
                f"Question: Where is the tall tower relative to you?\nChoices:\n{choices}"
                if not inline
                else "Where is the tall tower? A. fly up B. turn left C. land D. go ahead"
            )
            urban_rows.append(dict(
                Question_id=v * 10 + c, video_id=video_id, question_category=category,
                question=body, answer=letters[(v + c) % 4],
            ))
            expected_kept += category in URBAN_KEPT
        if videos:
            write_clip(out / "videos" / video_id, seed=seed * 1000 + 500 + v)
    pd.DataFrame(vsi_rows).to_parquet(out / "vsi.parquet")
    pd.DataFrame(urban_rows).to_parquet(out / "urban.parquet")
    records = [
        {
            "Question_id": "rec_0", "video_id": "drone_000.mp4", "question_category": "object_rel_direction",
            "question": "<video>Please assume the role of an agent. The video represents your egocentric "
            "observations from the past to the present. Question: Is the lamp to my left or right?"
            "\n\nChoices: \nA. left\nB. right\n",
            "answer": "B",
        },
        {
            "Question_id": "rec_1", "video_id": "drone_000.mp4", "question_category": "route_planning",
            "question": "Question: How do I reach the door?\nChoices:\nA. turn left\nB. turn back\nC. go ahead",
            "answer": "C", "scene_name": "drone_000",
        },
    ]
    expected_kept += len(records)
    (out / "records.json").write_text(json.dumps(records, indent=2))
    return {
        "vsi": out / "vsi.parquet",
        "urban": out / "urban.parquet",
        "records": out / "records.json",
        "video_root": out / "videos",
        "expected_kept": expected_kept,
        "n_vsi": len(vsi_rows),
        "n_urban": len(urban_rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="embodied-r-train toy-data", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--scenes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-videos", action="store_true")
    args = parser.parse_args(argv)
    info = make_toy_benchmark(args.out, scenes=args.scenes, seed=args.seed, videos=not args.no_videos)
    print(json.dumps({k: str(v) for k, v in info.items()}, indent=2))
    return 0
