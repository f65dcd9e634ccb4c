"""Indexing ops (ONNX spec, Operators.md): Slice, Gather, GatherElements, GatherND, ScatterND,
ScatterElements, Scatter, Pad, Compress, OneHot, ReverseSequence (TopK, Unique and NonZero:
``selection.py``).

Index inputs may be negative (counted from the end of the axis) wherever the spec allows it;
numpy's fancy indexing wraps them and raises ``IndexError`` for out-of-range ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from pycann.dtypes import Dim, TensorDesc
from pycann.ops.index_checks import (
    desc_of,
    gather_nd_fault,
    pad_fault,
    scatter_elements_fault,
    scatter_nd_fault,
)
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.shape_utils import (
    const_ints,
    dtype_of,
    infer_axes,
    infer_axis,
    ints,
    normalize_axes,
    normalize_axis,
    same_as,
    vec_len,
)
from pycann.ops.tensor import astr

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]


def _opt(inputs: Inputs, i: int) -> Any:
    """Optional input ``i`` or None."""
    return inputs[i] if len(inputs) > i else None


# --------------------------------------------------------------------------- Slice
_INT32_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def _slice_bounds(d: int, start: int, end: int, step: int) -> tuple[int, int]:
    """ONNX clamping: negatives count from the end; [0, d] for step > 0, [0, d-1]/[-1, d-1] for step < 0.
    An ``end`` of INT32_MAX or INT64_MAX means "to the end in the step's direction", as ONNX Runtime reads
    it: through index 0 for a negative step (``x[4:INT64_MAX:-1]`` is ``x[4::-1]``, not empty)."""
    if step == 0:
        raise ValueError("Slice: 'steps' must not contain 0")
    if step < 0 and end in (_INT32_MAX, _INT64_MAX):
        end = -1 - d  # -> -1 below: through index 0
    start = start + d if start < 0 else start
    end = end + d if end < 0 else end
    if step > 0:
        return min(max(start, 0), d), min(max(end, 0), d)
    return min(max(start, 0), d - 1), min(max(end, -1), d - 1)


def _slice_spec(shape: Sequence[int], starts: list[int], ends: list[int], axes: list[int] | None,
                steps: list[int] | None) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) after normalisation; ``end == -1`` means "through index 0"."""
    if len(starts) != len(ends):
        raise ValueError(f"Slice: 'starts' {starts} and 'ends' {ends} differ in length")
    axes = list(range(len(starts))) if axes is None else normalize_axes(axes, len(shape), "Slice: ")
    steps = [1] * len(starts) if steps is None else steps
    if not len(axes) == len(steps) == len(starts):
        raise ValueError("Slice: 'starts', 'ends', 'axes' and 'steps' must have the same length")
    return [(a, *_slice_bounds(shape[a], s, e, st), st) for a, s, e, st in zip(axes, starts, ends, steps)]


def _k_slice(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Slice (Operators.md, opset 13): returns a view of the input."""
    x = inputs[0]
    axes, steps = _opt(inputs, 3), _opt(inputs, 4)
    spec = _slice_spec(x.shape, ints(inputs[1]), ints(inputs[2]),
                       None if axes is None else ints(axes), None if steps is None else ints(steps))
    sl = [slice(None)] * x.ndim
    for a, s, e, st in spec:
        sl[a] = slice(s, e if e >= 0 else None, st)
    return [x[tuple(sl)]]


def _infer_slice(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [same_as(x)]
    r = len(x.shape)
    starts, ends, axes, steps = (const_ints(ctx, i) for i in (1, 2, 3, 4))
    unknown = TensorDesc(x.dtype, (None,) * r)
    if axes is None:
        if ctx.input(3) is not None:
            return [unknown]  # any axis may be sliced
        n = len(starts) if starts is not None else len(ends) if ends is not None else vec_len(ctx.input(1))
        if n is None:
            return [unknown]
        axes = list(range(n))
    exact = starts is not None and ends is not None and (steps is not None or ctx.input(4) is None)
    steps = steps or [1] * len(axes)
    ax = infer_axes(ctx, axes, r, "input 'axes'")
    if exact and not len(starts) == len(ends) == len(ax) == len(steps):  # type: ignore[arg-type]
        raise ctx.fail("inputs 'starts', 'ends', 'axes' and 'steps' must have the same length")
    out: list[Dim] = list(x.shape)
    for i, a in enumerate(ax):
        d = x.shape[a]
        if not exact:
            out[a] = None
            continue
        s, e, st = starts[i], ends[i], steps[i]  # type: ignore[index]
        if st == 0:
            raise ctx.fail("input 'steps' must not contain 0")
        if isinstance(d, int):
            b0, b1 = _slice_bounds(d, s, e, st)
            out[a] = len(range(b0, b1, st))
        elif not ((st == 1 and s == 0 and e >= 2**62) or (st == -1 and s == -1 and e <= -(2**62))):
            out[a] = None  # a symbolic dim keeps its name only for "the whole axis" (maybe reversed)
    return [TensorDesc(x.dtype, tuple(out))]


# --------------------------------------------------------------------------- Gather family
def _k_gather(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Gather (Operators.md): ``np.take`` along ``axis``; negative indices count from the end."""
    x, idx = inputs[0], inputs[1]
    axis = normalize_axis(attrs["axis"], x.ndim, "Gather: ")
    return [np.asarray(np.take(x, idx, axis=axis))]


def _infer_gather(ctx: InferContext) -> list[TensorDesc]:
    x, idx = ctx.input(0), ctx.input(1)
    if x is None or x.shape is None or idx is None or idx.shape is None:
        return [TensorDesc(dtype_of(x), None)]
    a = infer_axis(ctx, ctx.attrs["axis"], len(x.shape))
    return [TensorDesc(x.dtype, (*x.shape[:a], *idx.shape, *x.shape[a + 1:]))]


def _wrap(idx: np.ndarray, dim: int | np.ndarray) -> np.ndarray:
    """Negative indices to positive (explicitly, so ufunc.at and take_along_axis agree)."""
    idx = idx.astype(np.int64, copy=False)
    if idx.size == 0 or idx.min() >= 0:  # the common case: skip the rewrite pass
        return idx
    return np.where(idx < 0, idx + dim, idx)


def _k_gather_elements(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """GatherElements (Operators.md): ``out[i][j] = x[idx[i][j]][j]`` for axis 0, and so on."""
    x, idx = inputs[0], inputs[1]
    axis = normalize_axis(attrs["axis"], x.ndim, "GatherElements: ")
    if idx.shape != x.shape:  # indices may be smaller than data off the axis (ORT allows it)
        x = x[tuple(slice(None) if i == axis else slice(0, d) for i, d in enumerate(idx.shape))]
    return [np.take_along_axis(x, _wrap(idx, x.shape[axis]), axis=axis)]


def _infer_indices_shape(ctx: InferContext) -> list[TensorDesc]:
    idx = ctx.input(1)
    return [TensorDesc(dtype_of(ctx.input(0)), None if idx is None else idx.shape)]


def _k_gather_nd(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """GatherND (Operators.md, opset 12 batch_dims): index tuples of length k = indices.shape[-1]."""
    x, idx = inputs[0], inputs[1]
    b = attrs["batch_dims"]
    fault = gather_nd_fault(desc_of(x), desc_of(idx), b)
    if fault:  # (checked by shape inference too; here for dims symbolic at compile time)
        raise ValueError(fault)
    k = idx.shape[-1]
    bsz = int(np.prod(x.shape[:b], dtype=np.int64))
    m = int(np.prod(idx.shape[b:-1], dtype=np.int64))
    xr = x.reshape((bsz, *x.shape[b:]))
    if k == 0:  # empty index tuples select whole slices
        return [np.broadcast_to(xr[:, None], (bsz, m, *x.shape[b:])).reshape((*idx.shape[:-1], *x.shape[b:]))]
    ix = _wrap(idx.reshape(bsz, m, k), np.array(x.shape[b:b + k], dtype=np.int64))
    sel = xr[(np.arange(bsz)[:, None],) + tuple(ix[..., j] for j in range(k))]
    return [sel.reshape((*idx.shape[:-1], *x.shape[b + k:]))]


def _infer_gather_nd(ctx: InferContext) -> list[TensorDesc]:
    x, idx = ctx.input(0), ctx.input(1)
    if x is None or x.shape is None or idx is None or idx.shape is None or not idx.shape:
        return [TensorDesc(dtype_of(x), None)]
    k, b = idx.shape[-1], ctx.attrs["batch_dims"]
    if not isinstance(k, int):
        return [TensorDesc(x.dtype, None)]
    if b + k > len(x.shape):
        raise ctx.fail(f"indices {idx} index {k} dims after {b} batch dims of data {x}")
    fault = gather_nd_fault(x, idx, b)
    if fault:
        raise ctx.fail(fault)
    return [TensorDesc(x.dtype, (*idx.shape[:-1], *x.shape[b + k:]))]


# --------------------------------------------------------------------------- Scatter family
_REDUCTIONS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter(out: np.ndarray, where: tuple, updates: np.ndarray, reduction: Any) -> np.ndarray:
    red = astr(reduction)
    if red == "none":
        out[where] = updates  # duplicates: last write wins (spec leaves it undefined)
    elif red in _REDUCTIONS:
        _REDUCTIONS[red].at(out, where, updates)
    else:
        raise ValueError(f"Scatter: unknown reduction '{red}'")
    return out


def _k_scatter_nd(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ScatterND (Operators.md, opset 18 reductions none/add/mul/max/min)."""
    x, idx, upd = inputs[0], inputs[1], inputs[2]
    fault = scatter_nd_fault(desc_of(x), desc_of(idx), desc_of(upd))
    if fault:  # the reshape below would take any updates with the right element count
        raise ValueError(fault)
    k = idx.shape[-1]
    ix = idx.reshape(-1, k)
    u = upd.reshape((ix.shape[0], *x.shape[k:]))
    return [_scatter(x.copy(), tuple(ix[:, j] for j in range(k)), u, attrs["reduction"])]


def _k_scatter_elements(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ScatterElements (Operators.md, opset 18): ``out[idx[i][j]][j] = upd[i][j]`` for axis 0."""
    x, idx, upd = inputs[0], inputs[1], inputs[2]
    fault = scatter_elements_fault(desc_of(x), desc_of(idx), desc_of(upd))
    if fault:  # numpy would broadcast a smaller updates over the indices
        raise ValueError(fault)
    axis = normalize_axis(attrs["axis"], x.ndim, "ScatterElements: ")
    grid = list(np.indices(idx.shape, sparse=True))
    grid[axis] = _wrap(idx, x.shape[axis])
    return [_scatter(x.copy(), tuple(grid), upd, attrs["reduction"])]


def _infer_data_shape(ctx: InferContext) -> list[TensorDesc]:
    return [same_as(ctx.input(0))]


def _infer_scatter(ctx: InferContext) -> list[TensorDesc]:
    """Data's shape, once indices and updates agree with it (index_checks)."""
    x, idx, upd = ctx.input(0), ctx.input(1), ctx.input(2)
    if x is not None and idx is not None and upd is not None:
        check = scatter_nd_fault if ctx.op_type == "ScatterND" else scatter_elements_fault
        fault = check(x, idx, upd)
        if fault:
            raise ctx.fail(fault)
    return [same_as(x)]


# --------------------------------------------------------------------------- Pad
_PadMode = Literal["constant", "reflect", "edge", "wrap"]
_PAD_MODES: dict[str, _PadMode] = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad_lists(rank: int, pads: list[int], axes: list[int] | None) -> tuple[list[int], list[int]]:
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank, "Pad: ")
    n = len(axes)
    if len(pads) != 2 * n:
        raise ValueError(f"Pad: 'pads' {pads} must have 2 * {n} entries")
    begin, end = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + n]
    return begin, end


def _k_pad(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Pad (Operators.md, opset 19): constant/reflect/edge/wrap. Negative pads crop, as in ONNX Runtime:
    in constant mode the input sits at offset ``begin`` of the output (pad, then crop: a crop may reach
    into the other side's padding); the other modes crop first, then mirror / repeat what is left."""
    x = inputs[0]
    mode_name = astr(attrs["mode"])
    mode = _PAD_MODES.get(mode_name)
    if mode is None:
        raise ValueError(f"Pad: unknown mode '{mode_name}'")
    axes = _opt(inputs, 3)
    pads = ints(inputs[1])
    begin, end = _pad_lists(x.ndim, pads, None if axes is None else ints(axes))
    fault = pad_fault(x.shape, begin, end, mode)
    if fault:  # (a symbolic dim at compile time: checked here, per call)
        raise ValueError(f"input 'pads' {pads} {fault} {desc_of(x)}")
    if mode == "constant" and any(p < 0 for p in begin + end):
        cv = _opt(inputs, 2)
        value = x.dtype.type(0) if cv is None or np.asarray(cv).size == 0 else np.asarray(cv).reshape(-1)[0]
        shape = [d + b + e for d, b, e in zip(x.shape, begin, end)]
        out = np.full(shape, value, dtype=x.dtype)
        dst = tuple(slice(max(b, 0), max(b, 0) + max(min(b + d, n) - max(b, 0), 0))
                    for d, b, n in zip(x.shape, begin, shape))
        src = tuple(slice(s.start - b, s.stop - b) for s, b in zip(dst, begin))
        out[dst] = x[src]
        return [out]
    if any(p < 0 for p in begin + end):
        x = x[tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begin, end, x.shape))]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if mode != "constant":
        if x.size == 0:  # (nothing to mirror or repeat: the output is empty too, pad_fault said so)
            return [np.zeros([d + b + e for d, (b, e) in zip(x.shape, widths)], x.dtype)]
        return [np.pad(x, widths, mode=mode)]
    cv = _opt(inputs, 2)
    value = x.dtype.type(0) if cv is None or np.asarray(cv).size == 0 else np.asarray(cv).reshape(-1)[0]
    # filling a fresh buffer and copying the body is cheaper than np.pad's general path
    out = np.full([d + b + e for d, (b, e) in zip(x.shape, widths)], value, dtype=x.dtype)
    out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, widths))] = x
    return [out]


def _infer_pad(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [same_as(x)]
    pads = const_ints(ctx, 1)
    axes = const_ints(ctx, 3)
    if pads is None or (ctx.input(3) is not None and axes is None):
        return [TensorDesc(x.dtype, (None,) * len(x.shape))]
    try:
        begin, end = _pad_lists(len(x.shape), pads, axes)
    except ValueError as e:
        raise ctx.fail(str(e)) from None
    out = [d + b + e if isinstance(d, int) else (d if b == e == 0 else None)
           for d, b, e in zip(x.shape, begin, end)]
    fault = pad_fault(x.shape, begin, end, astr(ctx.attrs["mode"]))
    if fault:
        raise ctx.fail(f"input 'pads' {pads} {fault} {x}")
    return [TensorDesc(x.dtype, tuple(out))]


# --------------------------------------------------------------------- Compress / OneHot / ReverseSequence
def _k_compress(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """Compress (Operators.md): keep slices where ``condition`` is true; no axis = flattened input."""
    x, cond = inputs[0], np.asarray(inputs[1]).astype(np.bool_, copy=False).reshape(-1)
    if attrs["axis"] is None:
        return [np.compress(cond, x.reshape(-1))]
    return [np.compress(cond, x, axis=normalize_axis(attrs["axis"], x.ndim, "Compress: "))]


def _infer_compress(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    cond = ctx.value(1)
    n = None if cond is None else int(np.count_nonzero(cond))
    if ctx.attrs["axis"] is None:
        return [TensorDesc(dtype_of(x), (n,))]
    if x is None or x.shape is None:
        return [TensorDesc(dtype_of(x), None)]
    a = infer_axis(ctx, ctx.attrs["axis"], len(x.shape))
    return [TensorDesc(x.dtype, tuple(n if i == a else d for i, d in enumerate(x.shape)))]


def _k_onehot(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """OneHot (Operators.md, opset 11): indices in [-depth, depth-1]; others give all off_value."""
    idx = np.asarray(inputs[0]).astype(np.int64)  # float indices truncate, as in ORT
    depth_in, values = np.asarray(inputs[1]).reshape(-1), np.asarray(inputs[2]).reshape(-1)
    if depth_in.size != 1:  # (shape inference's checks, for inputs it did not know)
        raise ValueError(f"input 'depth' must hold one value, got {depth_in.tolist()}")
    if values.size != 2:
        raise ValueError(f"input 'values' must hold two values (off, on), got {values.size}")
    depth = int(depth_in[0])
    axis = normalize_axis(attrs["axis"], idx.ndim + 1, "OneHot: ")
    idx = np.where(idx < 0, idx + depth, idx)
    hot = idx[..., None] == np.arange(depth, dtype=np.int64)
    out = np.where(hot, values[1], values[0]).astype(values.dtype, copy=False)
    return [np.moveaxis(out, -1, axis)]


def _infer_onehot(ctx: InferContext) -> list[TensorDesc]:
    idx, values = ctx.input(0), ctx.input(2)
    dt = dtype_of(values)
    d = ctx.value(1)  # any numeric type (the spec): a float depth counts as its integer part
    depth = None if d is None else [int(v) for v in np.asarray(d).reshape(-1)]
    if depth is not None and len(depth) != 1:
        raise ctx.fail(f"input 'depth' must hold one value, got {depth}")
    if values is not None and values.is_static and values.numel() != 2:
        raise ctx.fail(f"input 'values' must hold two values (off, on), got {values.numel()}")
    if idx is None or idx.shape is None:
        return [TensorDesc(dt, None)]
    r = len(idx.shape) + 1
    a = infer_axis(ctx, ctx.attrs["axis"], r)
    dims = list(idx.shape)
    dims.insert(a, None if depth is None else int(depth[0]))
    return [TensorDesc(dt, tuple(dims))]


def _k_reverse_sequence(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ReverseSequence (Operators.md): reverse the first ``sequence_lens[b]`` steps of each batch."""
    x, lens = inputs[0], np.asarray(inputs[1]).astype(np.int64).reshape(-1)
    ta, ba = attrs["time_axis"], attrs["batch_axis"]
    t = np.arange(x.shape[ta], dtype=np.int64)[:, None]  # (T, 1) against lens (1, B)
    src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)  # (T, B)
    shape = [1] * x.ndim
    shape[ta], shape[ba] = x.shape[ta], x.shape[ba]
    src = src if ta < ba else src.T
    return [np.take_along_axis(x, src.reshape(shape), axis=ta)]


OPS: list[OpDef] = [
    # Slice-1's attributes are rewritten into inputs by the importer
    OpDef("Slice", _infer_slice, _k_slice, since=1),
    OpDef("Gather", _infer_gather, _k_gather, since=1, attrs={"axis": 0}),
    OpDef("GatherElements", _infer_indices_shape, _k_gather_elements, since=11, attrs={"axis": 0}),
    OpDef("GatherND", _infer_gather_nd, _k_gather_nd, since=11, attrs={"batch_dims": 0}),
    OpDef("ScatterND", _infer_scatter, _k_scatter_nd, since=11, attrs={"reduction": "none"}),
    OpDef("ScatterElements", _infer_scatter, _k_scatter_elements, since=11,
          attrs={"axis": 0, "reduction": "none"}),
    # Scatter (9-10, deprecated at 11) is ScatterElements without reduction
    OpDef("Scatter", _infer_scatter, _k_scatter_elements, since=9, attrs={"axis": 0, "reduction": "none"}),
    # Pad-2..10 attributes (pads, value) are rewritten into inputs by the importer
    OpDef("Pad", _infer_pad, _k_pad, since=2, attrs={"mode": "constant"}),
    OpDef("Compress", _infer_compress, _k_compress, since=9, attrs={"axis": None}),
    OpDef("OneHot", _infer_onehot, _k_onehot, since=9, attrs={"axis": -1}),
    OpDef("ReverseSequence", _infer_data_shape, _k_reverse_sequence, since=10,
          attrs={"batch_axis": 1, "time_axis": 0}),
]
