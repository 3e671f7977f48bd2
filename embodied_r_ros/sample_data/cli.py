"""`embodied-r make-sample OUT_DIR`: render the sample clip and write bag, questions, scene.

Output (deterministic for a seed):
- ``OUT_DIR/sample.mcap/`` (or ``sample.db3/`` with ``--storage sqlite3``): a rosbag2
  folder with the camera images and the true camera poses on ``/odom``;
- ``OUT_DIR/questions.json``: graded multiple-choice questions in the dataset format;
- ``OUT_DIR/scene.json``: objects, scripted segments, per-frame poses and conventions;
- ``OUT_DIR/preview.png``: a contact sheet of a few frames.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np

from embodied_r_ros.core.errors import EmbodiedRError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="embodied-r make-sample",
        description="Render the synthetic room clip (known camera path) and write it as a "
        "rosbag2 bag with graded questions.",
    )
    p.add_argument("out_dir", help="output folder (created if missing)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default="mcap", help="bag storage (default mcap)")
    p.add_argument("--fps", type=float, default=10.0, help="camera frame rate (default 10)")
    p.add_argument("--compressed", action="store_true", help="write JPEG CompressedImage instead of raw rgb8")
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=240)
    p.add_argument("--seed", type=int, default=0, help="texture and question seed (default 0)")
    p.add_argument("--topic", default="/camera/image_raw", help="image topic (default /camera/image_raw)")
    p.add_argument("--no-odom", action="store_true", help="leave the /odom poses out of the bag")
    p.add_argument("--force", action="store_true", help="replace an existing bag folder in OUT_DIR")
    return p


def contact_sheet(frames: list[np.ndarray], stamps: list[float], columns: int = 4, count: int = 8) -> np.ndarray:
    """A grid of `count` evenly spaced frames, each labelled with its time."""
    idx = np.linspace(0, len(frames) - 1, num=min(count, len(frames))).round().astype(int)
    tiles = []
    for i in idx:
        tile = np.ascontiguousarray(frames[i][:, :, ::-1])  # to BGR for OpenCV drawing
        label = f"t={stamps[i]:.1f}s"
        cv2.putText(tile, label, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 3, cv2.LINE_AA)
        cv2.putText(tile, label, (6, 18), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
        tiles.append(tile)
    while len(tiles) % columns:
        tiles.append(np.zeros_like(tiles[0]))
    rows = [np.hstack(tiles[r : r + columns]) for r in range(0, len(tiles), columns)]
    return np.vstack(rows)  # BGR


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from embodied_r_ros.sample_data.bag_io import write_image_bag
    from embodied_r_ros.sample_data.questions import make_questions
    from embodied_r_ros.sample_data.scene import render_clip

    out = Path(args.out_dir)
    bag_name = "sample.mcap" if args.storage == "mcap" else "sample.db3"
    bag_path = out / bag_name
    try:
        if bag_path.exists():
            if not args.force:
                print(f"make-sample: {bag_path} exists; use --force to replace it", file=sys.stderr)
                return 1
            shutil.rmtree(bag_path)
        out.mkdir(parents=True, exist_ok=True)
        clip = render_clip(fps=args.fps, width=args.width, height=args.height, seed=args.seed)
        write_image_bag(
            bag_path,
            clip.frames,
            clip.stamps_s,
            topic=args.topic,
            storage=args.storage,
            compressed=args.compressed,
            poses=None if args.no_odom else clip.poses,
        )
        questions = make_questions(clip, video_id=bag_name, seed=args.seed)
    except EmbodiedRError as exc:
        print(f"make-sample: {exc}", file=sys.stderr)
        return 2

    (out / "questions.json").write_text(json.dumps(questions, indent=2) + "\n")
    scene = clip.to_scene_dict()
    scene["bag"] = bag_name
    compressed_suffix = args.compressed and not args.topic.endswith("/compressed")
    scene["image_topic"] = args.topic + ("/compressed" if compressed_suffix else "")
    scene["odom_topic"] = None if args.no_odom else "/odom"
    (out / "scene.json").write_text(json.dumps(scene, indent=2) + "\n")
    cv2.imwrite(str(out / "preview.png"), contact_sheet(clip.frames, clip.stamps_s))

    print(f"rendered {len(clip.frames)} frames ({clip.width}x{clip.height}, {clip.fps:g} fps, "
          f"{clip.duration_s:.1f} s, seed {clip.seed})")
    print(f"wrote {bag_path} ({args.storage}, topic {scene['image_topic']}"
          f"{'' if args.no_odom else ' + /odom'})")
    print(f"wrote {out / 'questions.json'} ({len(questions)} questions)")
    print(f"wrote {out / 'scene.json'}")
    print(f"wrote {out / 'preview.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
