"""Write and read camera rosbag2 files (MCAP or sqlite3) without a ROS installation.

Uses the pure-Python `rosbags` library. Images are written as ``sensor_msgs/msg/Image``
(``rgb8``) or ``sensor_msgs/msg/CompressedImage`` (JPEG) with header stamps equal to the
frame stamps, which are also the bag's receive times; known camera poses can be added as
``nav_msgs/msg/Odometry``. Reading accepts either image type and any raw encoding that
`embodied_r_ros.core.image_codec` decodes, so bags recorded on a real robot work too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.core.errors import BagError, InvalidRequestError
from embodied_r_ros.core.image_codec import (
    encode_jpeg,
    image_from_compressed,
    image_from_raw,
)

__all__ = [
    "COMPRESSED_TYPE",
    "IMAGE_TYPE",
    "IMAGE_TYPES",
    "ODOM_TYPE",
    "BagFrame",
    "BagImage",
    "BagReadReport",
    "ImageBagWriter",
    "iter_bag_frames",
    "list_topics",
    "read_image_bag",
    "read_odometry",
    "write_image_bag",
]

IMAGE_TYPE = "sensor_msgs/msg/Image"
COMPRESSED_TYPE = "sensor_msgs/msg/CompressedImage"
ODOM_TYPE = "nav_msgs/msg/Odometry"
IMAGE_TYPES = (IMAGE_TYPE, COMPRESSED_TYPE)
LOG = logging.getLogger("embodied_r_ros.bag")


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


def _storage_plugin(storage: str):
    StoragePlugin = _rosbags()[2]
    plugins = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
    if storage not in plugins:
        raise InvalidRequestError(f"storage must be 'mcap' or 'sqlite3', got {storage!r}")
    return plugins[storage]


def _image_payload(ts, image: np.ndarray, sec: int, nsec: int, frame_id: str,
                   compressed: bool, jpeg_quality: int) -> bytes:
    """CDR bytes of one sensor_msgs Image (rgb8) or CompressedImage (JPEG)."""
    T = ts.types
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise InvalidRequestError(f"frames must be RGB uint8 (H, W, 3), got {arr.shape} {arr.dtype}")
    header = T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec),
                                      frame_id=frame_id)
    if compressed:
        msg = T[COMPRESSED_TYPE](header=header, format="rgb8; jpeg compressed bgr8",
                                 data=np.frombuffer(encode_jpeg(arr, jpeg_quality), np.uint8))
        return bytes(ts.serialize_cdr(msg, COMPRESSED_TYPE))
    h, w = arr.shape[:2]
    msg = T[IMAGE_TYPE](header=header, height=h, width=w, encoding="rgb8", is_bigendian=0,
                        step=w * 3, data=np.ascontiguousarray(arr).reshape(-1))
    return bytes(ts.serialize_cdr(msg, IMAGE_TYPE))


class ImageBagWriter:
    """Streaming writer of one camera topic into a new rosbag2 folder (bounded memory).

        with ImageBagWriter(out, storage="mcap", compressed=True) as bag:
            for image, stamp in frames:
                bag.write(image, stamp)

    Each image goes out at once as sensor_msgs/Image (rgb8) or, with ``compressed``,
    sensor_msgs/CompressedImage (JPEG) on ``topic`` + "/compressed" (unless the topic ends
    with it). The header stamp is ``stamp_s``; the record time is ``log_time_ns`` when
    given, else the same instant. Stamps are written as given (also zero or out of order:
    tests use that to make broken recordings). The folder must not exist yet; a failure
    while writing removes it again, so no half-written bag is left under the name.
    """

    def __init__(self, path: str | Path, *, topic: str = "/camera/image_raw",
                 frame_id: str = "camera", storage: str = "mcap", compressed: bool = False,
                 jpeg_quality: int = 90, version: int = 8) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise InvalidRequestError(f"bag path {self.path} already exists; choose a new folder")
        self.plugin = _storage_plugin(storage)
        self.compressed = compressed
        self.topic = topic.rstrip("/") + "/compressed" if compressed and not topic.endswith("/compressed") else topic
        self.frame_id = frame_id
        self.jpeg_quality = jpeg_quality
        self.version = version
        self.count = 0
        self._ts = _typestore()
        self._writer: Any = None
        self._conn: Any = None

    def __enter__(self) -> ImageBagWriter:
        Writer = _rosbags()[1]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = Writer(self.path, version=self.version, storage_plugin=self.plugin)
        self._writer.open()
        self._conn = self._writer.add_connection(
            self.topic, COMPRESSED_TYPE if self.compressed else IMAGE_TYPE, typestore=self._ts)
        return self

    def write(self, image: np.ndarray, stamp_s: float, log_time_ns: int | None = None, *,
              frame_id: str | None = None) -> None:
        sec, nsec = _split_stamp(float(stamp_s))
        raw = _image_payload(self._ts, image, sec, nsec,
                             self.frame_id if frame_id is None else frame_id, self.compressed,
                             self.jpeg_quality)
        self._writer.write(self._conn, sec * 1_000_000_000 + nsec if log_time_ns is None
                           else int(log_time_ns), raw)
        self.count += 1

    def __exit__(self, exc_type: object, *exc: object) -> None:
        import shutil

        try:
            self._writer.close()
        finally:
            if exc_type is not None:
                shutil.rmtree(self.path, ignore_errors=True)


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
    Writer = _rosbags()[1]
    path = Path(path)
    if path.exists():
        raise InvalidRequestError(f"bag path {path} already exists; choose a new folder")
    plugin = _storage_plugin(storage)
    if len(frames) != len(stamps_s):
        raise InvalidRequestError(f"{len(frames)} frames but {len(stamps_s)} stamps")
    if not frames:
        raise InvalidRequestError("no frames to write")
    if any(b <= a for a, b in zip(stamps_s, stamps_s[1:])):
        raise InvalidRequestError("frame stamps must be strictly increasing")
    if compressed and not topic.endswith("/compressed"):
        topic = topic.rstrip("/") + "/compressed"

    ts = _typestore()
    messages: list[tuple[int, int, bytes]] = []  # (time ns, connection slot, payload)
    for image, stamp in zip(frames, stamps_s):
        sec, nsec = _split_stamp(float(stamp))
        raw = _image_payload(ts, image, sec, nsec, frame_id, compressed, jpeg_quality)
        messages.append((sec * 1_000_000_000 + nsec, 0, raw))

    if poses is not None:
        messages += [(t, 1, raw) for t, raw in _odometry_messages(ts, poses, stamps_s, odom_frame_id, base_frame_id)]

    messages.sort(key=lambda m: (m[0], m[1]))
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = Writer(path, version=version, storage_plugin=plugin)
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
            header=T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=sec, nanosec=nsec),
                                            frame_id=odom_frame),
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
        raise BagError(p, "the bag does not exist; check the path")
    if p.is_file() and (p.parent / "metadata.yaml").exists():
        return p.parent
    if p.is_file():
        raise BagError(p, "is a file without a metadata.yaml beside it; give the rosbag2 "
                          "folder (the one holding metadata.yaml)")
    if not (p / "metadata.yaml").exists():
        raise BagError(p, "is not a rosbag2 folder (no metadata.yaml)")
    return p


def _open_reader(path: str | Path):
    Reader = _rosbags()[0]
    bag = _bag_dir(path)
    try:
        reader = Reader(bag)
        reader.open()
    except Exception as exc:  # rosbags raises its own ReaderError family
        raise BagError(bag, f"cannot open the bag ({exc}); the file is corrupt, truncated "
                            "or not a rosbag2 sqlite3/MCAP bag") from exc
    return reader


def list_topics(path: str | Path) -> dict[str, str]:
    """Topic name -> message type for every topic in the bag."""
    reader = _open_reader(path)
    try:
        return {c.topic: c.msgtype for c in reader.connections}
    finally:
        reader.close()


def _pick_image_topic(bag: Path, topics: dict[str, str], topic: str | None) -> str:
    images = sorted(t for t, ty in topics.items() if ty in IMAGE_TYPES)
    if topic is not None:
        if topic not in topics:
            raise BagError(bag, f"topic {topic!r} is not in the bag; image topics: "
                                f"{images or 'none'}")
        if topics[topic] not in IMAGE_TYPES:
            raise BagError(bag, f"topic {topic!r} has type {topics[topic]}, not an image type")
        return topic
    if not images:
        raise BagError(bag, f"the bag has no image topics (topics: {sorted(topics)})")
    return images[0]


# --------------------------------------------------------------------------- replay reading
STAMP_SOURCES = ("header", "record")


@dataclass
class BagReadReport:
    """What reading one bag's camera topic did (filled while frames are read).

    `messages` counts the topic's messages, `frames` the frames handed on; the others
    count why the rest were not handed on as recorded (see `iter_bag_frames`)."""

    path: str
    topic: str = ""
    msgtype: str = ""
    messages: int = 0
    frames: int = 0
    stamp_fallbacks: int = 0
    reordered: int = 0
    dropped_out_of_order: int = 0
    dropped_duplicate: int = 0
    undeserializable: int = 0
    sizes: list[tuple[int, int]] = field(default_factory=list)  # (width, height) changes
    warnings: list[str] = field(default_factory=list)

    def warn(self, text: str) -> None:
        message = f"{self.path}: {text}"
        self.warnings.append(message)
        LOG.warning("%s", message)

    def saw_image(self, index: int, image: np.ndarray) -> None:
        """Note a decoded frame's size; a change of resolution is reported once per change."""
        size = (int(image.shape[1]), int(image.shape[0]))
        if not self.sizes:
            self.sizes.append(size)
        elif size != self.sizes[-1]:
            self.warn(f"the image size changes from {self.sizes[-1][0]}x{self.sizes[-1][1]} to "
                      f"{size[0]}x{size[1]} at frame {index}; key frames are still compared "
                      "(the overlap is measured on the newer frame's size)")
            self.sizes.append(size)

    def to_json(self) -> dict[str, Any]:
        return {k: (list(map(list, v)) if k == "sizes" else v) for k, v in self.__dict__.items()}


@dataclass
class BagFrame:
    """One camera message of a bag, decoded only when `image()` is called."""

    index: int  # position among the frames handed on (0, 1, 2 ...)
    stamp_s: float  # stream time: the header stamp, or the fallback (see iter_bag_frames)
    log_time_ns: int  # time the recorder wrote the message
    frame_id: str
    topic: str
    msgtype: str
    msg: Any  # the deserialized message (rosbags)
    stamp_from: str = "header"  # "header" or "record"

    def image(self) -> np.ndarray:
        """The RGB uint8 image; raises InvalidRequestError when it cannot be decoded."""
        msg = self.msg
        if self.msgtype == COMPRESSED_TYPE:
            return image_from_compressed(msg.data, msg.format)
        return image_from_raw(msg.data, msg.width, msg.height, msg.encoding, msg.step,
                              msg.is_bigendian)


def iter_bag_frames(
    path: str | Path,
    topic: str | None = None,
    *,
    stamps: str = "header",
    reorder_window: int = 16,
    report: BagReadReport | None = None,
) -> Iterator[BagFrame]:
    """The camera frames of a bag in stream-time order, robust to broken recordings.

    Rules (the same for the fast and the live replay, so both see the same frames):

    * **Stamps.** ``stamps="header"`` (default) uses each message's header stamp. A zero or
      negative header stamp (a driver that never set it) is replaced by the message's
      record time, shifted onto the header clock of the last frame that had a good stamp
      (record time as is before any good stamp), so stream time stays continuous when the
      camera and the recorder clocks differ; counted in `stamp_fallbacks` and warned.
      ``stamps="record"`` uses the record time for every frame (for a camera whose
      clock is frozen or wrong).
    * **Order.** Messages are re-sorted by stamp within a window of `reorder_window`
      messages (recorders write in arrival order, so small swaps are common); a frame
      whose stamp is still earlier than one already handed on is dropped
      (`dropped_out_of_order`), and one with the same stamp as the previous frame handed
      on is dropped as a duplicate (`dropped_duplicate`): stream time strictly increases.
      ``reorder_window=0`` keeps the recorded order and only drops.
    * **Bad payloads.** A message that cannot be deserialized is dropped
      (`undeserializable`); image decoding happens later, in `BagFrame.image()`.
    * **Empty bags.** A bag whose image topic has no messages yields nothing (a warning
      says so); the caller decides what that means (replay evaluation answers its
      questions with NO_KEYFRAMES).
    * **Unreadable bags** (missing, no metadata.yaml, corrupt, truncated, no image topic,
      a read error midway) raise `BagError` naming the file.

    `report`, when given, is filled as frames are read (counts, warnings, topic).
    """
    import heapq

    if stamps not in STAMP_SOURCES:
        raise InvalidRequestError(f"stamps must be one of {STAMP_SOURCES}, got {stamps!r}")
    if reorder_window < 0:
        raise InvalidRequestError(f"reorder_window must be >= 0, got {reorder_window}")
    bag = _bag_dir(path)
    report = report if report is not None else BagReadReport(str(bag))
    reader = _open_reader(bag)
    try:
        topics = {c.topic: c.msgtype for c in reader.connections}
        chosen = _pick_image_topic(bag, topics, topic)
        report.topic, report.msgtype = chosen, topics[chosen]
        ts = _typestore()
        conns = [c for c in reader.connections if c.topic == chosen]
        heap: list[tuple[float, int, BagFrame]] = []
        last_out: tuple[float, int] | None = None  # (stamp, record position) handed on
        good: tuple[float, int] | None = None  # (header stamp, record time) of a good frame
        position = 0

        def emit(item: tuple[float, int, BagFrame]) -> Iterator[BagFrame]:
            nonlocal last_out
            stamp, seq, frame = item
            if last_out is not None and stamp <= last_out[0]:
                if stamp == last_out[0]:
                    report.dropped_duplicate += 1
                else:
                    report.dropped_out_of_order += 1
                return
            if last_out is not None and seq < last_out[1]:
                report.reordered += 1
            last_out = (stamp, max(seq, last_out[1]) if last_out else seq)
            frame.index = report.frames
            report.frames += 1
            yield frame

        messages = reader.messages(connections=conns)
        while True:
            try:
                item = next(messages, None)
            except Exception as exc:
                raise BagError(bag, f"reading failed after {report.messages} messages of "
                                    f"{chosen} ({exc}); the bag is corrupt or truncated") from exc
            if item is None:
                break
            conn, log_ns, raw = item
            report.messages += 1
            try:
                msg = ts.deserialize_cdr(raw, conn.msgtype)
                header_s = msg.header.stamp.sec + msg.header.stamp.nanosec / 1e9
            except Exception:  # noqa: BLE001 - a damaged message is dropped, not fatal
                report.undeserializable += 1
                continue
            log_s = int(log_ns) / 1e9
            if stamps == "record":
                stamp, source = log_s, "record"
            elif header_s > 0 or (header_s == 0 and log_ns == 0):
                stamp, source = float(header_s), "header"
                good = (stamp, int(log_ns))
            else:
                report.stamp_fallbacks += 1
                stamp = log_s if good is None else good[0] + (int(log_ns) - good[1]) / 1e9
                source = "record"
            frame = BagFrame(-1, float(stamp), int(log_ns), str(msg.header.frame_id), chosen,
                             conn.msgtype, msg, source)
            heapq.heappush(heap, (frame.stamp_s, position, frame))
            position += 1
            if len(heap) > reorder_window:
                yield from emit(heapq.heappop(heap))
        while heap:
            yield from emit(heapq.heappop(heap))
    finally:
        reader.close()
    _warn_summary(report)


def _warn_summary(report: BagReadReport) -> None:
    if report.messages == 0:
        report.warn(f"topic {report.topic} has no messages (a zero-length bag): nothing to "
                    "replay")
    if report.stamp_fallbacks:
        report.warn(f"{report.stamp_fallbacks} of {report.messages} frames had a zero header "
                    "stamp; their record time was used instead (fix the camera driver's "
                    "stamps, or read with stamps='record')")
    if report.reordered:
        report.warn(f"{report.reordered} frames were recorded out of stamp order and were "
                    "re-sorted by stamp")
    if report.dropped_out_of_order or report.dropped_duplicate:
        report.warn(f"{report.dropped_out_of_order} out-of-order and {report.dropped_duplicate} "
                    "duplicate-stamp frames were dropped (stream time must increase); a "
                    "larger reorder window keeps more, stamps='record' ignores the header "
                    "stamps")
    if report.undeserializable:
        report.warn(f"{report.undeserializable} messages could not be deserialized and were "
                    "dropped")


def read_image_bag(path: str | Path, topic: str | None = None, *, stamps: str = "header",
                   reorder_window: int = 16,
                   report: BagReadReport | None = None) -> Iterator[BagImage]:
    """Yield the images of one topic in stream-time order, decoded to RGB.

    With ``topic`` None the (alphabetically) first Image or CompressedImage topic is used.
    Stamps, order and damaged messages follow `iter_bag_frames`. Raises `BagError` when
    the bag or topic is missing or the bag is unreadable, `InvalidRequestError` when an
    image cannot be decoded.
    """
    report = report if report is not None else BagReadReport(str(path))
    for frame in iter_bag_frames(path, topic, stamps=stamps, reorder_window=reorder_window,
                                 report=report):
        image = frame.image()
        report.saw_image(frame.index, image)
        yield BagImage(frame.stamp_s, image, frame.frame_id, frame.topic, frame.log_time_ns)


def read_odometry(path: str | Path, topic: str = "/odom"):
    """All ``nav_msgs/Odometry`` poses of `topic` as `core.odometry.Pose3D`, in order."""
    from embodied_r_ros.core.perception.odometry import pose_from_odometry_msg

    reader = _open_reader(path)
    try:
        topics = {c.topic: c.msgtype for c in reader.connections}
        if topic not in topics:
            raise InvalidRequestError(f"topic {topic!r} is not in the bag (topics: {sorted(topics)})")
        if topics[topic] != ODOM_TYPE:
            raise InvalidRequestError(f"topic {topic!r} has type {topics[topic]}, not {ODOM_TYPE}")
        ts = _typestore()
        conns = [c for c in reader.connections if c.topic == topic]
        return [pose_from_odometry_msg(ts.deserialize_cdr(raw, c.msgtype))
                for c, _, raw in reader.messages(connections=conns)]
    finally:
        reader.close()
