"""Tests for odometry-grounded motion (embodied_r_ros.core.perception.odometry)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.perception.odometry import (
    MOTION_ACTIONS,
    Pose2D,
    Pose3D,
    PoseHistory,
    describe_motion,
    motion_between,
    pose_from_odometry_msg,
    wrap_angle,
)
from embodied_r_ros.sample_data.scene import ACTIONS, CameraPose, render_clip

DEG = math.pi / 180


def test_vocabulary_matches_scene_actions():
    assert MOTION_ACTIONS == ACTIONS
    assert len(set(MOTION_ACTIONS)) == 10


def test_wrap_angle():
    assert wrap_angle(0.0) == 0.0
    assert wrap_angle(3 * math.pi / 2) == pytest.approx(-math.pi / 2)
    assert wrap_angle(-3 * math.pi / 2) == pytest.approx(math.pi / 2)


# --- poses ----------------------------------------------------------------------------


def test_pose3d_euler_round_trip_and_normalisation():
    p = Pose3D.from_xyz_ypr(1, 2, 3, yaw=0.7, pitch=-0.2, roll=0.1, stamp_s=4.0)
    assert (p.yaw, p.pitch, p.roll) == pytest.approx((0.7, -0.2, 0.1))
    assert math.isclose(p.qx**2 + p.qy**2 + p.qz**2 + p.qw**2, 1.0)
    q = Pose3D(0, 0, 0, 0, 0, 2.0, 2.0)  # un-normalised: 90 degrees about z
    assert (q.qz, q.qw) == pytest.approx((math.sqrt(0.5), math.sqrt(0.5)))
    assert q.yaw == pytest.approx(math.pi / 2)
    with pytest.raises(InvalidRequestError):
        Pose3D(0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(InvalidRequestError):
        Pose3D(0, 0, 0, float("nan"), 0, 0, 1)


def test_pose_conversions():
    p2 = Pose2D(1.0, -2.0, 1.2, 5.0)
    p3 = p2.to_pose3d(z=0.5)
    assert (p3.x, p3.y, p3.z, p3.stamp_s) == (1.0, -2.0, 0.5, 5.0)
    assert p3.yaw == pytest.approx(1.2)
    back = Pose2D.from_pose3d(p3)
    assert (back.x, back.y, back.stamp_s) == (1.0, -2.0, 5.0)
    assert back.yaw == pytest.approx(1.2)
    assert Pose3D.from_pose2d(p2).z == 0.0
    q = Pose3D.from_xyz_quat((1, 2, 3), (0, 0, math.sin(0.25), math.cos(0.25)), stamp_s=2)
    assert q.yaw == pytest.approx(0.5)


def test_pose_from_odometry_message_duck_typed():
    msg = SimpleNamespace(
        header=SimpleNamespace(stamp=SimpleNamespace(sec=12, nanosec=500_000_000), frame_id="odom"),
        pose=SimpleNamespace(
            pose=SimpleNamespace(
                position=SimpleNamespace(x=1.0, y=2.0, z=3.0),
                orientation=SimpleNamespace(x=0.0, y=0.0, z=math.sin(0.5), w=math.cos(0.5)),
            ),
            covariance=[0.0] * 36,
        ),
    )
    p = pose_from_odometry_msg(msg)
    assert p.stamp_s == 12.5 and (p.x, p.y, p.z) == (1.0, 2.0, 3.0)
    assert p.yaw == pytest.approx(1.0)
    # geometry_msgs/PoseStamped: pose without the covariance wrapper.
    stamped = SimpleNamespace(header=msg.header, pose=msg.pose.pose)
    assert pose_from_odometry_msg(stamped).x == 1.0
    with pytest.raises(InvalidRequestError):
        pose_from_odometry_msg(SimpleNamespace(header=None))


# --- motion ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "heading_deg,dx,dy,expected",
    [
        (0, 1.0, 0.0, "move forward"),
        (0, -1.0, 0.0, "move backward"),
        (0, 0.0, 1.0, "move left"),
        (0, 0.0, -1.0, "move right"),
        # Facing +y (north): moving north is forward, moving east is to the right.
        (90, 0.0, 1.0, "move forward"),
        (90, 1.0, 0.0, "move right"),
        (90, -1.0, 0.0, "move left"),
        (180, 1.0, 0.0, "move backward"),
        (-45, 1.0, -1.0, "move forward"),
    ],
)
def test_translation_in_body_frame(heading_deg, dx, dy, expected):
    p0 = Pose2D(2.0, 3.0, heading_deg * DEG, 0.0)
    p1 = Pose2D(2.0 + dx, 3.0 + dy, heading_deg * DEG, 1.0)
    m = motion_between(p0, p1)
    assert m.action == expected
    assert m.distance_m == pytest.approx(math.hypot(dx, dy))
    assert m.duration_s == 1.0
    assert abs(m.yaw_deg) < 1e-9


def test_forward_and_left_components():
    m = motion_between(Pose2D(0, 0, 90 * DEG), Pose2D(-0.5, 2.0, 90 * DEG))
    assert m.forward_m == pytest.approx(2.0)
    assert m.left_m == pytest.approx(0.5)


@pytest.mark.parametrize(
    "yaw0,yaw1,expected,deg",
    [
        (0, 90, "rotate left", 90),
        (0, -30, "rotate right", -30),
        (170, -170, "rotate left", 20),  # across the +-180 seam: CCW by 20
        (-170, 170, "rotate right", -20),
        (45, 180, "rotate left", 135),
    ],
)
def test_rotation_sign_and_wrap(yaw0, yaw1, expected, deg):
    m = motion_between(Pose2D(1, 1, yaw0 * DEG), Pose2D(1, 1, yaw1 * DEG))
    assert m.action == expected
    assert m.yaw_deg == pytest.approx(deg)
    assert m.distance_m == 0.0


def test_vertical_and_tilt():
    a = Pose3D.from_xyz_ypr(0, 0, 1.0, 0.0)
    up = Pose3D.from_xyz_ypr(0, 0, 1.6, 0.0)
    assert motion_between(a, up).action == "move upward"
    assert motion_between(up, a).action == "move downward"
    assert motion_between(a, up).dz_m == pytest.approx(0.6)
    down_look = Pose3D.from_xyz_ypr(0, 0, 1.0, 0.0, pitch=25 * DEG)
    # Tilt is ignored unless asked for.
    assert motion_between(a, down_look).action is None
    m = motion_between(a, down_look, min_tilt_deg=10)
    assert m.action == "tilt downward" and m.pitch_deg == pytest.approx(25)
    assert motion_between(down_look, a, min_tilt_deg=10).action == "tilt upward"


def test_below_thresholds_is_none():
    m = motion_between(Pose2D(0, 0, 0), Pose2D(0.05, 0.02, 5 * DEG))
    assert m.action is None and m.secondary == ()
    assert describe_motion(m) == "stay in place"


def test_dominant_motion_wins_and_secondary_listed():
    # 2 m forward (20x threshold) with a 15 degree turn (1.5x): forward dominates.
    m = motion_between(Pose2D(0, 0, 0), Pose2D(2.0, 0.0, -15 * DEG))
    assert m.action == "move forward"
    assert m.secondary == ("rotate right",)
    assert describe_motion(m) == "move forward (about 2.0 m) and rotate right (about 15 degrees)"
    # 90 degree turn (9x) with 0.3 m drift (3x): the turn dominates.
    m = motion_between(Pose2D(0, 0, 0), Pose2D(0.3, 0.0, 90 * DEG))
    assert m.action == "rotate left"
    assert describe_motion(m).startswith("rotate left (about 90 degrees)")
    # Thresholds are configurable.
    assert motion_between(Pose2D(0, 0, 0), Pose2D(0.3, 0, 0), min_translation_m=0.5).action is None


def test_describe_motion_simple():
    m = motion_between(Pose2D(0, 0, 0), Pose2D(0, 0, 90 * DEG))
    assert describe_motion(m) == "rotate left (about 90 degrees)"
    m = motion_between(Pose3D.from_xyz_ypr(0, 0, 1, 0), Pose3D.from_xyz_ypr(0, 0, 2.5, 0))
    assert describe_motion(m) == "move upward (about 1.5 m)"


def test_bad_thresholds():
    with pytest.raises(InvalidRequestError):
        motion_between(Pose2D(0, 0, 0), Pose2D(1, 0, 0), min_translation_m=0)


# --- history --------------------------------------------------------------------------


def test_history_interpolates_and_bounds():
    h = PoseHistory(max_age_s=100)
    assert h.at(0.0) is None
    h.add(Pose2D(0.0, 0.0, 0.0, 10.0))
    h.add(Pose2D(2.0, 4.0, 90 * DEG, 12.0))
    mid = h.at(11.0)
    assert isinstance(mid, Pose2D)
    assert (mid.x, mid.y, mid.stamp_s) == pytest.approx((1.0, 2.0, 11.0))
    assert mid.yaw == pytest.approx(45 * DEG)
    assert h.at(10.0) == Pose2D(0.0, 0.0, 0.0, 10.0)
    assert h.at(9.99) is None and h.at(12.01) is None


def test_history_yaw_interpolation_takes_short_way():
    h = PoseHistory()
    h.add(Pose2D(0, 0, 170 * DEG, 0.0))
    h.add(Pose2D(0, 0, -170 * DEG, 1.0))
    assert abs(h.at(0.5).yaw) == pytest.approx(math.pi)
    assert h.at(0.25).yaw == pytest.approx(175 * DEG)


def test_history_tolerance_out_of_order_and_replace():
    h = PoseHistory(tolerance_s=0.05)
    h.add(Pose2D(1.0, 0, 0, 2.0))
    h.add(Pose2D(0.0, 0, 0, 1.0))  # older, arrives late
    assert h.oldest.stamp_s == 1.0 and h.newest.stamp_s == 2.0
    assert h.at(1.5).x == pytest.approx(0.5)
    assert h.at(2.04).x == 1.0 and h.at(2.04).stamp_s == 2.04
    assert h.at(0.96).x == 0.0
    assert h.at(2.1) is None
    h.add(Pose2D(5.0, 0, 0, 2.0))  # same stamp replaces
    assert len(h) == 2 and h.at(2.0).x == 5.0


def test_history_drops_old_poses():
    h = PoseHistory(max_age_s=1.0)
    for i in range(50):
        h.add(Pose2D(float(i), 0.0, 0.0, i * 0.1))
    assert len(h) == 11  # stamps 3.9 .. 4.9
    assert h.oldest.stamp_s == pytest.approx(3.9)
    assert h.at(1.0) is None
    h.clear()
    assert len(h) == 0 and h.newest is None


def test_history_rejects_bad_input():
    with pytest.raises(InvalidRequestError):
        PoseHistory(max_age_s=0)
    h = PoseHistory()
    h.add(Pose2D(0, 0, 0, 0.0))
    with pytest.raises(InvalidRequestError):
        h.add(Pose3D(0, 0, 0, stamp_s=1.0))
    with pytest.raises(InvalidRequestError):
        h.add("pose")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError):
        h.add(Pose2D(0, 0, 0, float("nan")))


def test_history_pose3d_slerp():
    h = PoseHistory()
    h.add(Pose3D.from_xyz_ypr(0, 0, 0, 0.0, stamp_s=0.0))
    h.add(Pose3D.from_xyz_ypr(2, 0, 1, 100 * DEG, stamp_s=2.0))
    mid = h.at(1.0)
    assert isinstance(mid, Pose3D)
    assert (mid.x, mid.z) == pytest.approx((1.0, 0.5))
    assert mid.yaw == pytest.approx(50 * DEG)


# --- on the synthetic clip's known camera path ---------------------------------------


def _segment_magnitude_ok(seg, m) -> bool:
    if seg.action.startswith("rotate"):
        return abs(abs(m.yaw_deg) - seg.amount) < 0.5
    if seg.action.startswith("tilt"):
        return abs(abs(m.pitch_deg) - seg.amount) < 0.5
    if seg.action in ("move upward", "move downward"):
        return abs(abs(m.dz_m) - seg.amount) < 0.01
    return abs(m.distance_m - seg.amount) < 0.01


def test_default_path_segments_recovered_from_odometry():
    clip = render_clip(fps=2.0, width=64, height=48)
    history = PoseHistory(max_age_s=1000.0)
    for pose in clip.poses:
        history.add(pose.to_pose2d())
    assert len(clip.segments) >= 8
    for seg in clip.segments:
        p0, p1 = history.at(seg.start_s), history.at(seg.end_s)
        assert p0 is not None and p1 is not None
        m = motion_between(p0, p1)
        assert m.action == seg.action, (seg, m)
        assert _segment_magnitude_ok(seg, m), (seg, m)
        assert m.secondary == ()
        # The phrase carries the action and the scripted amount.
        unit = "degrees" if seg.unit == "deg" else "m"
        amount = f"{seg.amount:.0f}" if unit == "degrees" else f"{seg.amount:.1f}"
        assert describe_motion(m) == f"{seg.action} (about {amount} {unit})"


def test_all_ten_actions_recovered_from_3d_odometry():
    path = [
        ("move upward", 0.5),
        ("tilt downward", 15.0),
        ("move forward", 1.0),
        ("tilt upward", 15.0),
        ("move downward", 0.5),
        ("rotate right", 45.0),
        ("move backward", 1.0),
        ("move left", 1.0),
        ("rotate left", 60.0),
        ("move right", 1.0),
    ]
    clip = render_clip(path, fps=2.0, width=64, height=48, start_pose=CameraPose(5.0, 4.0, 0.0))
    assert {s.action for s in clip.segments} == set(MOTION_ACTIONS)
    # Every segment boundary falls on a frame stamp, so the frame poses bracket it.
    assert all(min(abs(t - s.end_s) for t in clip.stamps_s) < 1e-9 for s in clip.segments)
    history = PoseHistory(max_age_s=1000.0)
    for pose in clip.poses:
        history.add(pose.to_pose3d())
    for seg in clip.segments:
        m = motion_between(history.at(seg.start_s), history.at(seg.end_s), min_tilt_deg=10.0)
        assert m.action == seg.action, (seg, m)
        assert _segment_magnitude_ok(seg, m), (seg, m)
