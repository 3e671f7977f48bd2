"""Odometry-measured actions in the training cache (the robot's perception.use_odometry),
as the mini-world run and its model setup use them."""

from __future__ import annotations

import json
from pathlib import Path

from embodied_r_ros.evaluation import models as model_setup
from embodied_r_ros.sample_data.world import WorldConfig, label_annotations, render_room
from embodied_r_training.perception_cache import build_record

RECORD = {"Question_id": "q0", "video_id": "v.mp4", "question_category": "appearance_order",
          "question": "Question: which first?\nChoices:\nA. red box\nB. blue ball", "answer": "A",
          "scene_name": "room"}
TEXTS = ["red box ahead.", "1. move forward\n2. new: blue ball right.\n3. in view: red box left; blue ball right.",
         "1. rotate left\n2. nothing new.\n3. no objects in view."]
KEYFRAMES = {"source_frames": [0, 4, 9], "n_sampled": 6, "video_fps": 2.0, "n_source_frames": 12}


def test_measured_actions_replace_the_vlm_guess_of_later_key_frames() -> None:
    kept = build_record(RECORD, "streaming", KEYFRAMES, TEXTS)
    assert [f["action"] for f in kept["frames"]] == [None, "move forward", "rotate left"]
    measured = build_record(RECORD, "streaming", KEYFRAMES, TEXTS, actions=[None, "rotate right", None])
    # Frame 1 takes the odometry action; frame 2 (nothing measured) keeps the VLM's.
    assert [f["action"] for f in measured["frames"]] == [None, "rotate right", "rotate left"]
    assert "Frame 1: After rotate right, Observe: new: blue ball right." in measured["video_text"]
    assert measured["video_text"] in measured["prompt"][-1]["content"]
    # The observations are the VLM's in both.
    assert [f["observation"] for f in measured["frames"]] == [f["observation"] for f in kept["frames"]]


def test_odometry_motion_names_the_scripted_segment_between_key_frames(tmp_path: Path) -> None:
    """On a rendered room, two key frames inside one scripted segment get that segment's
    action (the camera script is the truth the world was drawn from)."""
    from embodied_r_training.mini_world.run import odometry_motion

    cfg = WorldConfig()
    clip = render_room(3, cfg)
    labels = label_annotations(clip)
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / f"{clip.scene_name}.json").write_text(json.dumps(labels))
    stamps = [f["stamp_s"] for f in labels["frames"]]
    checked = 0
    for seg in labels["segments"]:
        inside = [i for i, t in enumerate(stamps) if seg["start_s"] + 0.25 <= t <= seg["end_s"] - 0.25]
        if len(inside) < 2 or seg["action"] not in ("move forward", "rotate left", "rotate right"):
            continue
        a, b = inside[0], inside[-1]
        got = odometry_motion(tmp_path)({"scene_name": clip.scene_name}, {"source_frames": [0, a, b]})
        assert got[0] is None and got[2] == seg["action"], (seg, got)
        checked += 1
    assert checked >= 2


def test_mini_world_setup_turns_odometry_on_and_matches_training_lengths() -> None:
    from embodied_r_training.mini_world import run

    overrides = model_setup.mini_world_overrides()
    assert overrides["perception.use_odometry"] is True
    assert overrides["reasoning.max_new_tokens"] == run.REASONING_TOKENS
    assert overrides["perception.max_new_tokens"] == run.PERCEPTION_TOKENS
    assert "perception.use_odometry" not in model_setup.mini_world_overrides(["reasoning"])
