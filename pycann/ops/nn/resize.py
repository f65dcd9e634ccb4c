"""Resize (ONNX spec, Operators.md#Resize), opset 10 and 11+ forms.

Interpolation is separable: every resized axis gets a precomputed (index, weight) table of
``taps`` input positions per output position, applied with ``np.take`` one axis at a time.
Coordinates are computed in float32 in the same order as ONNX Runtime so that nearest-mode
ties round the same way. As in ONNX Runtime, an axis whose scale is exactly 1 is copied
unchanged (no coordinate transform, no extrapolation).

``resize_nd`` is public so that Upsample (``pycann.ops.misc``) can reuse it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, TensorDesc
from pycann.ops.nn.resize_int import bilinear_exact, bilinear_fixed_point, taps_fixed22
from pycann.ops.nn.spatial import is_channels_last
from pycann.ops.opdef import InferContext, OpDef

F32 = np.float32
MODES = ("nearest", "linear", "cubic")
COORD_MODES = (
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_crop_and_resize", "tf_half_pixel_for_nn",
)
# "simple" is Resize-10 / Upsample's rounding: truncate when upsampling, ceil when downsampling.
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")
POLICIES = ("stretch", "not_larger", "not_smaller")
_HALF_TOL = 1.2e-6


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# ------------------------------------------------------------------------- output shape


def output_shape(
    in_shape: Sequence[int], scales: Sequence[float] | None, sizes: Sequence[int] | None,
    axes: Sequence[int] | None, policy: str = "stretch",
) -> tuple[list[int], list[float]]:
    """Output dims and per-axis float32 scales (Operators.md#Resize, 'scales'/'sizes'/'axes').

    ``scales`` give ``floor(in * scale)``; ``sizes`` give the dims directly (adjusted by
    ``keep_aspect_ratio_policy``) and scales ``out / in``. Raises ``ValueError`` on bad lengths.
    """
    r = len(in_shape)
    ax = list(range(r)) if not axes else [int(a) % r for a in axes]
    if scales is not None:
        if len(scales) != len(ax):
            raise ValueError(f"'scales' has {len(scales)} values; expected {len(ax)} (one per resized axis)")
        sc = [F32(1.0)] * r
        for a, s in zip(ax, scales):
            if not s > 0:
                raise ValueError(f"'scales' must be positive, got {list(scales)}")
            sc[a] = F32(s)
        # ORT: static_cast<int64_t>(float scale * dim) (float32 product, truncated).
        out = [int(F32(s) * F32(d)) for s, d in zip(sc, in_shape)]
        return out, [float(s) for s in sc]
    if sizes is None:
        raise ValueError("one of 'scales' or 'sizes' must be given")
    if len(sizes) != len(ax):
        raise ValueError(f"'sizes' has {len(sizes)} values; expected {len(ax)} (one per resized axis)")
    out = list(in_shape)
    for a, s in zip(ax, sizes):
        out[a] = int(s)
    sc = [F32(1.0) if d == 0 else F32(o) / F32(d) for o, d in zip(out, in_shape)]
    if policy != "stretch":
        pick = min if policy == "not_larger" else max
        s = pick(sc[a] for a in ax)
        for a in range(r):
            if a in ax:
                sc[a] = s
                out[a] = int(math.floor(float(s * F32(in_shape[a])) + 0.5))  # std::round, positive
            else:
                sc[a], out[a] = F32(1.0), in_shape[a]
    return out, [float(s) for s in sc]


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
        half = np.abs(o - fl - 0.5) < _HALF_TOL
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


class _AxisPlan:
    """Gather table for one axis: ``idx`` [out, taps], ``w`` [out, taps] or None (nearest),
    ``ext`` [out] bool where the extrapolation value is used, or None."""

    def __init__(self, idx: np.ndarray, w: np.ndarray | None, ext: np.ndarray | None) -> None:
        self.idx, self.w, self.ext = idx, w, ext
        self.w10: np.ndarray | None = None  # 10-bit fixed-point linear weights (int8 NHWC path)


def _plan(
    n_in: int, n_out: int, scale: float, roi: tuple[float, float], mode: str, coord: str,
    nearest_mode: str, cubic_a: float, exclude_outside: bool, antialias: bool,
) -> _AxisPlan | None:
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
        return _AxisPlan(idx[:, None], None, ext)
    if antialias:
        idx, w = _aa_taps(orig, n_in, scale, mode, cubic_a, exclude_outside)
        return _AxisPlan(idx, w, ext)
    if mode == "linear":
        v = np.clip(orig, F32(0), F32(n_in - 1))
        x1 = np.minimum(v.astype(np.int64), n_in - 1)
        x2 = np.minimum(x1 + 1, n_in - 1)
        w1 = np.abs(v - x2.astype(F32))  # weight of x1
        w2 = np.abs(v - x1.astype(F32))
        same = x1 == x2
        w1, w2 = np.where(same, F32(0.5), w1), np.where(same, F32(0.5), w2)
        plan = _AxisPlan(np.stack([x1, x2], 1), np.stack([w1, w2], 1).astype(F32), ext)
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
    return _AxisPlan(np.clip(taps, 0, n_in - 1), w.astype(F32), ext)


_DUP = {1: (np.uint8, np.uint16, 0x101), 2: (np.uint16, np.uint32, 0x10001), 4: (np.uint32, np.uint64, 0x100000001)}


def _nearest_axis(y: np.ndarray, idx: np.ndarray, a: int) -> np.ndarray:
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


def _apply_taps(y: np.ndarray, p: _AxisPlan, a: int, cdt: type) -> np.ndarray:
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


def _identity_linear(n: int) -> _AxisPlan:
    """ORT's bilinear taps for an unscaled axis: (x, x+1) weighted (1, 0), last (0.5, 0.5)."""
    x1 = np.arange(n)
    x2 = np.minimum(x1 + 1, n - 1)
    w = np.stack([np.ones(n, F32), np.zeros(n, F32)], 1)
    w[-1] = 0.5
    p = _AxisPlan(np.stack([x1, x2], 1), w, None)
    p.w10 = (w * 1024).astype(np.int64)
    return p


def _bilinear_axes(x: np.ndarray, mode: str, antialias: bool, scales: Sequence[float]) -> tuple[int, int] | None:
    """The (height, width) axes ORT's 2-D bilinear kernel uses, or None for other layouts."""
    if mode != "linear" or antialias:
        return None
    if x.ndim == 2:
        return (0, 1)
    if x.ndim == 4:
        return (2, 3) if F32(scales[1]) == 1 else (1, 2)
    return None


def resize_nd(
    x: np.ndarray, out_shape: Sequence[int], scales: Sequence[float], roi: Sequence[float] | None = None,
    *, mode: str = "nearest", coord: str = "half_pixel", nearest_mode: str = "round_prefer_floor",
    cubic_a: float = -0.75, exclude_outside: bool = False, extrapolation_value: float = 0.0,
    antialias: bool = False,
) -> np.ndarray:
    """Resize ``x`` to ``out_shape`` (Operators.md#Resize semantics, ONNX Runtime rounding).

    ``scales`` are the per-axis float32 scales used by the coordinate transform; ``roi`` is
    ``[starts..., ends...]`` over all axes (only read by tf_crop_and_resize).
    """
    r = x.ndim
    if tuple(out_shape) == x.shape:
        return x.copy()  # ORT copies when no dim changes (even with a tf_crop_and_resize roi)
    if any(d == 0 for d in out_shape) or x.size == 0:
        if x.size == 0 and any(o and not i for o, i in zip(out_shape, x.shape)):
            raise ValueError(f"cannot resize an empty dim of {x.shape} to {list(out_shape)}")
        return np.zeros(tuple(out_shape), x.dtype)
    rois = [(0.0, 1.0)] * r if roi is None or len(roi) == 0 else [(roi[a], roi[a + r]) for a in range(r)]
    plans = [
        _plan(x.shape[a], int(out_shape[a]), scales[a], rois[a], mode, coord, nearest_mode,
              cubic_a, exclude_outside, antialias)
        for a in range(r)
    ]
    # Shrinking axes first keeps the intermediates small; on ties the last axis goes first, so
    # its (slower) element gather runs on the smaller tensor.
    active = {a: p for a, p in enumerate(plans) if p is not None}  # the axes that change
    order = sorted(active, key=lambda a: (out_shape[a] / x.shape[a], -a))
    bilinear_axes = _bilinear_axes(x, mode, antialias, scales)
    if mode == "nearest":
        y = x
        for a in order:
            y = _nearest_axis(y, active[a].idx[:, 0], a)
    elif bilinear_axes is not None and x.dtype.kind in "iu":
        ident = [_identity_linear(x.shape[a]) for a in range(r)]
        pa, pb = (plans[a] or ident[a] for a in bilinear_axes)
        if x.dtype.itemsize == 1 and bilinear_axes == (1, 2):
            y = bilinear_fixed_point(x, pa, pb)
        else:
            y = bilinear_exact(x, bilinear_axes, pa, pb)
    elif antialias and x.dtype.itemsize == 1:
        y = x.astype(np.int64)
        for a in sorted(order, reverse=True):  # ORT: width pass, then height
            # each pass is stored as T (int8 wraps, as ORT's static_cast does)
            y = taps_fixed22(y, active[a], a).astype(x.dtype).astype(np.int64)
    else:
        int_aa = antialias and x.dtype.kind in "iu"
        if int_aa:
            order = sorted(order, reverse=True)  # ORT: width pass, then height, rounding each
        cdt = np.float64 if x.dtype == np.float64 else F32
        y = x.astype(cdt, copy=False)
        for a in order:
            y = _apply_taps(y, active[a], a, cdt)
            if int_aa:
                info = np.iinfo(x.dtype)
                y = np.clip(np.sign(y) * np.floor(np.abs(y) + 0.5), info.min, info.max)
    exts = [(a, p.ext) for a, p in active.items() if p.ext is not None]
    if exts:
        mask = np.zeros((1,) * r, bool)
        for a, e in exts:
            shp = [1] * r
            shp[a] = e.shape[0]
            mask = mask | e.reshape(shp)
        y = np.where(mask, np.asarray(extrapolation_value).astype(y.dtype), y)
    if y.dtype != x.dtype:
        if x.dtype.kind in "iu":
            info = np.iinfo(x.dtype)
            y = np.clip(y, info.min, info.max)  # C++ static_cast truncates toward zero
        y = y.astype(x.dtype)
    return np.ascontiguousarray(y)


# ------------------------------------------------------------------------------ the op


def _present(a: np.ndarray | None) -> bool:
    return a is not None and a.size > 0


def _attrs_ok(attrs: Mapping[str, Any]) -> str | None:
    """The first invalid attribute, described, or None."""
    checks = (("mode", MODES), ("coordinate_transformation_mode", COORD_MODES),
              ("nearest_mode", NEAREST_MODES), ("keep_aspect_ratio_policy", POLICIES))
    for name, allowed in checks:
        v = _text(attrs.get(name, allowed[0]))
        if v not in allowed:
            return f"attribute '{name}' is {v!r}; expected one of {', '.join(allowed)}"
    return None


def _full_roi(roi: np.ndarray | None, axes: Sequence[int] | None, r: int) -> list[float] | None:
    if not _present(roi):
        return None
    v = [float(t) for t in np.asarray(roi).reshape(-1)]
    if not axes:
        if len(v) != 2 * r:
            raise ValueError(f"'roi' has {len(v)} values; expected {2 * r} (starts and ends per axis)")
        return v
    n = len(axes)
    if len(v) != 2 * n:
        raise ValueError(f"'roi' has {len(v)} values; expected {2 * n} (starts and ends per axis in 'axes')")
    full = [0.0] * r + [1.0] * r
    for i, a in enumerate(axes):
        full[a % r], full[a % r + r] = v[i], v[n + i]
    return full


def _split_inputs(x: Sequence[Any]) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(roi, scales, sizes) from the opset-11 form or the opset-10 form (X, scales)."""
    if len(x) == 2:
        return None, x[1], None
    get = lambda i: x[i] if len(x) > i else None
    return get(1), get(2), get(3)


def _k_resize(x: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Resize (Operators.md#Resize): nearest / linear / cubic, every coordinate mode, antialias."""
    X = x[0]
    roi, scales, sizes = _split_inputs(x)
    axes = attrs.get("axes") or None
    sc = [float(v) for v in np.asarray(scales).reshape(-1)] if _present(scales) else None
    sz = [int(v) for v in np.asarray(sizes).reshape(-1)] if _present(sizes) and sc is None else None
    out, scl = output_shape(X.shape, sc, sz, axes, _text(attrs.get("keep_aspect_ratio_policy", "stretch")))
    full_roi = _full_roi(roi, axes, X.ndim)
    if _text(attrs["mode"]) == "nearest" and is_channels_last(X):
        # channels-last input (GE LayoutSelection): nearest is a per-axis gather, so resizing the
        # NHWC-ordered view gives the same values and keeps the layout
        p = (0, 2, 3, 1)
        r = None if full_roi is None else [full_roi[i] for i in p] + [full_roi[4 + i] for i in p]
        y = resize_nd(X.transpose(p), [out[i] for i in p], [scl[i] for i in p], r, mode="nearest",
                      coord=_text(attrs["coordinate_transformation_mode"]), nearest_mode=_text(attrs["nearest_mode"]),
                      extrapolation_value=float(attrs.get("extrapolation_value", 0.0)),
                      antialias=bool(attrs.get("antialias", 0)))
        return [y.transpose(0, 3, 1, 2)]
    return [resize_nd(
        X, out, scl, full_roi,
        mode=_text(attrs["mode"]), coord=_text(attrs["coordinate_transformation_mode"]),
        nearest_mode=_text(attrs["nearest_mode"]), cubic_a=float(attrs.get("cubic_coeff_a", -0.75)),
        exclude_outside=bool(attrs.get("exclude_outside", 0)),
        extrapolation_value=float(attrs.get("extrapolation_value", 0.0)),
        antialias=bool(attrs.get("antialias", 0)),
    )]


def infer_resized_shape(
    ctx: InferContext, x: TensorDesc | None, scales: np.ndarray | None, sizes: np.ndarray | None,
    axes: Sequence[int] | None, policy: str = "stretch",
) -> tuple[Dim, ...] | None:
    """Output shape from the input desc and constant scales/sizes (None entries if unknown)."""
    if x is None or x.shape is None:
        return None
    r = len(x.shape)
    if axes:
        if any(not -r <= int(a) < r for a in axes):
            raise ctx.fail(f"attribute 'axes' {list(axes)} is out of range for rank {r}")
        axes = [int(a) % r for a in axes]
        if len(set(axes)) != len(axes):
            raise ctx.fail(f"attribute 'axes' {list(axes)} repeats an axis")
    ax = list(axes) if axes else list(range(r))
    if _present(scales):
        sc = [float(v) for v in np.asarray(scales).reshape(-1)]
        if len(sc) != len(ax):
            raise ctx.fail(f"input 'scales' has {len(sc)} values; expected {len(ax)} (one per resized axis)")
        if any(not v > 0 for v in sc):
            raise ctx.fail(f"input 'scales' {sc} must be positive")
        full = [1.0] * r
        for a, v in zip(ax, sc):
            full[a] = v
        return tuple(
            int(F32(s) * F32(d)) if isinstance(d, int) else (d if F32(s) == 1 else None)
            for s, d in zip(full, x.shape)
        )
    if _present(sizes):
        sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sz) != len(ax):
            raise ctx.fail(f"input 'sizes' has {len(sz)} values; expected {len(ax)} (one per resized axis)")
        if policy == "stretch":
            dims: list[Dim] = list(x.shape)
            for a, v in zip(ax, sz):
                dims[a] = v
            return tuple(dims)
        if all(isinstance(x.shape[a], int) for a in ax):
            ins = [int(d) if isinstance(d, int) else 1 for d in x.shape]
            out, _ = output_shape(ins, None, sz, ax, policy)
            return tuple(out[a] if a in ax else x.shape[a] for a in range(r))
    return (None,) * r


def _infer_resize(ctx: InferContext) -> list[TensorDesc]:
    bad = _attrs_ok(ctx.attrs)
    if bad:
        raise ctx.fail(bad)
    x = ctx.input(0)
    if len(ctx.inputs) == 2:
        scales, sizes, n_sizes = ctx.value(1), None, None
        sc_desc = ctx.input(1)
    else:
        scales, sizes = ctx.value(2), ctx.value(3)
        sc_desc, n_sizes = ctx.input(2), ctx.input(3)
    sc_given = sc_desc is not None and not (sc_desc.shape is not None and 0 in sc_desc.shape)
    sz_given = n_sizes is not None and not (n_sizes.shape is not None and 0 in n_sizes.shape)
    if sc_given and sz_given:
        raise ctx.fail("inputs 'scales' and 'sizes' are both given; only one of them may be non-empty")
    if len(ctx.inputs) > 2 and not sc_given and not sz_given:
        raise ctx.fail("one of inputs 'scales' or 'sizes' must be given (non-empty)")
    if x is not None and x.rank == 0:
        raise ctx.fail("input X must have rank >= 1")
    shape = infer_resized_shape(ctx, x, scales if sc_given else None, sizes if sz_given else None,
                                ctx.attrs.get("axes") or None, _text(ctx.attrs.get("keep_aspect_ratio_policy", "stretch")))
    return [TensorDesc(x.dtype if x is not None else 1, shape)]


_ATTRS_11 = {
    "mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0,
    "antialias": 0, "axes": None, "keep_aspect_ratio_policy": "stretch",
}
# Resize-10: asymmetric coordinates and ORT's legacy nearest rounding. The importer may
# rewrite it to the opset-11 input form; the kernel accepts (X, scales) as well.
_ATTRS_10 = {**_ATTRS_11, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}

OPS: list[OpDef] = [
    OpDef("Resize", _infer_resize, _k_resize, since=10, attrs=_ATTRS_10),
    # Opset 13 made roi/scales optional, 18 added antialias/axes/keep_aspect_ratio_policy and
    # 19 half_pixel_symmetric: all are absent-or-default in older models, so one definition.
    OpDef("Resize", _infer_resize, _k_resize, since=11, attrs=_ATTRS_11),
]
