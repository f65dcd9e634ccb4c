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
from pycann.ops.nn.resize_taps import apply_taps, axis_plan, bilinear_axes, identity_linear, nearest_axis
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
        axis_plan(x.shape[a], int(out_shape[a]), scales[a], rois[a], mode, coord, nearest_mode,
                  cubic_a, exclude_outside, antialias)
        for a in range(r)
    ]
    # Shrinking axes first keeps the intermediates small; on ties the last axis goes first, so
    # its (slower) element gather runs on the smaller tensor.
    active = {a: p for a, p in enumerate(plans) if p is not None}  # the axes that change
    order = sorted(active, key=lambda a: (out_shape[a] / x.shape[a], -a))
    hw_axes = bilinear_axes(x, mode, antialias, scales)
    if mode == "nearest":
        y = x
        for a in order:
            y = nearest_axis(y, active[a].idx[:, 0], a)
    elif hw_axes is not None and x.dtype.kind in "iu":
        ident = [identity_linear(x.shape[a]) for a in range(r)]
        pa, pb = (plans[a] or ident[a] for a in hw_axes)
        if x.dtype.itemsize == 1 and hw_axes == (1, 2):
            y = bilinear_fixed_point(x, pa, pb)
        else:
            y = bilinear_exact(x, hw_axes, pa, pb)
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
            y = apply_taps(y, active[a], a, cdt)
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
