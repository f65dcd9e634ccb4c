"""Concat of float32 (or bfloat16 / float16) tensors as one oneDNN concat primitive (multi-threaded copy).

Where it pays: a channel concat of channels-last maps, which numpy does as one single-threaded
strided copy (PP-OCR det's FPN: four 24x160x160 maps into 96 channels, 9.8 MB, ~1 ms). Every
operand's exact strides are bound at plan time, so a call re-points the handles and executes.

Semantics: ONNX Concat (Operators.md): inputs equal in every dim but ``axis``; the primitive is
``dnnl_concat_primitive_desc_create`` (oneDNN v3.2 dnnl.h), sources as ``DNNL_ARG_MULTIPLE_SRC + i``.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork
from pycann.kernels.providers import onednn_capi as capi

ARG_MULTIPLE_SRC = 1024  # DNNL_ARG_MULTIPLE_SRC (dnnl_types.h)
# Which concats the primitive takes. At least MIN_ELEMENTS (4 MiB of float32): always (two threads'
# bandwidth wins: PP-OCR det's 9.8 MB FPN concat ~0.4 vs ~0.5-1 ms on numpy). From THICK_ELEMENTS,
# when the parts along the axis average at least THICK_PARTS entries (GoogLeNet's inception
# concats of 32-384 channels: 4 % slower on numpy, in-process A/B). Below, or for thin parts,
# numpy's one strided copy in cache beats a primitive call, an OpenMP fork/join and oneDNN's
# per-pixel loop over thin slices (DenseNet-121's 62 concats of 32-channel parts: 1.3 vs 2.4 ms).
MIN_ELEMENTS = 1 << 20
THICK_ELEMENTS = 1 << 16
THICK_PARTS = 64

_F32 = np.dtype(np.float32)


def _dnnl_type(dtype: np.dtype) -> int | None:
    """dnnl_data_type_t of a float dtype the primitive copies (dnnl_common_types.h), else None."""
    from pycann.dtypes import is_bfloat16

    if dtype == _F32:
        return capi.F32
    if is_bfloat16(dtype):
        return capi.BF16
    return capi.F16 if dtype == np.float16 else None


def _concat_pd(dst: capi.MemoryDesc, axis: int, srcs: Sequence[capi.MemoryDesc]) -> capi.PrimitiveDesc:
    h = ctypes.c_void_p()
    arr = (ctypes.c_void_p * len(srcs))(*[m.handle for m in srcs])
    capi.check(capi.load().dnnl_concat_primitive_desc_create(ctypes.byref(h), capi.engine(), dst.handle, len(srcs),
                                                             axis, arr, None), "dnnl_concat_primitive_desc_create")
    return capi.PrimitiveDesc(h)


def takes(out_shape: Sequence[int], axis: int, parts: int) -> bool:
    """Whether ``bound_concat`` binds a primitive for this concat (``MIN_ELEMENTS``, ``THICK_*``)."""
    total = int(np.prod(out_shape, dtype=np.int64))
    return parts > 0 and total >= THICK_ELEMENTS and (total >= MIN_ELEMENTS
                                                       or int(out_shape[axis]) >= THICK_PARTS * parts)


def bound_concat(shapes: Sequence[tuple[int, ...]], strides: Sequence[tuple[int, ...]], axis: int,
                 out_shape: tuple[int, ...], out_strides: tuple[int, ...],
                 dtype: np.dtype = _F32) -> BoundKernel | None:
    """A bound primitive whose ``run(inputs, out) -> out`` concatenates arrays of ``dtype``
    (float32, bfloat16 or float16: the bytes are copied, never converted) of the given shapes and
    element strides along ``axis`` into ``out`` (element strides ``out_strides``), or None when the
    concat is too small or too thin (``MIN_ELEMENTS``, ``THICK_*``), the dtype is another one or
    oneDNN declines. ``run`` returns None, writing nothing, when an input or ``out`` is not of
    ``dtype`` with the bound shape and strides. Raises nothing."""
    dt = _dnnl_type(dtype)
    if dt is None or not takes(out_shape, axis, len(shapes)):
        return None
    try:
        mds = [capi.MemoryDesc.strided(s, st, dt) for s, st in zip(shapes, strides)]
        dst = capi.MemoryDesc.strided(out_shape, out_strides, dt)
        pd = _concat_pd(dst, axis, mds)
        pd.fast_impl()
        mems = [capi.Memory(m, 0) for m in mds]
        dst_mem = capi.Memory(dst, 0)
        prim = capi.Primitive(pd, [(ARG_MULTIPLE_SRC + i, m) for i, m in enumerate(mems)] + [(capi.ARG_DST, dst_mem)])
    except capi.DnnlError:
        return None
    size = dtype.itemsize
    want = [(tuple(s), tuple(size * v for v in st)) for s, st in zip(shapes, strides)]
    out_want = (tuple(out_shape), tuple(size * v for v in out_strides))
    lock = omp_fork.fork_safe(threading.Lock())

    def fits(a: Any, shape: tuple[int, ...], st: tuple[int, ...]) -> bool:
        return isinstance(a, np.ndarray) and a.dtype == dtype and a.shape == shape \
            and all(s == t or d == 1 for s, t, d in zip(a.strides, st, shape))

    def run(inputs: Sequence[Any], out: np.ndarray) -> np.ndarray | None:
        if len(inputs) != len(want) or not fits(out, *out_want) \
                or not all(fits(a, s, st) for a, (s, st) in zip(inputs, want)) \
                or any(np.may_share_memory(a, out) for a in inputs):
            return None
        with lock:
            for m, a in zip(mems, inputs):
                m.set(a.__array_interface__["data"][0])
            dst_mem.set(out.__array_interface__["data"][0])
            prim.execute()
        return out

    return BoundKernel(run, threads=Threads.OPENMP, keep=(mds, dst, prim))
