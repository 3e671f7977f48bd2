"""How key frames reach the VLM: OpenCV JPEG bytes equal to the reference's, full resolution
by default, and the same decoded pixels for in-process and HTTP backends (docs/method.md §3).

The frames are decoded from a real video file with OpenCV, as the reference reads them.
"""

from __future__ import annotations

import base64
import io

import cv2
import numpy as np
import pytest
from PIL import Image

from embodied_r_ros.core import parameters as cfg
from embodied_r_ros.core.backends.images import (
    ImageEncoding,
    encode_image,
    from_data_url,
    model_images,
    to_data_url,
)
from embodied_r_ros.core.backends.model_spec import ModelSpec
from embodied_r_ros.core.errors import ConfigError, InvalidRequestError
from embodied_r_ros.core.settings import build_settings

from helpers.env import REPO_ROOT

REPO = REPO_ROOT


@pytest.fixture(scope="module")
def bgr_frames(tmp_path_factory) -> list[np.ndarray]:
    """Frames of a real 1280x720 MJPEG clip, decoded by cv2.VideoCapture (BGR)."""
    from embodied_r_ros.testing.keyframe_clips import make_texture

    path = tmp_path_factory.mktemp("clip") / "clip.avi"
    texture = make_texture(1600, 900, seed=4)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, (1280, 720))
    assert writer.isOpened()
    for shift in (0, 40, 80):
        writer.write(np.ascontiguousarray(texture[100:820, shift:shift + 1280, ::-1]))
    writer.release()
    capture = cv2.VideoCapture(str(path))
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    assert len(frames) == 3 and frames[0].shape == (720, 1280, 3)
    return frames


def _rgb(bgr: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def _reference_bytes(bgr: np.ndarray) -> bytes:
    """What the reference sends for a frame: cv2.imencode(".jpg", frame), default quality."""
    ok, buffer = cv2.imencode(".jpg", bgr)
    assert ok
    return buffer.tobytes()


def test_default_jpeg_bytes_equal_the_reference_encoding(bgr_frames) -> None:
    for bgr in bgr_frames:
        assert encode_image(_rgb(bgr)) == _reference_bytes(bgr)
        url = to_data_url(_rgb(bgr))
        assert url == "data:image/jpeg;base64," + base64.b64encode(_reference_bytes(bgr)).decode()


def test_quality_and_format_settings(bgr_frames) -> None:
    bgr = bgr_frames[0]
    ok, q60 = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 60])
    assert encode_image(_rgb(bgr), ImageEncoding(jpeg_quality=60)) == q60.tobytes()
    assert len(q60) < len(_reference_bytes(bgr))
    png = encode_image(_rgb(bgr), ImageEncoding(fmt="png"))
    assert png.startswith(b"\x89PNG")
    assert np.array_equal(from_data_url(to_data_url(_rgb(bgr), ImageEncoding(fmt="png"))), _rgb(bgr))


def test_full_resolution_by_default_and_a_cap_when_asked(bgr_frames) -> None:
    rgb = _rgb(bgr_frames[0])
    assert from_data_url(to_data_url(rgb)).shape == (720, 1280, 3)
    capped = from_data_url(to_data_url(rgb, ImageEncoding(max_side=640)))
    assert capped.shape == (360, 640, 3)
    expected = cv2.resize(rgb, (640, 360), interpolation=cv2.INTER_AREA)
    assert encode_image(rgb, ImageEncoding(max_side=640)) == _reference_bytes(expected[:, :, ::-1].copy())
    assert from_data_url(to_data_url(rgb, ImageEncoding(max_side=2000))).shape == (720, 1280, 3)


def test_in_process_images_are_the_decoded_jpeg(bgr_frames) -> None:
    """In-process backends see exactly what a server decodes from the data URL."""
    rgbs = [_rgb(bgr) for bgr in bgr_frames]
    pils = model_images(rgbs)
    for bgr, rgb, pil in zip(bgr_frames, rgbs, pils):
        decoded = np.asarray(Image.open(io.BytesIO(_reference_bytes(bgr))).convert("RGB"))
        assert pil.mode == "RGB" and pil.size == (1280, 720)
        assert np.array_equal(np.asarray(pil), decoded)
        assert np.array_equal(np.asarray(pil), from_data_url(to_data_url(rgb)))
        assert not np.array_equal(np.asarray(pil), rgb)  # JPEG is lossy: the round trip happened
    lossless = model_images(rgbs[:1], ImageEncoding(fmt="png", max_side=640))
    assert np.array_equal(np.asarray(lossless[0]), cv2.resize(rgbs[0], (640, 360), interpolation=cv2.INTER_AREA))


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [({"fmt": "webp"}, "image_format"), ({"fmt": "JPG"}, "image_format"),
     ({"jpeg_quality": 0}, "jpeg_quality"), ({"jpeg_quality": 101}, "jpeg_quality"),
     ({"max_side": -1}, "max_image_side")],
)
def test_bad_encoding_settings(kwargs, key) -> None:
    with pytest.raises(ConfigError, match=key):
        ImageEncoding(**kwargs)


def test_bad_images_are_invalid_requests() -> None:
    with pytest.raises(InvalidRequestError):
        encode_image(np.zeros((4, 4), np.uint8))
    with pytest.raises(InvalidRequestError):
        from_data_url("data:image/jpeg;base64," + base64.b64encode(b"not an image").decode())


# ------------------------------------------------------------------ where the settings come from
def test_model_spec_defaults_to_the_reference_image_input() -> None:
    assert ModelSpec(model="m").image_encoding() == ImageEncoding("jpeg", 95, 0)
    spec = ModelSpec.from_dict({"model": "m", "image_format": "png", "jpeg_quality": 80, "max_image_side": 512})
    assert spec.image_encoding() == ImageEncoding("png", 80, 512)
    for bad, key in (({"image_format": "bmp"}, "image_format"), ({"jpeg_quality": 0}, "jpeg_quality"),
                     ({"extra": {"image_format": "png"}}, "extra.image_format")):
        with pytest.raises(ConfigError, match=key):
            ModelSpec.from_dict({"model": "m", **bad})


@pytest.mark.parametrize("name", ["perception_72b.yaml", "perception_tiny.yaml"])
def test_training_perception_configs_send_full_resolution_jpeg_q95(name) -> None:
    from embodied_r_training.config import read_yaml_config

    config = read_yaml_config(REPO / "training" / "configs" / name)
    spec = ModelSpec.from_dict(config["perception_model"])
    assert spec.image_encoding() == ImageEncoding("jpeg", 95, 0)


def test_robot_parameters_reach_the_perception_model_spec() -> None:
    params = cfg.load_parameters(REPO / "config" / "embodied_r.yaml",
                                 overrides={"perception.model": "/models/vlm"})
    spec = ModelSpec.from_dict(build_settings(params).perception.spec_dict())
    assert spec.image_encoding() == ImageEncoding("jpeg", 95, 640)  # robot default: capped
    params = cfg.validate({"perception.model": "/m", "perception.max_image_side": 0,
                           "perception.image_format": "png", "perception.jpeg_quality": 70})
    spec = ModelSpec.from_dict(build_settings(params).perception.spec_dict())
    assert spec.image_encoding() == ImageEncoding("png", 70, 0)
    with pytest.raises(ConfigError, match="perception.image_format"):
        cfg.validate({"perception.image_format": "gif"})
