"""Synthetic camera clips with a known motion, for key-frame tests and benchmarks.

A clip is a sequence of crops of one large random texture ("the world"): a pan slides the
crop sideways, a turn jumps it far, moving forward shrinks the crop and scales it back up
(zoom). The texture wraps around horizontally so arbitrarily long pans stay textured.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

import cv2
import numpy as np


def make_texture(width: int, height: int, seed: int = 0) -> np.ndarray:
    """Random RGB texture rich in corners: smoothed noise plus random filled shapes."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (max(2, height // 6), max(2, width // 6), 3), dtype=np.uint8)
    tex = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    n_shapes = max(20, width * height // 4000)
    for _ in range(n_shapes):
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        x, y = int(rng.integers(0, width)), int(rng.integers(0, height))
        size = int(rng.integers(4, max(6, min(width, height) // 12)))
        if rng.random() < 0.5:
            cv2.rectangle(tex, (x, y), (x + size, y + size // 2 + 2), colour, -1)
        else:
            cv2.circle(tex, (x, y), size // 2 + 1, colour, -1)
    return tex


@dataclass(frozen=True)
class Pose:
    """Crop centre (x, y) in texture pixels and zoom (1 = full-size crop, 2 = half-size)."""

    x: float
    y: float
    zoom: float = 1.0


def render(texture: np.ndarray, pose: Pose, width: int, height: int) -> np.ndarray:
    """The RGB view of size width x height at `pose` (horizontal wrap-around)."""
    tex_h, tex_w = texture.shape[:2]
    crop_w = max(8, int(round(width / pose.zoom)))
    crop_h = max(8, int(round(height / pose.zoom)))
    x0 = int(round(pose.x - crop_w / 2))
    y0 = int(np.clip(round(pose.y - crop_h / 2), 0, tex_h - crop_h))
    x0 %= tex_w
    if x0 + crop_w <= tex_w:
        crop = texture[y0 : y0 + crop_h, x0 : x0 + crop_w]
    else:
        cols = (x0 + np.arange(crop_w)) % tex_w
        crop = texture[y0 : y0 + crop_h][:, cols]
    if crop_w != width or crop_h != height:
        crop = cv2.resize(crop, (width, height), interpolation=cv2.INTER_LINEAR)
    return np.ascontiguousarray(crop)


def pan_poses(n: int, step_px: float, start: Pose) -> list[Pose]:
    """n poses sliding right by step_px each."""
    return [Pose(start.x + i * step_px, start.y, start.zoom) for i in range(n)]


def clip_frames(texture: np.ndarray, poses: Iterable[Pose], width: int, height: int) -> Iterator[np.ndarray]:
    for pose in poses:
        yield render(texture, pose, width, height)


def scenario_poses(name: str, n: int, width: int, texture_height: int) -> list[Pose]:
    """Per-sampled-frame poses of the standard scenarios.

    static: no motion. slow_pan: 3% of the width per frame. fast_turn: 70% of the width per
    frame. forward: zoom in 6% per frame (restarting every 12 frames) while drifting.
    mixed: hold, slow pan, fast turn, forward, pan back.
    """
    start = Pose(width, texture_height / 2)
    if name == "static":
        return [start] * n
    if name == "slow_pan":
        return pan_poses(n, 0.03 * width, start)
    if name == "fast_turn":
        return pan_poses(n, 0.7 * width, start)
    if name == "forward":
        return [Pose(start.x + i * 2.0, start.y, 1.0 + 0.06 * (i % 12)) for i in range(n)]
    if name == "mixed":
        poses: list[Pose] = []
        x = start.x
        for i in range(n):
            phase = (i * 5) // max(1, n)
            if phase == 1:
                x += 0.04 * width
            elif phase == 2:
                x += 0.55 * width
            elif phase == 4:
                x -= 0.08 * width
            zoom = 1.0 + 0.05 * (i % 10) if phase == 3 else 1.0
            poses.append(Pose(x, start.y, zoom))
        return poses
    raise ValueError(f"unknown scenario {name!r}")


def textureless_frames(n: int, width: int, height: int, texture: np.ndarray) -> list[np.ndarray]:
    """Alternating flat grey frames (no ORB features) and textured views."""
    out = []
    for i in range(n):
        if i % 3 == 1:
            out.append(np.full((height, width, 3), 90 + 10 * (i % 5), np.uint8))
        else:
            out.append(render(texture, Pose(width + i * 0.05 * width, texture.shape[0] / 2), width, height))
    return out


def write_video(
    path: str | Path, frames_rgb: Iterable[np.ndarray], fps: float, codec: str = "MJPG"
) -> Path:
    """Write RGB frames with cv2.VideoWriter (codec MJPG -> .avi, mp4v -> .mp4 usual)."""
    path = Path(path)
    writer = None
    try:
        for frame in frames_rgb:
            if writer is None:
                h, w = frame.shape[:2]
                writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*codec), fps, (w, h))
                if not writer.isOpened():
                    raise RuntimeError(f"cannot write {codec} video at {path}")
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
    finally:
        if writer is not None:
            writer.release()
    return path


def video_poses(seconds: int, fps: int, width: int, texture_height: int) -> list[Pose]:
    """Per-source-frame poses of a clip mixing holds, slow pans, a turn and forward motion."""
    per_second = scenario_poses("mixed", seconds, width, texture_height)
    poses: list[Pose] = []
    for s in range(seconds):
        a = per_second[s]
        b = per_second[min(s + 1, seconds - 1)]
        for k in range(fps):
            t = k / fps
            poses.append(Pose(a.x + (b.x - a.x) * t, a.y, a.zoom + (b.zoom - a.zoom) * t))
    return poses


# Encoders of PyAV (FFmpeg) used for clips: name -> (encoder, options, container suffix).
PYAV_CODECS = {
    "h264": ("libx264", {"bf": "3", "preset": "veryfast"}, ".mp4"),  # B-frames, b-pyramid
    "hevc": ("libx265", {"x265-params": "log-level=error"}, ".mp4"),
    "mpeg4": ("mpeg4", {"bf": "2"}, ".mp4"),  # MPEG-4 Part 2 with B-VOPs
    # An IDR every 20 frames: many closed segments, decoded side by side.
    "h264-gop20": ("libx264", {"bf": "3", "preset": "veryfast",
                               "x264-params": "keyint=20:min-keyint=20"}, ".mp4"),
    # Open GOPs: recovery-point I-frames that later B-frames look past; one closed segment.
    "h264-open-gop": ("libx264", {"bf": "3", "preset": "veryfast",
                                  "x264-params": "keyint=20:min-keyint=20:open-gop=1"}, ".mp4"),
    "hevc-gop20": ("libx265", {"x265-params": "log-level=error:keyint=20:min-keyint=20:open-gop=0"},
                   ".mp4"),
}


def write_video_pyav(
    path: str | Path, frames_rgb: Iterable[np.ndarray], fps: int, codec: str = "h264",
    *, display_matrix: list[int] | None = None, pix_fmt: str = "yuv420p",
    colorspace: int | None = None,
) -> Path:
    """Write RGB frames with PyAV's FFmpeg encoders (`PYAV_CODECS`).

    `display_matrix` (nine 16.16 fixed-point ints) stores rotation metadata, which OpenCV
    applies when reading and PyAV does not. `pix_fmt` e.g. "yuv420p10le" for 10-bit;
    `colorspace` an AVColorSpace number to tag (1 = BT.709)."""
    import av  # only the clips that need PyAV import it

    encoder, options, _ = PYAV_CODECS[codec]
    path = Path(path)
    container = av.open(str(path), "w")
    stream: av.VideoStream | None = None
    try:
        for frame in frames_rgb:
            if stream is None:
                h, w = frame.shape[:2]
                added = container.add_stream(encoder, rate=fps)
                if not isinstance(added, av.VideoStream):  # every PYAV_CODECS encoder is a video one
                    raise TypeError(f"{encoder} did not make a video stream")
                stream = added
                stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
                stream.options = dict(options)
                if display_matrix is not None:
                    stream.set_display_matrix(display_matrix)
                if colorspace is not None:
                    stream.codec_context.colorspace = colorspace
            picture = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format=pix_fmt)
            if colorspace is not None:
                picture.colorspace = colorspace
            for packet in stream.encode(picture):
                container.mux(packet)
        if stream is not None:
            for packet in stream.encode():
                container.mux(packet)
    finally:
        container.close()
    return path


def flat_frame(width: int, height: int, level: int) -> np.ndarray:
    """A uniform grey RGB frame: ORB finds no features in it."""
    return np.full((height, width, 3), level, np.uint8)
