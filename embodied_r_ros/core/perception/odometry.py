"""Motion between key frames measured from odometry instead of guessed by the VLM.

A robot with wheel or visual odometry knows how it moved between two key frames. This
module keeps a short, bounded history of poses, looks up (interpolates) the pose at any
frame stamp, and names the dominant motion between two poses with the same ten-action
vocabulary the perception prompt uses ("move forward", "rotate left", ...), so an
odometry-measured action can stand in for the VLM's part-1 answer.

Conventions (REP 103): x forward, y left, z up; yaw is counter-clockwise seen from above,
so a positive yaw change is "rotate left". Pitch follows the right-hand rule about the
y (left) axis, so a positive pitch change points the nose down: "tilt downward".
Translations are expressed in the gravity-aligned heading frame of the first pose.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any, Union

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.prompts.perception import ACTIONS

__all__ = [
    "MOTION_ACTIONS",
    "MotionEstimate",
    "Pose",
    "Pose2D",
    "Pose3D",
    "PoseHistory",
    "describe_motion",
    "motion_between",
    "pose_from_odometry_msg",
    "wrap_angle",
]

# The action vocabulary (one copy, owned by the perception prompts).
MOTION_ACTIONS: tuple[str, ...] = ACTIONS


def wrap_angle(angle_rad: float) -> float:
    """Wrap an angle to [-pi, pi)."""
    return (angle_rad + math.pi) % (2.0 * math.pi) - math.pi


def _yaw_pitch_roll(qx: float, qy: float, qz: float, qw: float) -> tuple[float, float, float]:
    """Z-Y-X (yaw, pitch, roll) Euler angles of a unit quaternion, in radians."""
    siny = 2.0 * (qw * qz + qx * qy)
    cosy = 1.0 - 2.0 * (qy * qy + qz * qz)
    yaw = math.atan2(siny, cosy)
    sinp = max(-1.0, min(1.0, 2.0 * (qw * qy - qz * qx)))
    pitch = math.asin(sinp)
    sinr = 2.0 * (qw * qx + qy * qz)
    cosr = 1.0 - 2.0 * (qx * qx + qy * qy)
    roll = math.atan2(sinr, cosr)
    return yaw, pitch, roll


def _quat_from_ypr(yaw: float, pitch: float = 0.0, roll: float = 0.0) -> tuple[float, float, float, float]:
    """Unit quaternion (x, y, z, w) from Z-Y-X Euler angles in radians."""
    cy, sy = math.cos(yaw / 2), math.sin(yaw / 2)
    cp, sp = math.cos(pitch / 2), math.sin(pitch / 2)
    cr, sr = math.cos(roll / 2), math.sin(roll / 2)
    return (
        sr * cp * cy - cr * sp * sy,
        cr * sp * cy + sr * cp * sy,
        cr * cp * sy - sr * sp * cy,
        cr * cp * cy + sr * sp * sy,
    )


@dataclass(frozen=True)
class Pose2D:
    """A planar pose: position (m), heading yaw (rad, CCW from +x) and its stamp (s)."""

    x: float
    y: float
    yaw: float
    stamp_s: float = 0.0

    @property
    def z(self) -> float:
        return 0.0

    @property
    def pitch(self) -> float:
        return 0.0

    @classmethod
    def from_pose3d(cls, pose: Pose3D) -> Pose2D:
        """Drop height, roll and pitch of a 3D pose (keeps x, y, yaw, stamp)."""
        return cls(pose.x, pose.y, pose.yaw, pose.stamp_s)

    def to_pose3d(self, z: float = 0.0) -> Pose3D:
        return Pose3D.from_xyz_ypr(self.x, self.y, z, self.yaw, stamp_s=self.stamp_s)


@dataclass(frozen=True)
class Pose3D:
    """A 3D pose: position (m), orientation quaternion (x, y, z, w) and stamp (s)."""

    x: float
    y: float
    z: float
    qx: float = 0.0
    qy: float = 0.0
    qz: float = 0.0
    qw: float = 1.0
    stamp_s: float = 0.0

    def __post_init__(self) -> None:
        norm = math.sqrt(self.qx**2 + self.qy**2 + self.qz**2 + self.qw**2)
        if not math.isfinite(norm) or norm < 1e-9:
            raise InvalidRequestError(
                f"pose orientation quaternion ({self.qx}, {self.qy}, {self.qz}, {self.qw}) "
                "is zero or not finite"
            )
        if abs(norm - 1.0) > 1e-9:
            for name in ("qx", "qy", "qz", "qw"):
                object.__setattr__(self, name, getattr(self, name) / norm)

    @property
    def yaw(self) -> float:
        return _yaw_pitch_roll(self.qx, self.qy, self.qz, self.qw)[0]

    @property
    def pitch(self) -> float:
        return _yaw_pitch_roll(self.qx, self.qy, self.qz, self.qw)[1]

    @property
    def roll(self) -> float:
        return _yaw_pitch_roll(self.qx, self.qy, self.qz, self.qw)[2]

    @classmethod
    def from_xyz_quat(
        cls, position: tuple[float, float, float],
        quaternion_xyzw: tuple[float, float, float, float], stamp_s: float = 0.0
    ) -> Pose3D:
        """Build from a position triple and a quaternion in ROS (x, y, z, w) order."""
        x, y, z = (float(v) for v in position)
        qx, qy, qz, qw = (float(v) for v in quaternion_xyzw)
        return cls(x, y, z, qx, qy, qz, qw, float(stamp_s))

    @classmethod
    def from_xyz_ypr(
        cls, x: float, y: float, z: float, yaw: float, pitch: float = 0.0, roll: float = 0.0, *, stamp_s: float = 0.0
    ) -> Pose3D:
        """Build from a position and Z-Y-X Euler angles (radians)."""
        qx, qy, qz, qw = _quat_from_ypr(yaw, pitch, roll)
        return cls(float(x), float(y), float(z), qx, qy, qz, qw, float(stamp_s))

    @classmethod
    def from_pose2d(cls, pose: Pose2D, z: float = 0.0) -> Pose3D:
        return pose.to_pose3d(z)


Pose = Union[Pose2D, Pose3D]


def pose_from_odometry_msg(msg: Any) -> Pose3D:
    """Read a ``nav_msgs/Odometry`` (or ``geometry_msgs/PoseStamped``) message object.

    Duck-typed: works with rclpy messages and with messages deserialised by `rosbags`,
    without importing either.
    """
    try:
        stamp = msg.header.stamp
        stamp_s = float(stamp.sec) + float(stamp.nanosec) / 1e9
        pose = msg.pose.pose if hasattr(msg.pose, "pose") else msg.pose
        p, q = pose.position, pose.orientation
        return Pose3D(float(p.x), float(p.y), float(p.z), float(q.x), float(q.y), float(q.z), float(q.w), stamp_s)
    except AttributeError as exc:
        raise InvalidRequestError(f"not an odometry/pose message: {exc}") from exc


def _interpolate(a: Pose, b: Pose, stamp_s: float) -> Pose:
    """Pose at `stamp_s` between `a` and `b` (linear position, shortest-path rotation)."""
    span = b.stamp_s - a.stamp_s
    t = 0.0 if span <= 0 else (stamp_s - a.stamp_s) / span
    if isinstance(a, Pose2D) and isinstance(b, Pose2D):
        yaw = wrap_angle(a.yaw + t * wrap_angle(b.yaw - a.yaw))
        return Pose2D(a.x + t * (b.x - a.x), a.y + t * (b.y - a.y), yaw, stamp_s)
    assert isinstance(a, Pose3D) and isinstance(b, Pose3D)
    qa = (a.qx, a.qy, a.qz, a.qw)
    qb = (b.qx, b.qy, b.qz, b.qw)
    dot = sum(u * v for u, v in zip(qa, qb))
    if dot < 0.0:  # take the short way round
        qb = (-qb[0], -qb[1], -qb[2], -qb[3])
        dot = -dot
    if dot > 0.9995:
        q = [u + t * (v - u) for u, v in zip(qa, qb)]
    else:
        theta = math.acos(dot)
        s0 = math.sin((1 - t) * theta) / math.sin(theta)
        s1 = math.sin(t * theta) / math.sin(theta)
        q = [s0 * u + s1 * v for u, v in zip(qa, qb)]
    return Pose3D(
        a.x + t * (b.x - a.x), a.y + t * (b.y - a.y), a.z + t * (b.z - a.z), q[0], q[1], q[2], q[3], stamp_s
    )


class PoseHistory:
    """A bounded, time-ordered buffer of poses with interpolated look-up.

    Poses older than ``max_age_s`` before the newest one are dropped on every `add`, so
    memory stays bounded on a long-running robot. `at` interpolates between the two
    poses around a stamp; a stamp outside the stored span gives None unless it lies
    within ``tolerance_s`` of an end, in which case that end pose is used (odometry often
    lags the camera by a few milliseconds).
    """

    def __init__(self, max_age_s: float = 60.0, *, tolerance_s: float = 0.0) -> None:
        if not max_age_s > 0:
            raise InvalidRequestError(f"max_age_s must be positive, got {max_age_s}")
        if tolerance_s < 0:
            raise InvalidRequestError(f"tolerance_s must be >= 0, got {tolerance_s}")
        self.max_age_s = float(max_age_s)
        self.tolerance_s = float(tolerance_s)
        self._stamps: list[float] = []
        self._poses: list[Pose] = []

    def __len__(self) -> int:
        return len(self._poses)

    def clear(self) -> None:
        self._stamps.clear()
        self._poses.clear()

    @property
    def oldest(self) -> Pose | None:
        return self._poses[0] if self._poses else None

    @property
    def newest(self) -> Pose | None:
        return self._poses[-1] if self._poses else None

    def add(self, pose: Pose) -> None:
        """Insert a pose (out-of-order stamps are placed correctly; equal stamps replace)."""
        if not isinstance(pose, (Pose2D, Pose3D)):
            raise InvalidRequestError(f"expected Pose2D or Pose3D, got {type(pose).__name__}")
        if self._poses and type(pose) is not type(self._poses[0]):
            raise InvalidRequestError(
                f"cannot mix {type(pose).__name__} with {type(self._poses[0]).__name__} in one history"
            )
        if not math.isfinite(pose.stamp_s):
            raise InvalidRequestError(f"pose stamp must be finite, got {pose.stamp_s}")
        i = bisect.bisect_left(self._stamps, pose.stamp_s)
        if i < len(self._stamps) and self._stamps[i] == pose.stamp_s:
            self._poses[i] = pose
        else:
            self._stamps.insert(i, pose.stamp_s)
            self._poses.insert(i, pose)
        cutoff = self._stamps[-1] - self.max_age_s
        drop = bisect.bisect_left(self._stamps, cutoff)
        if drop:
            del self._stamps[:drop]
            del self._poses[:drop]

    def at(self, stamp_s: float) -> Pose | None:
        """The (interpolated) pose at `stamp_s`, or None when it is outside the history."""
        if not self._poses:
            return None
        first, last = self._stamps[0], self._stamps[-1]
        if stamp_s < first:
            if first - stamp_s <= self.tolerance_s:
                return self._with_stamp(self._poses[0], stamp_s)
            return None
        if stamp_s > last:
            if stamp_s - last <= self.tolerance_s:
                return self._with_stamp(self._poses[-1], stamp_s)
            return None
        i = bisect.bisect_left(self._stamps, stamp_s)
        if self._stamps[i] == stamp_s:
            return self._poses[i]
        return _interpolate(self._poses[i - 1], self._poses[i], stamp_s)

    @staticmethod
    def _with_stamp(pose: Pose, stamp_s: float) -> Pose:
        if isinstance(pose, Pose2D):
            return Pose2D(pose.x, pose.y, pose.yaw, stamp_s)
        return Pose3D(pose.x, pose.y, pose.z, pose.qx, pose.qy, pose.qz, pose.qw, stamp_s)


@dataclass(frozen=True)
class MotionEstimate:
    """The motion from one pose to another, in the first pose's heading frame.

    ``action`` is the dominant motion named with the ten-action vocabulary, or None when
    nothing passed its threshold. ``secondary`` lists the other motions that passed,
    strongest first.
    """

    action: str | None
    distance_m: float  # horizontal distance travelled (straight line)
    yaw_deg: float  # heading change, counter-clockwise positive (left)
    dz_m: float = 0.0  # height change, up positive
    pitch_deg: float = 0.0  # pitch change, nose-down positive
    forward_m: float = 0.0  # translation along the first pose's heading
    left_m: float = 0.0  # translation to the first pose's left
    duration_s: float = 0.0
    secondary: tuple[str, ...] = field(default_factory=tuple)


def motion_between(
    p0: Pose,
    p1: Pose,
    *,
    min_translation_m: float = 0.1,
    min_rotation_deg: float = 10.0,
    min_vertical_m: float | None = None,
    min_tilt_deg: float | None = None,
) -> MotionEstimate:
    """Name the dominant motion from `p0` to `p1`.

    Each motion component is scored by how many times it exceeds its threshold:
    horizontal translation (``min_translation_m``; forward/backward or left/right by the
    larger body-frame component), heading change (``min_rotation_deg``), height change
    (``min_vertical_m``, default the translation threshold) and, only when ``min_tilt_deg``
    is given, pitch change. Body pitch from odometry is usually flight dynamics rather
    than a camera tilt, so tilt is off by default. The highest score wins; when no
    component reaches its threshold the action is None.
    """
    if min_translation_m <= 0 or min_rotation_deg <= 0:
        raise InvalidRequestError("motion thresholds must be positive")
    min_vertical = min_translation_m if min_vertical_m is None else float(min_vertical_m)
    dx, dy = p1.x - p0.x, p1.y - p0.y
    c, s = math.cos(p0.yaw), math.sin(p0.yaw)
    forward = c * dx + s * dy
    left = -s * dx + c * dy
    distance = math.hypot(dx, dy)
    yaw_deg = math.degrees(wrap_angle(p1.yaw - p0.yaw))
    dz = p1.z - p0.z
    pitch_deg = math.degrees(wrap_angle(p1.pitch - p0.pitch))

    candidates: list[tuple[float, str]] = []
    if distance >= min_translation_m:
        if abs(forward) >= abs(left):
            name = "move forward" if forward > 0 else "move backward"
        else:
            name = "move left" if left > 0 else "move right"
        candidates.append((distance / min_translation_m, name))
    if abs(yaw_deg) >= min_rotation_deg:
        candidates.append((abs(yaw_deg) / min_rotation_deg, "rotate left" if yaw_deg > 0 else "rotate right"))
    if min_vertical > 0 and abs(dz) >= min_vertical:
        candidates.append((abs(dz) / min_vertical, "move upward" if dz > 0 else "move downward"))
    if min_tilt_deg is not None and min_tilt_deg > 0 and abs(pitch_deg) >= min_tilt_deg:
        candidates.append((abs(pitch_deg) / min_tilt_deg, "tilt downward" if pitch_deg > 0 else "tilt upward"))
    candidates.sort(key=lambda item: -item[0])
    names = [name for _, name in candidates]
    return MotionEstimate(
        action=names[0] if names else None,
        distance_m=distance,
        yaw_deg=yaw_deg,
        dz_m=dz,
        pitch_deg=pitch_deg,
        forward_m=forward,
        left_m=left,
        duration_s=p1.stamp_s - p0.stamp_s,
        secondary=tuple(names[1:]),
    )


def _magnitude_text(m: MotionEstimate, action: str) -> str:
    if action.startswith("rotate"):
        return f"about {abs(m.yaw_deg):.0f} degrees"
    if action.startswith("tilt"):
        return f"about {abs(m.pitch_deg):.0f} degrees"
    if action in ("move upward", "move downward"):
        return f"about {abs(m.dz_m):.1f} m"
    return f"about {m.distance_m:.1f} m"


def describe_motion(m: MotionEstimate) -> str:
    """A short phrase for a motion, e.g. "rotate left (about 90 degrees)".

    Secondary motions are appended ("move forward (about 2.0 m) and rotate right
    (about 12 degrees)"); no motion gives "stay in place".
    """
    if m.action is None:
        return "stay in place"
    text = f"{m.action} ({_magnitude_text(m, m.action)})"
    if m.secondary:
        extra = " and ".join(f"{a} ({_magnitude_text(m, a)})" for a in m.secondary)
        text += f" and {extra}"
    return text


def measured_action(history: PoseHistory, start_s: float, end_s: float) -> str | None:
    """The vocabulary action measured between two stamps, or None when either stamp is
    outside the recorded odometry (the VLM's guess is then kept). This is the motion
    source the perception worker uses when `perception.use_odometry` is on."""
    start, end = history.at(start_s), history.at(end_s)
    if start is None or end is None:
        return None
    return motion_between(start, end).action
