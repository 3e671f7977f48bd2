"""Tests for the synthetic clip, its questions and the make-sample command."""

from __future__ import annotations

import json
import math
import re

import cv2
import numpy as np
import pytest

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.sample_data.bag_io import list_topics, read_image_bag, read_odometry
from embodied_r_ros.sample_data.questions import format_question, make_questions, progress_choices
from embodied_r_ros.sample_data.scene import (
    ACTIONS,
    CameraPose,
    SceneObject,
    default_objects,
    render_clip,
)


@pytest.fixture(scope="module")
def clip():
    """The default scene and path at 5 fps (161 frames)."""
    return render_clip(fps=5.0)


def _grey(img: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)


# --- rendering ------------------------------------------------------------------------


def test_clip_shape_timing_and_poses(clip):
    assert clip.stamps_s[0] == 0.0
    assert clip.stamps_s[-1] == pytest.approx(clip.segments[-1].end_s)
    assert 20.0 <= clip.duration_s <= 40.0
    assert len(clip.frames) == len(clip.stamps_s) == len(clip.poses) == clip.visible_pixels.shape[0]
    assert np.allclose(np.diff(clip.stamps_s), 0.2)
    for f in clip.frames:
        assert f.shape == (240, 320, 3) and f.dtype == np.uint8
    for seg in clip.segments:
        assert seg.action in ACTIONS
        assert seg.end_s > seg.start_s
    # Segments tile the clip without gaps.
    for a, b in zip(clip.segments, clip.segments[1:]):
        assert a.end_s == pytest.approx(b.start_s)
    # The scripted path: 3 m forward from (1.5, 1.5) facing east, then 90 degrees left.
    first, second = clip.segments[0], clip.segments[1]
    assert (first.action, first.end_pose.x, first.end_pose.y) == (
        "move forward", pytest.approx(4.5), pytest.approx(1.5))
    assert second.action == "rotate left"
    assert second.end_pose.yaw == pytest.approx(math.pi / 2)
    # pose_at interpolates: half-way along the first segment.
    assert clip.pose_at(first.end_s / 2).x == pytest.approx(3.0)


def test_rendering_is_deterministic_and_seeded():
    path = [("move forward", 0.5), ("rotate right", 15.0)]
    a = render_clip(path, fps=4.0, width=80, height=60, seed=3)
    b = render_clip(path, fps=4.0, width=80, height=60, seed=3)
    c = render_clip(path, fps=4.0, width=80, height=60, seed=4)
    assert len(a.frames) == len(b.frames) == len(c.frames)
    for fa, fb in zip(a.frames, b.frames):
        np.testing.assert_array_equal(fa, fb)
    # The seed changes textures, not the geometry.
    assert any(not np.array_equal(fa, fc) for fa, fc in zip(a.frames, c.frames))
    assert a.poses == c.poses
    np.testing.assert_array_equal(a.visible_pixels > 0, c.visible_pixels > 0)


def test_frames_have_texture_for_orb(clip):
    orb = cv2.ORB_create()
    counts = [len(orb.detect(_grey(f), None)) for f in clip.frames[::2]]
    assert min(counts) > 100, min(counts)


def test_frames_show_room_surfaces(clip):
    f = clip.frames[0]
    # Ceiling is light at the top, the floor darker and brownish at the bottom.
    top, bottom = f[:20].reshape(-1, 3).mean(0), f[-20:].reshape(-1, 3).mean(0)
    assert top.mean() > 170
    assert bottom.mean() < top.mean() - 40
    assert bottom[0] > bottom[2]  # red > blue: brown tiles


def _shift(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    (dx, dy), _ = cv2.phaseCorrelate(_grey(a).astype(np.float32), _grey(b).astype(np.float32))
    return dx, dy


def test_rotation_shifts_image_in_expected_direction(clip):
    f = (clip.width / 2) / math.tan(math.radians(clip.hfov_deg) / 2)
    checked = {"rotate left": 0, "rotate right": 0}
    for seg in clip.segments:
        if not seg.action.startswith("rotate"):
            continue
        idx = [i for i, t in enumerate(clip.stamps_s) if seg.start_s <= t and t + 0.2 <= seg.end_s + 1e-9]
        for i in idx:
            dx, dy = _shift(clip.frames[i], clip.frames[i + 1])
            dyaw = math.degrees(clip.poses[i + 1].yaw - clip.poses[i].yaw)
            dyaw = (dyaw + 180) % 360 - 180
            expected = f * math.tan(math.radians(abs(dyaw)))
            # Turning left (CCW) moves the scene to the right in the image, and vice versa.
            if seg.action == "rotate left":
                assert dx > 0.6 * expected, (seg.action, i, dx)
            else:
                assert dx < -0.6 * expected, (seg.action, i, dx)
            assert abs(dx) < 1.4 * expected and abs(dy) < 2.0
            checked[seg.action] += 1
    assert checked["rotate left"] >= 5 and checked["rotate right"] >= 3


def test_moving_forward_makes_object_grow(clip):
    first = clip.segments[0]
    idx = [i for i, t in enumerate(clip.stamps_s) if t <= first.end_s]
    red = clip.visible_pixels[idx, [o.name for o in clip.objects].index("red box")]
    assert red[0] > 0
    assert red[-1] > 3 * red[0]
    assert np.all(np.diff(red) >= 0)


def test_first_seen_matches_drawn_pixels_and_geometry(clip):
    half_fov = clip.hfov_deg / 2
    times = {}
    for k, obj in enumerate(clip.objects):
        t = clip.first_seen(obj.name)
        assert t is not None, obj.name
        times[obj.name] = t
        i = clip.stamps_s.index(t)
        assert clip.visible_pixels[i, k] >= clip.min_visible_px
        assert np.all(clip.visible_pixels[:i, k] < clip.min_visible_px)
        # When first seen, the object is at the edge of (or inside) the field of view.
        assert abs(clip.bearing_deg(obj.name, t)) < half_fov + 15
        if i > 0:
            # One frame earlier it was outside or only just entering the view.
            assert abs(clip.bearing_deg(obj.name, clip.stamps_s[i - 1])) > half_fov - 15
    # The default scene is staged so objects appear one after another.
    order = sorted(times, key=times.get)
    assert order == ["red box", "yellow ball", "blue pillar", "green door", "orange cabinet"]
    assert all(b - a >= 1.0 for a, b in zip(sorted(times.values()), sorted(times.values())[1:]))


def test_occluded_object_is_not_seen():
    # A tall wall-like box straight between the camera and the yellow ball.
    objects = [
        SceneObject("yellow ball", "yellow", (235, 205, 40), "sphere", (7.0, 4.0, 0.3), (0.6, 0.6, 0.6)),
        SceneObject("grey screen", "grey", (120, 120, 120), "box", (4.0, 4.0, 1.25), (0.3, 2.0, 2.5)),
    ]
    start = CameraPose(1.5, 4.0, 0.0)
    hidden = render_clip([("move forward", 0.5)], fps=2, width=96, height=72, objects=objects, start_pose=start)
    assert abs(hidden.bearing_deg("yellow ball", 0.0)) < 1.0  # straight ahead ...
    assert hidden.first_seen("yellow ball") is None  # ... but hidden
    assert hidden.first_seen("grey screen") == 0.0
    visible = render_clip(
        [("move forward", 0.5)], fps=2, width=96, height=72, objects=objects[:1], start_pose=start
    )
    assert visible.first_seen("yellow ball") == 0.0


def test_side_of(clip):
    # Start: (1.5, 1.5) facing east; the red box at (8, 2) is almost straight ahead.
    assert clip.side_of("red box", 0.0) == "ahead"
    # After the first left turn (facing north from (4.5, 1.5)): the box is to the right.
    t = clip.segments[1].end_s
    assert clip.side_of("red box", t) == "right"
    assert clip.side_of("green door", t) == "left"  # door on the west wall
    # End: facing south from (3.56, 4.06): red box to the left, blue pillar behind.
    end = clip.stamps_s[-1]
    assert clip.side_of("red box", end) == "left"
    assert clip.side_of("blue pillar", end) == "behind"
    assert clip.side_of("green door", end) == "right"
    with pytest.raises(InvalidRequestError):
        clip.side_of("purple sofa", end)


def test_path_validation():
    with pytest.raises(InvalidRequestError, match="leaves the room"):
        render_clip([("move forward", 20.0)], fps=1, width=32, height=24)
    with pytest.raises(InvalidRequestError, match="unknown path action"):
        render_clip([("jump", 1.0)], fps=1, width=32, height=24)
    with pytest.raises(InvalidRequestError, match="positive"):
        render_clip([("move forward", -1.0)], fps=1, width=32, height=24)
    with pytest.raises(InvalidRequestError, match="through the red box"):
        render_clip([("move forward", 1.0)], fps=1, width=32, height=24, start_pose=CameraPose(6.9, 2.0, 0.0))
    with pytest.raises(InvalidRequestError):
        render_clip(fps=0)
    # Dict steps work too.
    c = render_clip([{"action": "rotate left", "amount": 30}], fps=1, width=32, height=24)
    assert c.segments[0].action == "rotate left"


def test_scene_dict_is_json(clip):
    d = json.loads(json.dumps(clip.to_scene_dict()))
    assert [o["name"] for o in d["objects"]] == [o.name for o in default_objects()]
    assert len(d["poses"]) == len(clip.frames)
    assert d["segments"][0]["action"] == "move forward"
    assert d["objects"][0]["first_seen_s"] == 0.0


# --- questions ------------------------------------------------------------------------

REQUIRED = {"Question_id", "video_id", "question_category", "question", "answer", "scene_name",
            "question_text", "choices", "answer_text"}
CATEGORIES = {"appearance_order", "object_rel_direction", "object_rel_distance", "route_planning",
              "action_generation", "progress_evaluation"}


def _parse_choices(question: str) -> list[str]:
    head, _, tail = question.partition("\nChoices:\n")
    assert head.startswith("Question: ")
    lines = tail.split("\n")
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^([A-H])\. (.+)$", line)
        assert m and m.group(1) == "ABCDEFGH"[i], line
        out.append(m.group(2))
    return out


def _lrb(bearing: float) -> str:
    if abs(bearing) >= 135:
        return "back"
    return "left" if bearing > 0 else "right"


def _check_question(clip, q) -> None:
    """Recompute each question's answer from the clip geometry."""
    cat, text, truth = q["question_category"], q["question_text"], q["answer_text"]
    names = [o.name for o in clip.objects]
    mentioned = sorted((text.find(n), n) for n in names if n in text)
    if cat == "appearance_order":
        listed = [n for _, n in mentioned]
        assert truth == ", ".join(sorted(listed, key=clip.first_seen))
    elif cat == "object_rel_direction":
        end = clip.stamps_s[-1]
        if text.startswith("Where I am standing now"):
            (_, name), = mentioned
            assert truth == _lrb(clip.bearing_deg(name, end))
        elif text.startswith("At the moment I first saw the "):
            anchor = text[len("At the moment I first saw the "):].split(",")[0]
            other = text.split(", was the ")[1].split(" to my")[0]
            assert truth == _lrb(clip.bearing_deg(other, clip.first_seen(anchor)))
        else:
            m = re.match(r"If I am standing by the (.+?) and facing the (.+?), is the (.+?) to my", text)
            a, b, c = (clip.object(n).position for n in m.groups())
            heading = math.atan2(b[1] - a[1], b[0] - a[0])
            bearing = math.degrees(math.atan2(c[1] - a[1], c[0] - a[0]) - heading)
            assert truth == _lrb((bearing + 180) % 360 - 180)
    elif cat == "object_rel_distance":
        target = text.split("is the closest to the ")[1].rstrip("?")
        options = q["choices"]
        assert truth == min(options, key=lambda n: clip.distance_between(target, n))
    elif cat == "action_generation":
        name = text.split("After I first saw the ")[1].split(",")[0]
        t = clip.first_seen(name)
        turns = [s.action for s in clip.segments if s.action.startswith("rotate") and s.start_s >= t]
        assert truth == (turns[0] if turns else "I did not turn again")
    elif cat == "route_planning":
        name = text.split("how do I get to the ")[1].rstrip("?")
        bearing = clip.bearing_deg(name, clip.stamps_s[-1])
        assert truth.startswith("rotate left" if bearing > 0 else "rotate right")
        assert f"{clip.distance_from_camera(name, clip.stamps_s[-1]):.1f} m" in truth
    elif cat == "progress_evaluation":
        n = int(re.search(r"first (\d+) movements", text).group(1))
        assert truth == ", ".join(s.action for s in clip.segments[:n])
    else:  # pragma: no cover
        raise AssertionError(cat)


def test_questions_format_and_ground_truth(clip):
    qs = make_questions(clip, video_id="sample.mcap")
    assert 5 <= len(qs) <= 8
    assert len({q["Question_id"] for q in qs}) == len(qs)
    assert {q["question_category"] for q in qs} <= CATEGORIES
    assert len({q["question_category"] for q in qs}) >= 5
    for q in qs:
        assert REQUIRED <= set(q)
        assert q["video_id"] == "sample.mcap" and q["scene_name"] == clip.scene_name
        choices = _parse_choices(q["question"])
        assert choices == q["choices"]
        assert len(set(choices)) == len(choices) >= 3
        assert q["question"] == format_question(q["question_text"], q["choices"])
        assert choices["ABCDEFGH".index(q["answer"])] == q["answer_text"]
        _check_question(clip, q)
    json.dumps(qs)


def test_answer_letters_are_balanced(clip):
    letters = [q["answer"] for q in make_questions(clip)]
    counts = {letter: letters.count(letter) for letter in set(letters)}
    assert len(counts) >= 3
    assert max(counts.values()) <= len(letters) // 2


def test_questions_follow_a_different_path():
    """Answers come from geometry: a mirrored path gives different, still-correct answers."""
    path = [("move forward", 3.0), ("rotate right", 90.0), ("move forward", 2.0), ("rotate left", 45.0),
            ("move forward", 1.0), ("rotate right", 135.0), ("move forward", 1.5)]
    other = render_clip(path, fps=2.0, width=160, height=120, start_pose=CameraPose(1.5, 6.5, 0.0))
    qs = make_questions(other)
    assert len(qs) >= 5
    for q in qs:
        _check_question(other, q)
    progress = next(q for q in qs if q["question_category"] == "progress_evaluation")
    assert progress["answer_text"] == "move forward, rotate right, move forward, rotate left"


def test_progress_distractors_turn_reverse_and_flip_the_movements():
    correct, distractors = progress_choices(["move forward", "rotate right", "move forward", "rotate left"])
    assert correct == "move forward, rotate right, move forward, rotate left"
    assert distractors == ["move forward, rotate left, move forward, rotate right",
                           "rotate left, move forward, rotate right, move forward",
                           "move backward, rotate right, move backward, rotate left"]
    # a palindrome of turns only: mirrored and reversed coincide, flipping moves changes nothing
    assert progress_choices(["rotate left", "rotate left", "rotate left"]) is None


def test_questions_are_deterministic(clip):
    assert make_questions(clip, seed=1) == make_questions(clip, seed=1)


def test_format_question():
    assert format_question("Left or right?", ["left", "right"]) == (
        "Question: Left or right?\nChoices:\nA. left\nB. right"
    )
    with pytest.raises(InvalidRequestError):
        format_question("x", ["only one"])


# --- make-sample command ---------------------------------------------------------------


def test_make_sample_cli(tmp_path, capsys):
    from embodied_r_ros.cli import main as dispatcher

    out = tmp_path / "sample"
    assert dispatcher(["make-sample", str(out), "--fps", "2"]) == 0
    printed = capsys.readouterr().out
    assert "questions.json" in printed and "sample.mcap" in printed
    bag = out / "sample.mcap"
    assert list_topics(bag) == {"/camera/image_raw": "sensor_msgs/msg/Image", "/odom": "nav_msgs/msg/Odometry"}
    scene = json.loads((out / "scene.json").read_text())
    images = list(read_image_bag(bag))
    assert len(images) == len(scene["poses"]) == 65
    assert [i.stamp_s for i in images] == pytest.approx([p["stamp_s"] for p in scene["poses"]])
    assert len(read_odometry(bag)) == len(images)
    qs = json.loads((out / "questions.json").read_text())
    assert 5 <= len(qs) <= 8 and all(q["video_id"] == "sample.mcap" for q in qs)
    preview = cv2.imread(str(out / "preview.png"))
    assert preview is not None and preview.shape[0] >= 240 and preview.shape[1] >= 640

    # Same seed, same output; refusing to overwrite without --force.
    from embodied_r_ros.sample_data.cli import main

    assert main([str(out), "--fps", "2"]) == 1
    first_q = (out / "questions.json").read_text()
    first_scene = (out / "scene.json").read_text()
    assert main([str(out), "--fps", "2", "--force"]) == 0
    assert (out / "questions.json").read_text() == first_q
    assert (out / "scene.json").read_text() == first_scene


def test_make_sample_sqlite_compressed(tmp_path):
    from embodied_r_ros.sample_data.cli import main

    out = tmp_path / "s"
    assert main([str(out), "--storage", "sqlite3", "--fps", "1", "--compressed", "--no-odom"]) == 0
    bag = out / "sample.db3"
    assert list_topics(bag) == {"/camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage"}
    assert any(p.suffix == ".db3" for p in bag.iterdir())
    assert len(list(read_image_bag(bag))) == 33


def test_answer_letter_of_each_question_kind_is_uniform_across_clips():
    """The letter of a question at a given place in a clip's sequence (what its kind
    decides) must not be predictable: with a fixed tie-break every 4-option question after
    three 3-option ones landed on D, which a text model learns from the question alone."""
    from types import SimpleNamespace

    from embodied_r_ros.sample_data.questions import _Builder

    sizes = [3, 3, 4, 3, 4, 4, 3, 4]  # options per question, in the order a clip asks them
    per_place: list[dict[str, int]] = [{} for _ in sizes]
    clips = 600
    for seed in range(clips):
        b = _Builder(SimpleNamespace(scene_name="room", stamps_s=[0.0]), "v", seed)  # type: ignore[arg-type]
        for k, n in enumerate(sizes):
            b.add("kind", "which?", "right", [f"wrong {i}" for i in range(n - 1)], {})
            letter = b.records[-1]["answer"]
            per_place[k][letter] = per_place[k].get(letter, 0) + 1
            assert b.records[-1]["choices"]["ABCD".index(letter)] == "right"
        letters = [r["answer"] for r in b.records]
        assert max(letters.count(x) for x in set(letters)) <= 3  # balanced within the clip
    for k, n in enumerate(sizes):
        shares = [per_place[k].get(x, 0) / clips for x in "ABCD"[:n]]
        assert min(shares) > 0.6 / n and max(shares) < 1.4 / n, (k, per_place[k])
