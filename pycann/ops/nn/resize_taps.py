"""Resize's per-axis interpolation tables (ONNX spec, Operators.md#Resize): output coordinates
mapped to input coordinates (``coordinate_transformation_mode``), nearest rounding, linear, cubic
and antialiased taps, and their application one axis at a time.

Why a module of its own: ``resize.py`` keeps the op (attributes, inputs, output shape, shape
inference) and ``resize_nd``'s order of axes; the arithmetic here is what must match ONNX
Runtime's float32 rounding to the bit, and is tested through ``resize_nd``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["AxisPlan", "HALF_TOL", "apply_taps", "axis_plan", "bilinear_axes", "identity_linear", "nearest_axis"]

F32 = np.float32
HALF_TOL = 1.2e-6

# ------------------------------------------------------------------------ coordinates


def _original_coords(mode: str, n_out: int, n_in: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """x_original for every output index (Operators.md#Resize, coordinate_transformation_mode)."""
    x = np.arange(n_out, dtype=F32)
    s, lo, li = F32(scale), F32(n_out), F32(n_in)
    if mode == "asymmetric":
        return x / s
    if mode == "pytorch_half_pixel":
        return (x + F32(0.5)) / s - F32(0.5) if n_out > 1 else np.zeros(n_out, F32)
    if mode == "tf_half_pixel_for_nn":
        return (x + F32(0.5)) / s
    if mode == "align_corners":
        # The spec's length_resized is length_original * scale, not the rounded output length
        # (the ONNX reference does this; ORT uses the rounded length and differs when scales
        # do not divide evenly). With ``sizes`` given, scale = n_out / n_in and both agree.
        lr = li * s
        return x * (li - 1) / (lr - 1) if n_out > 1 and lr != 1 else np.zeros(n_out, F32)
    if mode == "tf_crop_and_resize":
        start, end = F32(roi[0]), F32(roi[1])
        if n_out > 1:
            return start * (li - 1) + (x * (end - start) * (li - 1)) / (lo - 1)
        return np.full(n_out, 0.5 * (float(start) + float(end)) * (n_in - 1), F32)
    if mode == "half_pixel_symmetric":
        adjustment = lo / (s * li)
        offset = (li / 2) * (1 - adjustment)
        # ORT mixes in double here ((x + 0.5) with a double literal), then rounds to float.
        return (float(offset) + (x.astype(np.float64) + 0.5) / float(s) - 0.5).astype(F32)
    return (x + F32(0.5)) / s - F32(0.5)  # half_pixel


def _nearest(orig: np.ndarray, mode: str, downsample: bool) -> np.ndarray:
    if mode in ("round_prefer_floor", "round_prefer_ceil"):
        # ONNX Runtime treats coordinates within ~1e-6 of a half as exact halves (measured
        # against ORT 1.2x-1.3x: e.g. 9 / 1.2f = 7.4999995 rounds like 7.5); other values
        # round half away from zero (std::round).
        o = orig.astype(np.float64)
        fl = np.floor(o)
        half = np.abs(o - fl - 0.5) < HALF_TOL
        rounded = np.sign(o) * np.floor(np.abs(o) + 0.5)
        idx = np.where(half, fl if mode == "round_prefer_floor" else fl + 1, rounded)
    elif mode == "floor":
        idx = np.floor(orig)
    elif mode == "ceil":
        idx = np.ceil(orig)
    else:  # simple
        idx = np.ceil(orig) if downsample else np.trunc(orig)
    return idx.astype(np.int64)


def _cubic_coeffs(s: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic weights for taps floor(x)-1 .. floor(x)+2 at fraction ``s`` (ORT GetCubicCoeffs)."""
    A = F32(a)
    s1, s2, s3 = s + 1, 1 - s, 2 - s
    return np.stack([
        ((A * s1 - 5 * A) * s1 + 8 * A) * s1 - 4 * A,
        ((A + 2) * s - (A + 3)) * s * s + 1,
        ((A + 2) * s2 - (A + 3)) * s2 * s2 + 1,
        ((A * s3 - 5 * A) * s3 + 8 * A) * s3 - 4 * A,
    ], axis=1).astype(F32)


def _aa_taps(
    orig: np.ndarray, n_in: int, scale: float, mode: str, a: float, exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Antialiasing filter taps (opset 18 'antialias'): the kernel is stretched by 1/scale when
    downscaling; out-of-range taps are clamped to the edge or, with exclude_outside, dropped."""
    inv = F32(1.0) / F32(scale)  # input pixels per output pixel
    support = (1.0 if mode == "linear" else 2.0) * (float(inv) if inv >= 1 else 1.0)
    inv_scale = F32(1.0) / inv if inv >= 1 else F32(1.0)
    center = orig + F32(0.5)
    lo = np.floor(center.astype(np.float64) - support + 0.5).astype(np.int64)
    hi = np.floor(center.astype(np.float64) + support + 0.5).astype(np.int64)
    k = int(math.ceil(support)) * 2 + 1
    j = lo[:, None] + np.arange(k)[None, :]
    d = np.abs((j.astype(F32) - center[:, None] + F32(0.5)) * inv_scale)
    if mode == "linear":
        w = np.where(d < 1, 1 - d, F32(0))
    else:
        A = F32(a)
        w = np.where(d < 1, ((A + 2) * d - (A + 3)) * d * d + 1,
                     np.where(d < 2, (((d - 5) * d + 8) * d - 4) * A, F32(0)))
    w = np.where(j < hi[:, None], w, F32(0)).astype(F32)
    if exclude_outside:
        w = np.where((j >= 0) & (j < n_in), w, F32(0))
    tot = w.sum(axis=1, keepdims=True, dtype=F32)
    w = np.where((tot != 0) & (tot != 1), w / np.where(tot == 0, 1, tot), w)
    return np.clip(j, 0, n_in - 1), w


class AxisPlan:
    """Gather table for one axis: ``idx`` [out, taps], ``w`` [out, taps] or None (nearest),
    ``ext`` [out] bool where the extrapolation value is used, or None."""

    def __init__(self, idx: np.ndarray, w: np.ndarray | None, ext: np.ndarray | None) -> None:
        self.idx, self.w, self.ext = idx, w, ext
        self.w10: np.ndarray | None = None  # 10-bit fixed-point linear weights (int8 NHWC path)


def axis_plan(
    n_in: int, n_out: int, scale: float, roi: tuple[float, float], mode: str, coord: str,
    nearest_mode: str, cubic_a: float, exclude_outside: bool, antialias: bool,
) -> AxisPlan | None:
    if n_out == n_in and F32(scale) == F32(1.0):
        return None  # identity axis (ORT skips the transform for scale 1)
    orig = _original_coords(coord, n_out, n_in, scale, roi)
    ext = None
    if coord == "tf_crop_and_resize":
        # ORT's antialias filter tests its pixel centre less the half pixel it added, (orig + 0.5) - 0.5
        # in float32: the coordinate itself (not orig + 0.5, which extrapolated the last output pixel
        # of a full [0, 1] crop); the other modes test orig
        chk = (orig + F32(0.5)) - F32(0.5) if antialias and mode != "nearest" else orig
        ext = (chk < 0) | (chk > F32(n_in - 1))
        if not ext.any():
            ext = None
    if mode == "nearest":
        idx = np.clip(_nearest(orig, nearest_mode, scale < 1), 0, n_in - 1)
        return AxisPlan(idx[:, None], None, ext)
    if antialias:
        idx, w = _aa_taps(orig, n_in, scale, mode, cubic_a, exclude_outside)
        return AxisPlan(idx, w, ext)
    if mode == "linear":
        v = np.clip(orig, F32(0), F32(n_in - 1))
        x1 = np.minimum(v.astype(np.int64), n_in - 1)
        x2 = np.minimum(x1 + 1, n_in - 1)
        w1 = np.abs(v - x2.astype(F32))  # weight of x1
        w2 = np.abs(v - x1.astype(F32))
        same = x1 == x2
        w1, w2 = np.where(same, F32(0.5), w1), np.where(same, F32(0.5), w2)
        plan = AxisPlan(np.stack([x1, x2], 1), np.stack([w1, w2], 1).astype(F32), ext)
        v10 = (v * F32(1024)).astype(np.int64)  # for the int8 fixed-point path
        plan.w10 = np.where(same[:, None], 512,
                            np.stack([np.abs(v10 - x2 * 1024), np.abs(v10 - x1 * 1024)], 1))
        return plan
    # cubic
    fl = np.floor(orig)
    taps = fl.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
    w = _cubic_coeffs(orig - fl, cubic_a)
    if exclude_outside:
        w = np.where((taps >= 0) & (taps < n_in), w, F32(0))
        w = w / w.sum(axis=1, keepdims=True)
    return AxisPlan(np.clip(taps, 0, n_in - 1), w.astype(F32), ext)


_DUP = {1: (np.uint8, np.uint16, 0x101), 2: (np.uint16, np.uint32, 0x10001), 4: (np.uint32, np.uint64, 0x100000001)}


def nearest_axis(y: np.ndarray, idx: np.ndarray, a: int) -> np.ndarray:
    """Gather ``idx`` along axis ``a``; integer repeats (the x2 upsampling of FPNs) avoid the
    element gather: rows are block-copied by np.repeat, and doubling the last axis of a
    1/2/4-byte tensor is a single integer multiply on a twice-as-wide view."""
    n = y.shape[a]
    k = len(idx) // n if n else 0
    if k < 2 or len(idx) != n * k or not np.array_equal(idx, np.repeat(np.arange(n), k)):
        return np.take(y, idx, axis=a)
    if a == y.ndim - 1 and k in (2, 4) and y.dtype.itemsize in _DUP:
        narrow, wide, mul = _DUP[y.dtype.itemsize]
        for _ in range(k // 2):
            v = np.ascontiguousarray(y).view(narrow).astype(wide)
            v *= wide(mul)  # the value in both halves of the wider word
            y = v.view(y.dtype)
        return y
    return np.repeat(y, k, axis=a)


def apply_taps(y: np.ndarray, p: AxisPlan, a: int, cdt: type) -> np.ndarray:
    """Weighted sum of ``taps`` gathers along axis ``a``."""
    shp = [1] * y.ndim
    shp[a] = p.idx.shape[0]
    w = p.w
    assert w is not None  # only nearest plans lack weights, and they never get here
    acc = None
    for k in range(p.idx.shape[1]):
        t = np.take(y, p.idx[:, k], axis=a)
        t *= w[:, k].astype(cdt).reshape(shp)
        acc = t if acc is None else np.add(acc, t, out=acc)
    assert acc is not None
    return acc


def identity_linear(n: int) -> AxisPlan:
    """ORT's bilinear taps for an unscaled axis: (x, x+1) weighted (1, 0), last (0.5, 0.5)."""
    x1 = np.arange(n)
    x2 = np.minimum(x1 + 1, n - 1)
    w = np.stack([np.ones(n, F32), np.zeros(n, F32)], 1)
    w[-1] = 0.5
    p = AxisPlan(np.stack([x1, x2], 1), w, None)
    p.w10 = (w * 1024).astype(np.int64)
    return p


def bilinear_axes(x: np.ndarray, mode: str, antialias: bool, scales: Sequence[float]) -> tuple[int, int] | None:
    """The (height, width) axes ORT's 2-D bilinear kernel uses, or None for other layouts."""
    if mode != "linear" or antialias:
        return None
    if x.ndim == 2:
        return (0, 1)
    if x.ndim == 4:
        return (2, 3) if F32(scales[1]) == 1 else (1, 2)
    return None
