"""VPC's interpolations (``acldvppSetResizeConfigInterpolation``), on ``(h, w)`` or ``(h, w, c)`` uint8.

The documented modes: 0 = the default (1 on Atlas inference products), 1 = bilinear computed as
OpenCV's ``INTER_LINEAR`` (half-pixel centres, edge clamp, 11-bit fixed-point weights: within one
LSB of ``cv2.resize``, which is what the docs promise for the device), 2 = nearest neighbour as
OpenCV's ``INTER_NEAREST`` (``floor(dst * src/dst)``), 3 = bilinear as TensorFlow's legacy
``resize_bilinear`` (``src = dst * scale``, no half-pixel offset), 4 = nearest as TensorFlow's
legacy ``resize_nearest_neighbor`` (``floor(dst * in/out)`` in float32). Mode 5 (Huawei's own high-order
filter) has no public definition and is refused.

Modes 0 and 1 run in OpenCV's ``cv2.resize(INTER_LINEAR)`` itself when OpenCV is installed
(``pip install pycann[media]`` brings it): the documented behaviour exactly, ~20x faster than
numpy and without the GIL. Without OpenCV, ``bilinear_numpy`` computes the same fixed-point
arithmetic (within one LSB of OpenCV, equal on most pixels).
"""

from __future__ import annotations

import enum
import functools
from types import ModuleType

import numpy as np

from pycann.dvpp.formats import DvppError, Fault

_BITS = 11
_ONE = 1 << _BITS


class Interpolation(enum.IntEnum):
    DEFAULT = 0
    BILINEAR_CV = 1
    NEAREST_CV = 2
    BILINEAR_TF = 3
    NEAREST_TF = 4
    HIGH_ORDER = 5


def interpolation(value: int) -> Interpolation:
    """The mode of an int. Raises ``DvppError`` (PARAM for unknown, UNSUPPORTED for mode 5)."""
    try:
        mode = Interpolation(value)
    except ValueError:
        raise DvppError(Fault.PARAM, f"interpolation {value} is not one of 0..5") from None
    if mode is Interpolation.HIGH_ORDER:
        raise DvppError(Fault.UNSUPPORTED, "interpolation 5 (the device's own high-order filter) has no "
                                           "public definition; use 1 (bilinear as OpenCV) or 2 (nearest)")
    return mode


def _linear_axis(n_in: int, n_out: int, half_pixel: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices (i0, i1) and integer weights (w0, w1), ``w0 + w1 == 2**11``, for one axis."""
    scale = n_in / n_out
    d = np.arange(n_out, dtype=np.float64)
    f = (d + 0.5) * scale - 0.5 if half_pixel else d * scale
    s = np.floor(f)
    frac = f - s
    s = s.astype(np.int64)
    low = s < 0
    s[low], frac[low] = 0, 0.0
    high = s >= n_in - 1
    s[high], frac[high] = n_in - 1, 0.0
    w0 = np.rint((1.0 - frac) * _ONE).astype(np.int32)  # OpenCV's saturate_cast rounds to nearest
    return s, np.minimum(s + 1, n_in - 1), w0, (_ONE - w0).astype(np.int32)


def _nearest_axis(n_in: int, n_out: int) -> np.ndarray:
    # OpenCV's resizeNN: ``floor(x * (1 / (out / in)))`` in double; ``in / out`` rounds differently
    # (6 -> 34: x = 17 gives 3.0 against OpenCV's 2.9999999999999996)
    ifx = 1.0 / (n_out / n_in)
    return np.minimum(np.floor(np.arange(n_out) * ifx).astype(np.int64), n_in - 1)


def _nearest_axis_tf(n_in: int, n_out: int) -> np.ndarray:
    # TensorFlow's legacy resize_nearest_neighbor: ``floorf(float(x) * (float(in) / out))`` in float32
    scale = np.float32(n_in) / np.float32(n_out)
    idx = np.floor(np.arange(n_out, dtype=np.float32) * scale).astype(np.int64)
    return np.minimum(idx, n_in - 1)


@functools.cache
def _cv2() -> ModuleType | None:
    try:
        import cv2
    except ImportError:
        return None
    return cv2


def resize(src: np.ndarray, out_h: int, out_w: int, mode: int = 0) -> np.ndarray:
    """``src`` ``(h, w[, c])`` uint8 resized to ``(out_h, out_w[, c])`` with VPC's ``mode`` (a new
    array). Raises ``DvppError`` for an unknown mode or mode 5 and (PARAM) for an output size below 1x1."""
    m = interpolation(mode)
    if out_h < 1 or out_w < 1:  # cv2.resize would assert, numpy would return an empty picture
        raise DvppError(Fault.PARAM, f"resize to {out_w}x{out_h}: the output needs at least 1x1 pixels")
    h, w = src.shape[:2]
    if (h, w) == (out_h, out_w):
        return src.copy()
    if m is Interpolation.NEAREST_CV:
        return src[_nearest_axis(h, out_h)][:, _nearest_axis(w, out_w)]
    if m is Interpolation.NEAREST_TF:
        return src[_nearest_axis_tf(h, out_h)][:, _nearest_axis_tf(w, out_w)]
    cv2 = _cv2()
    if m is not Interpolation.BILINEAR_TF and cv2 is not None and src.ndim in (2, 3) and src.dtype == np.uint8:
        out = cv2.resize(np.ascontiguousarray(src), (out_w, out_h), interpolation=cv2.INTER_LINEAR)
        return out.reshape(out_h, out_w, *src.shape[2:])
    return bilinear_numpy(src, out_h, out_w, half_pixel=m is not Interpolation.BILINEAR_TF)


def bilinear_numpy(src: np.ndarray, out_h: int, out_w: int, half_pixel: bool = True) -> np.ndarray:
    """Bilinear resize in numpy with OpenCV's fixed-point arithmetic: ``half_pixel`` centres (modes
    0 and 1, as ``INTER_LINEAR``) or TensorFlow's legacy ``src = dst * scale`` (mode 3)."""
    half = half_pixel
    h, w = src.shape[:2]
    y0, y1, wy0, wy1 = _linear_axis(h, out_h, half)
    x0, x1, wx0, wx1 = _linear_axis(w, out_w, half)
    ex = (1,) * (src.ndim - 2)
    wx0, wx1 = wx0.reshape(1, -1, *ex), wx1.reshape(1, -1, *ex)

    def horizontal(rows: np.ndarray) -> np.ndarray:
        # uint8 gathers (rows, then columns), promoted to int32 by the multiply itself
        acc = np.take(rows, x0, axis=1) * wx0
        acc += np.take(rows, x1, axis=1) * wx1
        return acc

    # OpenCV's arithmetic: an exact horizontal pass, then the vertical pass as its SIMD kernel
    # computes it ((row >> 4) * w >> 16, summed, + 2 >> 2)
    top, bottom = horizontal(src[y0]), horizontal(src[y1])
    top >>= 4
    top *= wy0.reshape(-1, 1, *ex)
    top >>= 16
    bottom >>= 4
    bottom *= wy1.reshape(-1, 1, *ex)
    bottom >>= 16
    top += bottom
    top += 2
    top >>= 2
    return np.clip(top, 0, 255).astype(np.uint8)
