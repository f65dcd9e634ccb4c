"""Reduction ops (ONNX spec, Operators.md): Reduce*, ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax, CumSum.

Reduce* kernels implement the opset-18 form (``axes`` is an optional int64 INPUT, attributes
``keepdims`` and ``noop_with_empty_axes``); the importer rewrites the older ``axes`` attribute
into that input, so one definition serves every opset. 16-bit floats accumulate in float32
(as ONNX Runtime does) and are cast back; integer inputs keep their dtype (C-style wrap-around,
integer means truncate toward zero like ORT).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, is_bfloat16
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.shape_utils import normalize_axes, normalize_axis, same_as

_REDUCE_ATTRS = {"keepdims": 1, "noop_with_empty_axes": 0}

Inputs = Sequence[Any]
Attrs = Mapping[str, Any]


def _work(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 are widened to float32 so sums do not lose precision."""
    return x.astype(np.float32) if x.dtype == np.float16 or is_bfloat16(x.dtype) else x


def _back(r: Any, dtype: np.dtype) -> np.ndarray:
    """Cast a result back to the ONNX output dtype (float->int truncates, like a C cast)."""
    r = np.asarray(r)
    if r.dtype == dtype:
        return r
    with np.errstate(invalid="ignore", over="ignore"):
        return r.astype(dtype)


# --------------------------------------------------------------------------- Reduce*

_FAST_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _rsum(w: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    """``np.sum(w, ax, keepdims=kd)`` in ``w``'s dtype.

    Summing trailing axes of a contiguous float array goes through ``einsum('ij->i')``: numpy's
    reduction handles short contiguous rows one at a time and is 3-5x slower on LayerNorm-style
    ReduceMean over the last axis and on Softmax denominators. (BLAS ``rows @ ones`` is as fast
    when idle but multi-threaded, and stalls badly when the other cores are busy.)
    """
    nd, n = w.ndim, len(ax)
    if (n and w.dtype in _FAST_FLOATS and w.size and w.flags.c_contiguous
            and sorted(ax) == list(range(nd - n, nd))):
        k = int(np.prod(w.shape[nd - n:], dtype=np.int64))
        r = np.einsum("ij->i", w.reshape(-1, k))
        return r.reshape(w.shape[: nd - n] + ((1,) * n if kd else ()))
    return np.asarray(np.sum(w, axis=ax, keepdims=kd, dtype=w.dtype))


def _reduce_axes(x: np.ndarray, axes: np.ndarray | None, noop: int) -> tuple[int, ...]:
    """Normalised reduction axes. With noop_with_empty_axes and no axes nothing is reduced, but
    the elementwise part still applies (ReduceL2 -> |x|, ReduceLogSum -> log x), as in ORT and
    onnx.reference."""
    if axes is None or axes.size == 0:
        return () if noop else tuple(range(x.ndim))
    return tuple(normalize_axes(axes.reshape(-1).tolist(), x.ndim, "Reduce: "))


def _identity_fill(x: np.ndarray, ax: tuple[int, ...], kd: bool, value: Any) -> np.ndarray:
    shape = [1 if i in ax else d for i, d in enumerate(x.shape) if kd or i not in ax]
    with np.errstate(invalid="ignore", over="ignore"):
        return np.full(shape, value).astype(x.dtype)


def _sum(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _work(x)
    return _back(_rsum(w, ax, kd), x.dtype)


def _mean(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    n = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
    if n == 0:  # ORT yields 0 for a mean over nothing (spec: undefined)
        return _identity_fill(x, ax, kd, 0)
    if x.dtype.kind in "iu":
        s = np.sum(x, axis=ax, keepdims=kd, dtype=np.int64)
        # C integer division truncates toward zero
        return _back(np.sign(s) * (np.abs(s) // n), x.dtype)
    w = _work(x)
    r = _rsum(w, ax, kd)
    r /= w.dtype.type(n)  # in place: _rsum always returns a fresh array
    return _back(r, x.dtype)


def _extreme(x: np.ndarray, largest: bool) -> Any:
    """The reduction identity: -inf/+inf for floats, the dtype's min/max otherwise."""
    if x.dtype == np.bool_:
        return not largest
    if x.dtype.kind == "f" or is_bfloat16(x.dtype):
        return -np.inf if largest else np.inf
    info = np.iinfo(x.dtype)
    return info.min if largest else info.max


def _max(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    # ``initial`` makes empty reductions give the identity; NaN still propagates.
    return np.asarray(np.max(x, axis=ax, keepdims=kd, initial=_extreme(x, True)))


def _min(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    return np.asarray(np.min(x, axis=ax, keepdims=kd, initial=_extreme(x, False)))


def _prod(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _work(x)
    return _back(np.prod(w, axis=ax, keepdims=kd, dtype=w.dtype), x.dtype)


def _l1(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _work(x)
    return _back(_rsum(np.abs(w), ax, kd), x.dtype)


def _sumsq(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _work(x)
    return _back(_rsum(w * w, ax, kd), x.dtype)


def _float_work(x: np.ndarray) -> np.ndarray:
    """Integer inputs to sqrt/log reductions are computed in float64, then truncated back."""
    return x.astype(np.float64) if x.dtype.kind in "iub" else _work(x)


def _l2(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _float_work(x)
    return _back(np.sqrt(_rsum(w * w, ax, kd)), x.dtype)


def _logsum(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _float_work(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _back(np.log(_rsum(w, ax, kd)), x.dtype)


def _logsumexp(x: np.ndarray, ax: tuple[int, ...], kd: bool) -> np.ndarray:
    w = _float_work(x)
    m = np.asarray(np.max(w, axis=ax, keepdims=True, initial=-np.inf))
    # rows that are all -inf (or empty) would give nan from -inf - -inf; shift by 0 instead
    m[~np.isfinite(m)] = 0
    with np.errstate(divide="ignore", over="ignore"):
        e = np.exp(w - m)
        r = np.log(_rsum(e, ax, True)) + m
    if not kd:
        r = r.reshape([d for i, d in enumerate(r.shape) if i not in ax])
    return _back(r, x.dtype)


def _make_reduce(fn: Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]) -> Callable:
    pure = fn in (_sum, _mean, _max, _min, _prod)  # reducing over no axes is the identity

    def kernel(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
        x = inputs[0]
        axes = inputs[1] if len(inputs) > 1 else None
        ax = _reduce_axes(x, axes, attrs["noop_with_empty_axes"])
        if not ax and pure:
            return [x]
        return [fn(x, ax, bool(attrs["keepdims"]))]

    kernel.__doc__ = f"ONNX Reduce kernel built on ``{fn.__name__}`` (Operators.md, Reduce*)."
    return kernel


def _infer_reduce(ctx: InferContext) -> list[TensorDesc]:
    """Reduce* shape: drop (keepdims=0) or set to 1 the reduced axes (Operators.md, ReduceSum)."""
    kd = ctx.flag("keepdims")
    noop = ctx.flag("noop_with_empty_axes")
    x = ctx.input(0)
    if x is None:
        raise ctx.fail("input 'data' is missing")
    axes_desc = ctx.input(1)
    if x.shape is None:
        return [TensorDesc(x.dtype, None)]
    rank = len(x.shape)
    if axes_desc is None:
        vals: list[int] | None = []
    else:
        v = ctx.value(1)
        vals = None if v is None else v.reshape(-1).tolist()
    if vals is None:
        if kd:
            return [TensorDesc(x.dtype, (None,) * rank)]
        n = axes_desc.shape[0] if axes_desc and axes_desc.shape and len(axes_desc.shape) == 1 else None
        if n == 0:  # statically empty axes: reduce all, or nothing with noop_with_empty_axes
            return [TensorDesc(x.dtype, x.shape if noop else ())]
        if isinstance(n, int):
            return [TensorDesc(x.dtype, (None,) * max(rank - n, 0))]
        return [TensorDesc(x.dtype, None)]
    if not vals:
        ax = [] if noop else list(range(rank))
    else:
        try:
            ax = normalize_axes(vals, rank)
        except ValueError as e:
            raise ctx.fail(f"input 'axes' {vals} is invalid for data of rank {rank}: {e}") from None
    shape = tuple(1 if i in ax else d for i, d in enumerate(x.shape) if kd or i not in ax)
    return [TensorDesc(x.dtype, shape)]


# --------------------------------------------------------------------------- ArgMax / ArgMin
def _infer_arg(ctx: InferContext) -> list[TensorDesc]:
    """ArgMax/ArgMin: int64, the axis kept as 1 or removed (Operators.md, ArgMax)."""
    kd = ctx.flag("keepdims")
    ctx.flag("select_last_index")
    x = ctx.input(0)
    if x is None or x.shape is None:
        return [TensorDesc(DType.INT64, None)]
    try:
        a = normalize_axis(ctx.attrs["axis"], len(x.shape))
    except ValueError as e:
        raise ctx.fail(f"attribute 'axis': {e}") from None
    if len(x.shape) == 0:
        raise ctx.fail("input 'data' must have rank >= 1")
    shape = tuple(1 if i == a else d for i, d in enumerate(x.shape) if kd or i != a)
    return [TensorDesc(DType.INT64, shape)]


def _arg(x: np.ndarray, attrs: Attrs, fn: Callable) -> list[np.ndarray]:
    axis = normalize_axis(attrs["axis"], x.ndim, "ArgMax/ArgMin: ")
    kd = bool(attrs["keepdims"])
    if x.shape[axis] == 0:  # (numpy raises "attempt to get argmax of an empty sequence" either way)
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape) if kd or i != axis)
        if 0 in shape:  # nothing to index: an empty result, as ONNX Runtime's
            return [np.zeros(shape, np.int64)]
        raise ValueError(f"ArgMax/ArgMin over the empty axis {axis} of X {list(x.shape)}: no index to return")
    if attrs["select_last_index"]:
        n = x.shape[axis]
        r = fn(np.flip(x, axis), axis=axis, keepdims=kd)
        return [np.asarray((n - 1) - r, dtype=np.int64)]
    return [np.asarray(fn(x, axis=axis, keepdims=kd), dtype=np.int64)]


def _k_argmax(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ArgMax (Operators.md): first occurrence unless select_last_index=1."""
    return _arg(inputs[0], attrs, np.argmax)


def _k_argmin(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """ArgMin (Operators.md): first occurrence unless select_last_index=1."""
    return _arg(inputs[0], attrs, np.argmin)


# --------------------------------------------------------------------------- Softmax family
def _infer_softmax(ctx: InferContext) -> list[TensorDesc]:
    """Softmax/LogSoftmax/Hardmax keep shape and dtype; the axis must be in range."""
    x = ctx.input(0)
    if x is not None and x.shape is not None:
        rank = len(x.shape)
        if not -rank <= ctx.attrs["axis"] <= max(rank - 1, 0):
            raise ctx.fail(f"attribute 'axis' {ctx.attrs['axis']} is out of range for input of rank {rank}")
    return [same_as(x)]


def _softmax_core(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    """Numerically stable (log-)softmax, reusing one result buffer for every step."""
    w = _work(x)
    if w.size == 0:
        return x.copy()
    # The shift only needs to be the row max where the row is NaN-free: NaN rows come out NaN
    # either way, so the faster NaN-ignoring fmax is safe here.
    # A fully masked row (-inf - -inf) is NaN by the formula, as in ONNX Runtime: not a warning.
    with np.errstate(invalid="ignore", divide="ignore"):
        out = w - np.fmax.reduce(w, axis=axis, keepdims=True)
        if log:
            s = _rsum(np.exp(out), (axis,), True)
            np.log(s, out=s)
            out -= s
        else:
            np.exp(out, out=out)
            out /= _rsum(out, (axis,), True)
    return _back(out, x.dtype)


def _hardmax_core(x: np.ndarray, axis: int) -> np.ndarray:
    out = np.zeros_like(x)
    if x.size == 0:
        return out
    idx = np.expand_dims(np.argmax(x, axis=axis), axis)
    np.put_along_axis(out, idx, 1, axis=axis)
    return out


def _coerce_2d(fn: Callable[[np.ndarray, int], np.ndarray]) -> Callable:
    """Opset 1-12 form: view the input as 2-D [prod(d[:axis]), prod(d[axis:])], apply on axis 1."""

    def kernel(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
        x = inputs[0]
        axis = attrs["axis"]
        axis = axis + x.ndim if axis < 0 else axis
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        cols = int(np.prod(x.shape[axis:], dtype=np.int64))
        return [fn(x.reshape(rows, cols), 1).reshape(x.shape)]

    return kernel


def _single_axis(fn: Callable[[np.ndarray, int], np.ndarray]) -> Callable:
    """Opset 13 form: apply along one axis."""

    def kernel(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
        x = inputs[0]
        return [fn(x, normalize_axis(attrs["axis"], x.ndim, "Softmax: "))]

    return kernel


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _softmax_core(x, axis, False)


def _logsoftmax(x: np.ndarray, axis: int) -> np.ndarray:
    return _softmax_core(x, axis, True)


# --------------------------------------------------------------------------- CumSum
def _k_cumsum(inputs: Inputs, attrs: Attrs) -> list[np.ndarray]:
    """CumSum (Operators.md): axis is a 0-d/1-element input; ``exclusive`` and ``reverse`` flags."""
    x = inputs[0]
    axis = normalize_axis(int(np.asarray(inputs[1]).reshape(-1)[0]), x.ndim, "CumSum: ")
    w = _work(x)
    if attrs["reverse"]:
        w = np.flip(w, axis)
    r = np.cumsum(w, axis=axis, dtype=w.dtype)
    if attrs["exclusive"]:
        shifted = np.zeros_like(r)
        dst = [slice(None)] * x.ndim
        src = [slice(None)] * x.ndim
        dst[axis] = slice(1, None)
        src[axis] = slice(None, -1)
        shifted[tuple(dst)] = r[tuple(src)]
        r = shifted
    if attrs["reverse"]:
        r = np.flip(r, axis)
    return [_back(r, x.dtype)]


def _infer_cumsum(ctx: InferContext) -> list[TensorDesc]:
    """CumSum keeps shape and dtype."""
    return [same_as(ctx.input(0))]


_REDUCERS = {
    "ReduceSum": _sum,
    "ReduceMean": _mean,
    "ReduceMax": _max,
    "ReduceMin": _min,
    "ReduceProd": _prod,
    "ReduceL1": _l1,
    "ReduceL2": _l2,
    "ReduceLogSum": _logsum,
    "ReduceLogSumExp": _logsumexp,
    "ReduceSumSquare": _sumsq,
}
_ARG_ATTRS = {"axis": 0, "keepdims": 1, "select_last_index": 0}

OPS: list[OpDef] = [
    # Every Reduce* keeps its semantics since opset 1 (axes attribute -> input is an importer rewrite).
    *(OpDef(name, _infer_reduce, _make_reduce(fn), since=1, attrs=_REDUCE_ATTRS)
      for name, fn in _REDUCERS.items()),
    OpDef("ArgMax", _infer_arg, _k_argmax, since=1, attrs=_ARG_ATTRS),
    OpDef("ArgMin", _infer_arg, _k_argmin, since=1, attrs=_ARG_ATTRS),
    OpDef("Softmax", _infer_softmax, _coerce_2d(_softmax), since=1, attrs={"axis": 1}),
    OpDef("Softmax", _infer_softmax, _single_axis(_softmax), since=13, attrs={"axis": -1}),
    OpDef("LogSoftmax", _infer_softmax, _coerce_2d(_logsoftmax), since=1, attrs={"axis": 1}),
    OpDef("LogSoftmax", _infer_softmax, _single_axis(_logsoftmax), since=13, attrs={"axis": -1}),
    OpDef("Hardmax", _infer_softmax, _coerce_2d(_hardmax_core), since=1, attrs={"axis": 1}),
    OpDef("Hardmax", _infer_softmax, _single_axis(_hardmax_core), since=13, attrs={"axis": -1}),
    OpDef("CumSum", _infer_cumsum, _k_cumsum, since=11, attrs={"exclusive": 0, "reverse": 0}),
]
