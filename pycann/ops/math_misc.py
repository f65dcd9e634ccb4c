"""Assorted math and data-movement ops (ONNX spec, Operators.md: BitCast, CumProd, Det, MaxUnpool,
TensorScatter, DeformConv).

DeformConv samples the input at offset positions with multilinear interpolation (zero outside
the input) into a column matrix and finishes with one grouped GEMM, like im2col Conv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import product
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc, dtype_name, to_numpy
from pycann.ops.nn.spatial import check_window_attrs, compute_dtype, infer_window_dims, plan_window
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.shape_utils import int_dims, normalize_axis

FLOATS = frozenset({DType.FLOAT, DType.FLOAT16, DType.DOUBLE, DType.BFLOAT16})

# ---------------------------------------------------------------- BitCast

# Bit widths where the numpy carrier is wider than the ONNX type (ml_dtypes keeps the raw
# 4-/2-bit pattern in the low bits of one byte, so a byte view still reinterprets exactly).
_SUB_BYTE = {DType.INT4: 4, DType.UINT4: 4, DType.FLOAT4E2M1: 4, DType.INT2: 2, DType.UINT2: 2}


def _bit_width(t: int) -> int:
    if t in _SUB_BYTE:
        return _SUB_BYTE[DType(t)]
    return to_numpy(t).itemsize * 8


def _k_bitcast(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """BitCast (spec: BitCast-26): the same bits (little endian) read as dtype ``to``."""
    x = inputs[0]
    if not x.flags.c_contiguous:
        x = x.copy()  # (np.ascontiguousarray would turn a 0-d input into 1-d)
    to = int(attrs["to"])
    dt = to_numpy(to)
    if x.dtype.itemsize != dt.itemsize:
        raise ValueError(f"BitCast from {x.dtype} to {dtype_name(to)}: bit widths differ")
    if to == DType.BOOL:
        # Only 0/1 bytes are valid numpy bools; any non-zero byte reads as true.
        return [np.asarray(x.view(np.uint8) != 0)]
    return [np.asarray(x.view(dt))]


def _infer_bitcast(ctx: InferContext) -> list[TensorDesc]:
    """BitCast output: x's shape, dtype ``to`` of the same bit width."""
    x = ctx.input(0)
    to = int(ctx.attrs["to"])
    if to == DType.STRING or (x is not None and x.dtype == DType.STRING):
        raise ctx.fail("BitCast does not support STRING")
    try:
        wt = _bit_width(to)
    except TypeError:
        raise ctx.fail(f"attribute to = {to} is not a supported dtype") from None
    if x is not None and x.dtype and _bit_width(x.dtype) != wt:
        raise ctx.fail(f"input is {dtype_name(x.dtype)} ({_bit_width(x.dtype)} bits) but to = "
                       f"{dtype_name(to)} has {wt} bits; BitCast needs equal bit widths")
    return [TensorDesc(to, x.shape if x is not None else None)]


# ---------------------------------------------------------------- CumProd

_CUM_TYPES = frozenset({DType.UINT32, DType.UINT64, DType.INT32, DType.INT64} | FLOATS)


def _k_cumprod(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """CumProd (spec: CumProd-26): running product along ``axis``; ``exclusive`` shifts in a 1,
    ``reverse`` runs from the end."""
    x, axis_t = inputs[0], np.asarray(inputs[1])
    if axis_t.size != 1:
        raise ValueError(f"axis must be a scalar, got shape {axis_t.shape}")
    if x.ndim == 0:
        return [x.copy()]
    axis = normalize_axis(int(axis_t.reshape(())), x.ndim, "CumProd: ")
    rev = bool(attrs.get("reverse", 0))
    v = np.flip(x, axis) if rev else x
    if attrs.get("exclusive", 0):
        y = np.ones_like(v)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        src[axis], dst[axis] = slice(0, -1), slice(1, None)
        np.multiply.accumulate(v[tuple(src)], axis=axis, dtype=x.dtype, out=y[tuple(dst)])
    else:
        y = np.multiply.accumulate(v, axis=axis, dtype=x.dtype)
    return [np.ascontiguousarray(np.flip(y, axis) if rev else y)]


def _infer_cumprod(ctx: InferContext) -> list[TensorDesc]:
    """CumProd output: same shape and dtype as x; a constant axis is range-checked."""
    x, a = ctx.input(0), ctx.input(1)
    if x is not None and x.dtype and x.dtype not in _CUM_TYPES:
        raise ctx.fail(f"input x has dtype {dtype_name(x.dtype)}; CumProd takes (u)int32/64 and floats")
    if a is not None and a.shape is not None and len(a.shape) > 1:
        raise ctx.fail(f"input axis has shape {list(a.shape)}; expected a scalar")
    av = ctx.value(1)
    if x is not None and x.shape is not None and av is not None and len(x.shape):
        ax = int(np.asarray(av).reshape(-1)[0])
        if not -len(x.shape) <= ax < len(x.shape):
            raise ctx.fail(f"input axis = {ax} is out of range for x of rank {len(x.shape)}")
    return [TensorDesc(x.dtype if x is not None else 0, x.shape if x is not None else None)]


# ---------------------------------------------------------------- Det


def _k_det(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Det (spec: Det-22): determinants of the trailing (M, M) matrices (LU via LAPACK)."""
    x = inputs[0]
    cd = compute_dtype(x.dtype)
    if x.shape[-1] == 0:
        return [np.ones(x.shape[:-2], dtype=x.dtype)]
    return [np.asarray(np.linalg.det(x.astype(cd, copy=False))).astype(x.dtype)]


def _infer_det(ctx: InferContext) -> list[TensorDesc]:
    """Det output: x's shape without the last two (square) dims."""
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorDesc(x.dtype if x is not None else 0, None)]
    if x.dtype and x.dtype not in FLOATS:
        raise ctx.fail(f"input X has dtype {dtype_name(x.dtype)}; expected a float type")
    if len(x.shape) < 2:
        raise ctx.fail(f"input X has rank {len(x.shape)}; expected [*, M, M]")
    a, b = x.shape[-2:]
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ctx.fail(f"input X has shape {list(x.shape)}; the last two dims must be equal")
    return [TensorDesc(x.dtype, tuple(x.shape[:-2]))]


# ---------------------------------------------------------------- MaxUnpool


def _unpool_dims(in_dims: Sequence[Dim], attrs: Mapping[str, Any]) -> list[Dim]:
    """Default MaxUnpool spatial sizes: (in - 1) * stride - pads + kernel (spec: MaxUnpool)."""
    ks = [int(k) for k in attrs["kernel_shape"]]
    n = len(ks)
    strides = [int(s) for s in (attrs.get("strides") or [1] * n)]
    pads = [int(p) for p in (attrs.get("pads") or [0] * (2 * n))]
    return [(d - 1) * strides[i] - pads[i] - pads[n + i] + ks[i] if isinstance(d, int) else None
            for i, d in enumerate(in_dims)]


def _k_max_unpool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """MaxUnpool (spec: MaxUnpool-22): scatter X to the flat positions I of the default-size
    output (zeros elsewhere). With ``output_shape``, that result is placed at the start of a
    zero tensor of that shape (the ONNX reference / conformance-test semantics)."""
    x, idx = inputs[0], np.asarray(inputs[1])
    oshape_in = inputs[2] if len(inputs) > 2 else None
    dims = _unpool_dims(x.shape[2:], attrs)
    full = (x.shape[0], x.shape[1], *dims)
    total = int(np.prod(full))
    flat = idx.reshape(-1).astype(np.int64)
    if x.size != flat.size:
        raise ValueError(f"I has {flat.size} elements but X has {x.size}")
    if flat.size and (flat.min() < 0 or flat.max() >= total):
        raise ValueError(f"MaxUnpool index out of range [0, {total}) for output {full}")
    y = np.zeros(total, dtype=x.dtype)
    y[flat] = x.reshape(-1)
    y = y.reshape(full)
    if oshape_in is None:
        return [y]
    oshape = tuple(int(v) for v in np.asarray(oshape_in).reshape(-1))
    if oshape == full:
        return [y]
    if len(oshape) != len(full):
        raise ValueError(f"output_shape {list(oshape)} must have rank {len(full)}")
    out = np.zeros(oshape, dtype=x.dtype)
    common = tuple(slice(0, min(a, b)) for a, b in zip(oshape, full))
    out[common] = y[common]
    return [out]


def _infer_max_unpool(ctx: InferContext) -> list[TensorDesc]:
    """MaxUnpool output: ``output_shape`` when given (its value if constant), else the
    default unpooled size from kernel_shape / strides / pads."""
    x = ctx.input(0)
    dtype = x.dtype if x is not None else 0
    ks = list(ctx.attrs["kernel_shape"])
    err = check_window_attrs(ctx.attrs, len(ks), ks)
    if err:
        raise ctx.fail(err)
    if x is not None and x.shape is not None and len(x.shape) != len(ks) + 2:
        raise ctx.fail(f"input X has rank {len(x.shape)}; kernel_shape {ks} needs rank {len(ks) + 2}")
    if ctx.input(2) is not None:
        v = ctx.value(2)
        if v is not None:
            return [TensorDesc(dtype, tuple(int(d) for d in np.asarray(v).reshape(-1)))]
        return [TensorDesc(dtype, (None,) * (len(ks) + 2))]
    if x is None or x.shape is None:
        return [TensorDesc(dtype, (None,) * (len(ks) + 2))]
    return [TensorDesc(dtype, (x.shape[0], x.shape[1], *_unpool_dims(x.shape[2:], ctx.attrs)))]


# ---------------------------------------------------------------- TensorScatter


def _mode(attrs: Mapping[str, Any]) -> str:
    m = attrs.get("mode", "linear")
    return m.decode() if isinstance(m, bytes) else str(m)


def _k_tensor_scatter(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """TensorScatter (spec: TensorScatter-24): copy of past_cache with ``update`` written along
    ``axis`` from ``write_indices[b]`` on, per batch entry b (modulo the axis size if circular)."""
    past, upd = inputs[0], inputs[1]
    wi = inputs[2] if len(inputs) > 2 else None
    axis = normalize_axis(int(attrs.get("axis", -2)), past.ndim, "TensorScatter: ")
    if axis == 0:
        raise ValueError("TensorScatter axis must not be the batch axis 0")
    b, lmax, seq = past.shape[0], past.shape[axis], upd.shape[axis]
    starts = np.zeros(b, np.int64) if wi is None else np.asarray(wi, np.int64).reshape(-1)
    pos = starts[:, None] + np.arange(seq, dtype=np.int64)[None, :]  # (B, seq)
    if _mode(attrs) == "circular":
        pos %= max(lmax, 1)
    elif pos.size and (pos.min() < 0 or pos.max() >= lmax):
        raise ValueError(f"write_indices {starts.tolist()} + update length {seq} exceed the cache axis size {lmax}")
    out = past.copy()
    if pos.size:
        # Bring the sequence axis next to the batch axis: one advanced-index assignment.
        ov = np.moveaxis(out, axis, 1)
        ov[np.arange(b)[:, None], pos] = np.moveaxis(upd, axis, 1)
    return [out]


def _infer_tensor_scatter(ctx: InferContext) -> list[TensorDesc]:
    """TensorScatter output: past_cache's shape and dtype; update must match except on axis."""
    p, u = ctx.input(0), ctx.input(1)
    if _mode(ctx.attrs) not in ("linear", "circular"):
        raise ctx.fail(f"attribute mode is {_mode(ctx.attrs)!r}; expected 'linear' or 'circular'")
    if p is None or p.shape is None:
        return [TensorDesc(p.dtype if p is not None else 0, None)]
    rank = len(p.shape)
    ax = int(ctx.attrs.get("axis", -2))
    if not -rank <= ax < rank or ax % rank == 0:
        raise ctx.fail(f"attribute axis = {ax} must name a non-batch axis of past_cache (rank {rank})")
    ax %= rank
    if u is not None and u.shape is not None:
        if len(u.shape) != rank:
            raise ctx.fail(f"update has rank {len(u.shape)}; past_cache has rank {rank}")
        for i, (a, c) in enumerate(zip(p.shape, u.shape)):
            if isinstance(a, int) and isinstance(c, int) and (c > a if i == ax else c != a):
                raise ctx.fail(f"update shape {list(u.shape)} does not fit past_cache {list(p.shape)} at dim {i}")
    return [TensorDesc(p.dtype, p.shape)]


# ---------------------------------------------------------------- DeformConv


def _sample_columns(x: np.ndarray, pos: list[np.ndarray], weight: np.ndarray) -> np.ndarray:
    """Multilinear samples of ``x`` (N, G, Cg, *S) at positions ``pos[d]`` (N, G, T) per spatial
    dim, zero outside, times ``weight`` (N, G, T): returns (N, G, Cg, T)."""
    n, g, cg = x.shape[:3]
    sizes = x.shape[3:]
    xf = x.reshape(n, g, cg, -1)
    lows = [np.floor(p) for p in pos]
    fracs = [p - lo for p, lo in zip(pos, lows)]
    lows_i = [lo.astype(np.int64) for lo in lows]
    cols = np.zeros((n, g, cg, weight.shape[-1]), dtype=x.dtype)
    for corner in product((0, 1), repeat=len(sizes)):
        wgt = weight.copy()
        flat = np.zeros(weight.shape, dtype=np.int64)
        for d, bit in enumerate(corner):
            i = lows_i[d] + bit
            ok = (i >= 0) & (i < sizes[d])
            wgt *= (fracs[d] if bit else 1 - fracs[d]) * ok
            flat = flat * sizes[d] + np.clip(i, 0, sizes[d] - 1)
        vals = np.take_along_axis(xf, flat[:, :, None, :], axis=3)
        cols += vals * wgt[:, :, None, :].astype(x.dtype, copy=False)
    return cols


def _k_deform_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """DeformConv (spec: DeformConv-22): Conv whose kernel taps sample X at
    ``base + offset`` with linear interpolation, scaled by ``mask``, plus bias B."""
    x, w, off = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    cd = compute_dtype(x.dtype)
    n, c = x.shape[:2]
    m = w.shape[0]
    group, og = int(attrs.get("group", 1)), int(attrs.get("offset_group", 1))
    ks = [int(k) for k in (attrs.get("kernel_shape") or w.shape[2:])]
    nd = len(ks)
    if x.ndim != nd + 2 or w.shape[1] * group != c or m % group or c % og:
        raise ValueError(f"DeformConv shapes X {x.shape}, W {w.shape} do not fit group={group}, offset_group={og}")
    win = plan_window(x.shape[2:], ks, attrs)
    if tuple(off.shape[2:]) != win.out or off.shape[1] != og * int(np.prod(ks)) * nd:
        raise ValueError(f"offset shape {off.shape} must be (N, {og * int(np.prod(ks)) * nd}, {', '.join(map(str, win.out))})")
    k, lo = int(np.prod(ks)), int(np.prod(win.out))
    offs = off.astype(cd, copy=False).reshape(n, og, k, nd, lo)
    wgt = np.ones((n, og, k, lo), cd) if mask is None else mask.astype(cd, copy=False).reshape(n, og, k, lo)
    taps = np.array(list(np.ndindex(*ks)), dtype=cd).reshape(k, nd)
    outs = np.array(list(np.ndindex(*win.out)), dtype=cd).reshape(lo, nd)
    pos = []
    for d in range(nd):
        base = (outs[:, d] * win.strides[d] - win.pads_begin[d])[None, :] + (taps[:, d] * win.dilations[d])[:, None]
        pos.append((offs[:, :, :, d, :] + base).reshape(n, og, k * lo))
    xs = x.astype(cd, copy=False).reshape(n, og, c // og, *x.shape[2:])
    cols = _sample_columns(xs, pos, wgt.reshape(n, og, k * lo))  # (N, og, C/og, K*L)
    cols = cols.reshape(n, group, (c // group) * k, lo)
    y = np.matmul(w.astype(cd, copy=False).reshape(group, m // group, (c // group) * k), cols)
    y = y.reshape((n, m) + win.out)
    if b is not None:
        y += b.astype(cd, copy=False).reshape((1, m) + (1,) * nd)
    return [np.ascontiguousarray(y, dtype=x.dtype)]


def _infer_deform_conv(ctx: InferContext) -> list[TensorDesc]:
    """DeformConv output: (N, oC, *out) with out from offset's spatial dims, else the window rules."""
    x, w, off = ctx.input(0), ctx.input(1), ctx.input(2)
    dtype = x.dtype if x is not None else 0
    if x is not None and x.dtype and x.dtype not in FLOATS:
        raise ctx.fail(f"input X has dtype {dtype_name(x.dtype)}; expected a float type")
    rank = next((len(d.shape) for d in (x, w, off) if d is not None and d.shape is not None), None)
    if rank is None:
        return [TensorDesc(dtype, None)]
    if rank < 3:
        raise ctx.fail(f"inputs have rank {rank}; expected (N, C, D1, ...)")
    ws = w.shape if w is not None else None
    ks = list(ctx.attrs.get("kernel_shape") or [])
    if not ks and ws is not None and (w_ks := int_dims(ws[2:])) is not None:
        ks = w_ks
    err = check_window_attrs(ctx.attrs, rank - 2, ks or None)
    if err:
        raise ctx.fail(err)
    group = int(ctx.attrs.get("group", 1))
    if x is not None and x.shape is not None and ws is not None:
        if isinstance(x.shape[1], int) and isinstance(ws[1], int) and x.shape[1] != ws[1] * group:
            raise ctx.fail(f"X has {x.shape[1]} channels but W {list(ws)} with group={group} expects {ws[1] * group}")
    if off is not None and off.shape is not None:
        spatial: list[Dim] = list(off.shape[2:])
    elif x is not None and x.shape is not None:
        spatial = infer_window_dims(x.shape[2:], ks or None, ctx.attrs)
    else:
        spatial = [None] * (rank - 2)
    n: Dim = x.shape[0] if x is not None and x.shape is not None else None
    m: Dim = ws[0] if ws is not None else None
    return [TensorDesc(dtype, (n, m, *spatial))]


_DEFORM_ATTRS: dict[str, Any] = {
    "dilations": [], "group": 1, "kernel_shape": [], "offset_group": 1, "pads": [], "strides": [],
}

OPS: list[OpDef] = [
    OpDef("BitCast", _infer_bitcast, _k_bitcast, since=26, attrs={"to": REQUIRED}),
    OpDef("CumProd", _infer_cumprod, _k_cumprod, since=26, attrs={"exclusive": 0, "reverse": 0}),
    OpDef("Det", _infer_det, _k_det, since=11),
    OpDef("MaxUnpool", _infer_max_unpool, _k_max_unpool, since=9,
          attrs={"kernel_shape": REQUIRED, "pads": [], "strides": []}),
    OpDef("TensorScatter", _infer_tensor_scatter, _k_tensor_scatter, since=24, attrs={"axis": -2, "mode": "linear"}),
    OpDef("DeformConv", _infer_deform_conv, _k_deform_conv, since=19, attrs=dict(_DEFORM_ATTRS)),
]
