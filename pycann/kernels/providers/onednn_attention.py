"""Scaled dot-product attention as three oneDNN primitives (C API, see ``onednn_capi``):
``softmax((Q @ Kt) * scale + mask, axis=-1) @ V`` (pycann.FusedAttention, the pattern of
ONNX Attention-23 without its options) for float32 operands of static shapes.

* ``S = Q @ Kt`` is a batched matmul whose ``scale`` (eltwise ``linear``) and additive ``mask``
  (binary ``add``, broadcast by oneDNN) are post-ops, so the scores are written once (a mask
  broadcast the post-op does not take, e.g. a (1, 1, S, T) causal mask over batch x heads, is
  added by numpy in one pass);
* the softmax (``softmax_accurate``: max-subtracted) runs in place on S;
* ``Y = S @ V`` writes the result: for 4-D (batch, heads, seq, dim) operands into a buffer stored
  (batch, seq, heads, dim), the layout the exporter's Transpose + Reshape merge the heads into (that
  Reshape becomes a view, not a copy); otherwise into the executor's arena when it gives one.

Q and V are made C-contiguous and Kt the transposed view of a C-contiguous K (one small copy
each when the graph hands over a head-split view): those are the layouts oneDNN's brgemm
matmul takes; transposed views as exported (Q = Transpose(Reshape(X @ Wq))) fall back to its
slower gemm path. The scores buffer belongs to the bound kernel.

NaN: a NaN (or an inf giving one) among a row's scores makes numpy's softmax row all NaN;
oneDNN's softmax keeps only some entries NaN, but at least one, and ``S @ V`` then makes the
whole output row NaN, which is what numpy's path returns too (tests pin this).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.errors import OperandError
from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.bound_out import dest, finish
from pycann.kernels.providers.native_args import address, conform

_F32 = np.dtype(np.float32)


def _scores_pd(q_shape: tuple[int, ...], kt_shape: tuple[int, ...], kt_strides: tuple[int, ...],
               s_md: capi.MemoryDesc, scale: float, mask_md: capi.MemoryDesc | None) -> capi.PrimitiveDesc:
    """``S = (Q @ Kt) * scale [+ mask]``: the scale and the mask as post-ops."""
    ops: list[tuple[Any, ...]] = []
    if scale != 1.0:
        ops.append(("eltwise", capi.ELTWISE["linear"], float(scale), 0.0))
    if mask_md is not None:
        ops.append(("binary_add", mask_md))
    return capi_ops.matmul_pd(capi.MemoryDesc.dense(q_shape), capi.MemoryDesc.strided(kt_shape, kt_strides), None, s_md, capi_ops.Attr(ops))


def bound_attention(q_shape: Sequence[int], kt_shape: Sequence[int], v_shape: Sequence[int],
                    mask_shape: Sequence[int] | None, scale: float) -> Any:
    """A plan kernel ``k(inputs, attrs, out=None) -> [y]`` for FusedAttention (inputs Q, Kt, V
    [, mask]) with these static float32 shapes, all of one rank >= 3 (batch dims equal or 1:
    oneDNN broadcasts them; the mask broadcasts to the scores). With ``out`` (``k.writes_out``)
    Y is written there. None when the shapes do not fit or oneDNN rejects a primitive."""
    q_shape, kt_shape, v_shape = (tuple(int(d) for d in s) for s in (q_shape, kt_shape, v_shape))
    nd = len(q_shape)
    if nd < 3 or len(kt_shape) != nd or len(v_shape) != nd or 0 in q_shape + kt_shape + v_shape:
        return None
    m, d = q_shape[-2:]
    if kt_shape[-2] != d or v_shape[-2] != kt_shape[-1]:
        return None
    try:
        batch = tuple(int(b) for b in np.broadcast_shapes(q_shape[:-2], kt_shape[:-2], v_shape[:-2]))
    except ValueError:
        return None
    if any(b != 1 and b != t for s in (q_shape, kt_shape, v_shape) for b, t in zip(s[:-2], batch)):
        return None
    s_shape = batch + (m, kt_shape[-1])
    y_shape = batch + (m, v_shape[-1])
    # 4-D (batch, heads, seq, head dim): Y is stored (batch, seq, heads, head dim), the order the
    # exported graph's Transpose(0, 2, 1, 3) + Reshape merge the heads back in, so that Reshape is a
    # view instead of a copy (same brgemm speed for this strided destination)
    y_store = (y_shape[0], y_shape[2], y_shape[1], y_shape[3]) if nd == 4 else y_shape
    y_md_strides = (y_store[1] * y_store[2] * y_store[3], y_store[3], y_store[2] * y_store[3], 1) if nd == 4 \
        else capi.dense_strides(y_shape)
    mk = None
    if mask_shape is not None:
        mk = tuple(int(x) for x in mask_shape)
        if len(mk) > nd:
            return None
        mk = (1,) * (nd - len(mk)) + mk
        if any(a != 1 and a != b for a, b in zip(mk, s_shape)):
            return None
    k_shape = kt_shape[:-2] + (kt_shape[-1], kt_shape[-2])
    kst = capi.dense_strides(k_shape)
    kt_strides = kst[:-2] + (kst[-1], kst[-2])  # Kt as the transposed view of a dense K
    mask_md = None if mk is None else capi.MemoryDesc.dense(mk)
    try:
        s_md = capi.MemoryDesc.dense(s_shape)
        try:
            pd1 = _scores_pd(q_shape, kt_shape, kt_strides, s_md, scale, mask_md)
            pd1.fast_impl()
            mask_post = mask_md is not None
        except capi.DnnlError:  # a mask broadcast brgemm's binary post-op does not take: added by numpy
            pd1 = _scores_pd(q_shape, kt_shape, kt_strides, s_md, scale, None)
            mask_post = False
        pd2 = capi_ops.softmax_pd(s_md, s_md, nd - 1)
        y_md = capi.MemoryDesc.strided(y_shape, y_md_strides)
        pd3 = capi_ops.matmul_pd(s_md, capi.MemoryDesc.dense(v_shape), None, y_md, capi_ops.Attr())
        impl = " / ".join(pd.fast_impl() for pd in (pd1, pd2, pd3))
        scores = np.empty(s_shape, _F32)
        q_mem, k_mem, s_mem = capi.Memory(capi.MemoryDesc.dense(q_shape), 0), \
            capi.Memory(capi.MemoryDesc.strided(kt_shape, kt_strides), 0), capi.Memory(s_md, capi.ptr(scores))
        v_mem, y_mem = capi.Memory(capi.MemoryDesc.dense(v_shape), 0), capi.Memory(y_md, 0)
        args1 = [(capi.ARG_SRC, q_mem), (capi.ARG_WEIGHTS, k_mem), (capi.ARG_DST, s_mem)]
        m_mem = None
        if mask_post and mask_md is not None:
            m_mem = capi.Memory(mask_md, 0)
            args1.append((capi.arg_post_op_src1(1 if scale != 1.0 else 0), m_mem))
        mm1 = capi.Primitive(pd1, args1)
        sm = capi.Primitive(pd2, [(capi.ARG_SRC, s_mem), (capi.ARG_DST, s_mem)])
        mm2 = capi.Primitive(pd3, [(capi.ARG_SRC, s_mem), (capi.ARG_WEIGHTS, v_mem), (capi.ARG_DST, y_mem)])
    except capi.DnnlError:
        return None
    numpy_mask = mk is not None and m_mem is None
    lock = omp_fork.fork_safe(threading.Lock())
    swap = (*range(nd - 2), nd - 1, nd - 2)

    def kernel(inputs: Any, attrs: Any, out: Any = None) -> list[np.ndarray]:
        q, kt, v = inputs[0], inputs[1], inputs[2]
        mask = inputs[3] if len(inputs) > 3 else None
        if q.shape != q_shape or kt.shape != kt_shape or v.shape != v_shape:
            raise OperandError(f"FusedAttention bound for Q {q_shape}, Kt {kt_shape}, V {v_shape}; "
                             f"got {q.shape}, {kt.shape}, {v.shape}")
        q = q if q.dtype == _F32 and q.flags.c_contiguous else np.ascontiguousarray(q, dtype=_F32)
        k = kt.transpose(swap)
        k = k if k.dtype == _F32 and k.flags.c_contiguous else np.ascontiguousarray(k, dtype=_F32)
        v = v if v.dtype == _F32 and v.flags.c_contiguous else np.ascontiguousarray(v, dtype=_F32)
        if mk is not None and mask is None:
            raise OperandError(f"FusedAttention was bound with a mask of shape {list(mk)} but none was given")
        mask_c = None if mk is None or mask is None else conform("FusedAttention mask", mask, mk)  # mk: + leading 1s
        y = np.empty(y_store, _F32).transpose(0, 2, 1, 3) if nd == 4 else None
        y, o = (y, None if out is None else out[0]) if y is not None else dest(out, y_shape, (q, k, v))
        qp, kp = address("FusedAttention Q", q, q_shape), address("FusedAttention K", k, k_shape)
        vp = address("FusedAttention V", v, v_shape)
        mp = address("FusedAttention mask", mask_c, mk) if mask_c is not None and mk is not None else 0
        yp = address("FusedAttention Y", y, y_shape, strides=y.strides if nd == 4 else None)
        with lock:
            q_mem.set(qp)
            k_mem.set(kp)
            if m_mem is not None and mp:
                m_mem.set(mp)
            mm1.execute()
            if numpy_mask and mask_c is not None:
                np.add(scores, mask_c.reshape(mk), out=scores)
            sm.execute()
            v_mem.set(vp)
            y_mem.set(yp)
            mm2.execute()
        return finish(y, o)

    # (4-D: computed in its own buffer, then copied into the arena view)
    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, keep=(scores, mm1, sm, mm2), impl=impl)
