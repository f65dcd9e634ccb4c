"""oneDNN's softmax primitive (C API, see ``onednn_capi``): the attention softmax in place
(``softmax_last_axis_``) and the Softmax op bound at plan time (``bound_softmax``).

FusedAttention's scores (batch x heads x queries x keys) are normalised over the last axis.
numpy needs five single-threaded passes (max, subtract, exp, sum, divide); oneDNN's
``softmax_accurate`` (max-subtracted, the same formula) does it in one multi-threaded AVX-512
pass. Primitives are cached per (shape, strides); only C-contiguous float32 arrays with at
least ``MIN_ELEMENTS`` elements are handed over, everything else stays in numpy.

NaN behaviour follows the formula: a row masked entirely with -inf comes out NaN, as in numpy;
scores containing a NaN are left to numpy (oneDNN would keep the other entries of the row
finite, where the formula - and numpy - make the whole row NaN).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork, openmp
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.bound_out import dest, finish
from pycann.kernels.providers.native_args import address, conform

MIN_ELEMENTS = 16384  # below this, a call's fixed cost (~5 us) exceeds numpy's passes
_MAX_PLANS = 256

_plans: dict[tuple[int, ...], tuple[capi.Primitive, capi.Memory, threading.Lock]] = {}


def softmax_last_axis_(s: np.ndarray) -> bool:
    """Normalise ``s`` over its last axis in place with oneDNN; False (``s`` untouched) when the
    array is not eligible (dtype, layout, size, library missing) and the caller must do it."""
    if s.dtype != np.float32 or not s.flags.c_contiguous or not s.flags.writeable or s.size < MIN_ELEMENTS \
            or s.ndim < 1:
        return False
    if np.isnan(s).any():
        return False  # oneDNN keeps a row's other entries finite around a NaN; numpy's formula makes them NaN
    key = (*s.shape, -openmp.team())  # (negative: never a dimension)
    plan = _plans.get(key)
    if plan is None:
        try:
            md = capi.MemoryDesc.strided(s.shape, [st // 4 for st in s.strides])
            mem = capi.Memory(md, 0)
            prim = capi.Primitive(capi_ops.softmax_pd(md, md, s.ndim - 1), [(capi.ARG_SRC, mem), (capi.ARG_DST, mem)])
        except (capi.DnnlError, OSError):
            return False
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        plan = _plans[key] = (prim, mem, omp_fork.fork_safe(threading.Lock()))
    prim, mem, lock = plan
    with lock:
        mem.set(s.__array_interface__["data"][0])
        prim.execute()
    return True


def bound_softmax(shape: tuple[int, ...], generic: Any) -> Any:
    """A plan kernel ``k(inputs, attrs, out=None) -> [y]``: ONNX Softmax over the last axis of a
    float32 X of static ``shape`` (Operators.md Softmax-13; also Softmax-1/11 with axis = rank-1,
    which is the same computation), X -> Y in one oneDNN pass. An output holding a NaN (X had a
    NaN or an inf: numpy's formula then gives whole NaN rows, oneDNN only some entries) is
    recomputed by ``generic(inputs, attrs)``. None when oneDNN rejects the shape."""
    if len(shape) < 1 or int(np.prod(shape, dtype=np.int64)) < MIN_ELEMENTS:
        return None
    try:
        md = capi.MemoryDesc.dense(shape)
        src, dst = capi.Memory(md, 0), capi.Memory(md, 0)
        pd = capi_ops.softmax_pd(md, md, len(shape) - 1)
        impl = pd.fast_impl()
        prim = capi.Primitive(pd, [(capi.ARG_SRC, src), (capi.ARG_DST, dst)])
    except (capi.DnnlError, OSError):
        return None
    lock = omp_fork.fork_safe(threading.Lock())

    def kernel(inputs: Any, attrs: Any, out: Any = None) -> list[np.ndarray]:
        x = conform("Softmax input X", inputs[0], shape)
        y, o = dest(out, shape, (x,))
        xp, yp = address("Softmax input X", x, shape), address("Softmax output Y", y, shape)
        with lock:
            src.set(xp)
            dst.set(yp)
            prim.execute()
        if np.isnan(y).any():
            y[...] = generic([x], attrs)[0]
        return finish(y, o)

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, keep=(prim,), impl=impl)
