"""What the providers build with the oneDNN v3 bindings: post-op attributes (``Attr``), one
primitive-descriptor constructor per operation (``convolution_pd``, ``matmul_pd``, ``softmax_pd``,
``layer_normalization_pd``, ``pooling_pd``, ``resampling_pd``) with their algorithm constants, and
``reorder``, a weight packed into a library-owned memory (queued while a plan builds).

Separate from ``onednn_capi`` (the library, memory descriptors, memories and primitives): that is the
object model every caller shares, this the per-operation vocabulary on top of it. The engine is read
as ``capi._engine`` when a descriptor is made, after ``capi.load()`` has set it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from pycann.kernels.providers import background_pack
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers.onednn_capi import (
    Memory,
    MemoryDesc,
    PrimitiveDesc,
    _Owned,
    check,
    dims,
    load,
    reorder_pd,
)
from pycann.kernels.providers.onednn_capi_table import (
    _P,
    ARG_FROM,
    ARG_TO,
    BINARY_ADD,
    CONVOLUTION_DIRECT,
    DECONVOLUTION_DIRECT,
    FORWARD_INFERENCE,
)


class Attr(_Owned):
    """Primitive attributes carrying a post-op chain.

    ``ops``: ``("eltwise", alg, alpha, beta)``, ``("sum", scale)``, ``("binary_add", md)`` or
    ``("binary", dnnl_binary alg, md)``.
    """

    _destroy = "dnnl_primitive_attr_destroy"

    def __init__(self, ops: Sequence[tuple[Any, ...]] = ()) -> None:
        lib = load()
        h = _P()
        check(lib.dnnl_primitive_attr_create(ctypes.byref(h)), "dnnl_primitive_attr_create")
        super().__init__(h)
        if not ops:
            return
        po = _P()
        check(lib.dnnl_post_ops_create(ctypes.byref(po)), "dnnl_post_ops_create")
        try:
            for op in ops:
                if op[0] == "eltwise":
                    check(lib.dnnl_post_ops_append_eltwise(po, op[1], op[2], op[3]), "dnnl_post_ops_append_eltwise")
                elif op[0] == "sum":
                    check(lib.dnnl_post_ops_append_sum(po, op[1], 0, 0), "dnnl_post_ops_append_sum")
                elif op[0] in ("binary_add", "binary"):  # ("binary", alg, md): any dnnl_binary_* kind
                    alg, md = (BINARY_ADD, op[1]) if op[0] == "binary_add" else (op[1], op[2])
                    check(lib.dnnl_post_ops_append_binary(po, alg, md.handle), "dnnl_post_ops_append_binary")
                else:
                    raise ValueError(f"unknown post-op {op[0]!r}")
            check(lib.dnnl_primitive_attr_set_post_ops(h, po), "dnnl_primitive_attr_set_post_ops")
        finally:
            lib.dnnl_post_ops_destroy(po)


def convolution_pd(src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None, dst: MemoryDesc,
                   strides: Sequence[int], dilates: Sequence[int], pad_l: Sequence[int], pad_r: Sequence[int],
                   attr: Attr, *, deconvolution: bool = False) -> PrimitiveDesc:
    """Forward-inference (de)convolution primitive descriptor (direct algorithm).

    ``dilates`` use oneDNN's convention (0 = dense), i.e. ONNX dilation - 1."""
    lib = load()
    name = f"dnnl_{'de' if deconvolution else ''}convolution_forward_primitive_desc_create"
    h = _P()
    check(getattr(lib, name)(ctypes.byref(h), capi._engine, FORWARD_INFERENCE,
                             DECONVOLUTION_DIRECT if deconvolution else CONVOLUTION_DIRECT, src.handle,
                             weights.handle, None if bias is None else bias.handle, dst.handle, dims(strides),
                             dims(dilates), dims(pad_l), dims(pad_r), attr.handle), name)
    return PrimitiveDesc(h)


def matmul_pd(src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None, dst: MemoryDesc,
              attr: Attr) -> PrimitiveDesc:
    """Matmul primitive descriptor: ``dst = src @ weights (+ bias)`` then ``attr``'s post-ops.

    All descriptors have the same rank; batch dims of size 1 broadcast (src/weights), bias dims
    of size 1 broadcast against ``dst``."""
    h = _P()
    check(load().dnnl_matmul_primitive_desc_create(ctypes.byref(h), capi._engine, src.handle, weights.handle,
                                                   None if bias is None else bias.handle, dst.handle, attr.handle),
          "dnnl_matmul_primitive_desc_create")
    return PrimitiveDesc(h)


RUNTIME_DIM = -(2**63)  # DNNL_RUNTIME_DIM_VAL (INT64_MIN, dnnl_types.h): a dim or stride given per execution

SOFTMAX_ACCURATE = 0x30000  # dnnl_alg_kind_t dnnl_softmax_accurate (dnnl_types.h, v3.2)


def softmax_pd(src: MemoryDesc, dst: MemoryDesc, axis: int) -> PrimitiveDesc:
    """Softmax (accurate: max-subtracted) forward-inference primitive descriptor over ``axis``."""
    h = _P()
    check(load().dnnl_softmax_forward_primitive_desc_create(ctypes.byref(h), capi._engine, FORWARD_INFERENCE,
                                                            SOFTMAX_ACCURATE, src.handle, dst.handle,
                                                            ctypes.c_int(axis), None),
          "dnnl_softmax_forward_primitive_desc_create")
    return PrimitiveDesc(h)


def layer_normalization_pd(src: MemoryDesc, dst: MemoryDesc, epsilon: float, flags: int) -> PrimitiveDesc:
    """Layer normalisation (over the last logical dim) forward-inference primitive descriptor;
    statistics computed per call (no ``stat_desc``); ``flags``: ``USE_SCALE | USE_SHIFT``."""
    h = _P()
    check(load().dnnl_layer_normalization_forward_primitive_desc_create(
        ctypes.byref(h), capi._engine, FORWARD_INFERENCE, src.handle, dst.handle, None, ctypes.c_float(epsilon),
        ctypes.c_uint(flags), None), "dnnl_layer_normalization_forward_primitive_desc_create")
    return PrimitiveDesc(h)


def pooling_pd(alg: int, src: MemoryDesc, dst: MemoryDesc, strides: Sequence[int], kernel: Sequence[int],
               dilation: Sequence[int], pad_l: Sequence[int], pad_r: Sequence[int]) -> PrimitiveDesc:
    """Pooling forward-inference primitive descriptor (``POOLING[...]`` algorithm); ``dilation``
    in oneDNN's convention (0 = dense). Inference needs no workspace."""
    h = _P()
    check(load().dnnl_pooling_forward_primitive_desc_create(
        ctypes.byref(h), capi._engine, FORWARD_INFERENCE, alg, src.handle, dst.handle, dims(strides), dims(kernel),
        dims(dilation), dims(pad_l), dims(pad_r), None), "dnnl_pooling_forward_primitive_desc_create")
    return PrimitiveDesc(h)


RESAMPLING_NEAREST = 0x2FFF0  # dnnl_alg_kind_t dnnl_resampling_nearest (dnnl_types.h, v3.2)


def resampling_pd(alg: int, src: MemoryDesc, dst: MemoryDesc) -> PrimitiveDesc:
    """Resampling forward-inference primitive descriptor; the factors are the ratio of ``dst``'s
    spatial dims to ``src``'s (none passed)."""
    h = _P()
    check(load().dnnl_resampling_forward_primitive_desc_create(ctypes.byref(h), capi._engine, FORWARD_INFERENCE, alg,
                                                              None, src.handle, dst.handle, None),
          "dnnl_resampling_forward_primitive_desc_create")
    return PrimitiveDesc(h)



def reorder(src: Any, src_ptr: int, dst: Any, api: Any = None, *, keep: Any = None,
            lock: AbstractContextManager[Any] | None = None) -> Memory:
    """A library-owned memory of layout ``dst`` holding the data at ``src_ptr`` (layout ``src``).

    Inside a ``background_pack.packing()`` block of the calling thread (a plan build) the reorder
    runs on the block's helper thread, holding ``keep`` (the array at ``src_ptr``) and ``lock``
    (held around the execute) until it ran: the memory's ``ticket`` is then set, and every
    ``Primitive`` bound to the memory waits for it before it first executes."""
    api = api or capi
    out = api.Memory(dst)
    prim = api.Primitive(reorder_pd(src, dst, api), [(ARG_FROM, api.Memory(src, src_ptr)), (ARG_TO, out)])
    if lock is None:
        job = prim.execute
    else:
        def job() -> None:
            with lock:
                prim.execute()
    ticket = background_pack.submit(job, keep)
    if not ticket.done() or ticket.error is not None:  # (a failed one stays: readers raise its error)
        out.ticket = ticket
    return out  # type: ignore[no-any-return]
