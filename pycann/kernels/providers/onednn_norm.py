"""oneDNN's layer normalisation primitive (C API, see ``onednn_capi``) for the ``onednn`` provider.

ONNX LayerNormalization (Operators.md, LayerNormalization-17) over the trailing axes
``[axis, rank)`` of a float32 tensor is oneDNN's layer normalisation over the last dim of the
``(rows, n)`` view: mean, then the variance of the deviations, ``(x - mean) / sqrt(var + eps)``
times Scale plus B - the formula of ``ops/nn/norm.py``'s kernel, in one multi-threaded AVX-512
pass per row block where numpy needs six single-threaded ones (MiniLM: 54 us -> ~10 us a call).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork, openmp
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.bound_out import dest, finish
from pycann.kernels.providers.native_args import address, conform

_F32 = np.dtype(np.float32)

# A normalisation of at most this many values gets a one-thread primitive (no parallel region): a
# decode step's row (768 values, ~2 us of work) paid the team's fork/join and, after a numpy stretch
# longer than the workers' spin, their wake-up (60-150 us on a VM). Measured with the gemv layout of
# ``kernels/weight_layouts.py``: GPT-2 decode b1 1.6-6 % faster per token (bench/RESULTS.md, twenty-
# ninth session); alone, within the run-to-run spread.
ONE_THREAD_ELEMENTS = 1 << 13


def bound_layer_norm(shape: Sequence[int], n: int, scale: np.ndarray, bias: np.ndarray | None,
                     epsilon: float) -> Any:
    """A plan kernel ``k(inputs, attrs, out=None) -> [y]`` normalising float32 X of static
    ``shape`` over its trailing ``n`` elements (Y only: no Mean / InvStdDev outputs).

    ``scale``, ``bias``: constants with exactly ``n`` elements (any shape of that size), cast to
    float32 once. With ``out`` (the executor's arena view; ``k.writes_out``) Y is written there.
    None when the shape is empty, the constants do not have ``n`` elements, or oneDNN offers only
    its reference implementation (slower than numpy)."""
    shape = tuple(int(d) for d in shape)
    size = int(np.prod(shape, dtype=np.int64))
    if n <= 0 or size == 0 or size % n or scale.size != n or (bias is not None and bias.size != n):
        return None
    rows = size // n
    sc = np.ascontiguousarray(scale, dtype=_F32).reshape(n)
    sh = None if bias is None else np.ascontiguousarray(bias, dtype=_F32).reshape(n)
    try:
        md = capi.MemoryDesc.strided((rows, n), (n, 1))
        vec = capi.MemoryDesc.strided((n,), (1,))
        flags = capi.USE_SCALE | (capi.USE_SHIFT if sh is not None else 0)
        pd = capi_ops.layer_normalization_pd(md, md, float(epsilon), flags)
        impl = pd.fast_impl()
        one_thread = size <= ONE_THREAD_ELEMENTS
        # (no descriptor kept by the memories or the primitive, no bound methods in the closure: the
        # shape-generic plan binds a kernel per node and row count, and each object is one more for
        # the cyclic GC)
        src, dst = capi.Memory(md, 0, keep_md=False), capi.Memory(md, 0, keep_md=False)
        args = [(capi.ARG_SRC, src), (capi.ARG_DST, dst),
                (capi.ARG_SCALE, capi.Memory(vec, address("LayerNormalization Scale", sc, (n,)), keep_md=False))]
        if sh is not None:
            args.append((capi.ARG_SHIFT, capi.Memory(vec, address("LayerNormalization B", sh, (n,)), keep_md=False)))
        before = openmp.max_threads() if one_thread else None
        openmp.set_max_threads(1 if one_thread else None)
        try:  # (oneDNN fixes a primitive's team when it creates it)
            prim = capi.Primitive(pd, args, keep_pd=False)
        finally:
            openmp.set_max_threads(before)
    except capi.DnnlError:
        return None
    lock = omp_fork.fork_safe(threading.Lock())

    def kernel(inputs: Any, attrs: Any, out: Any = None) -> list[np.ndarray]:
        x = conform("LayerNormalization input X", inputs[0], shape)
        y, o = dest(out, shape, same_ok=x)  # in place (same buffer) is allowed by oneDNN; a partial overlap is not
        xp, yp = address("LayerNormalization input X", x, shape), address("LayerNormalization output Y", y, shape)
        with lock:
            src.set(xp)
            dst.set(yp)
            prim.execute()
        return finish(y, o)

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, keep=(sc, sh, prim),
                       impl=impl + (" (one thread)" if one_thread else ""))
