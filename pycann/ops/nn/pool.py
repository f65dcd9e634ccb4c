"""Pooling ops (ONNX spec, Operators.md: MaxPool, AveragePool, LpPool, GlobalAveragePool,
GlobalMaxPool, GlobalLpPool, MaxRoiPool).

Windowed pools reduce over kernel taps: each tap is a strided (N, C, *out) view of the padded
input, combined with one in-place ufunc call, so Python work is O(kernel taps). Padding is
-inf (or the integer minimum) for max pooling and zero for sums; the average divides by a
per-position count built separably from 1-D counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc
from pycann.ops.nn.spatial import (
    Window,
    check_window_attrs,
    compute_dtype,
    empty_like_layout,
    infer_window_dims,
    pad_spatial,
    plan_window,
    tap_slices,
)
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

_POOL_ATTRS: dict[str, Any] = {
    "auto_pad": "NOTSET",
    "ceil_mode": 0,
    "dilations": [],
    "kernel_shape": REQUIRED,
    "pads": [],
    "strides": [],
}


def _pool_window(x_shape: Sequence[int], attrs: Mapping[str, Any]) -> tuple[Window, tuple[int, ...]]:
    """Resolved window plus the end padding actually needed (ceil_mode may reach past ``pads``)."""
    kernel = tuple(int(k) for k in attrs["kernel_shape"])
    if len(kernel) != len(x_shape) - 2:
        raise ValueError(f"kernel_shape {list(kernel)} does not match input rank {len(x_shape)}")
    win = plan_window(tuple(x_shape[2:]), kernel, attrs, bool(attrs.get("ceil_mode", 0)), truncate=True)
    for i, size in enumerate(x_shape[2:]):
        if size > 0 and win.out[i] <= 0:  # (as shape inference says it; ONNX Runtime refuses it or gives an empty array)
            raise ValueError(f"kernel_shape {list(kernel)} does not fit spatial dim {i} of X {list(x_shape)}")
    ends = []
    for i, size in enumerate(x_shape[2:]):
        need = (win.out[i] - 1) * win.strides[i] + win.span(i) if win.out[i] > 0 else 0
        ends.append(max(win.pads_end[i], need - size - win.pads_begin[i]))
    return win, tuple(ends)


def _lowest(dtype: np.dtype) -> Any:
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _tap_view(xp: np.ndarray, sl: tuple[slice, ...]) -> np.ndarray:
    return xp[(slice(None), slice(None)) + sl]


def _flat_indices(
    arg: np.ndarray, taps: list[tuple[int, ...]], win: Window, x_shape: Sequence[int], col_major: bool
) -> np.ndarray:
    """ONNX MaxPool Indices: flat offsets into X, ignoring padding (spec: MaxPool outputs)."""
    nsp = len(win.kernel)
    pos = np.asarray(taps, dtype=np.int64).reshape(len(taps), nsp)
    sizes = [int(s) for s in x_shape[2:]]
    # Row-major over (N, C, spatial) by default; storage_order=1 reverses the spatial strides.
    strides = [int(np.prod(sizes[i + 1 :])) for i in range(nsp)]
    if col_major:
        strides = [int(np.prod(sizes[:i])) for i in range(nsp)]
    n, c = x_shape[:2]
    nc = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * nsp)
    flat = nc * int(np.prod(sizes))
    for i in range(nsp):
        grid: np.ndarray = np.arange(win.out[i], dtype=np.int64) * win.strides[i] - win.pads_begin[i]
        grid = grid.reshape((1, 1) + tuple(-1 if j == i else 1 for j in range(nsp)))
        coord = grid + pos[:, i][arg] * win.dilations[i]
        flat = flat + coord * strides[i]
    return flat


def _max_pool(
    x: np.ndarray, attrs: Mapping[str, Any], indices: bool, out: np.ndarray | None = None
) -> list[np.ndarray]:
    """MaxPool (spec: MaxPool-12/22): window maximum over -inf padding; Y and, if asked, the
    flat Indices. Y is accumulated in ``out`` when given (C-contiguous, X's dtype)."""
    win, ends = _pool_window(x.shape, attrs)
    out_shape = x.shape[:2] + win.out
    if x.size == 0 or any(o <= 0 for o in win.out):
        return [np.zeros(out_shape, x.dtype), np.zeros(out_shape, np.int64)][: 1 + indices]
    xp = pad_spatial(x, win.pads_begin, ends, _lowest(x.dtype))
    taps = tap_slices(win)
    y = out if out is not None and out.dtype == x.dtype else empty_like_layout(x, out_shape)
    np.copyto(y, _tap_view(xp, taps[0][1]))
    # fmax: a NaN is skipped unless the whole window is NaN (ONNX Runtime compares with '>').
    for _, sl in taps[1:]:
        np.fmax(y, _tap_view(xp, sl), out=y)
    if not indices:
        return [y]
    # Index of the first tap (scan order) equal to the max: scan backwards, later hits overwrite.
    tap_dt = np.int8 if len(taps) < 128 else np.int32
    arg = np.full(out_shape, len(taps) - 1, dtype=tap_dt)
    for t in range(len(taps) - 2, -1, -1):
        arg = np.where(_tap_view(xp, taps[t][1]) == y, tap_dt(t), arg)
    idx = _flat_indices(arg, [p for p, _ in taps], win, x.shape, int(attrs.get("storage_order", 0)) == 1)
    return [y, np.ascontiguousarray(idx, dtype=np.int64)]


def _k_max_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """MaxPool kernel. Indices cost several passes, so they are computed only when the node has
    a second output (``_n_outputs``, set by the executor; unknown means compute them)."""
    return _max_pool(inputs[0], attrs, int(attrs.get("_n_outputs", 2)) > 1)


def _out_average_pool(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """AveragePool into the executor's arena view (the prepared oneDNN pooling writes there itself)."""
    outs[0][...] = _k_average_pool(inputs, attrs)[0]


def _out_max_pool(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """MaxPool into preallocated outputs; Indices only if the node has that output."""
    res = _max_pool(inputs[0], attrs, len(outs) > 1, outs[0])
    for dst, src in zip(outs, res):
        if src is not dst:
            dst[...] = src


def _counts(win: Window, in_sizes: Sequence[int], include_pad: bool) -> np.ndarray:
    """Divisor of every output position: in-window elements inside the input (or the padded
    input when ``count_include_pad``), as a product of per-dim 1-D counts."""
    nsp = len(win.kernel)
    total: np.ndarray | float = 1.0
    for i, size in enumerate(in_sizes):
        starts = np.arange(win.out[i]) * win.strides[i] - win.pads_begin[i]
        taps = starts[:, None] + np.arange(win.kernel[i]) * win.dilations[i]
        lo, hi = (-win.pads_begin[i], size + win.pads_end[i]) if include_pad else (0, size)
        cnt = ((taps >= lo) & (taps < hi)).sum(axis=1)
        total = total * cnt.reshape(tuple(-1 if j == i else 1 for j in range(nsp)))
    return np.asarray(total)


def _window_sum(x: np.ndarray, win: Window, ends: Sequence[int]) -> np.ndarray:
    xp = pad_spatial(x, win.pads_begin, ends, 0)
    taps = tap_slices(win)
    acc = empty_like_layout(xp, _tap_view(xp, taps[0][1]).shape)
    np.copyto(acc, _tap_view(xp, taps[0][1]))
    for _, sl in taps[1:]:
        acc += _tap_view(xp, sl)
    return acc


def _k_average_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """AveragePool (spec: AveragePool-19/22): window mean; padding counted only if
    ``count_include_pad`` (and never the extra cells ``ceil_mode`` adds past the pads)."""
    x = inputs[0]
    win, ends = _pool_window(x.shape, attrs)
    cd = compute_dtype(x.dtype)
    if x.size == 0 or any(o <= 0 for o in win.out):
        return [np.zeros(x.shape[:2] + win.out, x.dtype)]
    acc = _window_sum(x.astype(cd, copy=False), win, ends)
    cnt = _counts(win, x.shape[2:], bool(attrs.get("count_include_pad", 0)))
    acc /= np.maximum(cnt, 1).astype(cd)
    return [acc.astype(x.dtype, copy=False)]


def _lp_power(x: np.ndarray, p: float) -> np.ndarray:
    if p == 1:
        return np.abs(x)
    if p == 2:
        return x * x
    return np.power(np.abs(x), p)


def _lp_root(s: np.ndarray, p: float) -> np.ndarray:
    if p == 1:
        return s
    if p == 2:
        return np.sqrt(s)
    return np.power(s, 1.0 / p)


def _k_lp_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """LpPool (spec: LpPool-18/22): (sum over window of |x|^p)^(1/p), zero padding."""
    x = inputs[0]
    p = float(attrs.get("p", 2))
    win, ends = _pool_window(x.shape, attrs)
    cd = compute_dtype(x.dtype)
    if x.size == 0 or any(o <= 0 for o in win.out):
        return [np.zeros(x.shape[:2] + win.out, x.dtype)]
    acc = _window_sum(_lp_power(x.astype(cd, copy=False), p), win, ends)
    return [np.asarray(_lp_root(acc, p), dtype=x.dtype)]


def _spatial_axes(x: np.ndarray) -> tuple[int, ...]:
    return tuple(range(2, x.ndim))


def _k_global_average_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """GlobalAveragePool (spec): mean over all spatial dims, kept as size-1 dims."""
    x = inputs[0]
    cd = compute_dtype(x.dtype)
    if 0 in x.shape[2:]:  # (ONNX Runtime refuses it; ReduceMean over H, W, canonicalised to this op, gives 0)
        return [np.zeros(x.shape[:2] + (1,) * (x.ndim - 2), x.dtype)]
    y = np.mean(x, axis=_spatial_axes(x), keepdims=True, dtype=cd)
    return [np.asarray(y, dtype=x.dtype)]


def _k_global_max_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """GlobalMaxPool (spec): max over all spatial dims, kept as size-1 dims."""
    x = inputs[0]
    return [np.asarray(np.max(x, axis=_spatial_axes(x), keepdims=True))]


def _k_global_lp_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """GlobalLpPool (spec): (sum over all spatial dims of |x|^p)^(1/p)."""
    x = inputs[0]
    p = float(attrs.get("p", 2))
    cd = compute_dtype(x.dtype)
    s = np.sum(_lp_power(x.astype(cd, copy=False), p), axis=_spatial_axes(x), keepdims=True)
    return [np.asarray(_lp_root(s, p), dtype=x.dtype)]


def _k_max_roi_pool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """MaxRoiPool (spec): max over each of pooled_shape bins of every ROI (batch, x1, y1, x2, y2).

    ROI corners are scaled by ``spatial_scale`` and rounded half away from zero; bins split
    the ROI with floor/ceil edges and an empty bin yields 0 (the Caffe/ONNX Runtime rule).
    """
    x, rois = inputs[0], inputs[1]
    ph, pw = (int(v) for v in attrs["pooled_shape"])
    scale = float(attrs.get("spatial_scale", 1.0))
    _, c, h, w = x.shape
    y = np.zeros((rois.shape[0], c, ph, pw), dtype=x.dtype)
    for r, roi in enumerate(np.asarray(rois, dtype=np.float64)):
        b = int(roi[0])
        x1, y1, x2, y2 = (int(np.sign(v) * np.floor(abs(v) * scale + 0.5)) for v in roi[1:5])
        bin_h = max(y2 - y1 + 1, 1) / ph
        bin_w = max(x2 - x1 + 1, 1) / pw
        for i in range(ph):
            hs = min(max(int(np.floor(i * bin_h)) + y1, 0), h)
            he = min(max(int(np.ceil((i + 1) * bin_h)) + y1, 0), h)
            for j in range(pw):
                ws = min(max(int(np.floor(j * bin_w)) + x1, 0), w)
                we = min(max(int(np.ceil((j + 1) * bin_w)) + x1, 0), w)
                if he > hs and we > ws:
                    y[r, :, i, j] = x[b, :, hs:he, ws:we].max(axis=(1, 2))
    return [y]


# ---------------------------------------------------------------- inference


def _infer_pool(ctx: InferContext) -> list[TensorDesc]:
    """(N, C, *out) with out from kernel/strides/pads/dilations/auto_pad/ceil_mode."""
    x = ctx.input(0)
    if x is None or x.shape is None:
        outs = [TensorDesc(x.dtype if x else 0, None)]
        return outs + [TensorDesc(int(DType.INT64), None)] * (ctx.n_outputs - 1)
    kernel = [int(k) for k in ctx.attrs["kernel_shape"]]
    rank = len(x.shape)
    if rank < 3:
        raise ctx.fail(f"input X has rank {rank}; expected (N, C, D1, ...) with at least one spatial dim")
    err = check_window_attrs(ctx.attrs, rank - 2, kernel)
    if err:
        raise ctx.fail(err)
    if ctx.op_type == "LpPool" and float(ctx.attrs.get("p", 2)) <= 0:
        raise ctx.fail(f"attribute p = {ctx.attrs.get('p')} must be positive")
    spatial = infer_window_dims(x.shape[2:], kernel, ctx.attrs, bool(ctx.attrs.get("ceil_mode", 0)), truncate=True)
    for i, (d, o) in enumerate(zip(x.shape[2:], spatial)):
        if isinstance(d, int) and d > 0 and o == 0:
            raise ctx.fail(f"kernel_shape {kernel} does not fit spatial dim {i} of X {list(x.shape)}")
    shape: tuple[Dim, ...] = (x.shape[0], x.shape[1], *spatial)
    outs = [TensorDesc(x.dtype, shape)]
    if ctx.n_outputs > 1:
        outs.append(TensorDesc(int(DType.INT64), shape))
    return outs


def _infer_global(ctx: InferContext) -> list[TensorDesc]:
    """(N, C, 1, ..., 1): every spatial dim reduced to 1."""
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorDesc(x.dtype if x else 0, None)]
    if len(x.shape) < 3:
        raise ctx.fail(f"input X has rank {len(x.shape)}; expected (N, C, D1, ...)")
    return [TensorDesc(x.dtype, (x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2))]


def _infer_max_roi_pool(ctx: InferContext) -> list[TensorDesc]:
    """(num_rois, C, pooled_h, pooled_w)."""
    x, rois = ctx.input(0), ctx.input(1)
    pooled = [int(v) for v in ctx.attrs["pooled_shape"]]
    if len(pooled) != 2 or min(pooled) < 1:
        raise ctx.fail(f"attribute pooled_shape {pooled} must be two positive ints")
    if x is not None and x.shape is not None and len(x.shape) != 4:
        raise ctx.fail(f"input X must be 4-D (N, C, H, W), got {x}")
    if rois is not None and rois.shape is not None:
        if len(rois.shape) != 2 or (isinstance(rois.shape[1], int) and rois.shape[1] != 5):
            raise ctx.fail(f"input rois must be (num_rois, 5), got {rois}")
    r = rois.shape[0] if rois is not None and rois.shape is not None else None
    c = x.shape[1] if x is not None and x.shape is not None else None
    return [TensorDesc(x.dtype if x else 0, (r, c, *pooled))]


OPS: list[OpDef] = [
    OpDef("MaxPool", _infer_pool, _k_max_pool, since=1, attrs={**_POOL_ATTRS, "storage_order": 0},
          out_kernel=_out_max_pool),
    OpDef("AveragePool", _infer_pool, _k_average_pool, since=1, attrs={**_POOL_ATTRS, "count_include_pad": 0},
          out_kernel=_out_average_pool),
    OpDef("LpPool", _infer_pool, _k_lp_pool, since=1, attrs={**_POOL_ATTRS, "p": 2}),
    OpDef("GlobalAveragePool", _infer_global, _k_global_average_pool, since=1),
    OpDef("GlobalMaxPool", _infer_global, _k_global_max_pool, since=1),
    OpDef("GlobalLpPool", _infer_global, _k_global_lp_pool, since=1, attrs={"p": 2}),
    OpDef("MaxRoiPool", _infer_max_roi_pool, _k_max_roi_pool, since=1,
          attrs={"pooled_shape": REQUIRED, "spatial_scale": 1.0}),
]
