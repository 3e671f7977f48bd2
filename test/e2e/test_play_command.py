"""`embodied-r play` (issue 25, item 2): a bag or a video onto the camera topic over real
DDS, as a camera driver would, where `ros2 bag play` is not installed. And `embodied-r
keyframes --json / --sheet` (item 8): per-frame overlap and reason, a contact sheet."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import rclpy

from helpers.env import fresh_ros_domain


def command(*args: str) -> list[str]:
    script = shutil.which("embodied-r")
    return [script, *args] if script else [sys.executable, "-m", "embodied_r_ros.cli", *args]


class Camera:
    """A subscriber on the camera topic, in this process, recording header stamps."""

    def __init__(self, topic: str = "/camera/image_raw", reliable: bool = True) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("camera_probe", context=self.context)
        qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE if reliable
                         else ReliabilityPolicy.BEST_EFFORT)
        self.stamps: list[float] = []
        self.sizes: set[tuple[int, int]] = set()
        self.node.create_subscription(Image, topic, self._on_image, qos)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _on_image(self, msg) -> None:  # type: ignore[no-untyped-def]
        self.stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
        self.sizes.add((msg.width, msg.height))

    def _spin(self) -> None:
        while not self._stop:
            self.executor.spin_once(timeout_sec=0.1)

    def close(self) -> None:
        self._stop = True
        self.thread.join(timeout=5)
        self.node.destroy_node()
        rclpy.shutdown(context=self.context)


def _video(path: Path, frames: int = 40, fps: int = 10) -> Path:
    import cv2
    import numpy as np

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (160, 120))
    for i in range(frames):
        image = np.full((120, 160, 3), 40, np.uint8)
        cv2.rectangle(image, (4 * i % 140, 30), (4 * i % 140 + 20, 60), (0, 200, 255), -1)
        writer.write(image)
    writer.release()
    return path


@pytest.mark.slow
def test_play_a_bag_onto_the_camera_topic(sample_dir: Path) -> None:
    from embodied_r_ros.sample_data.bag_io import iter_bag_frames

    fresh_ros_domain()
    camera = Camera()
    try:
        done = subprocess.run(command("play", str(sample_dir / "sample.mcap"), "--rate", "0",
                                      "--qos", "reliable", "--wait", "30"),
                              capture_output=True, text=True, timeout=300, env=os.environ.copy())
        assert done.returncode == 0, done.stderr[-3000:]
        deadline = time.monotonic() + 20
        while len(camera.stamps) < 321 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        camera.close()
    recorded = [round(f.stamp_s, 6) for f in iter_bag_frames(sample_dir / "sample.mcap")]
    # every frame, in order, its stamp: the reliable publisher waits for the subscriber's
    # acknowledgements before it exits (it once exited with 236 frames undelivered)
    assert [round(s, 6) for s in camera.stamps] == recorded
    assert "published 321 frames" in done.stdout
    assert "playing sample.mcap on /camera/image_raw" in done.stderr  # the progress line
    assert "321/321 frames (100%)" in done.stderr
    assert "embodied-r ask" in done.stdout  # what to do next


@pytest.mark.slow
def test_play_a_video_looped_on_another_topic(tmp_path: Path) -> None:
    fresh_ros_domain()
    video = _video(tmp_path / "walk.mp4")
    camera = Camera("/front/image_raw")
    proc = subprocess.Popen(command("play", str(video), "--rate", "4", "--loop", "--topic",
                                    "/front/image_raw", "--qos", "reliable", "--wait", "30"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())
    try:
        deadline = time.monotonic() + 120
        while len(camera.stamps) < 100 and time.monotonic() < deadline:  # 2.5 laps of 40
            time.sleep(0.2)
    finally:
        proc.send_signal(2)  # Ctrl-C ends the loop
        out, err = proc.communicate(timeout=60)
        camera.close()
    assert len(camera.stamps) >= 100, err[-2000:]
    assert camera.sizes == {(160, 120)}
    assert all(b > a for a, b in zip(camera.stamps, camera.stamps[1:])), "time runs forward"
    assert abs(camera.stamps[0] - 1.0) < 1e-6  # --start-time default
    assert "loop 2" in err or "loop 3" in err
    assert "published" in out, err[-2000:]  # Ctrl-C ends the loop with the summary line


def test_play_help_and_bad_input(tmp_path: Path) -> None:
    helped = subprocess.run(command("play", "--help"), capture_output=True, text=True,
                            timeout=120)
    assert helped.returncode == 0 and "--loop" in helped.stdout and "--qos" in helped.stdout
    missing = subprocess.run(command("play", str(tmp_path / "nope.mcap")), capture_output=True,
                             text=True, timeout=120)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    listed = subprocess.run(command("--help"), capture_output=True, text=True, timeout=120)
    assert "play" in listed.stdout


def test_keyframes_json_and_contact_sheet(tmp_path: Path) -> None:
    import cv2

    video = _video(tmp_path / "walk.mp4", frames=120)
    sheet = tmp_path / "sheet.png"
    done = subprocess.run(command("keyframes", str(video), "--json", "--sheet", str(sheet)),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert len(out["frames"]) == out["n_sampled"]
    for row in out["frames"]:
        assert set(row) >= {"position", "source_frame", "time_s", "overlap", "reason",
                            "selected", "key_frame"}
        assert row["overlap"] is None or 0.0 <= row["overlap"] <= 1.0
        assert row["reason"]
    assert [k["source_frame"] for k in out["keyframes"]] == out["source_frames"]
    assert out["keyframes"][0]["reason"] == "first" and out["keyframes"][0]["time_s"] == 0.0
    image = cv2.imread(str(sheet))
    assert image is not None and image.shape[1] == 4 * 320  # four tiles a row
    text = subprocess.run(command("keyframes", str(video)), capture_output=True, text=True,
                          timeout=300)
    assert "index  frame   time s  overlap  why" in text.stdout
