"""Sampling-grid ops (ONNX spec, Operators.md): GridSample (16, 20) and AffineGrid (20).
Part of the ``pycann.ops.misc`` family.

GridSample follows PyTorch's grid_sampler semantics (which the spec adopts): normalised
coordinates in [-1, 1], the last grid dim ordered (x, y[, z]) i.e. innermost spatial axis
first, nearest rounding half-to-even, out-of-range handling by padding_mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, TensorDesc
from pycann.ops.opdef import InferContext, OpDef

_MODE_20 = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect coordinates into [lo, hi] by the nearer border, repeatedly."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    d = np.where(x < lo, lo - x, x - hi)
    n = np.floor(d / rng)
    r = d - n * rng
    even = (n % 2) == 0
    below = np.where(even, lo + r, hi - r)
    above = np.where(even, hi - r, lo + r)
    return np.where(x < lo, below, np.where(x > hi, above, x))


def _cubic_w(t: np.ndarray) -> list[np.ndarray]:
    A = -0.75  # PyTorch's bicubic constant
    t1, t2 = t + 1, 1 - t
    return [
        ((A * t1 - 5 * A) * t1 + 8 * A) * t1 - 4 * A,
        ((A + 2) * t - (A + 3)) * t * t + 1,
        ((A + 2) * t2 - (A + 3)) * t2 * t2 + 1,
        ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A,
    ]


def grid_sample(X: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool) -> np.ndarray:
    """GridSample over any number of spatial dims (Operators.md#GridSample, opset 20)."""
    N, C = X.shape[:2]
    spatial = X.shape[2:]
    d = len(spatial)
    out_sp = grid.shape[1:-1]
    cdt = np.float64 if X.dtype == np.float64 else np.float32
    if N == 0 or C == 0 or int(np.prod(out_sp)) == 0:
        return np.zeros((N, C, *out_sp), X.dtype)
    g = grid.astype(np.float64).reshape(N, -1, d)  # [N, P, d], (x, y, ...) order
    P = g.shape[1]
    coords, borders = [], []
    for k in range(d):
        L = spatial[d - 1 - k]
        n = g[..., k]
        c = (n + 1) / 2 * (L - 1) if align else ((n + 1) * L - 1) / 2
        lo, hi = (0.0, L - 1.0) if align else (-0.5, L - 0.5)
        if mode == "nearest":
            c = np.rint(c)
        # Cubic applies the padding rule to each of its 4 taps only (PyTorch / ORT), the
        # other modes to the sampling coordinate itself.
        if padding == "border" and mode != "cubic":
            c = np.clip(c, 0, L - 1)
        elif padding == "reflection" and mode != "cubic":
            c = _reflect(c, lo, hi)
        coords.append(c)
        borders.append((L, lo, hi))
    coords, borders = coords[::-1], borders[::-1]  # now in X's axis order

    def taps(c: np.ndarray, L: int, lo: float, hi: float) -> list[tuple[np.ndarray, np.ndarray]]:
        if mode == "nearest":
            offs, ws = [c.astype(np.int64)], [np.ones_like(c)]
        else:
            f = np.floor(c)
            t = c - f
            f = f.astype(np.int64)
            if mode == "linear":
                offs, ws = [f, f + 1], [1 - t, t]
            else:
                offs, ws = [f - 1, f, f + 1, f + 2], _cubic_w(t)
        out = []
        for i, w in zip(offs, ws):
            if padding == "zeros":
                w = np.where((i >= 0) & (i < L), w, 0.0)
                i = np.clip(i, 0, L - 1)
            elif padding == "border":
                i = np.clip(i, 0, L - 1)
            else:  # reflection of out-of-range taps (cubic)
                i = np.clip(_reflect(i.astype(np.float64), lo, hi).astype(np.int64), 0, L - 1)
            out.append((i, w))
        return out

    per_axis = [taps(c, *b) for c, b in zip(coords, borders)]
    strides = np.cumprod((1,) + tuple(spatial[::-1]))[:-1][::-1]
    flat = X.astype(cdt, copy=False).reshape(N, C, -1)
    out = np.zeros((N, C, P), cdt)
    bidx = np.arange(N)[:, None]
    for combo in np.ndindex(*(len(t) for t in per_axis)):
        lin = np.zeros((N, P), np.int64)
        w = np.ones((N, P))
        for ax, j in enumerate(combo):
            i, wj = per_axis[ax][j]
            lin += i * strides[ax]
            w = w * wj
        vals = flat[bidx, :, lin]  # [N, P, C]
        out += (vals * w[..., None].astype(cdt)).transpose(0, 2, 1)
    return out.reshape(N, C, *out_sp).astype(X.dtype)


def _gs_kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """GridSample (Operators.md#GridSample); opset 16 mode names bilinear/bicubic map to
    linear/cubic."""
    mode = _MODE_20[_text(a["mode"])]
    return [grid_sample(x[0], x[1], mode, _text(a["padding_mode"]), bool(a["align_corners"]))]


def _infer_gs(ctx: InferContext) -> list[TensorDesc]:
    mode, pad = _text(ctx.attrs["mode"]), _text(ctx.attrs["padding_mode"])
    allowed = ("bilinear", "nearest", "bicubic") if ctx.opset < 20 else ("linear", "nearest", "cubic")
    if mode not in allowed:
        raise ctx.fail(f"attribute 'mode' is {mode!r}; expected one of {', '.join(allowed)}")
    if pad not in ("zeros", "border", "reflection"):
        raise ctx.fail(f"attribute 'padding_mode' is {pad!r}; expected zeros, border or reflection")
    x, g = ctx.input(0), ctx.input(1)
    if x is None or x.shape is None or g is None or g.shape is None:
        return [TensorDesc(x.dtype if x else 1, None)]
    if len(g.shape) != len(x.shape):
        raise ctx.fail(f"grid {g} must have the rank of X {x} ((N, *spatial_out, {len(x.shape) - 2}))")
    if isinstance(g.shape[-1], int) and g.shape[-1] != len(x.shape) - 2:
        raise ctx.fail(f"grid's last dim is {g.shape[-1]}; expected {len(x.shape) - 2} (spatial rank)")
    n: Dim = x.shape[0] if isinstance(x.shape[0], int) else g.shape[0]
    return [TensorDesc(x.dtype, (n, x.shape[1], *g.shape[1:-1]))]


# -------------------------------------------------------------------------------- AffineGrid


def _base(L: int, align: bool) -> np.ndarray:
    if align:
        return np.linspace(-1.0, 1.0, L) if L > 1 else np.zeros(L)
    return (np.arange(L) * 2.0 + 1.0) / L - 1.0


def _k_affine_grid(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """AffineGrid (Operators.md#AffineGrid): ``grid = [x, y(, z), 1] @ theta^T`` over the
    normalised output coordinates."""
    theta = x[0]
    size = [int(v) for v in np.asarray(x[1]).reshape(-1)]
    align = bool(a["align_corners"])
    sp = size[2:]
    axes = [_base(L, align) for L in sp]  # (D,) H, W
    mesh = np.meshgrid(*axes, indexing="ij")
    pts = np.stack([*mesh[::-1], np.ones(tuple(sp))], axis=-1).reshape(-1, len(sp) + 1)  # (x, y, [z], 1)
    cdt = np.float64 if theta.dtype == np.float64 else np.float32
    grid = np.einsum("pk,njk->npj", pts.astype(cdt), theta.astype(cdt))
    return [grid.reshape(size[0], *sp, len(sp)).astype(theta.dtype)]


def _infer_affine_grid(ctx: InferContext) -> list[TensorDesc]:
    t, size = ctx.input(0), ctx.value(1)
    if t is not None and t.shape is not None and len(t.shape) != 3:
        raise ctx.fail(f"theta has shape {t}; expected (N, 2, 3) or (N, 3, 4)")
    if size is None:
        size_desc = ctx.input(1)
        n = size_desc.shape[0] if size_desc is not None and size_desc.shape else None
        if isinstance(n, int):
            return [TensorDesc(t.dtype if t else 1, (None,) * (n - 1) + (n - 2,))]
        return [TensorDesc(t.dtype if t else 1, None)]
    s = [int(v) for v in np.asarray(size).reshape(-1)]
    if len(s) not in (4, 5):
        raise ctx.fail(f"input 'size' {s} must have 4 (N, C, H, W) or 5 (N, C, D, H, W) values")
    return [TensorDesc(t.dtype if t else 1, (s[0], *s[2:], len(s) - 2))]


_GS_ATTRS = {"align_corners": 0, "padding_mode": "zeros"}

OPS: list[OpDef] = [
    OpDef("GridSample", _infer_gs, _gs_kernel, since=16, attrs={**_GS_ATTRS, "mode": "bilinear"}),
    # Opset 20 renamed the modes (linear/cubic) and allowed N-D spatial inputs.
    OpDef("GridSample", _infer_gs, _gs_kernel, since=20, attrs={**_GS_ATTRS, "mode": "linear"}),
    OpDef("AffineGrid", _infer_affine_grid, _k_affine_grid, since=20, attrs={"align_corners": 0}),
]
