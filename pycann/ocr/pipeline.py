"""PP-OCR (v4 det, mobile v2 cls, v4 rec) end to end on pycann: image bytes -> DVPP decode ->
det -> DB boxes -> perspective crops -> direction cls -> rec (batches of variable width) -> CTC.

The steps and constants follow PaddleOCR as RapidOCR (``rapidocr-onnxruntime``, whose models these
are) runs them, so results can be compared line by line: BGR input; det input resized so the short
side is >= 736 and both sides are multiples of 32, ``(x / 255 - 0.5) / 0.5``; boxes sorted top to
bottom then left to right (rows within 10 px); cls and rec in batches of 6 by aspect ratio, height
48, cls width 192, rec width ``48 * max(320 / 48, widest ratio of the batch)``; a crop rotated 180
degrees when cls says "180" with score > 0.9; lines with a rec score < 0.5 dropped; before all
that, RapidOCR's global scaling (sides > 2000 px down, < 30 px up) and letterbox (``prepare``).
Models run through any ``Runner`` (``x -> first output``): ``InferSession`` here, ``acl.mdl`` in
samples/ocr/ocr_acl.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pycann.dvpp import jpeg, png
from pycann.dvpp.formats import DvppError, Fault, PixelFormat
from pycann.dvpp.resize import resize
from pycann.ocr import ctc
from pycann.ocr.db import DBParams, boxes_from_map

Runner = Callable[[np.ndarray], np.ndarray]
"""A model: float32 NCHW input -> its first output."""

DET_LIMIT_SIDE = 736
REC_H, REC_W, CLS_W, BATCH = 48, 320, 192, 6
CLS_THRESH, TEXT_SCORE = 0.9, 0.5
MAX_SIDE, MIN_SIDE, MIN_HEIGHT, WIDTH_HEIGHT_RATIO = 2000, 30, 30, 8


@dataclass(frozen=True)
class TextLine:
    """One recognised line: ``box`` (4, 2) float32 corners tl, tr, br, bl in image pixels."""

    box: np.ndarray
    text: str
    score: float


def decode_image(data: bytes) -> np.ndarray:
    """JPEG or PNG bytes -> ``(h, w, 3)`` uint8 BGR (DVPP's JPEGD / PNGD decoders, without PNGD's
    32..4096 size range: the pipeline scales small and large pictures itself, as for JPEGs).
    Raises ``DvppError``."""
    if data[:2] == b"\xff\xd8":
        return jpeg.decode_array(data, PixelFormat.BGR_888)
    if data[:8] != b"\x89PNG\r\n\x1a\n":  # (else PNGD's "not a PNG stream" for, say, a BMP or WebP)
        raise DvppError(Fault.DATA, f"neither a JPEG nor a PNG image (it starts with {data[:8]!r}): the OCR "
                        "pipeline decodes those two, as DVPP does; convert the picture first")
    return np.ascontiguousarray(png.decode_array(data, PixelFormat.RGB_888, device_range=False)[..., ::-1])


def det_size(h: int, w: int) -> tuple[int, int]:
    """Det input (height, width): short side scaled up to >= 736, both rounded to multiples of 32."""
    ratio = DET_LIMIT_SIDE / min(h, w) if min(h, w) < DET_LIMIT_SIDE else 1.0
    rh, rw = int(h * ratio), int(w * ratio)
    return max(32, int(round(rh / 32) * 32)), max(32, int(round(rw / 32) * 32))


def normalize(img: np.ndarray) -> np.ndarray:
    """``(h, w, 3)`` uint8 -> ``(3, h, w)`` float32 ``(x / 255 - 0.5) / 0.5``."""
    return ((img.astype(np.float32) / 255.0 - 0.5) / 0.5).transpose(2, 0, 1)


def order_clockwise(pts: np.ndarray) -> np.ndarray:
    """tl, tr, br, bl: the two left-most points by y, then the two right-most by y."""
    xs = pts[np.argsort(pts[:, 0], kind="stable")]
    left, right = xs[:2][np.argsort(xs[:2, 1], kind="stable")], xs[2:][np.argsort(xs[2:, 1], kind="stable")]
    return np.array([left[0], right[0], right[1], left[1]], np.float32)


def sort_boxes(boxes: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Top to bottom, then left to right for boxes whose top-left y differ by < 10 px."""
    out = sorted(boxes, key=lambda b: (b[0][1], b[0][0]))
    for i in range(len(out) - 1):
        for j in range(i, -1, -1):
            if abs(out[j + 1][0][1] - out[j][0][1]) < 10 and out[j + 1][0][0] < out[j][0][0]:
                out[j], out[j + 1] = out[j + 1], out[j]
            else:
                break
    return out


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """``(n, 4)`` weights of the taps at -1, 0, 1, 2 for fractions ``t`` (Keys' cubic, OpenCV's a)."""
    d = np.stack([1 + t, t, 1 - t, 2 - t], -1)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, far).astype(np.float32)


def crop_quad(img: np.ndarray, box: np.ndarray) -> np.ndarray:
    """The quadrilateral ``box`` of ``img`` warped upright (bicubic, edge pixels replicated);
    turned 90 degrees when it is at least 1.5x taller than wide."""
    w = int(max(np.linalg.norm(box[0] - box[1]), np.linalg.norm(box[2] - box[3])))
    h = int(max(np.linalg.norm(box[0] - box[3]), np.linalg.norm(box[1] - box[2])))
    w, h = max(w, 1), max(h, 1)
    dst = np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)
    a = []
    for (x, y), (u, v) in zip(dst, box.astype(np.float64)):
        a.append([x, y, 1, 0, 0, 0, -u * x, -u * y, u])
        a.append([0, 0, 0, x, y, 1, -v * x, -v * y, v])
    m = np.asarray(a)
    hom = np.append(np.linalg.solve(m[:, :8], m[:, 8]), 1.0).reshape(3, 3)  # dst -> src
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    q = hom @ np.stack([xx.ravel(), yy.ravel(), np.ones(xx.size)])
    sx, sy = q[0] / q[2], q[1] / q[2]
    # bicubic (a = -0.75) on the 4x4 neighbourhood, edge pixels replicated: cv2.warpPerspective's
    # INTER_CUBIC + BORDER_REPLICATE as RapidOCR calls it (OpenCV also quantises the fraction to 1/32)
    x0, y0 = np.floor(sx).astype(np.int64), np.floor(sy).astype(np.int64)
    wx, wy = _cubic_weights(sx - x0), _cubic_weights(sy - y0)
    f = img.astype(np.float32)
    out = np.zeros((sx.size, f.shape[2]), np.float32)
    for j in range(4):
        yi = np.clip(y0 + j - 1, 0, img.shape[0] - 1)
        row = np.zeros_like(out)
        for i in range(4):
            xi = np.clip(x0 + i - 1, 0, img.shape[1] - 1)
            row += f[yi, xi] * wx[:, i : i + 1]
        out += row * wy[:, j : j + 1]
    crop = np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(h, w, -1)
    return np.rot90(crop) if h / w >= 1.5 else crop


def _scale_to(img: np.ndarray, ratio: float) -> tuple[np.ndarray, tuple[float, float]]:
    h, w = img.shape[:2]
    rh, rw = max(32, int(round(int(h * ratio) / 32) * 32)), max(32, int(round(int(w * ratio) / 32) * 32))
    return resize(img, rh, rw, 1), (h / rh, w / rw)


def prepare(img: np.ndarray) -> tuple[np.ndarray, tuple[float, float], int]:
    """RapidOCR's global pre-processing: (image, (y, x) ratios back to the input, top padding).
    Sides over 2000 px are scaled down and under 30 px up (to multiples of 32); a line <= 30 px
    high or more than 8x wider than high gets black bands above and below."""
    ratios = (1.0, 1.0)
    h, w = img.shape[:2]
    if max(h, w) > MAX_SIDE:
        img, ratios = _scale_to(img, MAX_SIDE / max(h, w))
    h, w = img.shape[:2]
    if min(h, w) < MIN_SIDE:
        img, ratios = _scale_to(img, MIN_SIDE / min(h, w))
    h, w = img.shape[:2]
    top = 0
    if h <= MIN_HEIGHT or w / h > WIDTH_HEIGHT_RATIO:
        top = int(abs(max(int(w / WIDTH_HEIGHT_RATIO), MIN_HEIGHT) * 2 - h) / 2)
        img = np.pad(img, ((top, top), (0, 0), (0, 0)))
    return img, ratios, top


def _resize_pad(img: np.ndarray, width: int) -> np.ndarray:
    h, w = img.shape[:2]
    rw = min(width, int(math.ceil(REC_H * w / h)))
    out = np.zeros((3, REC_H, width), np.float32)
    out[:, :, :rw] = normalize(resize(np.ascontiguousarray(img), REC_H, rw, 1))
    return out


class OcrPipeline:
    """det / cls / rec runners plus the rec class table; ``__call__(bgr) -> [TextLine]``."""

    def __init__(self, det: Runner, cls: Runner, rec: Runner, characters: list[str],
                 db: DBParams | None = None) -> None:
        self.det, self.cls, self.rec, self.characters = det, cls, rec, characters
        self.db = db or DBParams()

    @classmethod
    def with_infersession(cls, det_path: str | Path, cls_path: str | Path, rec_path: str | Path) -> OcrPipeline:
        """The three ONNX models through ``pycann.InferSession`` (compiled in memory)."""
        from pycann.acl.session import InferSession

        def runner(path: str | Path) -> Runner:
            sess = InferSession(0, str(path))
            name = sess.get_inputs()[0].name
            return lambda x: sess.run(None, {name: x})[0]

        return cls(runner(det_path), runner(cls_path), runner(rec_path), ctc.characters_from_model(str(rec_path)))

    def detect(self, img: np.ndarray) -> list[np.ndarray]:
        """Sorted text boxes (4, 2) float32 of a BGR image."""
        h, w = img.shape[:2]
        rh, rw = det_size(h, w)
        prob = self.det(normalize(resize(img, rh, rw, 1))[None])[0, 0]
        boxes, _ = boxes_from_map(prob, w, h, self.db)
        kept = []
        for b in boxes:
            q = order_clockwise(b.astype(np.float32))
            q[:, 0] = np.clip(q[:, 0], 0, w - 1).astype(np.int32)
            q[:, 1] = np.clip(q[:, 1], 0, h - 1).astype(np.int32)
            if int(np.linalg.norm(q[0] - q[1])) > 3 and int(np.linalg.norm(q[0] - q[3])) > 3:
                kept.append(q)
        return sort_boxes(kept)

    def classify(self, crops: list[np.ndarray]) -> list[np.ndarray]:
        """Crops with those cls reads as upside down turned 180 degrees."""
        order = np.argsort([c.shape[1] / c.shape[0] for c in crops], kind="stable")
        out = list(crops)
        for s in range(0, len(crops), BATCH):
            idx = order[s : s + BATCH]
            x = np.stack([_resize_pad(crops[i], CLS_W) for i in idx])
            probs = self.cls(x)
            for i, p in zip(idx, probs):
                if int(p.argmax()) == 1 and float(p.max()) > CLS_THRESH:
                    out[i] = np.ascontiguousarray(crops[i][::-1, ::-1])
        return out

    def recognize(self, crops: list[np.ndarray]) -> list[tuple[str, float]]:
        """(text, score) per crop, batched by aspect ratio with each batch's width."""
        ratios = [c.shape[1] / c.shape[0] for c in crops]
        order = np.argsort(ratios, kind="stable")
        res: list[tuple[str, float]] = [("", 0.0)] * len(crops)
        for s in range(0, len(crops), BATCH):
            idx = order[s : s + BATCH]
            width = int(REC_H * max(REC_W / REC_H, *(ratios[i] for i in idx)))
            x = np.stack([_resize_pad(crops[i], width) for i in idx])
            for i, r in zip(idx, ctc.ctc_decode(self.rec(x), self.characters)):
                res[i] = r
        return res

    def __call__(self, img: np.ndarray) -> list[TextLine]:
        raw_h, raw_w = img.shape[:2]
        work, (ry, rx), top = prepare(img)
        boxes = self.detect(work)
        if not boxes:
            return []
        crops = self.classify([crop_quad(work, b) for b in boxes])
        lines = []
        for b, (t, s) in zip(boxes, self.recognize(crops)):
            if s < TEXT_SCORE:
                continue
            q = (b - np.array([0, top], np.float32)) * np.array([rx, ry], np.float32)  # back to the input
            q[:, 0], q[:, 1] = np.clip(q[:, 0], 0, raw_w), np.clip(q[:, 1], 0, raw_h)
            lines.append(TextLine(q, t, s))
        return lines

    def read(self, data: bytes) -> list[TextLine]:
        """OCR of JPEG / PNG bytes."""
        return self(decode_image(data))
