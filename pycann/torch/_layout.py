"""ATen's memory-format rule for the results of the ops pycann computes on the npu.

PyTorch decides a result's layout per op, and code depends on it (``conv(x).view(n, -1)`` needs a
contiguous result): a convolution's result is channels-last when its input or its weight suggests
channels-last (``suggest_memory_format``), else contiguous; a batch norm's or a pooling's follows
its input's suggested format; an elementwise op's is TensorIterator's (its operands' common layout,
the first operand's order when they differ); softmax and matrix products are contiguous.
``expected`` gives those strides for one signature (``_pycann_ops`` computes them once, when it
binds the signature's kernel), ``conform`` makes a kernel's result follow them: nothing when it
does (the hot kernels write the right layout themselves), else one multi-threaded oneDNN reorder
(torch's strided ``copy_`` from channels-last to contiguous is ~10x slower: 1.6 against 0.16 ms
for a 64x112x112 activation on 2 cores). ``channels_last_input`` gives the channels-last
convolution (``torch:conv2d_nhwc``) its input in its layout the same way: a contiguous model's
convolutions run channels-last between two reorders, which costs less than oneDNN's own
NCHW path (docs/torch.md, "Memory formats").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

_ELTWISE_1 = frozenset({"Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Reciprocal"})
_ELTWISE_2 = frozenset({"Add", "Sub", "Mul", "Div", "Max", "Min"})
_SUGGESTED = frozenset({"BatchNormalization", "AveragePool", "GlobalAveragePool", "MaxPool"})
_CONTIGUOUS = frozenset({"Softmax", "LogSoftmax", "MatMul", "Gemm"})
_MAX_REORDERS = 256
_reorders: dict[tuple[Any, ...], Any] = {}
_MIN_REORDER = 1 << 12  # elements: below, torch's copy (no primitive to create and keep)


def _channels_last_like(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """ATen's ``suggest_memory_format() == ChannelsLast`` for a 4-D tensor (c10's
    ``is_channels_last_strides_2d_s4``: strides ordered C < W < H < N, NCHW where ambiguous)."""
    if len(shape) != 4 or strides[1] == 0:
        return False
    lo = 0
    for d in (1, 3, 2, 0):
        if shape[d] == 0 or strides[d] < lo:
            return False
        if d == 0 and lo == strides[1]:
            return False
        lo = strides[d] * shape[d] if shape[d] > 1 else strides[d]
    return True


def _dense(shape: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a dense tensor of ``shape`` whose dims, outermost first, are ``order``.
    (``onednn_capi.layout_strides`` computes the same, and NDHWC for 5-D; that module is imported only
    where a oneDNN reorder is made, so the adaptor's layout rule does not depend on the library.)"""
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(int(shape[d]), 1)
    return tuple(strides)


def _format_strides(shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    return _dense(shape, (0, 2, 3, 1) if channels_last and len(shape) == 4 else range(len(shape)))


def _elements(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def _iterator_strides(ins: Sequence[np.ndarray]) -> tuple[int, ...]:
    """TensorIterator's result strides for same-shaped operands ``ins`` (what a CPU elementwise op
    allocates), computed by the op's meta kernel on meta tensors of the operands' strides."""
    meta = [torch.empty_strided(a.shape, _elements(a), device="meta") for a in ins]
    y = torch.neg(meta[0]) if len(meta) == 1 else torch.add(meta[0], meta[1])
    return tuple(y.stride())


def expected(op_type: str, ins: Sequence[np.ndarray | None], out_shape: Sequence[int],
             itemsize: int) -> tuple[int, ...] | None:
    """The byte strides ATen gives the result of ``op_type`` (of ``out_shape``, ``itemsize`` bytes an
    element) for inputs ``ins`` (numpy views of the ATen op's tensors); None for an op without a
    rule here (its kernel's layout is kept)."""
    x = ins[0] if ins else None
    if x is None:
        return None
    if op_type == "Conv":
        w = ins[1]
        cl = _channels_last_like(x.shape, _elements(x)) or (w is not None and _channels_last_like(w.shape, _elements(w)))
        strides = _format_strides(out_shape, cl)
    elif op_type in _SUGGESTED:
        strides = _format_strides(out_shape, _channels_last_like(x.shape, _elements(x)))
    elif op_type in _CONTIGUOUS:
        strides = _format_strides(out_shape, False)
    elif op_type in _ELTWISE_1 or op_type in _ELTWISE_2:
        ops = [a for a in ins[:1 if op_type in _ELTWISE_1 else 2] if a is not None]
        if any(a.shape != tuple(out_shape) for a in ops):
            return None  # broadcasting: not a call the adaptor routes here
        strides = _iterator_strides(ops)
    else:
        return None
    return tuple(s * itemsize for s in strides)


def contiguous(shape: Sequence[int], strides: Sequence[int], itemsize: int) -> bool:
    """Whether byte ``strides`` of ``shape`` (``itemsize`` bytes an element) are a contiguous layout's."""
    return same_layout(shape, strides, tuple(s * itemsize for s in _format_strides(shape, False)))


def same_layout(shape: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether strides ``a`` and ``b`` of one ``shape`` address the elements alike (a dim of size 1
    has no stride that matters)."""
    return all(x == y for x, y, n in zip(a, b, shape) if n > 1) or 0 in shape


def _empty(shape: Sequence[int], strides: Sequence[int], dtype: np.dtype[Any]) -> np.ndarray:
    """An uninitialized array of ``shape`` with byte ``strides`` (those of a dense layout)."""
    order = sorted(range(len(shape)), key=lambda d: -strides[d])
    base = np.empty([shape[d] for d in order], dtype)
    return base.transpose(np.argsort(order))


def _reorder(a: np.ndarray, out: np.ndarray) -> None:
    """``out[...] = a`` for arrays of one shape and dtype in other layouts: oneDNN's reorder for
    float32 (multi-threaded, on torch's OpenMP pool), else torch's copy."""
    if a.dtype == np.float32 and a.size >= _MIN_REORDER and a.ndim <= 6:
        key = (a.shape, a.strides, out.strides)
        prim = _reorders.get(key)
        if prim is None:
            prim = _reorder_primitive(a, out)
            if len(_reorders) >= _MAX_REORDERS:
                _reorders.clear()
            _reorders[key] = prim
        if prim is not False:
            prim.run(a.__array_interface__["data"][0], out.__array_interface__["data"][0])
            return
    torch.from_numpy(out).copy_(torch.from_numpy(a))


def _reorder_primitive(a: np.ndarray, out: np.ndarray) -> Any:
    from pycann.kernels.providers import onednn

    if not onednn.available():
        return False
    from pycann.kernels.providers import onednn_capi as capi

    try:
        return capi.Reorder(capi.MemoryDesc.strided(a.shape, _elements(a)),
                            capi.MemoryDesc.strided(out.shape, _elements(out)))
    except Exception:  # (a layout the library refuses: torch's copy)
        return False


def conform(a: np.ndarray, want: tuple[int, ...]) -> np.ndarray:
    """``a`` when its layout is ``want`` (byte strides, of a dense layout), else a copy in it. Where
    the two differ only in the strides of size-1 dims (no element moves), a view of ``a`` with
    ``want``'s strides: ``Tensor.stride()`` reports them (a 1-channel conv's first result said
    ``(25, 1, 5, 1)`` where torch's CPU says ``(25, 25, 5, 1)``)."""
    if a.strides == want:
        return a
    if same_layout(a.shape, a.strides, want):
        return np.lib.stride_tricks.as_strided(a, a.shape, want) if a.size else a
    out = _empty(a.shape, want, a.dtype)
    _reorder(a, out)
    return out


def _is_channels_last(a: np.ndarray) -> bool:
    return a.strides == tuple(s * a.itemsize for s in _format_strides(a.shape, True))


def channels_last_input(x: np.ndarray) -> Callable[[np.ndarray], np.ndarray] | None:
    """For a channels-last convolution's input like ``x`` (4-D float32, channels > 1, not
    channels-last): ``f(x) -> x`` in channels-last, by oneDNN's reorder (2x faster than the
    ``contiguous(memory_format=channels_last)`` the conv would make); None when ``x`` needs none."""
    if x.ndim != 4 or x.shape[1] <= 1 or x.dtype != np.float32 or _is_channels_last(x):
        return None
    want = tuple(s * x.itemsize for s in _format_strides(x.shape, True))
    return lambda a: conform(a, want)
