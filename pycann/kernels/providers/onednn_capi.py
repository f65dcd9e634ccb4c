"""Minimal ctypes bindings to oneDNN's C API (v3.x), as shipped by the ``onednn-cpu-gomp`` wheel.

Only what pycann's ``onednn`` provider needs: the CPU engine and an in-order stream, memory
descriptors (with explicit strides for user arrays, format ``any`` where a primitive chooses),
memory objects over numpy buffers, convolution / deconvolution forward and matmul primitives
with post-ops, reorders, and primitive execution. Every ``dnnl_status_t`` other than success raises
``DnnlError`` naming the call. Nothing here imports torch.

The library is looked up in ``$PYCANN_DNNL_LIB``, then ``<sys.prefix>/lib`` and the user base's
``lib`` (where pip puts the wheel's data files), and must report major version 3.

Enum values, structs and the function signature table: ``onednn_capi_table``; finding and opening
the library: ``onednn_capi_lib``; post-op attributes and the per-operation descriptors built on
these objects: ``onednn_capi_ops``.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.providers import background_pack, omp_fork
from pycann.kernels.providers.onednn_capi_lib import check, library_candidates, open_library
from pycann.kernels.providers.onednn_capi_table import (
    _P,
    ARG_BIAS,
    ARG_DST,
    ARG_FROM,
    ARG_SCALE,
    ARG_SHIFT,
    ARG_SRC,
    ARG_TO,
    ARG_WEIGHTS,
    BF16,
    BINARY_ADD,
    CONVOLUTION_DIRECT,
    DECONVOLUTION_DIRECT,
    ELTWISE,
    ENGINE_CPU,
    F16,
    F32,
    FORMAT_ANY,
    FORWARD_INFERENCE,
    FPMATH_STRICT,
    LAST_IMPL_REACHED,
    MAX_NDIMS,
    MEMORY_ALLOCATE,
    POOLING,
    QUERY_DATA_TYPE,
    QUERY_DIMS,
    QUERY_DST_MD,
    QUERY_IMPL_INFO_STR,
    QUERY_NDIMS_S32,
    QUERY_WEIGHTS_MD,
    STREAM_DEFAULT,
    SUCCESS,
    USE_SCALE,
    USE_SHIFT,
    Dims,
    DnnlError,
    ExecArg,
    Version,
    arg_post_op_src1,
)
from pycann.kernels.providers.onednn_capi_table import (
    RESTYPES as _RESTYPES,
)
from pycann.kernels.providers.onednn_capi_table import (
    SIGNATURES as _SIGNATURES,
)

# the constants and structs of onednn_capi_table are part of this module's interface (capi.ARG_SRC, ...)
__all__ = [
    "ARG_BIAS", "ARG_DST", "ARG_FROM", "ARG_SCALE", "ARG_SHIFT", "ARG_SRC", "ARG_TO", "ARG_WEIGHTS",
    "BINARY_ADD", "CONVOLUTION_DIRECT", "DECONVOLUTION_DIRECT", "Dims", "DnnlError", "ELTWISE", "ENGINE_CPU",
    "ExecArg", "BF16", "F16", "F32", "FORMAT_ANY", "FORWARD_INFERENCE", "LAST_IMPL_REACHED", "MAX_NDIMS",
    "MEMORY_ALLOCATE", "Memory", "MemoryDesc", "POOLING", "Primitive", "PrimitiveDesc", "QUERY_DATA_TYPE",
    "QUERY_DIMS", "Reorder", "QUERY_DST_MD", "QUERY_IMPL_INFO_STR", "QUERY_NDIMS_S32", "QUERY_WEIGHTS_MD",
    "STREAM_DEFAULT", "SUCCESS", "USE_SCALE", "USE_SHIFT", "Version", "arg_post_op_src1", "check",
    "dense_strides", "dims", "engine", "exec_args", "layout_strides", "library_candidates", "load",
    "open_library", "ptr", "reorder_pd", "self_check", "stream", "version",
]

_lib: Any = None
_engine: Any = None
_stream: Any = None
_synchronous = False


_load_lock = threading.Lock()  # (two threads loading their first models at once load it once)


def load() -> Any:
    """Load libdnnl once (raises OSError when missing or not v3); create the engine and stream."""
    global _lib, _engine, _stream, _synchronous
    if _lib is None:
        with _load_lock:
            if _lib is None:
                lib, eng, strm, sync = open_library(library_candidates(), 3, _SIGNATURES, _RESTYPES)
                # float32 primitives compute in float32 whatever ONEDNN_DEFAULT_FPMATH_MODE says: set
                # to BF16 (Intel's advice for AMX with PyTorch), it made oneDNN run pycann's float32
                # convolutions and matmuls in bf16 on AMX CPUs (error 1e-2 where ONNX Runtime's is
                # 1e-6). Reduced precision is the precision modes' business (docs/precision.md).
                check(lib.dnnl_set_default_fpmath_mode(FPMATH_STRICT), "dnnl_set_default_fpmath_mode")
                _engine, _stream, _synchronous = eng, strm, sync
                _lib = lib  # last: a thread that sees it set finds the engine and stream too
    return _lib


def version() -> tuple[int, int, int]:
    """(major, minor, patch) of the loaded library."""
    v = load().dnnl_version().contents
    return v.major, v.minor, v.patch


def engine() -> Any:
    """The CPU engine (index 0)."""
    load()
    return _engine


def stream() -> Any:
    """The in-order CPU stream all primitives run on."""
    load()
    return _stream




def ptr(a: np.ndarray) -> int:
    """The data address of a numpy array (what ``Memory`` and ``Memory.set`` take)."""
    return a.__array_interface__["data"][0]  # type: ignore[no-any-return]


def dense_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-contiguous array of ``shape`` (a size-0 dim counts as 1, so strides stay valid)."""
    strides: list[int] = []
    inner = 1
    for d in reversed(shape):
        strides.insert(0, inner)
        inner *= max(int(d), 1)
    return tuple(strides)


def layout_strides(shape: Sequence[int], channels_last: bool) -> tuple[int, ...]:
    """Element strides of a dense array of logical ``shape`` (N, C, *spatial): channels-last
    (NHWC / NDHWC) when asked and the rank has spatial dims, else C-contiguous."""
    if not channels_last or len(shape) < 3:
        return dense_strides(shape)
    order = [0, *range(2, len(shape)), 1]
    st = [0] * len(shape)
    inner = 1
    for ax in reversed(order):
        st[ax] = inner
        inner *= max(int(shape[ax]), 1)
    return tuple(st)


def dims(values: Sequence[int]) -> Any:
    """A ``dnnl_dims_t`` (zero-filled past ``len(values)``)."""
    return Dims(*[int(v) for v in values])


class _Owned:
    """A handle destroyed by ``dnnl_<kind>_destroy`` when this object goes away.

    ``_api`` is the binding module whose library, engine and stream the object uses (its
    ``load()``, ``_lib``, ``_engine``, ``_stream``, ``_synchronous``): this one, or ``onednn2_capi``
    (oneDNN v2, whose memory / primitive calls have the same signatures) in its subclasses."""

    _destroy = ""
    _api: Any = sys.modules[__name__]
    # (an object whose ``__init__`` raised before setting it, e.g. interrupted by a signal handler's
    # exception: ``__del__`` then has nothing to destroy, rather than an AttributeError on stderr)
    handle: Any = None

    def __init__(self, handle: Any) -> None:
        # the address as a plain int (None for NULL): the functions' argtypes take it as void*, and an
        # int is no object for the cyclic GC to walk. A shape-generic plan that bound 84 OCR shapes
        # held ~25,000 c_void_p handles, and each full collection walked them (40-100 ms pauses)
        self.handle = handle.value if isinstance(handle, ctypes.c_void_p) else handle

    def __del__(self) -> None:
        lib = self._api._lib
        if self.handle and lib is not None and self._destroy:
            try:
                getattr(lib, self._destroy)(self.handle)
            except Exception:  # pragma: no cover - interpreter shutdown
                pass
            self.handle = None


class MemoryDesc(_Owned):
    """A ``dnnl_memory_desc_t`` (owned)."""

    _destroy = "dnnl_memory_desc_destroy"

    @classmethod
    def strided(cls, shape: Sequence[int], strides: Sequence[int], dt: int = F32) -> MemoryDesc:
        """Descriptor of logical ``shape`` with ``strides`` in elements (``dt``: dnnl_data_type_t, f32)."""
        h = _P()
        check(load().dnnl_memory_desc_create_with_strides(ctypes.byref(h), len(shape), dims(shape), dt,
                                                          dims(strides)), "dnnl_memory_desc_create_with_strides")
        return cls(h)

    @classmethod
    def dense(cls, shape: Sequence[int]) -> MemoryDesc:
        """f32 descriptor of a C-contiguous array of ``shape``."""
        return cls.strided(shape, dense_strides(shape))

    @classmethod
    def of(cls, a: np.ndarray, shape: Sequence[int] | None = None) -> MemoryDesc:
        """Descriptor of a float32 numpy array exactly as laid out (its strides)."""
        return cls.strided(a.shape if shape is None else shape, [s // a.itemsize for s in a.strides])

    @classmethod
    def any(cls, shape: Sequence[int], dt: int = F32) -> MemoryDesc:
        """Descriptor with format tag ``any`` (the primitive picks the layout); ``dt`` defaults to f32."""
        h = _P()
        check(load().dnnl_memory_desc_create_with_tag(ctypes.byref(h), len(shape), dims(shape), dt, FORMAT_ANY),
              "dnnl_memory_desc_create_with_tag")
        return cls(h)

    @classmethod
    def clone(cls, handle: Any) -> MemoryDesc:
        """An owned copy of a borrowed descriptor (e.g. from ``PrimitiveDesc.query_md``)."""
        h = _P()
        check(load().dnnl_memory_desc_clone(ctypes.byref(h), handle), "dnnl_memory_desc_clone")
        return cls(h)

    def _query(self, what: int, ctype: Any) -> Any:
        r = ctype()
        check(_lib.dnnl_memory_desc_query(self.handle, what, ctypes.byref(r)), "dnnl_memory_desc_query")
        return r

    def ndims(self) -> int:
        """Number of dimensions."""
        return int(self._query(QUERY_NDIMS_S32, ctypes.c_int).value)

    def data_type(self) -> int:
        """``dnnl_data_type_t`` value."""
        return int(self._query(QUERY_DATA_TYPE, ctypes.c_int).value)

    def dims(self) -> tuple[int, ...]:
        """Logical dimensions."""
        p = self._query(QUERY_DIMS, ctypes.POINTER(Dims))
        return tuple(int(v) for v in p.contents[: self.ndims()])

    def size(self) -> int:
        """Bytes a memory object of this descriptor needs."""
        return int(_lib.dnnl_memory_desc_get_size(self.handle))

    def equals(self, other: MemoryDesc) -> bool:
        """Same layout and type (``dnnl_memory_desc_equal``)."""
        return bool(_lib.dnnl_memory_desc_equal(self.handle, other.handle))


class Memory(_Owned):
    """A ``dnnl_memory_t`` on the CPU engine: over a caller's buffer (pointer), or, with no
    pointer, a buffer the library allocates (``DNNL_MEMORY_ALLOCATE``) and owns."""

    _destroy = "dnnl_memory_destroy"

    def __init__(self, md: Any, ptr: int | None = None, *, keep_md: bool = True) -> None:
        h = _P()
        api = self._api
        check(api.load().dnnl_memory_create(ctypes.byref(h), md.handle, api._engine,
                                            MEMORY_ALLOCATE if ptr is None else ptr), "dnnl_memory_create")
        super().__init__(h)
        # ``md`` for callers that read it back (``Reorder``); oneDNN keeps its own copy, so a memory
        # made with ``keep_md=False`` holds one Python object less (conv plans made per input shape)
        self.md: Any = md if keep_md else None
        self._set = api._lib.dnnl_memory_set_data_handle
        # a packing still queued on a plan build's helper thread (``reorder``): primitives wait for it
        self.ticket: background_pack.Ticket | None = None

    def set(self, ptr: int) -> None:
        """Point this memory at another buffer (``dnnl_memory_set_data_handle``)."""
        check(self._set(self.handle, ptr), "dnnl_memory_set_data_handle")



class PrimitiveDesc(_Owned):
    """A ``dnnl_primitive_desc_t`` (owned)."""

    _destroy = "dnnl_primitive_desc_destroy"

    def query_md(self, what: int) -> MemoryDesc:
        """An owned copy of the descriptor the primitive chose for ``what`` (``QUERY_*_MD``)."""
        h = _lib.dnnl_primitive_desc_query_md(self.handle, what, 0)
        if not h:
            raise DnnlError(f"dnnl_primitive_desc_query_md({what})", 2)
        return MemoryDesc.clone(h)

    _impl: str | None = None  # ``impl_info``, remembered until ``next_impl``

    def next_impl(self) -> bool:
        """Switch to the next implementation oneDNN offers for this operation; False at the end
        (``dnnl_last_impl_reached``; the descriptor is then unusable: recreate it)."""
        self._impl = None
        st = _lib.dnnl_primitive_desc_next_impl(self.handle)
        if st == LAST_IMPL_REACHED:
            return False
        check(st, "dnnl_primitive_desc_next_impl")
        return True

    def impl_info(self) -> str:
        """The implementation name oneDNN picked (e.g. ``brg_conv_fwd:avx2``); asked once per
        implementation (a conv plan asks when it picks one and again when it checks it: ~2.5 us each)."""
        impl = self._impl
        if impl is None:
            s = ctypes.c_char_p()
            check(self._api._lib.dnnl_primitive_desc_query(self.handle, QUERY_IMPL_INFO_STR, 0, ctypes.byref(s)),
                  "dnnl_primitive_desc_query")
            impl = self._impl = (s.value or b"").decode()
        return impl

    def fast_impl(self) -> str:
        """``impl_info()``, raising ``DnnlError`` (unimplemented) when oneDNN offers only its
        reference loops for this operation: they run 100-1000x slower than numpy, so every caller
        keeps its own kernel instead."""
        impl = self.impl_info()
        if "ref" in impl.replace("+", ":").split(":"):
            raise DnnlError(f"oneDNN offers only its reference implementation ({impl})", 3)
        return impl


def reorder_pd(src: Any, dst: Any, api: Any = None) -> PrimitiveDesc:
    """Reorder (layout conversion) primitive descriptor, CPU to CPU (``api``: the binding module,
    this one by default; ``onednn2_capi`` for v2 descriptors: the call is the same in both)."""
    api = api or sys.modules[__name__]
    h = _P()
    check(api.load().dnnl_reorder_primitive_desc_create(ctypes.byref(h), src.handle, api._engine, dst.handle,
                                                        api._engine, None), "dnnl_reorder_primitive_desc_create")
    return api.PrimitiveDesc(h)  # type: ignore[no-any-return]


def exec_args(args: Sequence[tuple[int, Memory]]) -> Any:
    """The ``dnnl_exec_arg_t`` array of ``args``, its fields set in place: an array built from
    ``ExecArg`` structs records each in a dict of its own (``_objects``: five more objects per
    primitive for the cyclic GC) and costs ~3x the time (a pointwise conv builds one per call)."""
    arr = (ExecArg * len(args))()
    i = 0
    for a, m in args:
        e = arr[i]
        e.arg = a
        e.memory = m.handle
        i += 1
    return arr


class Primitive(_Owned):
    """A ``dnnl_primitive_t`` with a fixed argument list, executed on the stream.

    ``args`` pairs ``DNNL_ARG_*`` indices with ``Memory`` objects, bound once: a call only
    re-points the memories (``Memory.set``) and runs ``execute``."""

    _destroy = "dnnl_primitive_destroy"

    def __init__(self, pd: PrimitiveDesc, args: Sequence[tuple[int, Memory]], *, keep_pd: bool = True,
                 keep_memories: bool = True) -> None:
        h = _P()
        api = self._api
        check(api.load().dnnl_primitive_create(ctypes.byref(h), pd.handle), "dnnl_primitive_create")
        super().__init__(h)
        # ``pd`` for callers that query it later; the primitive holds its own copy in oneDNN, so one
        # made with ``keep_pd=False`` lets it go (conv plans made per input shape: one object less)
        self.pd: PrimitiveDesc | None = pd if keep_pd else None
        # the memories kept alive, but by a caller that holds them itself (``keep_memories=False``: a
        # conv plan, one list less per plan and input shape for the cyclic GC)
        self.memories: Sequence[Memory] = [m for _, m in args] if keep_memories else ()
        # weights whose packing a plan build queued (``reorder``): waited for before the first execute
        # (a failed one too: its memory holds no data, the execute raises its error); () when none,
        # as is usual: an empty list would be one more object for the cyclic GC per primitive
        self._waits: Sequence[Any] = tuple(
            t for _, m in args if (t := m.ticket) is not None and (not t.done() or t.error is not None))
        self.n = len(args)
        self.args = exec_args(args)
        self._execute = api._lib.dnnl_primitive_execute
        self._stream = api._stream
        self._wait = None if api._synchronous else api._lib.dnnl_stream_wait

    def _wait_packed(self) -> None:
        for t in self._waits:
            t.wait()  # (raises the reorder's DnnlError)
        self._waits = ()

    def execute(self) -> None:
        """Run the primitive on its bound memories (CPU stream: returns when done)."""
        if self._waits:
            self._wait_packed()
        st = self._execute(self.handle, self._stream, self.n, self.args)
        if st:
            raise DnnlError("dnnl_primitive_execute", st)
        if self._wait is not None:
            check(self._wait(self._stream), "dnnl_stream_wait")

    def execute_array(self, arr: Any) -> None:
        """``execute_on`` with the argument array made once (``exec_args``) by a caller that
        re-points the same memories run after run (a sized pointwise conv)."""
        if self._waits:
            self._wait_packed()
        st = self._execute(self.handle, self._stream, len(arr), arr)
        if st:
            raise DnnlError("dnnl_primitive_execute", st)
        if self._wait is not None:
            check(self._wait(self._stream), "dnnl_stream_wait")

    def execute_on(self, args: Sequence[tuple[int, Memory]]) -> None:
        """Run the primitive on these memories instead of the bound ones: a primitive made with
        run-time dimensions (``RUNTIME_DIM``) gets memories of this call's concrete shapes."""
        if self._waits:
            self._wait_packed()
        arr = exec_args(args)
        st = self._execute(self.handle, self._stream, len(args), arr)
        if st:
            raise DnnlError("dnnl_primitive_execute", st)
        if self._wait is not None:
            check(self._wait(self._stream), "dnnl_stream_wait")


class Reorder:
    """A reorder primitive between two fixed descriptors (``src``, ``dst``: layouts, data types) run
    on any pair of buffers: ``run(src_ptr, dst_ptr)`` re-points its two memories. They are shared, so
    a call that finds them in use (another thread, or a forked child whose parent thread held them at
    the fork, which would otherwise wait for ever) executes on memories of its own."""

    def __init__(self, src: MemoryDesc, dst: MemoryDesc) -> None:
        self.src, self.dst = Memory(src, 0), Memory(dst, 0)  # (pointed per call)
        self.prim = Primitive(reorder_pd(src, dst), [(ARG_FROM, self.src), (ARG_TO, self.dst)])
        self._lock = omp_fork.fork_safe(threading.Lock())

    def run(self, src_ptr: int, dst_ptr: int) -> None:
        """Convert the data at ``src_ptr`` into ``dst_ptr`` (the caller checked both buffers)."""
        if not self._lock.acquire(blocking=False):
            self.prim.execute_on([(ARG_FROM, Memory(self.src.md, src_ptr)), (ARG_TO, Memory(self.dst.md, dst_ptr))])
            return
        try:
            self.src.set(src_ptr)
            self.dst.set(dst_ptr)
            self.prim.execute()
        finally:
            self._lock.release()


def self_check() -> None:
    """Verify the enum values this module relies on against the loaded library (raises)."""
    md = MemoryDesc.strided((2, 3, 4, 5), (60, 1, 15, 3))
    if md.data_type() != F32 or md.ndims() != 4 or md.dims() != (2, 3, 4, 5) or md.size() != 480:
        raise DnnlError("self_check: memory descriptor round trip", 2)
    a = MemoryDesc.any((2, 3))
    if a.ndims() != 2 or a.data_type() != F32:
        raise DnnlError("self_check: format_tag any descriptor", 2)


# the locks anew in a forked child (a fork beside a loading or running GoogLeNet: the child's next
# load waited for the parent's thread)
omp_fork.renew_in_child(globals(), _load_lock=threading.Lock)
