"""`embodied-r video2bag` on real mp4 clips (OpenCV's mp4v encoder, long GOP), read back
with rosbags, and a benchmark-style question file evaluated on the converted folder."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest

from embodied_r_ros.cli import main as cli_main
from embodied_r_ros.core.keyframes.rules import FrameRateSampler
from embodied_r_ros.sample_data.bag_io import list_topics, read_image_bag
from embodied_r_ros.testing.keyframe_clips import make_texture, render, video_poses, write_video, write_video_pyav

W, H = 160, 120


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A 12 s 29.97 fps clip with holds, pans and a turn, and a 4 s 30 fps one."""
    root = tmp_path_factory.mktemp("videos")
    texture = make_texture(8 * W, 2 * H, seed=3)
    poses = video_poses(12, 30, W, texture.shape[0])
    long = write_video(root / "EmbodiedCity_7_2_pan.mp4",
                       (render(texture, p, W, H) for p in poses), 29.97, codec="mp4v")
    short = write_video(root / "scene0011_00.mp4",
                        (render(texture, p, W, H) for p in poses[:120]), 30.0, codec="mp4v")
    return {"long": long, "short": short, "root": root}


def _opencv_decode(path: Path) -> list[tuple[float, np.ndarray]]:
    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, bgr = cap.read()
        if not ok:
            break
        out.append((cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0, cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)))
    cap.release()
    return out


def test_raw_bag_holds_every_decoded_frame_at_its_video_time(clips, tmp_path, capsys):
    assert cli_main(["video2bag", str(clips["long"]), "--out", str(tmp_path / "bags")]) == 0
    bag = tmp_path / "bags" / "EmbodiedCity_7_2_pan.mcap"
    assert list_topics(bag) == {"/camera/image_raw": "sensor_msgs/msg/Image"}
    decoded = _opencv_decode(clips["long"])
    got = list(read_image_bag(bag))
    assert len(got) == len(decoded) == 360
    for g, (t, rgb) in zip(got, decoded):
        assert g.stamp_s == pytest.approx(1.0 + t, abs=1e-6)  # --start-time 1 + video time
        assert g.log_time_ns == round(g.stamp_s * 1e9)
        np.testing.assert_array_equal(g.image, rgb)  # the pixels the offline path decodes
    assert got[1].stamp_s - got[0].stamp_s == pytest.approx(1 / 29.97, abs=1e-6)
    assert "360 of 360 frames (160x120, 12.0 s)" in capsys.readouterr().out
    assert not (tmp_path / "bags" / ".video2bag.partial").exists()


def test_h264_with_b_frames_keeps_presentation_order_and_times(clips, tmp_path):
    """The datasets' codec: B-frames are decoded out of order; the bag holds the frames in
    presentation order at their presentation times."""
    texture = make_texture(8 * W, 2 * H, seed=4)
    poses = video_poses(6, 30, W, texture.shape[0])
    video = write_video_pyav(tmp_path / "EmbodiedCity_3_1.mp4",
                             (render(texture, p, W, H) for p in poses), 30, codec="h264")
    assert cli_main(["video2bag", str(video), "--out", str(tmp_path / "bags")]) == 0
    got = list(read_image_bag(tmp_path / "bags" / "EmbodiedCity_3_1.mcap"))
    decoded = _opencv_decode(video)
    assert len(got) == len(decoded) == 180
    assert [g.stamp_s for g in got] == pytest.approx([1.0 + i / 30 for i in range(180)], abs=1e-6)
    for g, (_, rgb) in zip(got, decoded):
        np.testing.assert_array_equal(g.image, rgb)


def test_compressed_sqlite3_and_fps_limit_keep_the_robot_samples(clips, tmp_path):
    out = tmp_path / "bags"
    assert cli_main(["video2bag", str(clips["long"]), str(clips["short"]), "--out", str(out),
                     "--storage", "sqlite3", "--compressed", "--fps-limit", "2",
                     "--topic", "/drone/camera"]) == 0
    bag = out / "EmbodiedCity_7_2_pan.db3"
    assert list_topics(bag) == {"/drone/camera/compressed": "sensor_msgs/msg/CompressedImage"}
    limited = list(read_image_bag(bag))
    decoded = _opencv_decode(clips["long"])
    two_hz = FrameRateSampler(2.0)
    kept = [(t, rgb) for t, rgb in decoded if two_hz.accept(t)]
    assert len(limited) == len(kept) == 24
    for g, (t, rgb) in zip(limited, kept):
        assert g.stamp_s == pytest.approx(1.0 + t, abs=1e-6)
        mse = float(((g.image.astype(float) - rgb.astype(float)) ** 2).mean())
        assert 10 * math.log10(255**2 / max(mse, 1e-9)) > 25.0  # JPEG of a noisy texture
    # The robot's 1 Hz sampler picks the same frames from the 2 fps bag as from every frame.
    one_hz_full, one_hz_limited = FrameRateSampler(1.0), FrameRateSampler(1.0)
    full_picks = [1.0 + t for t, _ in decoded if one_hz_full.accept(1.0 + t)]
    limited_picks = [g.stamp_s for g in limited if one_hz_limited.accept(g.stamp_s)]
    assert limited_picks == pytest.approx(full_picks, abs=1e-6) and len(full_picks) == 12
    assert len(list(read_image_bag(out / "scene0011_00.db3"))) == 8


def test_reruns_skip_finished_bags_and_failures_name_the_video(clips, tmp_path, capsys):
    out = tmp_path / "bags"
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    # A conversion killed earlier left a partial bag: it is ignored and redone.
    (out / ".video2bag.partial" / "scene0011_00.mcap").mkdir(parents=True)
    code = cli_main(["video2bag", str(clips["short"]), str(broken), "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    assert str(broken) in captured.err and "1 of 2 videos failed" in captured.err
    assert len(list(read_image_bag(out / "scene0011_00.mcap"))) == 120
    assert not (out / "broken.mcap").exists()
    assert cli_main(["video2bag", str(clips["short"]), "--out", str(out)]) == 0
    assert "exists, skipped" in capsys.readouterr().out
    assert cli_main(["video2bag", str(clips["short"]), "--out", str(out), "--force",
                     "--fps-limit", "1"]) == 0
    assert len(list(read_image_bag(out / "scene0011_00.mcap"))) == 4
    # Two videos that would share a bag name are refused before anything is written.
    twin = clips["root"] / "sub"
    twin.mkdir(exist_ok=True)
    (twin / "scene0011_00.mp4").write_bytes(clips["short"].read_bytes())
    assert cli_main(["video2bag", str(clips["short"]), str(twin / "scene0011_00.mp4"),
                     "--out", str(tmp_path / "twins")]) == 2
    assert "would both become" in capsys.readouterr().err


def test_benchmark_questions_run_on_the_converted_folder(clips, tmp_path, tiny_models, capsys):
    """UrbanVideo-Bench records name their clip by video_id, prepared VSI-Bench records by
    video_path: both find the bags video2bag wrote."""
    bags = tmp_path / "bags"
    assert cli_main(["video2bag", str(clips["long"]), str(clips["short"]), "--out", str(bags),
                     "--compressed", "--fps-limit", "2"]) == 0
    records = [
        {"Question_id": "u1", "video_id": "EmbodiedCity_7_2_pan.mp4",
         "question_category": "landmark_position",
         "question": "Question: Where is the tower?\nChoices:\nA. left\nB. right", "answer": "B"},
        {"Question_id": "v1", "video_path": "scannet/scene0011_00.mp4",
         "question_category": "object_rel_direction",
         "question": "Question: Is the chair left of the bed?\nChoices:\nA. yes\nB. no",
         "answer": "A. yes"},
    ]
    qfile = tmp_path / "test.jsonl"
    qfile.write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "tiny_models").symlink_to(Path(tiny_models.vlm).parent, target_is_directory=True)
    out = tmp_path / "eval.json"
    capsys.readouterr()
    assert cli_main(["replay-eval", "--bag", str(bags), "--questions", str(qfile), "--mode", "fast",
                     "--tiny-models", "--artifacts", str(tmp_path), "--set",
                     "perception.max_new_tokens=4", "--out", str(out)]) == 0
    results = {r["question_id"]: r for r in map(json.loads, out.with_suffix(".results.jsonl")
                                                .read_text().splitlines())}
    assert results["u1"]["bag"] == "EmbodiedCity_7_2_pan.mcap"
    assert results["v1"]["bag"] == "scene0011_00.mcap"
    assert results["v1"]["ground_truth"] == "A"  # "A. yes" is read as its letter
    episodes = [json.loads(line) for line in out.with_suffix(".episodes.jsonl").read_text().splitlines()]
    assert all(e["read"]["stamp_fallbacks"] == 0 and not e["read"]["warnings"] for e in episodes)
    assert {e["bag"]: e["frames_published"] for e in episodes} == {
        "EmbodiedCity_7_2_pan.mcap": 24, "scene0011_00.mcap": 8}
    # Answered from the bags' frames: the first key frame and the current view at least.
    assert results["u1"]["keyframes_used"] >= 4 and results["v1"]["keyframes_used"] >= 2
