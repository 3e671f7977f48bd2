"""Overlap between two views related by a homography, computed from geometry.

The reference measures overlap by rasterising two full-resolution masks with
`cv2.fillPoly` (the previous frame's rectangle and the current frame's corners mapped into
the previous frame) and counting the pixels they share. This module gets the same decision
from a few dozen arithmetic operations instead:

1. The four projected corners are clamped to +-1e6 px and truncated to integers, exactly as
   the rasteriser receives them (both implementations share this convention).
2. The quadrilateral is split into simple pieces. A projective image of a rectangle is
   usually convex, but when a corner lies near or behind the homography's horizon line the
   four points can form a non-convex quad or a "bow-tie" whose opposite edges cross. For a
   bow-tie, the crossing point splits it into two triangles; `fillPoly` fills both lobes,
   so their unsigned areas are added (a plain shoelace sum would subtract them).
3. Each piece is clipped against the pixel-centre rectangle [0, w-1] x [0, h-1]
   (Sutherland-Hodgman; exact for any simple polygon against a convex window) and its area
   taken with the shoelace formula.
4. `fillPoly` counts pixels whose centres lie inside or on the polygon boundary, so the
   pixel count is about area + half the boundary length; it also clamps each scan-line
   span to the image, so a row the polygon crosses wholly outside the frame still lights
   one border pixel. The estimate is area + Chebyshev perimeter / 2 + 1, and its error is
   bounded by the L1 perimeter of the clipped pieces + 2 px per covered row + 8 (checked
   against the rasteriser on 20k random quads in the tests: worst error < half the bound).
   When the threshold lies inside that error band, the mask is rasterised once to decide
   exactly, so the keep/drop decision always equals the mask-based reference.
"""

from __future__ import annotations

import math
from typing import Sequence

import cv2
import numpy as np

# Projected corners are clamped to this many pixels before rasterising.
COORD_LIMIT = 1_000_000

Point = tuple[float, float]


def frame_corners(width: int, height: int) -> np.ndarray:
    """Pixel-centre corners of a width x height frame, shape (4, 1, 2), float32."""
    return np.array(
        [[[0, 0]], [[width - 1, 0]], [[width - 1, height - 1]], [[0, height - 1]]],
        dtype=np.float32,
    )


def project_corners(homography: np.ndarray, width: int, height: int) -> np.ndarray | None:
    """Map the corners of a width x height frame through `homography`.

    Returns the integer quad (4, 2) int32 the rasteriser would receive, or None when the
    mapping is not finite (degenerate homography).
    """
    mapped = cv2.perspectiveTransform(frame_corners(width, height), homography).reshape(4, 2)
    if not np.all(np.isfinite(mapped)):
        return None
    return np.clip(mapped, -COORD_LIMIT, COORD_LIMIT).astype(np.int32)


def mask_overlap_pixels(quad: np.ndarray, width: int, height: int) -> int:
    """Exact reference count: pixels of a width x height mask that `fillPoly(quad)` sets."""
    mask = np.zeros((height, width), dtype=np.uint8)
    cv2.fillPoly(mask, [np.asarray(quad, dtype=np.int32).reshape(-1, 1, 2)], 1)
    return int(np.count_nonzero(mask))


def _cross(o: Sequence[float], a: Sequence[float], b: Sequence[float]) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _proper_crossing(p1: Point, p2: Point, q1: Point, q2: Point) -> Point | None:
    """Intersection point when segments p1p2 and q1q2 cross at interior points only."""
    d1 = _cross(q1, q2, p1)
    d2 = _cross(q1, q2, p2)
    d3 = _cross(p1, p2, q1)
    d4 = _cross(p1, p2, q2)
    if ((d1 > 0 > d2) or (d1 < 0 < d2)) and ((d3 > 0 > d4) or (d3 < 0 < d4)):
        t = d1 / (d1 - d2)
        return (p1[0] + t * (p2[0] - p1[0]), p1[1] + t * (p2[1] - p1[1]))
    return None


def split_quad(quad: Sequence[Point]) -> list[list[Point]]:
    """Split a quad into pieces that are each simple polygons (one piece unless a bow-tie)."""
    p0, p1, p2, p3 = quad
    x = _proper_crossing(p0, p1, p2, p3)
    if x is not None:
        return [[x, p1, p2], [x, p3, p0]]
    x = _proper_crossing(p1, p2, p3, p0)
    if x is not None:
        return [[x, p2, p3], [x, p0, p1]]
    return [[p0, p1, p2, p3]]


def clip_to_rect(poly: list[Point], x_max: float, y_max: float) -> list[Point]:
    """Sutherland-Hodgman clip of `poly` to the box [0, x_max] x [0, y_max]."""
    # Each edge: (axis, bound, keep_if_greater_or_equal)
    for axis, bound, keep_ge in ((0, 0.0, True), (0, x_max, False), (1, 0.0, True), (1, y_max, False)):
        if not poly:
            break
        out: list[Point] = []
        prev = poly[-1]
        prev_in = prev[axis] >= bound if keep_ge else prev[axis] <= bound
        for cur in poly:
            cur_in = cur[axis] >= bound if keep_ge else cur[axis] <= bound
            if cur_in != prev_in:
                t = (bound - prev[axis]) / (cur[axis] - prev[axis])
                cut = (prev[0] + t * (cur[0] - prev[0]), prev[1] + t * (cur[1] - prev[1]))
                out.append(cut)
            if cur_in:
                out.append(cur)
            prev, prev_in = cur, cur_in
        poly = out
    return poly


def _area_and_lengths(poly: list[Point]) -> tuple[float, float, float]:
    """Unsigned shoelace area, L1 perimeter and Chebyshev perimeter of a closed polygon."""
    if len(poly) < 2:
        return 0.0, 0.0, 0.0
    twice = 0.0
    l1 = 0.0
    linf = 0.0
    prev = poly[-1]
    for cur in poly:
        twice += prev[0] * cur[1] - cur[0] * prev[1]
        dx = abs(cur[0] - prev[0])
        dy = abs(cur[1] - prev[1])
        l1 += dx + dy
        linf += max(dx, dy)
        prev = cur
    return abs(twice) / 2.0, l1, linf


def estimate_overlap_pixels(quad: np.ndarray, width: int, height: int) -> tuple[float, float]:
    """Estimated `fillPoly` pixel count inside the frame, and a bound on its error.

    Besides the boundary pixels, `fillPoly` clamps every scan-line span to the image, so a
    row the polygon crosses entirely left or right of the frame still lights the border
    pixel of that row: the bound allows two such pixels per covered row and piece.
    """
    pts = [(float(x), float(y)) for x, y in np.asarray(quad).reshape(4, 2)]
    estimate = 0.0
    bound = 0.0
    for piece in split_quad(pts):
        ys = [p[1] for p in piece]
        rows = max(0.0, min(max(ys), height - 1.0) - max(min(ys), 0.0) + 1.0)
        clipped = clip_to_rect(piece, width - 1, height - 1)
        area, l1, linf = _area_and_lengths(clipped)
        if len(clipped) >= 3:
            estimate += area + linf / 2.0 + 1.0
        bound += l1 + 2.0 * rows + 8.0
    return min(estimate, float(width * height)), bound


def overlap_fraction(
    quad: np.ndarray, width: int, height: int, threshold: float | None = None
) -> tuple[float, bool]:
    """Overlap of the projected quad with a width x height frame, as a fraction of w*h.

    With a `threshold`, the result is guaranteed to fall on the same side of it
    (``< threshold``) as the exact mask count: if the estimate is within its error bound
    of the threshold, the mask is rasterised. Returns (overlap, used_mask).
    """
    total = float(width * height)
    estimate, bound = estimate_overlap_pixels(quad, width, height)
    if threshold is not None and math.isfinite(threshold):
        if abs(estimate - threshold * total) <= bound:
            return mask_overlap_pixels(quad, width, height) / total, True
    return max(0.0, estimate) / total, False
