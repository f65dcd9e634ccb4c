"""bf16 FusedMatMul (``act(A @ B + bias + residual)``, the bf16 precision modes) bound once per node.

The generic kernel (``kernels/fused.py`` ``_bf16_matmul_fused`` -> ``onednn_bf16.matmul``) works out
the activation's post-op, the operands' layouts, the bias in float32 and the primitive's cache key on
every call (~65 us a call on BERT-base's 72 products in ``allow_fp32_to_bf16``, against 160-640 us of
kernel). For a static A shape and a constant bf16 B (packed once, as KernelSelection recorded), a
constant bias and an activation oneDNN runs as a post-op that keeps NaN, ``bind`` makes that part
once; a call re-points the primitive's handles and executes it. Any other call (another shape,
dtype or layout, other B or bias objects, a residual of another shape) runs the generic kernel, and
so does a node whose activation drops NaN (its epilogue runs in numpy: ``_bf16_matmul_fused``).

Semantics are those of ``ops/fused.py``'s FusedMatMul with the bf16 path's numbers: float32
accumulation, bias, residual and activation on the float32 accumulator, one rounding to bfloat16
(docs/precision.md); the same primitive ``onednn_bf16.matmul`` makes for these operands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, bfloat16, is_bfloat16
from pycann.kernels import algorithm
from pycann.kernels.algorithm import ONEDNN_MATMUL_BF16_PACKED
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import nan_guard, onednn_bf16
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers.onednn_eltwise import onednn_unary
from pycann.ops import fused as ref

__all__ = ["bind"]

_BF16_CODE = int(DType.BFLOAT16)
_F32 = np.dtype(np.float32)


def bind(attrs: Mapping[str, Any], ins: Sequence[Any], consts: Sequence[np.ndarray | None],
         outs: Sequence[Any]) -> BoundKernel | None:
    """The static binder of a bf16 FusedMatMul (see the module docstring); None where it does not
    apply (the generic kernel then runs every call)."""
    from pycann.kernels import fused as kfused

    a_desc = ins[0] if ins else None
    b = consts[1] if len(consts) > 1 else None
    bias = consts[2] if len(consts) > 2 else None
    if a_desc is None or a_desc.dtype != _BF16_CODE or a_desc.shape is None \
            or not all(isinstance(d, int) for d in a_desc.shape) or len(a_desc.shape) < 2 \
            or b is None or b.ndim != 2 or not is_bfloat16(b.dtype) or algorithm.is_numpy(attrs) \
            or not onednn_bf16.native():
        return None
    if len(ins) > 2 and ins[2] is not None and (bias is None or bias.size != b.shape[1]):
        return None  # a computed bias, or one that broadcasts otherwise: the generic kernel
    name, alpha, beta = ref._act(attrs)
    unary = onednn_unary(name, alpha, beta) if name else None
    if (name and unary is None) or nan_guard.drops_nan(unary) or ref.post_affine(attrs) is not None:
        return None
    a_shape = tuple(int(d) for d in a_desc.shape)
    if a_shape[-1] != b.shape[0]:
        return None
    rows = int(np.prod(a_shape[:-1], dtype=np.int64))
    k, n = b.shape
    y_shape = (*a_shape[:-1], n)
    packed = algorithm.of(attrs) == ONEDNN_MATMUL_BF16_PACKED
    b32 = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(1, n)
    post = (unary,) if unary is not None else None
    plans: dict[tuple[bool, str], Any] = {}  # (residual given, its dtype) -> the primitive

    def plan_for(a2: np.ndarray, y2: np.ndarray, r2: np.ndarray | None) -> Any:
        key = (r2 is not None, "" if r2 is None else r2.dtype.str)
        p = plans.get(key)
        if p is None:
            p = plans[key] = onednn_bf16.matmul_plan(a2, b, y2, b32, r2, post, packed)
        return p

    def kernel(inputs: Sequence[Any], a_: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        o = out[0] if out is not None else None
        x = inputs[0]
        r = inputs[3] if len(inputs) > 3 else None
        if x.__class__ is np.ndarray and x.shape == a_shape and is_bfloat16(x.dtype) and x.flags.c_contiguous \
                and inputs[1] is b and (inputs[2] if len(inputs) > 2 else None) is bias \
                and (r is None or (r.__class__ is np.ndarray and r.shape == y_shape and r.flags.c_contiguous
                                   and (is_bfloat16(r.dtype) or r.dtype == _F32))):
            y = o if o is not None and is_bfloat16(o.dtype) and o.shape == y_shape and o.flags.c_contiguous \
                and (r is None or not np.may_share_memory(o, r)) else np.empty(y_shape, bfloat16())
            a2, y2 = x.reshape(rows, k), y.reshape(rows, n)
            r2 = None if r is None else r.reshape(rows, n)
            try:
                plan_for(a2, y2, r2).run(a2, b, y2, b32, r2)
            except capi.DnnlError:
                pass
            else:
                if o is not None and y is not o:
                    o[...] = y
                    return [o]
                return [y]
        if o is not None:
            ref._out_fused_matmul(inputs, a_, [o], kfused.PROVIDED)
            return [o]
        return kfused.k_fused_matmul(inputs, a_)

    return BoundKernel(kernel, writes_out=True, keep=(b, bias, b32, plans), impl="onednn:bf16_matmul")
