"""Write and read camera rosbag2 files (MCAP or sqlite3) without a ROS installation.

Uses the pure-Python `rosbags` library. Images are written as ``sensor_msgs/msg/Image``
(``rgb8``) or ``sensor_msgs/msg/CompressedImage`` (JPEG) with header stamps equal to the
frame stamps, which are also the bag's receive times; known camera poses can be added as
``nav_msgs/msg/Odometry``. Reading accepts either image type and any raw encoding that
`embodied_r_ros.core.image_codec` decodes, so bags recorded on a real robot work too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.image_codec import encode_jpeg, image_from_compressed, image_from_raw

__all__ = [
    "COMPRESSED_TYPE",
    "IMAGE_TYPE",
    "IMAGE_TYPES",
    "ODOM_TYPE",
    "BagImage",
    "list_topics",
    "read_image_bag",
    "read_odometry",
    "write_image_bag",
]

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
ODOM_TYPE = "nav_msgs/msg/Odometry"
IMAGE_TYPES = (IMAGE_TYPE, COMPRESSED_TYPE)


def _rosbags():
    try:
        from rosbags.rosbag2 import Reader, StoragePlugin, Writer
        from rosbags.typesys import Stores, get_typestore
    except ImportError as exc:  # pragma: no cover - rosbags is a test/bag dependency
        raise InvalidRequestError(
            "reading or writing rosbags needs the 'rosbags' package (pip install rosbags)"
        ) from exc
    return Reader, Writer, StoragePlugin, Stores, get_typestore


def _typestore():
    _, _, _, Stores, get_typestore = _rosbags()
    # Humble is the oldest supported LTS; its message definitions for the types used here
    # are identical in later distributions.
    return get_typestore(Stores.ROS2_HUMBLE)


@dataclass(frozen=True)
class BagImage:
    """One decoded camera image from a bag."""

    stamp_s: float  # header stamp, seconds
    image: np.ndarray  # RGB uint8 (H, W, 3)
    frame_id: str
    topic: str
    log_time_ns: int = 0  # time the message was recorded


def _split_stamp(stamp_s: float) -> tuple[int, int]:
    if not math.isfinite(stamp_s) or stamp_s < 0:
        raise InvalidRequestError(f"stamps must be finite and >= 0, got {stamp_s}")
    ns = int(round(stamp_s * 1e9))
    return ns // 1_000_000_000, ns % 1_000_000_000


def _quat_from_yaw_pitch(yaw: float, pitch: float) -> tuple[float, float, float, float]:
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    return (-sp * sy, sp * cy, cp * sy, cp * cy)


def write_image_bag(
    path: str | Path,
    frames: Sequence[np.ndarray],
    stamps_s: Sequence[float],
    *,
    topic: str = "/camera/image_raw",
    frame_id: str = "camera",
    storage: str = "mcap",
    compressed: bool = False,
    jpeg_quality: int = 90,
    poses: Sequence[Any] | None = None,
    odom_topic: str = "/odom",
    odom_frame_id: str = "odom",
    base_frame_id: str = "base_link",
    version: int = 8,
) -> Path:
    """Write RGB frames (and optionally poses) as a rosbag2 folder at `path`.

    ``storage`` is "mcap" or "sqlite3". With ``compressed`` the images are JPEG
    ``CompressedImage`` messages on ``topic`` + "/compressed" unless the topic already
    ends with it; otherwise raw ``rgb8`` ``Image`` messages. ``poses``, when given, is a
    sequence of objects with ``x``, ``y``, ``yaw`` (and optionally ``z``, ``pitch``,
    ``stamp_s``), one per frame unless each carries its own ``stamp_s``; they go to
    ``odom_topic`` as ``nav_msgs/Odometry`` with body-frame velocities from finite
    differences. Returns the bag folder path. The folder must not exist yet.
    """
    _, Writer, StoragePlugin, _, _ = _rosbags()
    path = Path(path)
    if path.exists():
        raise InvalidRequestError(f"bag path {path} already exists; choose a new folder")
    plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
    if storage not in plugins:
        raise InvalidRequestError(f"storage must be 'mcap' or 'sqlite3', got {storage!r}")
    if len(frames) != len(stamps_s):
        raise InvalidRequestError(f"{len(frames)} frames but {len(stamps_s)} stamps")
    if not frames:
        raise InvalidRequestError("no frames to write")
    if any(b <= a for a, b in zip(stamps_s, stamps_s[1:])):
        raise InvalidRequestError("frame stamps must be strictly increasing")
    if compressed and not topic.endswith("/compressed"):
        topic = topic.rstrip("/") + "/compressed"

    ts = _typestore()
    T = ts.types
    Header, Time = T["std_msgs/msg/Header"], T["builtin_interfaces/msg/Time"]
    messages: list[tuple[int, int, bytes]] = []  # (time ns, connection slot, payload)

    for image, stamp in zip(frames, stamps_s):
        arr = np.asarray(image)
        if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
            raise InvalidRequestError(f"frames must be RGB uint8 (H, W, 3), got {arr.shape} {arr.dtype}")
        sec, nsec = _split_stamp(float(stamp))
        header = Header(stamp=Time(sec=sec, nanosec=nsec), frame_id=frame_id)
        if compressed:
            msg = T[COMPRESSED_TYPE](
                header=header,
                format="rgb8; jpeg compressed bgr8",
                data=np.frombuffer(encode_jpeg(arr, jpeg_quality), np.uint8),
            )
            raw = ts.serialize_cdr(msg, COMPRESSED_TYPE)
        else:
            h, w = arr.shape[:2]
            msg = T[IMAGE_TYPE](
                header=header,
                height=h,
                width=w,
                encoding="rgb8",
                is_bigendian=0,
                step=w * 3,
                data=np.ascontiguousarray(arr).reshape(-1),
            )
            raw = ts.serialize_cdr(msg, IMAGE_TYPE)
        messages.append((sec * 1_000_000_000 + nsec, 0, bytes(raw)))

    if poses is not None:
        messages += [(t, 1, raw) for t, raw in _odometry_messages(ts, poses, stamps_s, odom_frame_id, base_frame_id)]

    messages.sort(key=lambda m: (m[0], m[1]))
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = Writer(path, version=version, storage_plugin=plugins[storage])
    with writer:
        conns = [writer.add_connection(topic, COMPRESSED_TYPE if compressed else IMAGE_TYPE, typestore=ts)]
        if poses is not None:
            conns.append(writer.add_connection(odom_topic, ODOM_TYPE, typestore=ts))
        for t_ns, slot, raw in messages:
            writer.write(conns[slot], t_ns, raw)
    return path


def _odometry_messages(ts, poses: Sequence[Any], stamps_s: Sequence[float], odom_frame: str, base_frame: str):
    T = ts.types
    stamps = []
    for i, p in enumerate(poses):
        s = getattr(p, "stamp_s", None)
        if s is None:
            if len(poses) != len(stamps_s):
                raise InvalidRequestError("poses without stamp_s must be one per frame")
            s = stamps_s[i]
        stamps.append(float(s))
    out = []
    for i, p in enumerate(poses):
        x, y, yaw = float(p.x), float(p.y), float(p.yaw)
        z, pitch = float(getattr(p, "z", 0.0)), float(getattr(p, "pitch", 0.0))
        # Velocities from the neighbouring poses, in the body frame.
        j0, j1 = max(i - 1, 0), min(i + 1, len(poses) - 1)
        dt = stamps[j1] - stamps[j0]
        vx = vy = vz = wz = 0.0
        if dt > 0:
            a, b = poses[j0], poses[j1]
            dxw, dyw = (float(b.x) - float(a.x)) / dt, (float(b.y) - float(a.y)) / dt
            c, s = math.cos(yaw), math.sin(yaw)
            vx, vy = c * dxw + s * dyw, -s * dxw + c * dyw
            vz = (float(getattr(b, "z", 0.0)) - float(getattr(a, "z", 0.0))) / dt
            dyaw = (float(b.yaw) - float(a.yaw) + math.pi) % (2 * math.pi) - math.pi
            wz = dyaw / dt
        qx, qy, qz, qw = _quat_from_yaw_pitch(yaw, pitch)
        sec, nsec = _split_stamp(stamps[i])
        cov = np.zeros(36, np.float64)
        msg = T[ODOM_TYPE](
            header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec), frame_id=odom_frame),
            child_frame_id=base_frame,
            pose=T["geometry_msgs/msg/PoseWithCovariance"](
                pose=T["geometry_msgs/msg/Pose"](
                    position=T["geometry_msgs/msg/Point"](x=x, y=y, z=z),
                    orientation=T["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw),
                ),
                covariance=cov,
            ),
            twist=T["geometry_msgs/msg/TwistWithCovariance"](
                twist=T["geometry_msgs/msg/Twist"](
                    linear=T["geometry_msgs/msg/Vector3"](x=vx, y=vy, z=vz),
                    angular=T["geometry_msgs/msg/Vector3"](x=0.0, y=0.0, z=wz),
                ),
                covariance=cov.copy(),
            ),
        )
        out.append((sec * 1_000_000_000 + nsec, bytes(ts.serialize_cdr(msg, ODOM_TYPE))))
    return out


def _bag_dir(path: str | Path) -> Path:
    """The bag folder for a folder path or for a storage file inside one."""
    p = Path(path)
    if not p.exists():
        raise InvalidRequestError(f"bag {p} does not exist")
    if p.is_file() and (p.parent / "metadata.yaml").exists():
        return p.parent
    if p.is_dir() and not (p / "metadata.yaml").exists():
        raise InvalidRequestError(f"{p} is not a rosbag2 folder (no metadata.yaml)")
    return p


def _open_reader(path: str | Path):
    Reader = _rosbags()[0]
    bag = _bag_dir(path)
    try:
        reader = Reader(bag)
        reader.open()
    except Exception as exc:  # rosbags raises its own ReaderError family
        raise InvalidRequestError(f"cannot open bag {bag}: {exc}") from exc
    return reader


def list_topics(path: str | Path) -> dict[str, str]:
    """Topic name -> message type for every topic in the bag."""
    reader = _open_reader(path)
    try:
        return {c.topic: c.msgtype for c in reader.connections}
    finally:
        reader.close()


def _pick_image_topic(topics: dict[str, str], topic: str | None) -> str:
    images = sorted(t for t, ty in topics.items() if ty in IMAGE_TYPES)
    if topic is not None:
        if topic not in topics:
            raise InvalidRequestError(
                f"topic {topic!r} is not in the bag; image topics: {images or 'none'}"
            )
        if topics[topic] not in IMAGE_TYPES:
            raise InvalidRequestError(f"topic {topic!r} has type {topics[topic]}, not an image type")
        return topic
    if not images:
        raise InvalidRequestError(f"the bag has no image topics (topics: {sorted(topics)})")
    return images[0]


def read_image_bag(path: str | Path, topic: str | None = None) -> Iterator[BagImage]:
    """Yield the images of one topic in recording order, decoded to RGB.

    With ``topic`` None the (alphabetically) first Image or CompressedImage topic is used.
    Raises `InvalidRequestError` when the bag or topic is missing or an image cannot be
    decoded.
    """
    reader = _open_reader(path)
    try:
        topics = {c.topic: c.msgtype for c in reader.connections}
        chosen = _pick_image_topic(topics, topic)
        ts = _typestore()
        conns = [c for c in reader.connections if c.topic == chosen]
        for conn, log_ns, raw in reader.messages(connections=conns):
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            stamp = msg.header.stamp.sec + msg.header.stamp.nanosec / 1e9
            if conn.msgtype == COMPRESSED_TYPE:
                image = image_from_compressed(msg.data, msg.format)
            else:
                image = image_from_raw(msg.data, msg.width, msg.height, msg.encoding, msg.step, msg.is_bigendian)
            yield BagImage(float(stamp), image, str(msg.header.frame_id), chosen, int(log_ns))
    finally:
        reader.close()


def read_odometry(path: str | Path, topic: str = "/odom"):
    """All ``nav_msgs/Odometry`` poses of `topic` as `core.odometry.Pose3D`, in order."""
    from embodied_r_ros.core.odometry import pose_from_odometry_msg

    reader = _open_reader(path)
    try:
        topics = {c.topic: c.msgtype for c in reader.connections}
        if topic not in topics:
            raise InvalidRequestError(f"topic {topic!r} is not in the bag (topics: {sorted(topics)})")
        if topics[topic] != ODOM_TYPE:
            raise InvalidRequestError(f"topic {topic!r} has type {topics[topic]}, not {ODOM_TYPE}")
        ts = _typestore()
        conns = [c for c in reader.connections if c.topic == topic]
        return [pose_from_odometry_msg(ts.deserialize_cdr(raw, c.msgtype)) for c, _, raw in reader.messages(connections=conns)]
    finally:
        reader.close()
