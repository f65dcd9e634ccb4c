"""DB (Differentiable Binarization) post-processing: text boxes from a PP-OCR det probability map.

PaddleOCR's documented algorithm (``DBPostProcess``): threshold the map (0.3), dilate by a 2x2
square, take each 8-connected region (up to 1000), fit its minimum-area rectangle, drop it when
its short side is < 3 or the mean probability inside it is < ``box_thresh`` (0.5), grow it by
``area * unclip_ratio / perimeter`` with a rounded offset (pyclipper, as PaddleOCR), fit the
minimum-area rectangle again, drop it when its short side is < 5, and scale it to the image.
Regions come from ``scipy.ndimage.label`` where PaddleOCR traces contours with OpenCV; a
region's rectangle is the same because both are fitted to the convex hull of its pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DBParams:
    """PaddleOCR / RapidOCR defaults for PP-OCRv4 det."""

    thresh: float = 0.3
    box_thresh: float = 0.5
    max_candidates: int = 1000
    unclip_ratio: float = 1.6
    use_dilation: bool = True
    min_size: int = 3


def _cross(a: np.ndarray, b: np.ndarray) -> float:
    return float(a[0] * b[1] - a[1] * b[0])


def convex_hull(points: np.ndarray) -> np.ndarray:
    """Counter-clockwise convex hull (Andrew's monotone chain) of ``(n, 2)`` points."""
    pts = np.unique(points.astype(np.float64), axis=0)
    if len(pts) < 3:
        return pts

    def half(seq: np.ndarray) -> list[np.ndarray]:
        out: list[np.ndarray] = []
        for p in seq:
            while len(out) >= 2 and _cross(out[-1] - out[-2], p - out[-2]) <= 0:
                out.pop()
            out.append(p)
        return out

    lower, upper = half(pts), half(pts[::-1])
    return np.array(lower[:-1] + upper[:-1])


def min_area_rect(points: np.ndarray) -> tuple[np.ndarray, float]:
    """(4 corners, short side) of the minimum-area rectangle around ``points`` (rotating calipers
    over the hull's edges, as ``cv2.minAreaRect``)."""
    hull = convex_hull(points)
    if len(hull) == 1:
        return np.repeat(hull, 4, axis=0), 0.0
    if len(hull) == 2:
        a, b = hull
        return np.array([a, b, b, a]), 0.0
    edges = np.roll(hull, -1, axis=0) - hull
    angles = np.unique(np.mod(np.arctan2(edges[:, 1], edges[:, 0]), np.pi / 2))
    c, s = np.cos(angles), np.sin(angles)
    rot = np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], 1)  # (k, 2, 2): rotate by -angle
    proj = np.einsum("kij,nj->kni", rot, hull)
    lo, hi = proj.min(axis=1), proj.max(axis=1)
    area = np.prod(hi - lo, axis=1)
    k = int(np.argmin(area))
    (x0, y0), (x1, y1) = lo[k], hi[k]
    corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]]) @ rot[k]  # back to image axes
    return corners, float(min(x1 - x0, y1 - y0))


def order_box(corners: np.ndarray) -> np.ndarray:
    """PaddleOCR's ``get_mini_boxes`` order: by x, then each pair by y -> tl, tr, br, bl."""
    p = corners[np.argsort(corners[:, 0], kind="stable")]
    left = p[:2] if p[1, 1] > p[0, 1] else p[[1, 0]]
    right = p[2:] if p[3, 1] > p[2, 1] else p[[3, 2]]
    return np.array([left[0], right[0], right[1], left[1]])


def box_score(prob: np.ndarray, box: np.ndarray) -> float:
    """Mean of ``prob`` over the pixels whose centres lie in the quadrilateral ``box`` (PaddleOCR's
    "fast" score, its polygon fill done with edge tests on the integer corners)."""
    h, w = prob.shape
    b = box.astype(np.int32).astype(np.float64)
    x0 = int(np.clip(np.floor(box[:, 0].min()), 0, w - 1))
    x1 = int(np.clip(np.ceil(box[:, 0].max()), 0, w - 1))
    y0 = int(np.clip(np.floor(box[:, 1].min()), 0, h - 1))
    y1 = int(np.clip(np.ceil(box[:, 1].max()), 0, h - 1))
    yy, xx = np.mgrid[y0 : y1 + 1, x0 : x1 + 1]
    inside = np.ones(yy.shape, bool)
    sign = np.sign(_cross(b[1] - b[0], b[2] - b[0])) or 1.0
    for i in range(4):
        a, c = b[i], b[(i + 1) % 4]
        cross = (c[0] - a[0]) * (yy - a[1]) - (c[1] - a[1]) * (xx - a[0])
        inside &= cross * sign >= -1e-9
    patch = prob[y0 : y1 + 1, x0 : x1 + 1]
    return float(patch[inside].mean()) if inside.any() else 0.0


def unclip(box: np.ndarray, ratio: float) -> np.ndarray:
    """The polygon grown by ``area * ratio / perimeter`` with round joins (pyclipper)."""
    import pyclipper

    x, y = box[:, 0], box[:, 1]
    area = 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))
    length = float(np.linalg.norm(box - np.roll(box, -1, axis=0), axis=1).sum())
    off = pyclipper.PyclipperOffset()
    off.AddPath(box.tolist(), pyclipper.JT_ROUND, pyclipper.ET_CLOSEDPOLYGON)
    grown = off.Execute(area * ratio / length if length else 0.0)
    return np.array(grown[0] if len(grown) == 1 else sum(grown, []), dtype=np.float64).reshape(-1, 2)


def boxes_from_map(prob: np.ndarray, dest_w: int, dest_h: int,
                   params: DBParams | None = None) -> tuple[np.ndarray, list[float]]:
    """Text boxes ``(n, 4, 2)`` int32 in a ``dest_w x dest_h`` image (tl, tr, br, bl) and their
    scores, from det's ``(H, W)`` probability map."""
    from scipy import ndimage

    params = params or DBParams()
    mask = prob > params.thresh
    if params.use_dilation:
        grown = mask.copy()
        grown[1:] |= mask[:-1]
        grown[:, 1:] |= mask[:, :-1]
        grown[1:, 1:] |= mask[:-1, :-1]
        mask = grown
    labels, n = ndimage.label(mask, structure=np.ones((3, 3), bool))
    h, w = prob.shape
    boxes, scores = [], []
    for i, sl in enumerate(ndimage.find_objects(labels)[: params.max_candidates], start=1):
        if sl is None:
            continue
        region = labels[sl] == i
        # hull vertices are among each row's end pixels: 2 points a row instead of every pixel
        rows = np.nonzero(region.any(axis=1))[0]
        first = region[rows].argmax(axis=1)
        last = region.shape[1] - 1 - region[rows][:, ::-1].argmax(axis=1)
        pts = np.concatenate([np.stack([first, rows], -1), np.stack([last, rows], -1)])
        pts += (sl[1].start, sl[0].start)
        corners, side = min_area_rect(pts)
        if side < params.min_size:
            continue
        box = order_box(corners)
        score = box_score(prob, box)
        if score < params.box_thresh:
            continue
        corners, side = min_area_rect(unclip(box, params.unclip_ratio))
        if side < params.min_size + 2:
            continue
        box = order_box(corners)
        box[:, 0] = np.clip(np.round(box[:, 0] / w * dest_w), 0, dest_w)
        box[:, 1] = np.clip(np.round(box[:, 1] / h * dest_h), 0, dest_h)
        boxes.append(box.astype(np.int32))
        scores.append(score)
    return np.array(boxes, dtype=np.int32).reshape(-1, 4, 2), scores
