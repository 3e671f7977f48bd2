"""docs/method.md's worked examples equal what the code computes.

The blocks are parsed from the document itself, so an example cannot drift from the code
(and the code cannot drift from the documented reference rule) unnoticed. The numbers in
the count-rule and sampling examples are the reference rule's worked examples.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import cv2
import numpy as np
import pytest

from embodied_r_ros.core.keyframes.extraction import extract_keyframes_from_video
from embodied_r_ros.core.keyframes.rules import KeyFrameParams, reference_count_rule
from embodied_r_ros.core.perception.parser import parse_frame_description

from helpers.env import REPO_ROOT

DOC = REPO_ROOT / "docs" / "method.md"
TEXT = DOC.read_text(encoding="utf-8")


def _block(marker: str) -> str:
    """The fenced block that follows `<!-- marker -->` in the document."""
    match = re.search(rf"<!-- {marker} -->\s*```[a-z]*\n(.*?)\n```", TEXT, re.DOTALL)
    assert match, f"docs/method.md has no block marked {marker}"
    return match.group(1)


def _examples(kind: str) -> list[tuple[dict[str, str], list[int]]]:
    rows = []
    for line in _block("worked-examples").splitlines():
        if not line.startswith(kind + " "):
            continue
        left, right = line.split(" -> ")
        fields = dict(re.findall(r"(\w+)=(\[[^\]]*\]|\S+)", left[len(kind):]))
        rows.append((fields, ast.literal_eval(right)))
    assert rows, f"no {kind} examples"
    return rows


COUNT_RULE = _examples("count_rule")
SAMPLING = _examples("sampling")


def test_the_reference_worked_examples_are_in_the_document() -> None:
    table = {(int(f["n_sampled"]), f["keyframes"]): out for f, out in COUNT_RULE}
    assert table[(21, "[0, 20]")] == [0, 1, 11, 20]
    assert table[(10, "[0, 9]")] == [0, 1, 5, 9]
    assert {int(f["frame_count"]): len(out) for f, out in SAMPLING}[600] == 21


@pytest.mark.parametrize(("fields", "expected"), COUNT_RULE, ids=[f"n{f['n_sampled']}" for f, _ in COUNT_RULE])
def test_count_rule_examples(fields, expected) -> None:
    n_sampled = int(fields["n_sampled"])
    keyframes = list(range(n_sampled)) if fields["keyframes"] == "all" else ast.literal_eval(fields["keyframes"])
    assert reference_count_rule(keyframes, n_sampled, 4, 32) == expected


def _flat_clip(path: Path, frame_count: int, fps: float) -> Path:
    """A clip of uniform frames: no ORB features, so every sampled frame is a key frame
    and the final key frames are exactly the sampled frames (at most 32 of them here)."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (64, 48))
    assert writer.isOpened()
    frame = np.full((48, 64, 3), 128, np.uint8)
    for _ in range(frame_count):
        writer.write(frame)
    writer.release()
    return path


@pytest.mark.parametrize(("fields", "expected"), SAMPLING, ids=[f["fps"] for f, _ in SAMPLING])
def test_sampling_examples_on_real_clips(tmp_path, fields, expected) -> None:
    fps = float(fields["fps"])
    clip = _flat_clip(tmp_path / "flat.avi", int(fields["frame_count"]), fps)
    result = extract_keyframes_from_video(clip, KeyFrameParams())
    assert round(result.video_fps, 2) == fps
    assert result.n_sampled == len(expected)
    assert result.source_frames == expected


def test_split_examples() -> None:
    for example in json.loads(_block("split-examples")):
        parsed = parse_frame_description(example["reply"], first=False)
        assert (parsed.action, parsed.observation) == (example["action"], example["observation"])


def test_scene_examples() -> None:
    from embodied_r_training.data import urban_scene_name

    rows = [line.split(" -> ") for line in _block("scene-examples").splitlines() if line.strip()]
    assert len(rows) >= 6
    for video_id, scene in rows:
        assert urban_scene_name(video_id) == scene, video_id
