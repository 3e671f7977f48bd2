"""Tests for rosbag2 writing/reading with rosbags (embodied_r_ros.sample_data.bag_io)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.image_codec import rgb_to_raw
from embodied_r_ros.sample_data.bag_io import (
    COMPRESSED_TYPE,
    IMAGE_TYPE,
    ODOM_TYPE,
    list_topics,
    read_image_bag,
    read_odometry,
    write_image_bag,
)
from embodied_r_ros.sample_data.scene import CameraPose, render_clip

STORAGES = ["mcap", "sqlite3"]


@pytest.fixture(scope="module")
def clip():
    """A short real clip: textured frames, so JPEG error is representative."""
    return render_clip([("move forward", 0.5), ("rotate left", 30.0)], fps=4.0, width=96, height=72)


def _random_frames(n=5, h=12, w=16, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for _ in range(n)]


@pytest.mark.parametrize("storage", STORAGES)
def test_raw_round_trip_is_exact(tmp_path, storage):
    frames = _random_frames()
    stamps = [0.0, 0.1, 0.25, 1.5, 1700000000.123456789]
    bag = write_image_bag(tmp_path / "bag", frames, stamps, storage=storage, frame_id="cam_optical")
    assert (bag / "metadata.yaml").exists()
    assert list_topics(bag) == {"/camera/image_raw": IMAGE_TYPE}
    got = list(read_image_bag(bag))
    assert len(got) == len(frames)
    for g, f, s in zip(got, frames, stamps):
        np.testing.assert_array_equal(g.image, f)
        assert g.image.dtype == np.uint8 and g.image.shape == f.shape
        assert g.stamp_s == pytest.approx(s, abs=1e-9)
        assert g.frame_id == "cam_optical" and g.topic == "/camera/image_raw"
        # The recording time equals the header stamp.
        assert g.log_time_ns == round(s * 1e9)


@pytest.mark.parametrize("storage", STORAGES)
def test_jpeg_round_trip_is_close(tmp_path, storage, clip):
    bag = write_image_bag(tmp_path / "bag", clip.frames, clip.stamps_s, storage=storage, compressed=True)
    assert list_topics(bag) == {"/camera/image_raw/compressed": COMPRESSED_TYPE}
    got = list(read_image_bag(bag))
    assert [g.stamp_s for g in got] == pytest.approx(clip.stamps_s, abs=1e-9)
    for g, f in zip(got, clip.frames):
        assert g.image.shape == f.shape
        err = np.abs(g.image.astype(int) - f.astype(int))
        assert err.mean() < 8.0
        mse = float((err.astype(float) ** 2).mean())
        assert 10 * math.log10(255**2 / max(mse, 1e-9)) > 25.0  # PSNR
    # JPEG is much smaller than raw.
    raw_bag = write_image_bag(tmp_path / "raw", clip.frames, clip.stamps_s, storage=storage)
    size = lambda p: sum(f.stat().st_size for f in p.iterdir())  # noqa: E731
    assert size(bag) < size(raw_bag) / 2


def test_explicit_compressed_topic_kept(tmp_path):
    frames = _random_frames(2)
    bag = write_image_bag(tmp_path / "b", frames, [1.0, 2.0], topic="/front/compressed", compressed=True)
    assert list_topics(bag) == {"/front/compressed": COMPRESSED_TYPE}


@pytest.mark.parametrize("storage", STORAGES)
def test_odometry_round_trip(tmp_path, storage, clip):
    bag = write_image_bag(tmp_path / "bag", clip.frames, clip.stamps_s, storage=storage, poses=clip.poses)
    assert list_topics(bag) == {"/camera/image_raw": IMAGE_TYPE, "/odom": ODOM_TYPE}
    odom = read_odometry(bag)
    assert len(odom) == len(clip.poses)
    for o, p in zip(odom, clip.poses):
        assert (o.x, o.y, o.z) == pytest.approx((p.x, p.y, p.z))
        assert o.yaw == pytest.approx(p.yaw)
        assert o.stamp_s == pytest.approx(p.stamp_s, abs=1e-9)
    # Images are still read from the image topic when odometry is present.
    assert len(list(read_image_bag(bag))) == len(clip.frames)


def test_odometry_with_own_stamps_and_pitch(tmp_path):
    frames = _random_frames(2)
    poses = [CameraPose(0, 0, 0.0, 1.0, 0.2, stamp_s=0.5 * i) for i in range(5)]
    bag = write_image_bag(tmp_path / "b", frames, [0.0, 1.0], poses=poses, odom_topic="/robot/odom")
    odom = read_odometry(bag, "/robot/odom")
    assert [o.stamp_s for o in odom] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0])
    assert odom[0].pitch == pytest.approx(0.2)


def test_read_storage_file_path_directly(tmp_path):
    frames = _random_frames(3)
    bag = write_image_bag(tmp_path / "x", frames, [1.0, 2.0, 3.0], storage="mcap")
    storage_file = next(p for p in bag.iterdir() if p.suffix == ".mcap")
    assert len(list(read_image_bag(storage_file))) == 3


def test_choose_topic_among_several(tmp_path):
    """A bag written by hand with two image topics in other encodings (bgr8, mono8)."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_HUMBLE)
    T = ts.types
    img = _random_frames(1, 6, 8)[0]
    path = tmp_path / "multi"
    with Writer(path, version=8, storage_plugin=StoragePlugin.MCAP) as w:
        c1 = w.add_connection("/left/image", IMAGE_TYPE, typestore=ts)
        c2 = w.add_connection("/mono/image", IMAGE_TYPE, typestore=ts)
        for conn, enc in ((c1, "bgr8"), (c2, "mono8")):
            data, step = rgb_to_raw(img, enc)
            msg = T[IMAGE_TYPE](
                header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=3, nanosec=0), frame_id="f"),
                height=6, width=8, encoding=enc, is_bigendian=0, step=step,
                data=np.frombuffer(data, np.uint8),
            )
            w.write(conn, 3_000_000_000, ts.serialize_cdr(msg, IMAGE_TYPE))
    left = list(read_image_bag(path, "/left/image"))
    np.testing.assert_array_equal(left[0].image, img)  # bgr8 decoded back to RGB
    mono = list(read_image_bag(path, "/mono/image"))[0].image
    assert np.array_equal(mono[:, :, 0], mono[:, :, 2])
    # No topic given: the alphabetically first image topic.
    assert next(read_image_bag(path)).topic == "/left/image"


def test_errors(tmp_path):
    with pytest.raises(InvalidRequestError, match="does not exist"):
        list(read_image_bag(tmp_path / "missing"))
    with pytest.raises(InvalidRequestError, match="does not exist"):
        list_topics(tmp_path / "missing")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InvalidRequestError, match="metadata.yaml"):
        list(read_image_bag(tmp_path / "empty_dir"))

    frames = _random_frames(2)
    bag = write_image_bag(tmp_path / "ok", frames, [0.0, 1.0], poses=[CameraPose(1, 1, 0), CameraPose(1, 1, 0)])
    with pytest.raises(InvalidRequestError, match="not in the bag") as exc:
        list(read_image_bag(bag, "/nope"))
    assert "/camera/image_raw" in str(exc.value)
    with pytest.raises(InvalidRequestError, match="not an image type"):
        list(read_image_bag(bag, "/odom"))
    with pytest.raises(InvalidRequestError, match="not in the bag"):
        read_odometry(bag, "/missing_odom")
    with pytest.raises(InvalidRequestError, match="not nav_msgs"):
        read_odometry(bag, "/camera/image_raw")

    with pytest.raises(InvalidRequestError, match="already exists"):
        write_image_bag(bag, frames, [0.0, 1.0])
    with pytest.raises(InvalidRequestError, match="storage"):
        write_image_bag(tmp_path / "s", frames, [0.0, 1.0], storage="rosbag1")
    with pytest.raises(InvalidRequestError, match="stamps"):
        write_image_bag(tmp_path / "n", frames, [0.0])
    with pytest.raises(InvalidRequestError, match="increasing"):
        write_image_bag(tmp_path / "i", frames, [1.0, 1.0])
    with pytest.raises(InvalidRequestError, match="RGB uint8"):
        write_image_bag(tmp_path / "g", [np.zeros((4, 4), np.uint8)], [0.0])
    with pytest.raises(InvalidRequestError, match="no frames"):
        write_image_bag(tmp_path / "e", [], [])


def test_bag_without_images(tmp_path):
    bag = write_image_bag(tmp_path / "b", _random_frames(1), [0.0], poses=[CameraPose(1, 1, 0)])
    # Make a bag that holds only odometry by writing one directly.
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_HUMBLE)
    only = tmp_path / "odom_only"
    with Writer(only, version=8, storage_plugin=StoragePlugin.SQLITE3) as w:
        w.add_connection("/odom", ODOM_TYPE, typestore=ts)
    with pytest.raises(InvalidRequestError, match="no image topics"):
        list(read_image_bag(only))
    assert list_topics(bag)["/odom"] == ODOM_TYPE
