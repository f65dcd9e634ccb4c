"""Casts between bfloat16 and float32 as oneDNN reorders: one multi-threaded pass, in any layout.

The bf16 precision modes (``allow_fp32_to_bf16``, docs/precision.md) put a Cast on every edge
between a bf16 matrix op and a float32 vector op: PP-OCRv4 det at 640 x 640 has 39, over feature
maps up to 96 x 160 x 160. numpy's ``astype`` through ml_dtypes converts one element at a time on
one core (~0.4-0.8 ms per million values). A oneDNN reorder converts with vector instructions on
every OpenMP thread, and can write another layout in the same pass.

* bfloat16 -> float32 (``is_pair``): always; it is exact (ONNX Cast-19; oneDNN shifts the bits,
  subnormals included), and tests/kernels/test_onednn_cast.py compares bit patterns with ml_dtypes.
* float32 -> bfloat16 (``is_narrowing``, ``bound_cast(..., narrowing=True)``): rounds to nearest
  even as ONNX Cast does, but oneDNN's conversion (``vcvtneps2bf16`` on AVX512_BF16) reads float32
  subnormals as zero, where ONNX Cast and ml_dtypes round them. So only for the Casts whose readers
  read bf16 subnormals as zero themselves (the native bf16 matrix kernels:
  ``ge/compile/passes/flushing_casts.py``); every other narrowing Cast stays numpy's.

Small tensors (below ``MIN_ELEMENTS``) keep numpy: its call costs less than a primitive's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import bfloat16, is_bfloat16
from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers.native_args import address
from pycann.ops.nn.spatial import empty_like_layout

__all__ = ["MIN_ELEMENTS", "bound_cast", "is_narrowing", "is_pair", "to_bf16_flushing"]

MIN_ELEMENTS = 1 << 15  # below: numpy's astype (a oneDNN call's overhead is ~10 us)
_BF16 = capi.BF16
_MAX_LAYOUTS = 8  # (input strides, output strides) pairs one bound cast keeps a primitive for
_F32 = np.dtype(np.float32)


def bound_cast(shape: Sequence[int], src: np.dtype, dst: np.dtype, fallback: Any, *,
               narrowing: bool = False) -> BoundKernel | None:
    """Cast of a ``shape`` tensor from ``src`` to ``dst`` (bfloat16 -> float32; with ``narrowing``
    also float32 -> bfloat16, float32 subnormals to zero: the module docstring says where) as a kernel
    ``k(inputs, attrs, out=None) -> [y]`` writing into the arena view ``out[0]`` when given (any
    strides), else into a new array laid out as the input. None for other dtypes, small tensors or
    without libdnnl. A call with another shape or dtype runs ``fallback(inputs, attrs)``."""
    shape = tuple(int(d) for d in shape)
    if not (is_pair(src, dst) or (narrowing and is_narrowing(src, dst))) \
            or int(np.prod(shape, dtype=np.int64)) < MIN_ELEMENTS:
        return None
    from pycann.kernels.providers import onednn

    if not onednn.available():
        return None
    from pycann.kernels.providers.onednn_bf16 import _md

    prims: dict[tuple[tuple[int, ...], tuple[int, ...]], capi.Reorder] = {}

    def primitive(xs: tuple[int, ...], ys: tuple[int, ...]) -> capi.Reorder:
        p = prims.get((xs, ys))
        if p is None:
            p = capi.Reorder(_md(shape, xs, src.itemsize, _code(src)), _md(shape, ys, dst.itemsize, _code(dst)))
            if len(prims) >= _MAX_LAYOUTS:  # (no lock: dict operations are atomic under the GIL)
                prims.clear()
            prims[(xs, ys)] = p
        return p

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
        try:
            reorder = primitive(x.strides, y.strides)
        except capi.DnnlError:  # a layout oneDNN does not take (negative strides): numpy's
            y[...] = fallback(inputs, attrs)[0]
            return [y]
        reorder.run(address("Cast input", x, shape, src, strides=x.strides),
                    address("Cast output", y, shape, dst, strides=y.strides))
        if o is not None and y is not o:
            o[...] = y
            return [o]
        return [y]

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, keep=(prims,), impl="onednn:reorder_cast_flush" if narrowing else "onednn:reorder_cast")


def is_pair(src: np.dtype, dst: np.dtype) -> bool:
    """bfloat16 -> float32: the exact cast ``bound_cast`` always computes."""
    return is_bfloat16(src) and dst == _F32


def is_narrowing(src: np.dtype, dst: np.dtype) -> bool:
    """float32 -> bfloat16: the cast ``bound_cast`` computes with ``narrowing`` (subnormals to zero)."""
    return src == _F32 and is_bfloat16(dst)


def _code(dt: np.dtype) -> int:
    """oneDNN's data type code of float32 or bfloat16."""
    return _BF16 if is_bfloat16(dt) else capi.F32


_flushing: dict[tuple[tuple[int, ...], tuple[int, ...]], capi.Reorder] = {}
_MAX_FLUSHING = 64


def to_bf16_flushing(a: np.ndarray) -> np.ndarray:
    """``a`` (float32) rounded to a new C-ordered bfloat16 array by a oneDNN reorder, float32
    subnormals read as zero: for a value read only as a native bf16 matrix operand (see the module
    docstring; FusedAttention's P). numpy's exact cast below ``MIN_ELEMENTS``, for other dtypes or
    without libdnnl."""
    from pycann.kernels.providers import onednn

    if a.dtype != _F32 or a.size < MIN_ELEMENTS or not onednn.available():
        return a.astype(bfloat16())
    from pycann.kernels.providers.onednn_bf16 import _md

    y = np.empty(a.shape, bfloat16())
    key = (a.shape, a.strides)
    r = _flushing.get(key)
    try:
        if r is None:
            r = capi.Reorder(_md(a.shape, a.strides, 4, capi.F32), _md(y.shape, y.strides, 2, _BF16))
            if len(_flushing) >= _MAX_FLUSHING:  # (no lock: dict operations are atomic under the GIL)
                _flushing.clear()
            _flushing[key] = r
    except capi.DnnlError:
        return a.astype(bfloat16())
    r.run(address("bf16 operand", a, a.shape, a.dtype, strides=a.strides), address("bf16 operand", y, y.shape, y.dtype))
    return y
