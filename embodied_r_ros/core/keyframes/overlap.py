"""Overlap of the current view with the last key frame (docs/method.md §2), exactly as the
reference measures it, plus a geometric shortcut that never changes a keep/drop decision.

Reference measurement, step by step (`reference_mask_overlap` does exactly this):

1. The corners (0, 0), (w, 0), (w, h), (0, h) of the previous key frame (w x h: its width
   and height; note w and h, not w-1 and h-1) are mapped through the homography
   (current -> previous) with `cv2.perspectiveTransform` on float32 input, so the result is
   float32.
2. Both the unmapped rectangle and the mapped quadrilateral are cast to int32 with numpy's
   cast (`np.int32(...)`): truncation toward zero, no clamping. NaN, +-inf and values outside
   the int32 range become INT32_MIN (-2147483648) on x86, which is what numpy's unsafe cast
   does there; this module feeds those values to the rasteriser unchanged, as the reference
   does (a polygon with such a vertex can take seconds to rasterise: same cost as the
   reference).
3. Each polygon is filled with `cv2.fillPoly` (value 1) on its own h x w uint8 mask, the two
   masks are ANDed, and overlap = shared pixels / (w * h) as a float64 division.

The frame rectangle (w, h corners) covers every pixel of its mask, so the overlap is the
number of pixels `fillPoly` sets for the quadrilateral, over w * h.

Geometric shortcut (`estimate_overlap_pixels`), used only to decide faster:

- The quadrilateral is split into simple pieces (a "bow-tie" whose opposite edges cross
  becomes two triangles, because `fillPoly` fills both lobes), each piece is clipped to the
  pixel-centre rectangle [0, w-1] x [0, h-1] (Sutherland-Hodgman) and its area taken with
  the shoelace formula. `fillPoly` counts pixels whose centres lie inside or on the
  boundary, and lights one border pixel on rows the polygon crosses wholly outside the
  frame, so the estimate is area + Chebyshev perimeter / 2 + 1 per piece, with an error
  bound of the L1 perimeter + 2 px per covered row + 8 per piece.
- The estimate is trusted only inside its proven range: every integer corner within
  +-`PROVEN_COORD_LIMIT` pixels (the range the tests check against the rasteriser). Outside
  that range, and whenever the threshold lies inside the error band, the exact reference
  masks are rasterised, so the decision (`overlap < threshold`) always equals the reference's.
  The overlap value returned with a shortcut decision is the estimate (within the bound).
"""

from __future__ import annotations

import math
from typing import Sequence

import cv2
import numpy as np

# Integer corners beyond this many pixels from the origin always use the exact masks.
PROVEN_COORD_LIMIT = 1 << 20

Point = tuple[float, float]


def reference_corners(width: int, height: int) -> np.ndarray:
    """Corners (0, 0), (w, 0), (w, h), (0, h) of a width x height frame, (4, 1, 2) float32."""
    return np.array(
        [[[0, 0]], [[width, 0]], [[width, height]], [[0, height]]], dtype=np.float32
    )


def to_int32_like_reference(points: np.ndarray) -> np.ndarray:
    """numpy's int32 cast of float32 points: truncation, no clamping (non-finite and
    out-of-range values become INT32_MIN on x86), shape (4, 2)."""
    # np.asarray(..., np.int32) performs the same unsafe C cast as the reference's
    # np.int32([...]) (test_keyframes checks both on NaN, inf and out-of-range values).
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(np.asarray(points, dtype=np.float32).reshape(-1, 2)).astype(np.int32)


def project_corners(homography: np.ndarray, width: int, height: int) -> np.ndarray:
    """Integer quad (4, 2) int32 of a width x height frame's corners mapped by `homography`,
    exactly as the reference hands it to the rasteriser (never None: degenerate mappings
    give INT32_MIN coordinates, as in the reference)."""
    mapped = cv2.perspectiveTransform(reference_corners(width, height), homography)
    return to_int32_like_reference(mapped)


def reference_mask_overlap(quad: np.ndarray, width: int, height: int) -> float:
    """The reference's overlap: fillPoly masks of the frame rectangle and of `quad`, ANDed,
    shared pixels / (w * h)."""
    rect = to_int32_like_reference(reference_corners(width, height))
    mask_rect = np.zeros((height, width), dtype=np.uint8)
    mask_quad = np.zeros((height, width), dtype=np.uint8)
    cv2.fillPoly(mask_rect, [rect.reshape(-1, 1, 2)], 1)
    cv2.fillPoly(mask_quad, [np.asarray(quad, dtype=np.int32).reshape(-1, 1, 2)], 1)
    shared = int(np.count_nonzero(cv2.bitwise_and(mask_rect, mask_quad)))
    return shared / (width * height)


def mask_overlap_pixels(quad: np.ndarray, width: int, height: int) -> int:
    """Pixels of a width x height mask that `cv2.fillPoly(quad)` sets (no frame mask)."""
    mask = np.zeros((height, width), dtype=np.uint8)
    cv2.fillPoly(mask, [np.asarray(quad, dtype=np.int32).reshape(-1, 1, 2)], 1)
    return int(np.count_nonzero(mask))


def in_proven_range(quad: np.ndarray) -> bool:
    """Whether every integer corner lies within +-PROVEN_COORD_LIMIT pixels."""
    q = np.asarray(quad, dtype=np.int64)
    return bool(np.all(np.abs(q) <= PROVEN_COORD_LIMIT))


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
    """Overlap of the integer quad with a width x height frame, as a fraction of w * h.

    With a finite `threshold`, ``result < threshold`` is guaranteed to equal the reference's
    ``reference_mask_overlap(...) < threshold``: the exact masks are rasterised when a corner
    is outside the proven range or the estimate is within its error bound of the threshold.
    Without a threshold the exact value is returned. Returns (overlap, used_exact_masks).
    """
    if threshold is None or not math.isfinite(threshold) or not in_proven_range(quad):
        return reference_mask_overlap(quad, width, height), True
    total = float(width * height)
    estimate, bound = estimate_overlap_pixels(quad, width, height)
    if abs(estimate - threshold * total) <= bound:
        return reference_mask_overlap(quad, width, height), True
    return max(0.0, estimate) / total, False
