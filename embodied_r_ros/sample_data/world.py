"""The mini world: random rooms, camera scripts, clips and graded questions, seeded.

Each room is drawn from its own seed: a box of random size with textured walls, four
objects (random colours from `COLOURS`, shapes from `SHAPES`: box, ball, pillar,
cabinet) and a door on one wall, plus a random camera script (moves and turns that stay
inside the room and clear of the objects). The scene renderer (`scene.render_clip`)
draws the clip with per-pixel object labels; the question makers (`questions`) grade the
paper's kept kinds from geometry. Rooms are split into train / val / test by room index,
so no room is in two splits.

`write_world` writes the dataset as the published record format reads it::

    OUT/
      videos/<video_id>.mp4          the clip (MPEG-4, 2 fps, 320x240)
      records/<split>.json           questions: Question_id, video_id, question_category,
                                     question ("Question: ...\\nChoices:\\nA. ..."), answer
                                     (letter), scene_name (the room)
      truth/<split>.json             per question: answer text, choices, the numbers the
                                     answer came from (never read by the answer path)
      labels/<video_id>.json         per frame: stamp, camera pose, objects in view (name,
                                     pixels, horizontal centre) from the renderer's labels
      world.json                     the settings and the room lists of each split

    python -m embodied_r_ros.sample_data.world OUT [--train 200 --val 10 --test 40 --seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.sample_data.captions import frame_objects
from embodied_r_ros.sample_data.questions import make_questions
from embodied_r_ros.sample_data.scene import (
    CameraPose,
    Room,
    SceneObject,
    SyntheticClip,
    _check_path,
    _parse_path,
    _Trajectory,
    render_clip,
)

__all__ = [
    "COLOURS",
    "SHAPES",
    "SPLITS",
    "WORLD_KINDS",
    "WorldConfig",
    "random_path",
    "random_room",
    "render_room",
    "room_split",
    "write_room_sample",
    "write_world",
]

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (200, 35, 35),
    "green": (40, 150, 70),
    "blue": (45, 80, 210),
    "yellow": (235, 205, 40),
    "orange": (235, 125, 30),
    "purple": (130, 55, 170),
    "pink": (235, 120, 175),
    "cyan": (40, 190, 205),
}
# shape name -> (scene kind, size ranges (x, y, z) in metres; a sphere/cylinder uses x)
SHAPES: dict[str, tuple[str, tuple[tuple[float, float], ...]]] = {
    "box": ("box", ((0.6, 0.9), (0.6, 0.9), (0.5, 0.8))),
    "ball": ("sphere", ((0.5, 0.7), (0.0, 0.0), (0.0, 0.0))),
    "pillar": ("cylinder", ((0.4, 0.55), (0.0, 0.0), (1.8, 2.3))),
    "cabinet": ("box", ((1.0, 1.3), (0.45, 0.6), (1.4, 1.7))),
}
SPLITS: tuple[str, ...] = ("train", "val", "test")
# The question kinds of the world (question makers of `questions`).
WORLD_KINDS: tuple[str, ...] = (
    "appearance_order", "direction_now", "distance", "next_turn", "route", "direction_then",
    "direction_allocentric", "landmark_position", "progress",
)
_TURNS = (45.0, 90.0, 135.0)


@dataclass(frozen=True)
class WorldConfig:
    """Sizes and rendering settings of one world (all rooms derive from `seed`)."""

    seed: int = 0
    n_train: int = 200
    n_val: int = 10
    n_test: int = 40
    width: int = 320
    height: int = 240
    fps: float = 2.0
    n_objects: int = 5
    min_seen: int = 4  # objects the clip must show (re-drawn up to 8 times otherwise)

    @property
    def n_rooms(self) -> int:
        return self.n_train + self.n_val + self.n_test


def room_split(index: int, cfg: WorldConfig) -> str:
    """The split of room `index`: the first n_train rooms train, then val, then test."""
    if index < cfg.n_train:
        return "train"
    if index < cfg.n_train + cfg.n_val:
        return "val"
    return "test"


def room_name(index: int, cfg: WorldConfig) -> str:
    return f"world{cfg.seed}_room{index:04d}"


def _rng(cfg: WorldConfig, index: int) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, index, 7919])


def random_room(rng: np.random.Generator, n_objects: int = 4) -> tuple[Room, list[SceneObject]]:
    """A room box and its objects: `n_objects` free-standing ones of distinct colours,
    placed at least 1.4 m apart and 0.8 m from the walls, and a door on a random wall."""
    room = Room(float(rng.uniform(6.5, 9.0)), float(rng.uniform(5.5, 7.5)), 2.6)
    colours = list(rng.permutation(list(COLOURS)))
    shapes = list(SHAPES)
    objects: list[SceneObject] = []
    spots: list[tuple[float, float]] = []
    for k in range(n_objects):
        shape = shapes[int(rng.integers(len(shapes)))]
        kind, ranges = SHAPES[shape]
        sx = float(rng.uniform(*ranges[0]))
        if kind == "box":
            size = (sx, float(rng.uniform(*ranges[1])), float(rng.uniform(*ranges[2])))
        elif kind == "sphere":
            size = (sx, sx, sx)
        else:
            size = (sx, sx, float(rng.uniform(*ranges[2])))
        for _ in range(200):
            x = float(rng.uniform(0.8, room.size_x - 0.8))
            y = float(rng.uniform(0.8, room.size_y - 0.8))
            if all(math.hypot(x - a, y - b) >= 1.4 for a, b in spots):
                break
        else:
            raise InvalidRequestError("could not place the objects apart")
        spots.append((x, y))
        colour = str(colours[k])
        objects.append(SceneObject(f"{colour} {shape}", colour, COLOURS[colour], kind,
                                   (x, y, size[2] / 2), size))
    colour = str(colours[n_objects])
    wall = int(rng.integers(4))
    width = 1.0
    if wall in (0, 2):
        along = float(rng.uniform(1.0, room.size_x - 1.0))
        pos = (along, 0.0 if wall == 0 else room.size_y, 1.05)
    else:
        along = float(rng.uniform(1.0, room.size_y - 1.0))
        pos = (room.size_x if wall == 1 else 0.0, along, 1.05)
    objects.append(SceneObject(f"{colour} door", colour, COLOURS[colour], "door", pos, (width, 0.0, 2.1)))
    return room, objects


def random_path(
    rng: np.random.Generator, room: Room, objects: Sequence[SceneObject], *, tries: int = 400,
) -> tuple[CameraPose, list[tuple[str, float]]]:
    """A start pose and a camera script of 5-7 steps (forward moves of 1-2.5 m, turns of
    45/90/135 degrees, an occasional side step) that stays in the room, clear of objects."""
    for _ in range(tries):
        x0 = float(rng.uniform(0.8, room.size_x - 0.8))
        y0 = float(rng.uniform(0.8, room.size_y - 0.8))
        # Face roughly towards the middle of the room.
        yaw = math.atan2(room.size_y / 2 - y0, room.size_x / 2 - x0) + float(rng.uniform(-0.8, 0.8))
        start = CameraPose(x0, y0, (yaw + math.pi) % (2 * math.pi) - math.pi, 1.2, 0.0, 0.0)
        steps: list[tuple[str, float]] = []
        last_turn = bool(rng.integers(2))
        for _ in range(int(rng.integers(5, 8))):
            if not last_turn and rng.random() < 0.75:
                action = "rotate left" if rng.random() < 0.5 else "rotate right"
                steps.append((action, float(_TURNS[int(rng.integers(len(_TURNS)))])))
                last_turn = True
            elif rng.random() < 0.15:
                steps.append(("move left" if rng.random() < 0.5 else "move right",
                              float(round(rng.uniform(0.6, 1.2), 1))))
                last_turn = False
            else:
                steps.append(("move forward", float(round(rng.uniform(1.0, 2.5), 1))))
                last_turn = False
        if not any(a.startswith("rotate") for a, _ in steps):
            continue
        try:
            traj = _Trajectory(_parse_path(steps), start, 0.5, 30.0)
            _check_path(traj, room, objects, margin=0.5)
        except InvalidRequestError:
            continue
        return start, steps
    raise InvalidRequestError("no camera script fits this room")


def render_room(index: int, cfg: WorldConfig) -> SyntheticClip:
    """Draw room `index` of the world and render its clip (labels kept). A draw whose
    clip shows fewer than `cfg.min_seen` objects is replaced by the next draw (8 at most)."""
    rng = _rng(cfg, index)
    clip = None
    for _ in range(8):
        room, objects = random_room(rng, cfg.n_objects)
        start, steps = random_path(rng, room, objects)
        clip = render_clip(steps, fps=cfg.fps, width=cfg.width, height=cfg.height,
                           seed=int(rng.integers(1 << 31)), start_pose=start, objects=objects,
                           room=room, keep_labels=True)
        if sum(clip.first_seen(o.name) is not None for o in objects) >= cfg.min_seen:
            break
    assert clip is not None
    clip.scene_name = room_name(index, cfg)
    return clip


def label_annotations(clip: SyntheticClip) -> dict[str, Any]:
    """Per frame: stamp, pose and the objects in view (from the per-pixel labels)."""
    assert clip.labels is not None, "render with keep_labels=True"
    names = [o.name for o in clip.objects]
    frames = []
    for stamp, pose, labels in zip(clip.stamps_s, clip.poses, clip.labels):
        frames.append({"stamp_s": round(stamp, 6), "pose": pose.to_dict(),
                       "objects": [o.to_json() for o in frame_objects(labels, names)]})
    return {"scene_name": clip.scene_name, "fps": clip.fps, "width": clip.width,
            "height": clip.height, "objects": [o.to_dict() for o in clip.objects],
            "segments": [s.to_dict() for s in clip.segments], "frames": frames}


def write_video(path: Path, frames: Sequence[np.ndarray], fps: float) -> None:
    """An MPEG-4 file of RGB frames (what `prepare` and the key-frame extractor read)."""
    import cv2

    h, w = frames[0].shape[:2]
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), fps, (w, h))
    if not writer.isOpened():
        raise InvalidRequestError(f"cannot write {path}")
    for frame in frames:
        writer.write(np.ascontiguousarray(frame[:, :, ::-1]))
    writer.release()


PUBLISHED_COLUMNS = ("Question_id", "video_id", "question_category", "question", "answer", "scene_name")
TRUTH_COLUMNS = ("question_text", "choices", "answer_text", "ask_time_s", "ground_truth")


def room_questions(clip: SyntheticClip, video_id: str, index: int, cfg: WorldConfig) -> list[dict[str, Any]]:
    """The room's graded questions (full records: published columns + truth columns)."""
    return make_questions(clip, video_id=video_id, seed=cfg.seed * 100003 + index, kinds=WORLD_KINDS)


def write_world(out: str | Path, cfg: WorldConfig = WorldConfig(), *, progress: bool = True) -> dict[str, Any]:
    """Render every room and write videos, records, truth and labels (see module doc)."""
    from tqdm import tqdm

    out = Path(out)
    records: dict[str, list[dict[str, Any]]] = {s: [] for s in SPLITS}
    truth: dict[str, dict[str, Any]] = {s: {} for s in SPLITS}
    rooms: dict[str, list[str]] = {s: [] for s in SPLITS}
    (out / "labels").mkdir(parents=True, exist_ok=True)
    for index in tqdm(range(cfg.n_rooms), desc="rooms", disable=not progress):
        split = room_split(index, cfg)
        clip = render_room(index, cfg)
        video_id = f"{clip.scene_name}.mp4"
        write_video(out / "videos" / video_id, clip.frames, cfg.fps)
        (out / "labels" / f"{clip.scene_name}.json").write_text(json.dumps(label_annotations(clip)))
        rooms[split].append(clip.scene_name)
        for q in room_questions(clip, video_id, index, cfg):
            records[split].append({k: q[k] for k in PUBLISHED_COLUMNS})
            truth[split][q["Question_id"]] = {k: q[k] for k in TRUTH_COLUMNS}
    (out / "records").mkdir(exist_ok=True)
    (out / "truth").mkdir(exist_ok=True)
    counts: dict[str, Any] = {}
    for split in SPLITS:
        (out / "records" / f"{split}.json").write_text(json.dumps(records[split], indent=1) + "\n")
        (out / "truth" / f"{split}.json").write_text(json.dumps(truth[split], indent=1) + "\n")
        kinds: dict[str, int] = {}
        for r in records[split]:
            kinds[r["question_category"]] = kinds.get(r["question_category"], 0) + 1
        counts[split] = {"rooms": len(rooms[split]), "questions": len(records[split]), "kinds": kinds}
    summary = {"config": asdict(cfg), "counts": counts, "rooms": rooms}
    (out / "world.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def write_room_sample(out: str | Path, index: int, cfg: WorldConfig = WorldConfig(), *,
                      name: str = "sample") -> tuple[Path, Path]:
    """One room as the demo's sample: `OUT/<name>.mcap` (camera + /odom) and
    `OUT/<name>_questions.json` (`questions.json` for the default name; full records, with
    question_text and choices, video_id = the bag's name). Returns both."""
    from embodied_r_ros.sample_data.bag_io import write_image_bag

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    clip = render_room(index, cfg)
    bag = out / f"{name}.mcap"
    if bag.exists():
        import shutil

        shutil.rmtree(bag)
    write_image_bag(bag, clip.frames, clip.stamps_s, poses=clip.poses)
    questions = room_questions(clip, bag.name, index, cfg)
    prefix = "" if name == "sample" else f"{name}_"
    qpath = out / f"{prefix}questions.json"
    qpath.write_text(json.dumps(questions, indent=2) + "\n")
    scene = clip.to_scene_dict()
    scene.update({"bag": bag.name, "image_topic": "/camera/image_raw", "odom_topic": "/odom",
                  "world": asdict(cfg), "room_index": index, "split": room_split(index, cfg)})
    (out / f"{prefix}scene.json").write_text(json.dumps(scene, indent=2) + "\n")
    return bag, qpath


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m embodied_r_ros.sample_data.world",
                                description="Write the mini world (videos, records, truth, labels).")
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=int, default=WorldConfig.n_train)
    p.add_argument("--val", type=int, default=WorldConfig.n_val)
    p.add_argument("--test", type=int, default=WorldConfig.n_test)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    cfg = WorldConfig(seed=args.seed, n_train=args.train, n_val=args.val, n_test=args.test)
    summary = write_world(args.out, cfg, progress=not args.no_progress)
    print(json.dumps(summary["counts"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
