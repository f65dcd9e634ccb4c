"""Cast from float32 to bfloat16 or float16 on the plan's team (``slabs``): the array cut in slabs,
each converted by numpy / ml_dtypes exactly as ``astype`` converts it.

The reduced-precision modes (docs/precision.md) put a Cast on every edge from a float32 vector op to
a bf16 / fp16 matrix op: PP-OCRv4 det in ``allow_fp32_to_bf16`` narrows 2.4 M values before its
biggest 3x3 conv, on one core in numpy (~0.35 ms per million values here). oneDNN's reorder would
be faster still, but it flushes subnormal inputs to zero where ONNX Cast (and ml_dtypes, numpy)
round them (onednn_cast.py), so the values stay numpy's. Widening (bfloat16 -> float32) is
``onednn_cast``'s. The slabs are cut along the axis with the largest stride (H of a channels-last
map), so each is one contiguous run of the input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import is_bfloat16
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import nan_guard, slabs
from pycann.ops.nn.spatial import empty_like_layout

__all__ = ["bound_narrowing_cast", "is_narrowing", "narrow"]

_F32 = np.dtype(np.float32)


def is_narrowing(src: np.dtype, dst: np.dtype) -> bool:
    """float32 -> bfloat16 / float16: the casts ``bound_narrowing_cast`` computes."""
    return src == _F32 and (is_bfloat16(dst) or dst == np.float16)


def _convert(y: np.ndarray, x: np.ndarray) -> None:
    with np.errstate(over="ignore"):  # float32 -> float16 overflow is inf, silently (as the generic kernel)
        np.copyto(y, x, casting="unsafe")


def narrow(x: np.ndarray, y: np.ndarray, team: int) -> None:
    """``y[...] = x`` converted as numpy converts it, in up to ``team`` slabs along the axis of ``x``
    with the largest stride among those of at least ``team`` elements."""
    axes = [i for i, d in enumerate(x.shape) if d >= team] if team > 1 else []
    if not axes:
        _convert(y, x)
        return
    axis = max(axes, key=lambda i: abs(x.strides[i]))

    def part(lo: int, hi: int) -> Callable[[], None]:
        index = (slice(None),) * axis + (slice(lo, hi),)
        return lambda: _convert(y[index], x[index])

    slabs.run([part(lo, hi) for lo, hi in slabs.cuts(x.shape[axis], team)])


def bound_narrowing_cast(shape: Sequence[int], src: np.dtype, dst: np.dtype, fallback: Any) -> BoundKernel | None:
    """Cast of a ``shape`` tensor from float32 to ``dst`` (bfloat16 or float16) as a kernel
    ``k(inputs, attrs, out=None) -> [y]`` writing into the arena view ``out[0]`` when given (any
    strides), else into a new array laid out as the input (ONNX Cast-19/21: round to nearest even,
    NaN kept, overflow to inf; the values numpy's ``astype`` gives). None for other dtypes or small
    tensors. A call with another shape or dtype runs ``fallback(inputs, attrs)``. The input's proven
    NaN-guard bound goes on to the output (times 1.01: the rounding may round up)."""
    shape = tuple(int(d) for d in shape)
    if not is_narrowing(src, dst) or int(np.prod(shape, dtype=np.int64)) < slabs.MIN_ELEMENTS:
        return None
    top = float(np.finfo(np.float16).max) if dst == np.float16 else float("inf")  # (bf16: float32's range)
    # the spacing of ``dst``'s subnormals: a value below the smallest normal may round up by up to
    # half of it, far more than 1 % (float16: 4e-8 -> 5.96e-8)
    tiny = 2.0 ** -24 if dst == np.float16 else 2.0 ** -133

    def through(b: float) -> float | None:
        # (float16 overflows to inf above 65504: no bound then)
        return b * 1.01 + tiny if b * 1.01 + tiny < top else None

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        x = inputs[0]
        if x.__class__ is not np.ndarray or x.dtype != src or x.shape != shape:
            y = fallback(inputs, attrs)[0]
            if out is not None:
                out[0][...] = y
                return [out[0]]
            return [y]
        o = out[0] if out is not None else None
        y = o if o is not None and o.dtype == dst and o.shape == shape and o.flags.writeable \
            and not np.may_share_memory(o, x) else empty_like_layout(x, shape, dst)
        narrow(x, y, slabs.team(x.size))
        nan_guard.pass_on(y, x, through)
        if o is not None and y is not o:
            o[...] = y
            return [o]
        return [y]

    return BoundKernel(kernel, writes_out=True, impl="numpy:cast_slabs")
