"""Minimal ctypes bindings to oneDNN v2.x's C API, for the one thing v3 dropped on CPUs: the
Winograd convolution (``dnnl_convolution_winograd``: the JIT ``wino_2x3`` / ``wino_4x3``
AVX-512 kernels, removed in oneDNN v3.0).

The library is ``libdnnl.so.2`` from the ``onednn-cpu-gomp==2022.2.1`` wheel (oneDNN v2.6). That
wheel has the same distribution name as the v3 one the ``kernels`` extra installs, so pip cannot
install both; ``scripts/fetch_onednn2.py`` unpacks its library into ``~/.cache/pycann/onednn2/``
(or set ``$PYCANN_DNNL2_LIB``). Both libraries use the same OpenMP runtime (libgomp), so they
share one thread pool; each is loaded ``RTLD_LOCAL`` (ctypes' default), so their symbols never mix.

Only what ``onednn_wino`` needs: memory descriptors (v2: plain structs, held in ctypes buffers),
convolution forward-inference with eltwise post-ops, reorders, memories over numpy buffers,
primitive execution. Every status other than success raises ``DnnlError``.

Enum values (oneDNN v2.6 ``include/oneapi/dnnl/dnnl_types.h``; struct sizes from the same
headers, checked at load by a descriptor round trip):

=======================================  ========  ======================================
name                                     value     note
=======================================  ========  ======================================
dnnl_f32 / dnnl_cpu / stream in-order    3 / 1 / 1 as in v3
dnnl_format_tag_any / dnnl_nChw16c       1 / 69    dnnl_format_tag_t
dnnl_forward_inference                   96        dnnl_prop_kind_t
dnnl_convolution_winograd                0x2       dnnl_alg_kind_t
dnnl_eltwise_relu / tanh / logistic      0x1f / 0x2f / 0xaf   (v3 renumbered these)
dnnl_eltwise_clip / linear               0xff / 0x7f
dnnl_query_impl_info_str                 8         dnnl_query_t
dnnl_query_src_md / weights_md / dst_md  129 / 131 / 133
dnnl_query_scratchpad_md                 136
dnnl_scratchpad_mode_user / ARG_SCRATCHPAD  1 / 80
sizeof(dnnl_memory_desc_t)               696       ndims at 0, dims (int64[12]) at 8, data_type at 104
sizeof(dnnl_convolution_desc_t)          5976
=======================================  ========  ======================================
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from pycann import config
from pycann.kernels.providers import omp_fork
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.onednn_capi import DnnlError, ExecArg, Version, check, dims
from pycann.kernels.providers.onednn_capi_lib import open_library

F32 = 3
FORMAT_ANY = 1
FORWARD_INFERENCE = 96
CONVOLUTION_WINOGRAD = 0x2
# v2 eltwise algorithms by the v3 name ``onednn_capi.ELTWISE`` uses (only those whose alpha / beta
# mean the same in both versions)
ELTWISE_V2 = {"relu": 0x1F, "tanh": 0x2F, "logistic": 0xAF, "clip": 0xFF, "linear": 0x7F}
QUERY_IMPL_INFO_STR = 8
QUERY_SRC_MD, QUERY_WEIGHTS_MD, QUERY_DST_MD, QUERY_SCRATCHPAD_MD = 129, 131, 133, 136
SCRATCHPAD_MODE_USER = 1
ARG_SCRATCHPAD = 80
MD_SIZE = 696
OP_DESC_SIZE = 5976

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I = ctypes.c_int
_F = ctypes.c_float
Dims = type(dims(()))
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "dnnl_version": (),
    "dnnl_engine_create": (_PP, _I, ctypes.c_size_t),
    "dnnl_stream_create": (_PP, _P, ctypes.c_uint),
    "dnnl_stream_wait": (_P,),
    "dnnl_memory_desc_init_by_strides": (_P, _I, Dims, _I, Dims),
    "dnnl_memory_desc_init_by_tag": (_P, _I, Dims, _I, _I),
    "dnnl_memory_desc_get_size": (_P,),
    "dnnl_memory_create": (_PP, _P, _P, _P),
    "dnnl_memory_set_data_handle": (_P, _P),
    "dnnl_memory_destroy": (_P,),
    "dnnl_primitive_attr_create": (_PP,),
    "dnnl_primitive_attr_destroy": (_P,),
    "dnnl_primitive_attr_set_post_ops": (_P, _P),
    "dnnl_primitive_attr_set_scratchpad_mode": (_P, _I),
    "dnnl_post_ops_create": (_PP,),
    "dnnl_post_ops_destroy": (_P,),
    "dnnl_post_ops_append_eltwise": (_P, _F, _I, _F, _F),
    "dnnl_dilated_convolution_forward_desc_init": (_P, _I, _I, _P, _P, _P, _P, Dims, Dims, Dims, Dims),
    "dnnl_primitive_desc_create": (_PP, _P, _P, _P, _P),
    "dnnl_primitive_desc_query": (_P, _I, _I, _P),
    "dnnl_primitive_desc_query_md": (_P, _I, _I),
    "dnnl_primitive_desc_destroy": (_P,),
    "dnnl_reorder_primitive_desc_create": (_PP, _P, _P, _P, _P, _P),
    "dnnl_primitive_create": (_PP, _P),
    "dnnl_primitive_execute": (_P, _P, _I, ctypes.POINTER(ExecArg)),
    "dnnl_primitive_destroy": (_P,),
}
_RESTYPES: dict[str, Any] = {"dnnl_memory_desc_get_size": ctypes.c_size_t, "dnnl_primitive_desc_query_md": _P,
                             "dnnl_version": ctypes.POINTER(Version)}

_lib: Any = None
_engine: Any = None
_stream: Any = None
_synchronous = False


def library_candidates() -> list[str]:
    """Paths tried for ``libdnnl.so.2``, in order: ``$PYCANN_DNNL2_LIB``, then the cache
    ``scripts/fetch_onednn2.py`` fills (``$PYCANN_CACHE`` or ``~/.cache/pycann``)."""
    env = config.dnnl2_lib()
    cache = str(config.cache_dir())
    return ([env] if env else []) + [os.path.join(cache, "onednn2", "libdnnl.so.2")]


_load_lock = threading.Lock()  # (two threads loading their first models at once load it once)


def load() -> Any:
    """Load libdnnl v2 once (raises OSError when missing or not 2.x); create engine and stream."""
    global _lib, _engine, _stream, _synchronous
    if _lib is None:
        with _load_lock:
            if _lib is None:
                try:
                    lib, eng, strm, sync = open_library(library_candidates(), 2, _SIGNATURES, _RESTYPES)
                except OSError as e:
                    raise OSError(f"{e} (run scripts/fetch_onednn2.py)") from None
                _lib, _engine, _stream, _synchronous = lib, eng, strm, sync
                _self_check()
    return _lib


def version() -> tuple[int, int, int]:
    """(major, minor, patch) of the loaded library."""
    v = load().dnnl_version().contents
    return v.major, v.minor, v.patch


class MemoryDesc:
    """A v2 ``dnnl_memory_desc_t``: a struct, owned here as a ctypes buffer (``handle`` points at it)."""

    def __init__(self) -> None:
        self.buf = ctypes.create_string_buffer(MD_SIZE)
        self.handle = ctypes.addressof(self.buf)

    @classmethod
    def strided(cls, shape: Sequence[int], strides: Sequence[int]) -> MemoryDesc:
        """f32 descriptor of logical ``shape`` with ``strides`` in elements."""
        md = cls()
        check(load().dnnl_memory_desc_init_by_strides(md.handle, len(shape), dims(shape), F32, dims(strides)),
              "dnnl_memory_desc_init_by_strides")
        return md

    @classmethod
    def tagged(cls, shape: Sequence[int], tag: int) -> MemoryDesc:
        """f32 descriptor with a format tag (``FORMAT_ANY``: the primitive picks)."""
        md = cls()
        check(load().dnnl_memory_desc_init_by_tag(md.handle, len(shape), dims(shape), F32, tag),
              "dnnl_memory_desc_init_by_tag")
        return md

    @classmethod
    def copy_of(cls, address: int) -> MemoryDesc:
        """An owned copy of a descriptor the library returned (``PrimitiveDesc.query_md``)."""
        md = cls()
        ctypes.memmove(md.handle, address, MD_SIZE)
        return md

    def ndims(self) -> int:
        """Number of dimensions (the struct's first field)."""
        return int(ctypes.c_int.from_buffer(self.buf, 0).value)

    def dims(self) -> tuple[int, ...]:
        """Logical dimensions (``dims`` at offset 8)."""
        return tuple(int(v) for v in (ctypes.c_int64 * 12).from_buffer(self.buf, 8)[: self.ndims()])

    def data_type(self) -> int:
        """``dnnl_data_type_t`` (offset 104)."""
        return int(ctypes.c_int.from_buffer(self.buf, 104).value)

    def size(self) -> int:
        """Bytes a memory object of this descriptor needs."""
        return int(_lib.dnnl_memory_desc_get_size(self.handle))


class _V2:
    """Mixin: ``onednn_capi``'s memory / primitive classes bound to this module's library."""

    _api = sys.modules[__name__]


class Memory(_V2, capi.Memory):
    """A ``dnnl_memory_t`` over a caller's buffer (``ptr``) or, without one, library-owned."""


class Primitive(_V2, capi.Primitive):
    """A ``dnnl_primitive_t`` with a fixed argument list (``(DNNL_ARG_*, Memory)`` pairs, bound once)."""


class PrimitiveDesc(_V2, capi.PrimitiveDesc):
    """A ``dnnl_primitive_desc_t`` (owned); its descriptors are v2 structs."""

    def query_md(self, what: int) -> MemoryDesc:  # type: ignore[override]
        """A copy of the descriptor the primitive chose for ``what`` (``QUERY_*_MD``)."""
        address = _lib.dnnl_primitive_desc_query_md(self.handle, what, 0)
        if not address:
            raise DnnlError(f"dnnl_primitive_desc_query_md({what})", 2)
        return MemoryDesc.copy_of(address)


def winograd_pd(src: MemoryDesc, weights: MemoryDesc, bias: MemoryDesc | None, dst: MemoryDesc,
                pads_begin: Sequence[int], pads_end: Sequence[int],
                eltwise: Sequence[tuple[str, float, float]] = ()) -> PrimitiveDesc:
    """Forward-inference Winograd convolution descriptor (stride 1, no dilation), ``eltwise``
    post-ops ``(v3 name, alpha, beta)`` applied in order, scratchpad passed by the caller
    (``ARG_SCRATCHPAD``, size from ``QUERY_SCRATCHPAD_MD``): v2.6's library-managed, thread-local
    scratchpad crashed its ``wino_4x3`` kernel run from a thread other than the main one. Raises
    ``DnnlError`` (unimplemented) when oneDNN has no Winograd kernel for these shapes, layouts or
    post-ops on this CPU."""
    lib = load()
    op = ctypes.create_string_buffer(OP_DESC_SIZE)
    nsp = len(pads_begin)
    check(lib.dnnl_dilated_convolution_forward_desc_init(
        op, FORWARD_INFERENCE, CONVOLUTION_WINOGRAD, src.handle, weights.handle,
        None if bias is None else bias.handle, dst.handle, dims([1] * nsp), dims([0] * nsp), dims(pads_begin),
        dims(pads_end)), "dnnl_dilated_convolution_forward_desc_init")
    attr = _P()
    check(lib.dnnl_primitive_attr_create(ctypes.byref(attr)), "dnnl_primitive_attr_create")
    try:
        check(lib.dnnl_primitive_attr_set_scratchpad_mode(attr, SCRATCHPAD_MODE_USER),
              "dnnl_primitive_attr_set_scratchpad_mode")
        if eltwise:
            po = _P()
            check(lib.dnnl_post_ops_create(ctypes.byref(po)), "dnnl_post_ops_create")
            try:
                for name, alpha, beta in eltwise:
                    if name not in ELTWISE_V2:
                        raise DnnlError(f"eltwise {name} post-op (not mapped to oneDNN v2)", 3)
                    check(lib.dnnl_post_ops_append_eltwise(po, 1.0, ELTWISE_V2[name], alpha, beta),
                          "dnnl_post_ops_append_eltwise")
                check(lib.dnnl_primitive_attr_set_post_ops(attr, po), "dnnl_primitive_attr_set_post_ops")
            finally:
                lib.dnnl_post_ops_destroy(po)
        h = _P()
        check(lib.dnnl_primitive_desc_create(ctypes.byref(h), op, attr, _engine, None), "dnnl_primitive_desc_create")
    finally:
        lib.dnnl_primitive_attr_destroy(attr)
    return PrimitiveDesc(h)


def reorder_pd(src: MemoryDesc, dst: MemoryDesc) -> PrimitiveDesc:
    """Reorder (layout conversion) primitive descriptor, CPU to CPU."""
    return capi.reorder_pd(src, dst, sys.modules[__name__])  # type: ignore[return-value]


def reorder(src: MemoryDesc, src_ptr: int, dst: MemoryDesc, *, keep: Any = None,
            lock: AbstractContextManager[Any] | None = None) -> Memory:
    """A library-owned memory of layout ``dst`` holding the data at ``src_ptr`` (layout ``src``);
    queued on a plan build's helper thread as ``onednn_capi_ops.reorder`` says (``keep``, ``lock``)."""
    return capi_ops.reorder(src, src_ptr, dst, sys.modules[__name__], keep=keep, lock=lock)  # type: ignore[return-value]


def _self_check() -> None:
    """The struct layout this module assumes, against the loaded library (raises)."""
    md = MemoryDesc.strided((2, 3, 4, 5), (60, 1, 15, 3))
    if md.ndims() != 4 or md.dims() != (2, 3, 4, 5) or md.data_type() != F32 or md.size() != 480:
        raise DnnlError("self_check: v2 memory descriptor layout", 2)


# the locks anew in a forked child (a fork beside a loading or running GoogLeNet: the child's next
# load waited for the parent's thread)
omp_fork.renew_in_child(globals(), _load_lock=threading.Lock)
