"""ONNX Runtime's integer-rounding variants of Resize (used by ``pycann.ops.nn.resize``).

ORT evaluates integer bilinear resizes in its own float32 order (then truncates), NHWC
int8/uint8 bilinear in 10-bit fixed point and 8-bit antialiasing in 22-bit fixed point; these
helpers reproduce that bit for bit. ``Plan`` objects carry ``idx`` [out, taps], ``w`` [out, taps]
(float32) and, for linear plans, ``w10`` (10-bit fixed-point weights).
"""

from __future__ import annotations

from typing import Any

import numpy as np

F32 = np.float32
Plan = Any


def bilinear_exact(x: np.ndarray, axes: tuple[int, int], py: Plan, px: Plan) -> np.ndarray:
    """Integer bilinear in ORT's float32 evaluation order, truncated (upsample.h)."""
    ay, ax = axes
    ny, nx = py.idx.shape[0], px.idx.shape[0]
    xf = x.astype(F32)
    out: np.ndarray | None = None
    for i in range(2):
        rows = np.take(xf, py.idx[:, i], axis=ay)
        for j in range(2):
            c = py.w[:, i][:, None] * px.w[:, j][None, :]  # (dy * dx) first, as in ORT
            shp = [1] * x.ndim
            shp[ay], shp[ax] = ny, nx
            term = c.reshape(shp) * np.take(rows, px.idx[:, j], axis=ax)
            out = term if out is None else out + term
    assert out is not None  # the 2x2 tap loop always runs
    info = np.iinfo(x.dtype)
    return np.clip(out, info.min, info.max)


def bilinear_fixed_point(x: np.ndarray, py: Plan, px: Plan) -> np.ndarray:
    """ORT's NHWC int8/uint8 bilinear: 10-bit fixed-point weights, exact integer sums, result
    truncated toward zero (upsample.h NhwcUpsampleBilinearInteger)."""
    y = x.astype(np.int64)
    for a, p in ((1, py), (2, px)):
        assert p.w10 is not None
        shp = [1] * 4
        shp[a] = p.idx.shape[0]
        y = sum(np.take(y, p.idx[:, k], axis=a) * p.w10[:, k].reshape(shp) for k in range(2))
    return np.sign(y) * (np.abs(y) >> 20)


def taps_fixed22(y: np.ndarray, p: Plan, a: int) -> np.ndarray:
    """ORT's 8-bit antialias pass: 22-bit fixed-point weights, +0.5 rounding, clip to 0..255."""
    assert p.w is not None
    wq = np.where(p.w < 0, np.ceil(p.w.astype(np.float64) * (1 << 22) - 0.5),
                  np.floor(p.w.astype(np.float64) * (1 << 22) + 0.5)).astype(np.int64)
    shp = [1] * y.ndim
    shp[a] = p.idx.shape[0]
    acc = np.full((1,) * y.ndim, 1 << 21, np.int64)
    for k in range(p.idx.shape[1]):
        acc = acc + np.take(y, p.idx[:, k], axis=a) * wq[:, k].reshape(shp)
    return np.clip(acc >> 22, 0, 255)
