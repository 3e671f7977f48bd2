"""A synthetic egocentric clip of a textured room, rendered with a known camera path.

The renderer is a small numpy ray caster: the room is an axis-aligned box (floor, four
textured walls, ceiling) holding a few coloured objects that are vertical prisms (boxes,
a pillar, a cabinet), a ball, and a door painted onto one wall. Each image column casts
one horizontal ray; per pixel the height along that ray decides whether it shows floor,
wall, ceiling or an object, and a depth buffer resolves occlusion. Camera tilt is the
classic horizon shift of 2.5D engines. Walls, floor and ceiling carry random brick,
tile and poster patterns (from a seed) so feature detectors such as ORB find plenty of
corners, as in a real room.

Besides the pixels, the renderer records which object every pixel shows, so "when was
the red box first seen" is answered from what was actually drawn (projected into the
image and not hidden), not from a guess.

World frame: x east, y north, z up, yaw counter-clockwise from +x (REP 103). The camera
moves on scripted segments ("move forward 3 m", "rotate left 90 degrees", ...) at
constant speed, so its pose at every instant is known exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from embodied_r_ros.core.errors import InvalidRequestError
from embodied_r_ros.core.prompts.perception import ACTIONS

__all__ = [
    "ACTIONS",
    "DEFAULT_PATH",
    "CameraPose",
    "Room",
    "SceneObject",
    "Segment",
    "SyntheticClip",
    "default_objects",
    "render_clip",
]


# The default camera script: (action, amount); metres for moves, degrees for turns/tilts.
DEFAULT_PATH: tuple[tuple[str, float], ...] = (
    ("move forward", 3.0),
    ("rotate left", 90.0),
    ("move forward", 2.5),
    ("rotate right", 45.0),
    ("move forward", 1.5),
    ("rotate left", 135.0),
    ("move left", 1.0),
    ("move forward", 2.0),
    ("rotate left", 90.0),
)

_PPM = 64  # texture pixels per metre
_BIG = 1e9


@dataclass(frozen=True)
class Room:
    """The room box: x in [0, size_x], y in [0, size_y], z in [0, height] (metres)."""

    size_x: float = 10.0
    size_y: float = 8.0
    height: float = 2.6


@dataclass(frozen=True)
class SceneObject:
    """One named object. ``position`` is the centre of its footprint at mid-height.

    kind: "box" (size = x, y, z extents), "cylinder" (size = diameter, diameter, height),
    "sphere" (size = diameter x3, resting on the floor) or "door" (painted on a wall;
    size = width, thickness 0, height).
    """

    name: str
    colour: str
    rgb: tuple[int, int, int]
    kind: str
    position: tuple[float, float, float]
    size: tuple[float, float, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "colour": self.colour,
            "rgb": list(self.rgb),
            "kind": self.kind,
            "position": [round(v, 4) for v in self.position],
            "size": [round(v, 4) for v in self.size],
        }


@dataclass(frozen=True)
class CameraPose:
    """Camera pose: ground position (m), heading yaw (rad, CCW from +x, wrapped to
    [-pi, pi)), eye height z (m) and pitch (rad, positive looks down), at ``stamp_s``."""

    x: float
    y: float
    yaw: float
    z: float = 1.2
    pitch: float = 0.0
    stamp_s: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {
            "stamp_s": round(self.stamp_s, 6),
            "x": round(self.x, 6),
            "y": round(self.y, 6),
            "z": round(self.z, 6),
            "yaw": round(self.yaw, 6),
            "pitch": round(self.pitch, 6),
        }

    def to_pose2d(self):  # -> embodied_r_ros.core.perception.odometry.Pose2D
        from embodied_r_ros.core.perception.odometry import Pose2D

        return Pose2D(self.x, self.y, self.yaw, self.stamp_s)

    def to_pose3d(self):  # -> embodied_r_ros.core.perception.odometry.Pose3D
        from embodied_r_ros.core.perception.odometry import Pose3D

        return Pose3D.from_xyz_ypr(self.x, self.y, self.z, self.yaw, self.pitch, stamp_s=self.stamp_s)


@dataclass(frozen=True)
class Segment:
    """One scripted move: its action label, amount (m or degrees), time span and poses."""

    action: str
    amount: float
    unit: str
    start_s: float
    end_s: float
    start_pose: CameraPose
    end_pose: CameraPose

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "amount": self.amount,
            "unit": self.unit,
            "start_s": round(self.start_s, 6),
            "end_s": round(self.end_s, 6),
            "start_pose": self.start_pose.to_dict(),
            "end_pose": self.end_pose.to_dict(),
        }


def default_objects(room: Room = Room()) -> list[SceneObject]:
    """The five objects of the sample scene, placed so each first appears at a
    different moment of the default path."""
    return [
        SceneObject("red box", "red", (200, 35, 35), "box", (8.0, 2.0, 0.35), (0.8, 0.8, 0.7)),
        SceneObject("yellow ball", "yellow", (235, 205, 40), "sphere", (6.5, 6.5, 0.3), (0.6, 0.6, 0.6)),
        SceneObject("blue pillar", "blue", (45, 80, 210), "cylinder", (2.5, 6.0, 1.0), (0.5, 0.5, 2.0)),
        SceneObject("green door", "green", (40, 150, 70), "door", (0.0, 6.0, 1.05), (1.0, 0.0, 2.1)),
        SceneObject(
            "orange cabinet", "orange", (235, 125, 30), "box", (1.8, 0.35, 0.8), (1.2, 0.5, 1.6)
        ),
    ]


# --- path ----------------------------------------------------------------------------


def _parse_path(path_spec: Iterable[Any] | None) -> list[tuple[str, float]]:
    steps: list[tuple[str, float]] = []
    for item in DEFAULT_PATH if path_spec is None else path_spec:
        amount: Any  # as given (may be None or not a number: checked below), then a float
        if isinstance(item, dict):
            action, amount = item.get("action"), item.get("amount")
        else:
            try:
                action, amount = item
            except (TypeError, ValueError) as exc:
                raise InvalidRequestError(f"path step {item!r} is not (action, amount)") from exc
        if action not in ACTIONS:
            raise InvalidRequestError(f"unknown path action {action!r}; use one of {ACTIONS}")
        try:
            amount = float(amount)
        except (TypeError, ValueError) as exc:
            raise InvalidRequestError(f"path amount {amount!r} for {action!r} is not a number") from exc
        if not amount > 0:
            raise InvalidRequestError(f"path amount for {action!r} must be positive, got {amount}")
        steps.append((action, amount))
    if not steps:
        raise InvalidRequestError("the camera path has no steps")
    return steps


def _wrap(a: float) -> float:
    return (a + math.pi) % (2 * math.pi) - math.pi


class _Trajectory:
    """Piecewise-constant-velocity camera motion through the scripted segments."""

    def __init__(
        self,
        steps: Sequence[tuple[str, float]],
        start: CameraPose,
        linear_speed: float,
        angular_speed_deg: float,
    ) -> None:
        self.segments: list[Segment] = []
        # Unwrapped state (x, y, z, yaw, pitch) at the start of each segment.
        self._states: list[tuple[float, float, float, float, float]] = []
        x, y, z, yaw, pitch = start.x, start.y, start.z, start.yaw, start.pitch
        t = start.stamp_s
        for action, amount in steps:
            verb, direction = action.split(" ", 1)
            if verb in ("move",):
                duration = amount / linear_speed
                unit = "m"
            else:
                duration = amount / angular_speed_deg
                unit = "deg"
            self._states.append((x, y, z, yaw, pitch))
            start_pose = CameraPose(x, y, _wrap(yaw), z, pitch, t)
            x, y, z, yaw, pitch = self._apply(action, amount, 1.0, (x, y, z, yaw, pitch))
            end_pose = CameraPose(x, y, _wrap(yaw), z, pitch, t + duration)
            self.segments.append(Segment(action, amount, unit, t, t + duration, start_pose, end_pose))
            t += duration
        self.start_s = start.stamp_s
        self.end_s = t

    @staticmethod
    def _apply(
        action: str, amount: float, frac: float, state: tuple[float, float, float, float, float]
    ) -> tuple[float, float, float, float, float]:
        x, y, z, yaw, pitch = state
        d = amount * frac
        c, s = math.cos(yaw), math.sin(yaw)
        if action == "move forward":
            x, y = x + d * c, y + d * s
        elif action == "move backward":
            x, y = x - d * c, y - d * s
        elif action == "move left":
            x, y = x - d * s, y + d * c
        elif action == "move right":
            x, y = x + d * s, y - d * c
        elif action == "move upward":
            z += d
        elif action == "move downward":
            z -= d
        elif action == "rotate left":
            yaw += math.radians(d)
        elif action == "rotate right":
            yaw -= math.radians(d)
        elif action == "tilt downward":
            pitch += math.radians(d)
        elif action == "tilt upward":
            pitch -= math.radians(d)
        return x, y, z, yaw, pitch

    def segment_index_at(self, t: float) -> int:
        for i, seg in enumerate(self.segments):
            if t < seg.end_s:
                return i
        return len(self.segments) - 1

    def pose_at(self, t: float) -> CameraPose:
        t = min(max(t, self.start_s), self.end_s)
        i = self.segment_index_at(t)
        seg = self.segments[i]
        span = seg.end_s - seg.start_s
        frac = 0.0 if span <= 0 else min(max((t - seg.start_s) / span, 0.0), 1.0)
        x, y, z, yaw, pitch = self._apply(seg.action, seg.amount, frac, self._states[i])
        return CameraPose(x, y, _wrap(yaw), z, pitch, t)


# --- textures ------------------------------------------------------------------------


def _noise(rng: np.random.Generator, shape: tuple[int, int], amp: float) -> np.ndarray:
    return rng.normal(0.0, amp, size=shape).astype(np.float32)


def _brick_wall(rng: np.random.Generator, h: int, w: int, base: tuple[int, int, int]) -> np.ndarray:
    tex = np.empty((h, w, 3), np.float32)
    brick_h, brick_w, mortar = 13, 34, 2
    for r0 in range(0, h, brick_h):
        offset = (r0 // brick_h) % 2 * (brick_w // 2)
        for c0 in range(-offset, w, brick_w):
            shade = rng.uniform(0.72, 1.12)
            tint = rng.uniform(-12, 12, size=3)
            colour = np.clip(np.array(base, np.float32) * shade + tint, 0, 255)
            a, b = max(c0, 0), min(c0 + brick_w, w)
            tex[r0 : r0 + brick_h, a:b] = colour
            tex[r0 : r0 + mortar, a:b] = (205, 200, 190)
            tex[r0 : r0 + brick_h, a : min(a + mortar, b)] = (205, 200, 190)
    tex += _noise(rng, (h, w), 7.0)[:, :, None]
    return tex


def _painted_wall(rng: np.random.Generator, h: int, w: int, base: tuple[int, int, int]) -> np.ndarray:
    tex = np.empty((h, w, 3), np.float32)
    tex[:] = base
    tex += _noise(rng, (h, w), 5.0)[:, :, None]
    yy, xx = np.mgrid[0:h, 0:w]
    # Dark blotches and speckles, like a worn wall.
    for _ in range(w // 12):
        cx, cy, rad = rng.integers(0, w), rng.integers(0, h), rng.integers(3, 10)
        mask = (xx - cx) ** 2 + (yy - cy) ** 2 <= rad * rad
        tex[mask] *= rng.uniform(0.55, 0.85)
    # Framed posters with stripes in muted colours (never pure red/green/blue/yellow).
    palette = [(120, 90, 140), (90, 110, 120), (140, 110, 80), (70, 70, 90), (150, 140, 150), (100, 120, 100)]
    for c0 in range(int(rng.integers(20, 60)), w - 70, int(rng.integers(150, 220))):
        pw, ph = int(rng.integers(45, 80)), int(rng.integers(35, 60))
        r0 = int(rng.integers(35, max(36, h - ph - 40)))
        tex[r0 - 3 : r0 + ph + 3, c0 - 3 : c0 + pw + 3] = (40, 35, 30)
        fill = np.array(palette[int(rng.integers(len(palette)))], np.float32)
        tex[r0 : r0 + ph, c0 : c0 + pw] = fill
        stripe = int(rng.integers(4, 9))
        band = ((yy[r0 : r0 + ph, c0 : c0 + pw] // stripe + xx[r0 : r0 + ph, c0 : c0 + pw] // (stripe * 2)) % 2) == 0
        tex[r0 : r0 + ph, c0 : c0 + pw][band] *= 0.6
    return tex


def _build_wall_atlas(rng: np.random.Generator, room: Room, objects: Sequence[SceneObject]):
    """Wall textures side by side (south, east, north, west, each walked CCW) + object ids."""
    h = int(round(room.height * _PPM))
    lengths = [room.size_x, room.size_y, room.size_x, room.size_y]
    bases = [(190, 150, 120), (185, 190, 200), (175, 200, 215), (210, 180, 165)]
    styles = ["brick", "painted", "painted", "brick"]
    parts = []
    for length, base, style in zip(lengths, bases, styles):
        w = int(round(length * _PPM))
        parts.append((_brick_wall if style == "brick" else _painted_wall)(rng, h, w, base))
    atlas = np.concatenate(parts, axis=1)
    # Skirting board along the floor.
    atlas[h - 6 :, :] = (80, 65, 55)
    ids = np.zeros(atlas.shape[:2], np.uint8)
    offsets = np.cumsum([0] + [p.shape[1] for p in parts])[:-1]
    for k, obj in enumerate(objects):
        if obj.kind != "door":
            continue
        wall, along = _wall_coordinate(room, obj.position[0], obj.position[1])
        u0 = int(offsets[wall] + (along - obj.size[0] / 2) * _PPM)
        u1 = int(offsets[wall] + (along + obj.size[0] / 2) * _PPM)
        r0 = h - int(obj.size[2] * _PPM)
        colour = np.array(obj.rgb, np.float32)
        atlas[r0:, u0 - 5 : u1 + 5] = (60, 45, 35)  # frame
        atlas[r0 + 5 :, u0:u1] = colour
        # Panels and a handle so the door has structure of its own.
        for pr0, pr1 in ((r0 + 14, r0 + 60), (r0 + 72, h - 14)):
            atlas[pr0:pr1, u0 + 8 : u1 - 8] = colour * 0.78
        hr = r0 + int(1.05 * _PPM)
        hc = u1 - 12 if (u1 - u0) > 30 else u1 - 4
        atlas[hr - 3 : hr + 3, hc - 6 : hc] = (215, 210, 190)
        ids[r0:, u0 - 5 : u1 + 5] = k + 1
    return np.clip(atlas, 0, 255).astype(np.uint8), ids, offsets


def _wall_coordinate(room: Room, x: float, y: float) -> tuple[int, float]:
    """Wall index (0 south, 1 east, 2 north, 3 west) and distance along it (CCW) of a
    point on the room boundary."""
    d = {
        0: abs(y - 0.0),
        1: abs(x - room.size_x),
        2: abs(y - room.size_y),
        3: abs(x - 0.0),
    }
    wall = min(d, key=d.__getitem__)
    along = [x, y, room.size_x - x, room.size_y - y][wall]
    return wall, along


def _floor_texture(rng: np.random.Generator, room: Room) -> np.ndarray:
    h, w = int(room.size_y * _PPM), int(room.size_x * _PPM)
    yy, xx = np.mgrid[0:h, 0:w]
    tile = _PPM // 2
    check = ((yy // tile + xx // tile) % 2).astype(np.float32)
    tex = np.empty((h, w, 3), np.float32)
    tex[:] = (150, 120, 90)
    tex += check[:, :, None] * np.array([-35, -30, -25], np.float32)
    # Per-tile variation, grout lines and grain.
    tiles = rng.uniform(0.85, 1.12, size=(h // tile + 1, w // tile + 1)).astype(np.float32)
    tex *= tiles[yy // tile, xx // tile][:, :, None]
    grout = (yy % tile < 2) | (xx % tile < 2)
    tex[grout] = (70, 60, 50)
    tex += _noise(rng, (h, w), 9.0)[:, :, None]
    for _ in range(60):
        cx, cy, rad = rng.integers(0, w), rng.integers(0, h), rng.integers(2, 6)
        mask = (xx - cx) ** 2 + (yy - cy) ** 2 <= rad * rad
        tex[mask] *= 0.6
    return np.clip(tex, 0, 255).astype(np.uint8)


def _ceiling_texture(rng: np.random.Generator, room: Room) -> np.ndarray:
    h, w = int(room.size_y * _PPM), int(room.size_x * _PPM)
    yy, xx = np.mgrid[0:h, 0:w]
    tex = np.full((h, w, 3), 215, np.float32)
    tex += _noise(rng, (h, w), 4.0)[:, :, None]
    panel = int(0.6 * _PPM)
    tex[(yy % panel < 2) | (xx % panel < 2)] = (160, 160, 165)
    for cy in range(int(1.5 * _PPM), h, 2 * _PPM):
        for cx in range(int(1.5 * _PPM), w, 2 * _PPM):
            tex[cy - 12 : cy + 12, cx - 20 : cx + 20] = (250, 250, 240)
            tex[cy - 13 : cy - 11, cx - 21 : cx + 21] = (120, 120, 120)
    return np.clip(tex, 0, 255).astype(np.uint8)


# --- renderer ------------------------------------------------------------------------


class _Renderer:
    """Ray-casting renderer for one room + objects; textures are built once from a seed."""

    def __init__(
        self, room: Room, objects: Sequence[SceneObject], width: int, height: int, hfov_deg: float, seed: int
    ) -> None:
        self.room = room
        self.objects = list(objects)
        self.width, self.height = width, height
        self.f = (width / 2.0) / math.tan(math.radians(hfov_deg) / 2.0)
        rng = np.random.default_rng(seed)
        self.wall_atlas, self.wall_ids, self.wall_offsets = _build_wall_atlas(rng, room, self.objects)
        self.floor = _floor_texture(rng, room)
        self.ceiling = _ceiling_texture(rng, room)
        # Column offsets: positive to the left of the optical axis.
        self.col_offset = ((width / 2.0) - (np.arange(width) + 0.5)) / self.f
        self.light = np.array([0.45, -0.75], np.float32)
        self.light /= np.linalg.norm(self.light)

    def render(self, pose: CameraPose) -> tuple[np.ndarray, np.ndarray]:
        """RGB uint8 image and per-pixel object id (0 = room, k+1 = objects[k])."""
        room, f = self.room, self.f
        h, w = self.height, self.width
        cy = h / 2.0 - f * math.tan(pose.pitch)
        vr = ((cy - (np.arange(h) + 0.5)) / f).astype(np.float64)[:, None]  # (H, 1)
        c, s = math.cos(pose.yaw), math.sin(pose.yaw)
        dx = c - s * self.col_offset  # ray direction, forward component 1
        dy = s + c * self.col_offset
        dx = np.where(np.abs(dx) < 1e-9, 1e-9, dx)
        dy = np.where(np.abs(dy) < 1e-9, 1e-9, dy)
        px, py, cam_h = pose.x, pose.y, pose.z

        # Walls: first boundary the ray leaves through.
        tx = np.where(dx > 0, (room.size_x - px) / dx, (0.0 - px) / dx)
        ty = np.where(dy > 0, (room.size_y - py) / dy, (0.0 - py) / dy)
        hit_x = tx < ty
        t_wall = np.where(hit_x, tx, ty)
        hx, hy = px + t_wall * dx, py + t_wall * dy
        wall = np.where(hit_x, np.where(dx > 0, 1, 3), np.where(dy > 0, 2, 0))
        along = np.choose(wall, [hx, hy, room.size_x - hx, room.size_y - hy])
        u_wall = np.clip(
            (self.wall_offsets[wall] + along * _PPM).astype(np.int64), 0, self.wall_atlas.shape[1] - 1
        )

        z_wall = cam_h + vr * t_wall[None, :]  # (H, W)
        depth = np.broadcast_to(t_wall[None, :], (h, w)).copy()
        img = np.empty((h, w, 3), np.uint8)
        ids = np.zeros((h, w), np.uint8)

        on_wall = (z_wall >= 0.0) & (z_wall <= room.height)
        rows = np.clip(((room.height - z_wall) * _PPM).astype(np.int64), 0, self.wall_atlas.shape[0] - 1)
        cols = np.broadcast_to(u_wall[None, :], (h, w))
        img[on_wall] = self.wall_atlas[rows[on_wall], cols[on_wall]]
        ids[on_wall] = self.wall_ids[rows[on_wall], cols[on_wall]]

        for below, tex, plane_h in ((True, self.floor, 0.0), (False, self.ceiling, room.height)):
            mask = (z_wall < 0.0) if below else (z_wall > room.height)
            if not mask.any():
                continue
            rr, cc = np.nonzero(mask)
            t_plane = (plane_h - cam_h) / vr[rr, 0]
            wx = px + t_plane * dx[cc]
            wy = py + t_plane * dy[cc]
            ti = np.clip((wy * _PPM).astype(np.int64), 0, tex.shape[0] - 1)
            tj = np.clip((wx * _PPM).astype(np.int64), 0, tex.shape[1] - 1)
            img[rr, cc] = tex[ti, tj]
            depth[rr, cc] = t_plane

        shade = np.clip(1.12 - 0.04 * depth, 0.6, 1.0)
        out = img.astype(np.float32) * shade[:, :, None]

        for k, obj in enumerate(self.objects):
            if obj.kind == "door":
                continue
            self._draw_object(k, obj, out, depth, ids, px, py, cam_h, dx, dy, vr)
        return np.clip(out, 0, 255).astype(np.uint8), ids

    def _draw_object(self, k, obj, out, depth, ids, px, py, cam_h, dx, dy, vr) -> None:
        ox, oy, _ = obj.position
        sx, sy, sz = obj.size
        base = np.array(obj.rgb, np.float32)
        if obj.kind == "box":
            x0, x1, y0, y1 = ox - sx / 2, ox + sx / 2, oy - sy / 2, oy + sy / 2
            ax0, ax1 = (x0 - px) / dx, (x1 - px) / dx
            ay0, ay1 = (y0 - py) / dy, (y1 - py) / dy
            tnx, tfx = np.minimum(ax0, ax1), np.maximum(ax0, ax1)
            tny, tfy = np.minimum(ay0, ay1), np.maximum(ay0, ay1)
            t_near = np.maximum(tnx, tny)
            t_far = np.minimum(tfx, tfy)
            hit = (t_near <= t_far) & (t_near > 1e-3)
            x_face = tnx >= tny
            nx = np.where(x_face, np.where(dx > 0, -1.0, 1.0), 0.0)
            ny = np.where(x_face, 0.0, np.where(dy > 0, -1.0, 1.0))
            hxp, hyp = px + t_near * dx, py + t_near * dy
            u = np.where(x_face, hyp - y0, hxp - x0)  # metres along the face
            face_len = np.where(x_face, sy, sx)
            z_lo, z_hi = 0.0, sz
        elif obj.kind in ("cylinder", "sphere"):
            r = sx / 2
            ex, ey = px - ox, py - oy
            a = dx * dx + dy * dy
            b = 2 * (ex * dx + ey * dy)
            cc = ex * ex + ey * ey - r * r
            disc = b * b - 4 * a * cc
            hit = disc > 0
            sq = np.sqrt(np.where(hit, disc, 0.0))
            t_near = (-b - sq) / (2 * a)
            t_far = (-b + sq) / (2 * a)
            hit &= t_near > 1e-3
            hxp, hyp = px + t_near * dx, py + t_near * dy
            nx, ny = (hxp - ox) / r, (hyp - oy) / r
            u = (np.arctan2(ny, nx) + math.pi) * r
            face_len = np.full_like(u, 2 * math.pi * r)
            z_lo, z_hi = 0.0, sz
        else:
            raise InvalidRequestError(f"unknown object kind {obj.kind!r}")
        if not hit.any():
            return
        cols = np.nonzero(hit)[0]
        tn, tf = t_near[cols], t_far[cols]
        v = vr  # (H, 1)
        z_side = cam_h + v * tn[None, :]  # (H, n)
        if obj.kind == "sphere":
            # Half-height of the sphere's slice through this column's ray.
            r = sx / 2
            lateral = np.abs((px - ox) * dy[cols] - (py - oy) * dx[cols]) / np.hypot(dx[cols], dy[cols])
            half = np.sqrt(np.clip(r * r - lateral * lateral, 0.0, None))
            side = (z_side >= r - half[None, :]) & (z_side <= r + half[None, :])
            top = np.zeros_like(side)
            t_pix = np.broadcast_to(tn[None, :], side.shape)
            zz = z_side
        else:
            side = (z_side >= z_lo) & (z_side <= z_hi)
            with np.errstate(divide="ignore", invalid="ignore"):
                t_top = (z_hi - cam_h) / v  # depth where the ray crosses the top plane
            top = (~side) & (cam_h > z_hi) & (t_top >= tn[None, :]) & (t_top <= tf[None, :])
            t_pix = np.where(side, tn[None, :], t_top)
            zz = np.where(side, z_side, z_hi)
        mask = (side | top) & (t_pix < depth[:, cols])
        if not mask.any():
            return
        rr, ci = np.nonzero(mask)
        cc_ = cols[ci]
        tpix = t_pix[rr, ci]
        # Lambert-like shading from the face normal (sides) or flat bright (top).
        lam = 0.62 + 0.38 * np.clip(nx[cc_] * self.light[0] + ny[cc_] * self.light[1], 0.0, 1.0)
        lam = np.where(top[rr, ci], 1.05, lam)
        colour = base[None, :] * lam[:, None]
        uu = u[cc_]
        z_here = zz[rr, ci]
        if obj.kind == "sphere":
            rad = sx / 2
            dzc = (z_here - rad) / rad
            colour *= np.clip(1.0 - 0.35 * dzc, 0.6, 1.2)[:, None]
            colour[(np.abs(dzc) < 0.08)] *= 0.55  # a seam around the ball
        elif obj.kind == "cylinder":
            bands = (np.floor(z_here / 0.25) % 2) == 0
            colour[bands & ~top[rr, ci]] *= 0.8
        else:
            flen = face_len[cc_]
            edge = (uu < 0.04) | (uu > flen - 0.04) | (z_here > sz - 0.04) | (z_here < 0.04)
            colour[edge & ~top[rr, ci]] *= 0.55
            if sz > 1.0:  # cabinet: drawer lines and handles
                drawer = (np.abs((z_here % 0.4) - 0.2) < 0.015) & ~top[rr, ci]
                colour[drawer] *= 0.5
                handle = (np.abs((z_here % 0.4) - 0.3) < 0.03) & (np.abs(uu - flen / 2) < 0.1) & ~top[rr, ci]
                colour[handle] = (60, 60, 60)
            else:  # box: a white label
                label = (np.abs(uu - flen / 2) < 0.15) & (np.abs(z_here - sz * 0.55) < 0.08) & ~top[rr, ci]
                colour[label] = (235, 235, 230)
        colour *= np.clip(1.12 - 0.04 * tpix, 0.6, 1.0)[:, None]
        out[rr, cc_] = colour
        depth[rr, cc_] = tpix
        ids[rr, cc_] = k + 1


# --- clip ----------------------------------------------------------------------------


@dataclass
class SyntheticClip:
    """A rendered clip plus the ground truth needed to ask and grade questions."""

    frames: list[np.ndarray]
    stamps_s: list[float]
    poses: list[CameraPose]
    segments: list[Segment]
    objects: list[SceneObject]
    fps: float
    width: int
    height: int
    hfov_deg: float
    seed: int
    room: Room
    visible_pixels: np.ndarray  # (n_frames, n_objects) object pixels drawn per frame
    min_visible_px: int = 40
    scene_name: str = "synthetic_room"
    _trajectory: _Trajectory | None = field(default=None, repr=False)
    # Per-frame object id images (0 = room, k+1 = objects[k]) when rendered with keep_labels.
    labels: list[np.ndarray] | None = field(default=None, repr=False)

    @property
    def duration_s(self) -> float:
        return self.stamps_s[-1] - self.stamps_s[0] if self.stamps_s else 0.0

    def object(self, name: str) -> SceneObject:
        for obj in self.objects:
            if obj.name == name:
                return obj
        raise InvalidRequestError(f"no object named {name!r}; have {[o.name for o in self.objects]}")

    def _index(self, name: str) -> int:
        return self.objects.index(self.object(name))

    def pose_at(self, t: float) -> CameraPose:
        """The exact camera pose at time `t` (clamped to the clip)."""
        assert self._trajectory is not None
        return self._trajectory.pose_at(t)

    def segment_at(self, t: float) -> Segment:
        assert self._trajectory is not None
        return self.segments[self._trajectory.segment_index_at(t)]

    def visible_at(self, name: str, frame_index: int, min_pixels: int | None = None) -> bool:
        need = self.min_visible_px if min_pixels is None else min_pixels
        return bool(self.visible_pixels[frame_index, self._index(name)] >= need)

    def first_seen(self, name: str, min_pixels: int | None = None) -> float | None:
        """Stamp of the first frame showing at least `min_pixels` unhidden pixels of the
        object, or None if it never appears."""
        need = self.min_visible_px if min_pixels is None else min_pixels
        col = self.visible_pixels[:, self._index(name)]
        hits = np.nonzero(col >= need)[0]
        return float(self.stamps_s[int(hits[0])]) if hits.size else None

    def bearing_deg(self, name: str, at_time: float) -> float:
        """Direction of the object's centre from the camera heading, CCW positive (left),
        in (-180, 180]."""
        pose = self.pose_at(at_time)
        ox, oy, _ = self.object(name).position
        ang = math.atan2(oy - pose.y, ox - pose.x) - pose.yaw
        return -math.degrees(_wrap(-ang))

    def side_of(self, name: str, at_time: float, *, ahead_deg: float = 20.0, behind_deg: float = 135.0) -> str:
        """"ahead" within ±ahead_deg of the heading, "behind" when turning at least
        behind_deg would be needed to face it, else "left" or "right"."""
        b = self.bearing_deg(name, at_time)
        if abs(b) >= behind_deg:
            return "behind"
        if abs(b) <= ahead_deg:
            return "ahead"
        return "left" if b > 0 else "right"

    def distance_between(self, a: str, b: str) -> float:
        """Ground distance (m) between the footprint centres of two objects."""
        pa, pb = self.object(a).position, self.object(b).position
        return math.hypot(pa[0] - pb[0], pa[1] - pb[1])

    def distance_from_camera(self, name: str, at_time: float) -> float:
        pose = self.pose_at(at_time)
        p = self.object(name).position
        return math.hypot(p[0] - pose.x, p[1] - pose.y)

    def to_scene_dict(self) -> dict[str, Any]:
        """Everything but the pixels, for scene.json."""
        return {
            "scene_name": self.scene_name,
            "seed": self.seed,
            "fps": self.fps,
            "width": self.width,
            "height": self.height,
            "hfov_deg": self.hfov_deg,
            "duration_s": round(self.duration_s, 6),
            "room": {"size_x": self.room.size_x, "size_y": self.room.size_y, "height": self.room.height},
            "conventions": "x east, y north, z up; yaw counter-clockwise from +x (radians); "
            "pitch positive looks down; stamps in seconds from the clip start",
            "objects": [
                {**o.to_dict(), "first_seen_s": self.first_seen(o.name)} for o in self.objects
            ],
            "segments": [s.to_dict() for s in self.segments],
            "poses": [p.to_dict() for p in self.poses],
        }


def _check_path(traj: _Trajectory, room: Room, objects: Sequence[SceneObject], margin: float = 0.25) -> None:
    """Refuse paths that leave the room or pass through an object."""
    t = traj.start_s
    while t <= traj.end_s + 1e-9:
        p = traj.pose_at(t)
        if not (margin <= p.x <= room.size_x - margin and margin <= p.y <= room.size_y - margin):
            raise InvalidRequestError(f"camera path leaves the room at t={t:.2f}s ({p.x:.2f}, {p.y:.2f})")
        if not (0.1 <= p.z <= room.height - 0.1):
            raise InvalidRequestError(f"camera height {p.z:.2f} m at t={t:.2f}s is outside the room")
        if abs(p.pitch) > math.radians(60):
            raise InvalidRequestError(f"camera pitch beyond 60 degrees at t={t:.2f}s")
        for obj in objects:
            if obj.kind == "door":
                continue
            ox, oy, _ = obj.position
            if abs(p.x - ox) < obj.size[0] / 2 + 0.1 and abs(p.y - oy) < obj.size[1] / 2 + 0.1:
                raise InvalidRequestError(f"camera path passes through the {obj.name} at t={t:.2f}s")
        t += 0.05


def render_clip(
    path_spec: Iterable[Any] | None = None,
    *,
    fps: float = 10.0,
    width: int = 320,
    height: int = 240,
    seed: int = 0,
    start_pose: CameraPose | None = None,
    linear_speed_mps: float = 0.5,
    angular_speed_dps: float = 30.0,
    hfov_deg: float = 70.0,
    objects: Sequence[SceneObject] | None = None,
    room: Room | None = None,
    keep_labels: bool = False,
) -> SyntheticClip:
    """Render the synthetic room along a scripted camera path.

    ``path_spec`` is a sequence of ``(action, amount)`` pairs (or dicts with those keys)
    using the ten-action vocabulary; amounts are metres for moves and degrees for
    rotations and tilts. None uses `DEFAULT_PATH` (32 s). Frames are taken every 1/fps
    seconds from t=0 to the end of the path inclusive. Textures depend on ``seed`` only,
    so the same arguments always give the same pixels. ``keep_labels`` keeps each frame's
    per-pixel object ids in ``SyntheticClip.labels``.
    """
    if not fps > 0:
        raise InvalidRequestError(f"fps must be positive, got {fps}")
    if width < 16 or height < 16:
        raise InvalidRequestError(f"image size {width}x{height} is too small")
    if not 20.0 <= hfov_deg <= 120.0:
        raise InvalidRequestError(f"hfov_deg must be within 20..120, got {hfov_deg}")
    if not (linear_speed_mps > 0 and angular_speed_dps > 0):
        raise InvalidRequestError("speeds must be positive")
    room = room or Room()
    objects = list(objects) if objects is not None else default_objects(room)
    start = start_pose or CameraPose(1.5, 1.5, 0.0, 1.2, 0.0, 0.0)
    traj = _Trajectory(_parse_path(path_spec), start, linear_speed_mps, angular_speed_dps)
    _check_path(traj, room, objects)
    renderer = _Renderer(room, objects, int(width), int(height), hfov_deg, seed)

    n = int(math.floor((traj.end_s - traj.start_s) * fps + 1e-6)) + 1
    stamps = [traj.start_s + i / fps for i in range(n)]
    if traj.end_s - stamps[-1] > 1e-6:  # always include the final pose
        stamps.append(traj.end_s)
    frames: list[np.ndarray] = []
    poses: list[CameraPose] = []
    visible = np.zeros((len(stamps), len(objects)), np.int32)
    labels: list[np.ndarray] = []
    for i, t in enumerate(stamps):
        pose = traj.pose_at(t)
        image, ids = renderer.render(pose)
        frames.append(image)
        if keep_labels:
            labels.append(ids)
        poses.append(pose)
        counts = np.bincount(ids.ravel(), minlength=len(objects) + 1)
        visible[i] = counts[1 : len(objects) + 1]
    return SyntheticClip(
        frames=frames,
        stamps_s=[float(t) for t in stamps],
        poses=poses,
        segments=list(traj.segments),
        objects=objects,
        fps=float(fps),
        width=int(width),
        height=int(height),
        hfov_deg=float(hfov_deg),
        seed=int(seed),
        room=room,
        visible_pixels=visible,
        _trajectory=traj,
        labels=labels if keep_labels else None,
    )
