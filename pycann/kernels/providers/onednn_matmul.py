"""oneDNN's matmul primitive for the ``onednn`` provider: MatMul and Gemm in float32.

On a CPU with AVX-512 oneDNN's brgemm matmul runs about twice as fast as numpy's OpenBLAS
when OpenBLAS is held to its AVX2 kernels (``OPENBLAS_CORETYPE=Haswell``).

* ``matmul(a, b, out)``: numpy.matmul semantics (1-D operands promoted then squeezed, batch
  dims broadcast). Operands are described by their strides, so transposed or sliced views
  run without copies; a batch dim of stride 0 (``np.broadcast_to``) becomes a broadcast dim
  of size 1. Anything else (other dtypes, empty or tiny products, negative or overlapping
  strides, a shape oneDNN offers only in its reference loops) goes to ``np.matmul``.
* ``gemm(a, b, c, alpha, beta, out)``: ``numpy_blas.gemm`` semantics; alpha as an eltwise
  ``linear`` post-op, ``beta * C`` as the bias when it is a row vector (and alpha == 1), else
  as a binary-add post-op (broadcast by oneDNN).
* ``bound_matmul(b, bias, a_shape, unary, residual)``: a plan kernel for a constant 2-D B: the
  weight is reordered once into the layout the primitive prefers, bias, a run-time residual
  (binary-add post-op) and activation are post-ops, and a call only re-points the data handles
  (``onednn.bound_conv_nhwc`` does the same for convs).

Primitives are cached per operand signature (shapes, strides, post-ops); a signature oneDNN
rejects is recorded (None) and runs in numpy thereafter.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import ONEDNN_GEMM, ONEDNN_MATMUL, Packing, Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import aligned, omp_fork, onednn_packed, openmp
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.bound_out import dest, finish
from pycann.kernels.providers.native_args import conform
from pycann.kernels.providers.specs import GemmSpec, Implementation

Desc = tuple[tuple[int, ...], tuple[int, ...]]  # (dims, strides in elements)
Unary = tuple[int, float, float]

# Below this many flops (2*M*K*N*batch) numpy's single BLAS call beats the oneDNN path's fixed
# cost (descriptor key, handle re-pointing, OpenMP fork/join: ~10 us).
SMALL_FLOPS = 1 << 20
_MAX_PLANS = 1024
_F32 = np.dtype(np.float32)



def _desc(shape: Sequence[int], byte_strides: Sequence[int], nd: int, batch_ok: bool = True) -> Desc | None:
    """(dims, element strides) of an f32 operand padded with leading unit dims to rank ``nd``.

    A batch dim of stride 0 becomes size 1 (oneDNN broadcasts it); unit dims get the stride a
    dense array would have there (oneDNN matches plain layouts by strides). None when the
    strides are negative, not whole elements, or zero on a non-batch dim."""
    if any(s % 4 or s < 0 for s in byte_strides):
        return None
    pad = nd - len(shape)
    dims = [1] * pad + [int(d) for d in shape]
    st = [0] * pad + [int(s) // 4 for s in byte_strides]
    for i in range(nd):
        if st[i] == 0 and dims[i] > 1:
            if i >= nd - 2 or not batch_ok:
                return None
            dims[i] = 1
    inner = 1
    for i in range(nd - 1, -1, -1):
        if dims[i] == 1:
            st[i] = inner
        inner = max(inner, st[i] * dims[i])
    return tuple(dims), tuple(st)


def _md(d: Desc) -> capi.MemoryDesc:
    return capi.MemoryDesc.strided(d[0], d[1])


class _Plan:
    """One oneDNN matmul for fixed operand descriptors and post-ops, ready to run.

    ``b``: a Desc of a run-time B, or (dims, None) for a constant B packed by ``pack``.
    ``post``: ("eltwise", alg, alpha, beta) and ("binary_add", Desc) tuples, in order.
    ``impl``: the implementation to take (``impl_info``, e.g. ``gemm:jit:f32``) instead of oneDNN's
    first choice; raises ``capi.DnnlError`` when oneDNN does not offer it for this problem."""

    def __init__(self, a: Desc, b: tuple[tuple[int, ...], tuple[int, ...] | None], d: Desc,
                 bias: Desc | None, post: Sequence[tuple[Any, ...]], impl: str | None = None) -> None:
        ops: list[tuple[Any, ...]] = []
        self.binary: capi.Memory | None = None
        self.binary_index = 0
        # (the memories and the primitive keep no descriptor: oneDNN copied them, and a row-count
        # kernel of the shape-generic plan per node and row count kept a dozen objects for the GC)
        for i, op in enumerate(post):
            if op[0] == "binary_add":
                bmd = _md(op[1])
                ops.append(("binary_add", bmd))
                self.binary, self.binary_index = capi.Memory(bmd, 0, keep_md=False), i
            else:
                ops.append(op)
        w = capi.MemoryDesc.any(b[0]) if b[1] is None else _md((b[0], b[1]))
        bias_md = _md(bias) if bias is not None else None
        pd = capi_ops.matmul_pd(_md(a), w, bias_md, _md(d), capi_ops.Attr(ops))
        while impl is not None and pd.impl_info() != impl:
            if not pd.next_impl():
                raise capi.DnnlError(f"matmul implementation {impl} not offered", 3)
        self.impl = pd.fast_impl()
        self.wei_md: capi.MemoryDesc | None = None  # the packed layout, once ``pack`` made it
        self.pd: capi.PrimitiveDesc | None = pd  # (until the primitive is made: ``_make``)
        self.src = capi.Memory(_md(a), 0, keep_md=False)
        self.dst = capi.Memory(_md(d), 0, keep_md=False)
        self.wei = capi.Memory(w, 0, keep_md=False) if b[1] is not None else None
        self.bias = capi.Memory(bias_md, 0, keep_md=False) if bias_md is not None else None
        self.prim: capi.Primitive | None = None
        self.lock = omp_fork.fork_safe(threading.Lock())
        if self.wei is not None:
            self._make(self.wei)

    def _make(self, wei: capi.Memory) -> None:
        args = [(capi.ARG_SRC, self.src), (capi.ARG_WEIGHTS, wei), (capi.ARG_DST, self.dst)]
        if self.bias is not None:
            args.append((capi.ARG_BIAS, self.bias))
        if self.binary is not None:
            args.append((capi.arg_post_op_src1(self.binary_index), self.binary))
        assert self.pd is not None
        self.prim = capi.Primitive(self.pd, args, keep_pd=False)
        self.pd = None  # (nothing asks it again)

    def pack(self, b: np.ndarray, source_t: np.ndarray | None = None) -> None:
        """Reorder the constant B (2-D float32, any strides) once into the primitive's layout
        (before any other use of the plan: it makes the primitive). ``source_t``: B^T as a
        C-contiguous N x K array holding B's values, read instead of B (``onednn_packed.packed``)."""
        d = _desc(b.shape, b.strides, b.ndim, batch_ok=False)
        if d is None:
            b = np.ascontiguousarray(b)
            d = _desc(b.shape, b.strides, b.ndim)
        assert d is not None and self.pd is not None
        self.wei_md = self.pd.query_md(capi.QUERY_WEIGHTS_MD)
        source = None
        if source_t is not None:
            k, n = b.shape
            source = (source_t, capi.MemoryDesc.strided((k, n), (1, k)))
        self.wei = onednn_packed.packed(b, _md(d), self.wei_md, source)  # shared per layout
        self._make(self.wei)

    def run(self, a: int, b: int | None, y: int, bias: int | None = None, binary: int | None = None) -> None:
        """Execute on these data pointers (``b`` None: the packed constant)."""
        assert self.prim is not None
        with self.lock:
            self.src.set(a)
            if b is not None and self.wei is not None:
                self.wei.set(b)
            self.dst.set(y)
            if bias is not None and self.bias is not None:
                self.bias.set(bias)
            if binary is not None and self.binary is not None:
                self.binary.set(binary)
            self.prim.execute()


# The plan class for kernels that own their primitive (a run-time B they re-point per call:
# kernels/squeeze_excite_project.py); the module's own products go through ``_plan``'s cache.
MatmulPlan = _Plan

_plans: dict[tuple[Any, ...], _Plan | None] = {}
_plans_lock = omp_fork.fork_safe(threading.Lock())


def _plan(key: tuple[Any, ...], make: Any) -> _Plan | None:
    key = (*key, openmp.team())  # a primitive's team is fixed at creation
    p = _plans.get(key, False)
    if p is not False:
        return p  # type: ignore[return-value]
    try:
        p = make()
    except capi.DnnlError:
        p = None
    with _plans_lock:
        if len(_plans) >= _MAX_PLANS:
            _plans.clear()
        _plans[key] = p
    return p  # type: ignore[return-value]


def _usable(x: np.ndarray) -> bool:
    return x.dtype == _F32 and x.ndim >= 1 and x.size > 0


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b)`` for float32 through oneDNN (into ``out`` when it fits); numpy for
    everything oneDNN is not given (see the module docstring)."""
    if not (_usable(a) and _usable(b)) or (out is not None and out.dtype != _F32):
        return nb.matmul(a, b, out)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    if k != b2.shape[-2] or m == 0 or n == 0:
        return nb.matmul(a, b, out)
    try:
        batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except ValueError:
        return nb.matmul(a, b, out)  # numpy raises its own error
    nbatch = int(np.prod(batch, dtype=np.int64))
    if nbatch == 0 or 2 * nbatch * m * k * n < SMALL_FLOPS:
        return nb.matmul(a, b, out)
    nd = len(batch) + 2
    full = tuple(batch) + (m, n)
    shape = full[:-2] + ((m,) if a.ndim > 1 else ()) + ((n,) if b.ndim > 1 else ())
    y = None
    if out is not None and out.shape == shape and not np.may_share_memory(out, a) \
            and not np.may_share_memory(out, b):
        y = out.reshape(full) if out.flags.c_contiguous else _unit_view(out, a.ndim > 1, b.ndim > 1)
    if y is None:
        y = np.empty(full, _F32)
    da, db, dd = _desc(a2.shape, a2.strides, nd), _desc(b2.shape, b2.strides, nd), _desc(y.shape, y.strides, nd,
                                                                                           batch_ok=False)
    if da is None or db is None or dd is None:
        return nb.matmul(a, b, out)
    p = _plan(("mm", da, db, dd), lambda: _Plan(da, db, dd, None, ()))
    if p is None:
        return nb.matmul(a, b, out)
    p.run(capi.ptr(a2), capi.ptr(b2), capi.ptr(y))
    return out if out is not None and np.may_share_memory(y, out) else y.reshape(shape)


def _unit_view(out: np.ndarray, a_mat: bool, b_mat: bool) -> np.ndarray:
    """``out`` (the squeezed result shape) viewed with the unit M / N dims put back."""
    v = out
    if not a_mat:
        v = v[..., None, :] if b_mat else v[..., None]
    if not b_mat:
        v = v[..., None]
    return v


def _row(c: np.ndarray, n: int) -> bool:
    """C broadcasts along rows only: shape (N,) or (1, N)."""
    return c.size == n and (c.ndim == 1 or (c.ndim == 2 and c.shape[0] == 1))


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
         out: np.ndarray | None = None) -> np.ndarray:
    """``alpha * a @ b + beta * c`` (``numpy_blas.gemm`` semantics: ``a``, ``b`` already
    transposed, beta == 0 drops C) for 2-D float32 through oneDNN; numpy otherwise."""
    if a.ndim != 2 or b.ndim != 2 or not (_usable(a) and _usable(b)) or (c is not None and c.dtype != _F32) \
            or (out is not None and out.dtype != _F32):
        return nb.gemm(a, b, c, alpha, beta, out)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    if k != b.shape[0] or m == 0 or n == 0 or 2 * m * k * n < SMALL_FLOPS or (c is not None and c.ndim > 2):
        return nb.gemm(a, b, c, alpha, beta, out)
    if c is not None and beta == 0.0:
        c = None
    y = out if out is not None and out.shape == (m, n) and not np.may_share_memory(out, a) \
        and not np.may_share_memory(out, b) and (c is None or not np.may_share_memory(out, c)) else None
    if y is None:
        y = np.empty((m, n), _F32)
    da, db, dd = _desc(a.shape, a.strides, 2), _desc(b.shape, b.strides, 2), _desc(y.shape, y.strides, 2, False)
    cc = None if c is None else c if beta == 1.0 else c * np.float32(beta)
    bias: Desc | None = None
    post: list[tuple[Any, ...]] = []
    if alpha != 1.0:
        post.append(("eltwise", capi.ELTWISE["linear"], float(alpha), 0.0))
    if cc is not None:
        c2: np.ndarray = cc.reshape((1,) * (2 - cc.ndim) + tuple(cc.shape))
        cm, cn = c2.shape[0], c2.shape[1]
        dc = _desc(c2.shape, c2.strides, 2, batch_ok=False)
        if dc is None or cm not in (1, m) or cn not in (1, n):
            return nb.gemm(a, b, c, alpha, beta, out)
        if alpha == 1.0 and _row(c2, n):
            bias = dc
        else:
            post.append(("binary_add", dc))
        cc = c2
    if da is None or db is None or dd is None:
        return nb.gemm(a, b, c, alpha, beta, out)
    p = _plan(("gemm", da, db, dd, bias, tuple(post)), lambda: _Plan(da, db, dd, bias, post))
    if p is None:
        return nb.gemm(a, b, c, alpha, beta, out)
    cp = None if cc is None else capi.ptr(cc)
    p.run(capi.ptr(a), capi.ptr(b), capi.ptr(y), cp if bias is not None else None, cp if bias is None else None)
    return y


def _post_ops(b_shape: tuple[int, int], bias: np.ndarray | None, a_shape: tuple[int, ...], unary: Unary | None,
              residual: bool, min_flops: int | None) -> tuple[int, np.ndarray | None, list[tuple[Any, ...]]] | None:
    """(rows, bias as a (1, N) row or None, post-ops) of ``bound_matmul``'s product, or None when it
    is not expressible or under ``min_flops``."""
    k, n = b_shape
    rows = int(np.prod(a_shape[:-1], dtype=np.int64))
    if rows == 0 or 2 * rows * k * n < (SMALL_FLOPS if min_flops is None else min_flops):
        return None  # tiny: numpy's one BLAS call is faster
    y_shape = a_shape[:-1] + (n,)
    bc = None
    if bias is not None:
        if bias.size != n or bias.ndim > len(y_shape) or any(d != 1 for d in bias.shape[:-1]) \
                or (bias.ndim and bias.shape[-1] != n):  # (a 0-d bias, Gemm's scalar C, is a row when N is 1)
            return None
        bc = np.ascontiguousarray(bias, dtype=_F32).reshape(1, n)
    post: list[tuple[Any, ...]] = [("binary_add", ((rows, n), (n, 1)))] if residual else []
    if unary is not None:
        post.append(("eltwise", *unary))
    return rows, bc, post


def _bound(p: _Plan, bc: np.ndarray | None, a_shape: tuple[int, ...], n: int, keep: tuple[Any, ...],
           packing: Packing) -> BoundKernel:
    """The plan kernel running ``p`` (its weight bound already) on A of ``a_shape``."""
    if bc is not None and p.bias is not None:
        p.bias.set(capi.ptr(bc))
    assert p.prim is not None
    y_shape = a_shape[:-1] + (n,)
    # (a closure over the plan, not over its memories' bound methods: four objects less per kernel,
    # and the shape-generic plan binds one per node and row count: ``bind_generic.packed_matmul``)
    res = p.binary is not None

    def kernel(inputs: Any, attrs: Any, out: Any = None) -> list[np.ndarray]:
        x = conform("MatMul input A", inputs[0], a_shape)
        y, o = dest(out, y_shape, (x,))
        r = None
        if res:
            r = inputs[3]
            # the post-op reads the planned dense float32 layout; the destination may hold
            # partial sums before the post-ops run, so a residual overlapping it is copied too
            if r.dtype != _F32 or not r.flags.c_contiguous or r.shape != y_shape:
                r = np.ascontiguousarray(np.broadcast_to(r, y_shape), dtype=_F32)
            if np.may_share_memory(r, y):
                r = r.copy()
        with p.lock:
            p.src.set(x.__array_interface__["data"][0])
            p.dst.set(y.__array_interface__["data"][0])
            if r is not None and p.binary is not None:
                p.binary.set(r.__array_interface__["data"][0])
            p.prim.execute()  # type: ignore[union-attr]
        return finish(y, o)

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, packing=packing, keep=(*keep, bc, p),
                       impl=p.impl)


def bound_matmul(b: np.ndarray, bias: np.ndarray | None, a_shape: Sequence[int], unary: Unary | None,
                 residual: bool = False, min_flops: int | None = None, source_t: np.ndarray | None = None) -> Any:
    """``act(a @ b + bias + residual)`` for a constant B and a static A shape as a plan kernel
    ``k(inputs, attrs, out=None) -> [y]`` (``inputs[0]``: A; ``inputs[3]``: the residual when
    ``residual``; float32).

    ``b``: 2-D (leading unit dims allowed), packed once; ``bias``: broadcasts along the last
    axis only (N values, e.g. shape (N,) or (1, N)), or None; ``residual``: a run-time operand of
    the result's shape, added as a binary-add post-op after the bias (a residual in another
    dtype or layout, or one overlapping the destination, is copied into a dense float32 array
    first); ``unary`` a oneDNN eltwise post-op (``onednn.onednn_unary``), applied last, or None.
    A's leading dims fold into the rows of one 2-D product. With ``out`` (the executor's arena
    views; ``k.writes_out``) the result is written there. ``source_t``: B^T (N x K, C-contiguous)
    with B's values, read instead of ``b`` if B must be packed (``_Plan.pack``). None when the
    signature is not expressible, the product is under ``min_flops`` (``SMALL_FLOPS``), or oneDNN
    does not implement it."""
    a_shape = tuple(int(d) for d in a_shape)
    if b.ndim > 2 and all(d == 1 for d in b.shape[:-2]):
        b = b.reshape(b.shape[-2:])
    if b.ndim != 2 or b.dtype != _F32 or not a_shape or a_shape[-1] != b.shape[0] or b.size == 0:
        return None
    k, n = b.shape
    ops = _post_ops((k, n), bias, a_shape, unary, residual, min_flops)
    if ops is None:
        return None
    rows, bc, post = ops
    try:
        p = _Plan(((rows, k), (k, 1)), ((k, n), None), ((rows, n), (n, 1)),
                  ((1, n), (n, 1)) if bc is not None else None, post)
        ok_t = source_t is not None and source_t.shape == (n, k) and source_t.dtype == _F32 \
            and source_t.flags.c_contiguous
        p.pack(b, source_t if ok_t else None)
    except capi.DnnlError:
        return None
    return _bound(p, bc, a_shape, n, (b,), Packing.PACKED)


GEMV_IMPL = "gemm:jit:f32"


def transposed_weight(kernel: BoundKernel) -> np.ndarray | None:
    """B^T (N x K, C-contiguous, 64-byte aligned) read back from a ``bound_matmul`` kernel's packed
    weight by one reorder (an exact copy): the gemv layout made without touching the original B,
    whose mapped .om pages the loader dropped from memory. None for a kernel without a packed weight."""
    p = kernel.keep[-1] if kernel.keep else None
    if not isinstance(p, _Plan) or p.wei is None or p.wei_md is None:
        return None
    k, n = p.wei_md.dims()
    bt = aligned.empty((n, k), np.float32)
    to = capi.MemoryDesc.strided((k, n), (1, k))
    capi.Primitive(capi.reorder_pd(p.wei_md, to), [(capi.ARG_FROM, p.wei), (capi.ARG_TO, capi.Memory(to, capi.ptr(bt)))]).execute()
    return bt


def bound_matmul_gemv(bt: np.ndarray, bias: np.ndarray | None, a_shape: Sequence[int], unary: Unary | None,
                      residual: bool = False) -> Any:
    """``bound_matmul``'s product with the constant B given transposed, ``bt`` = B^T as a C-contiguous
    N x K float32 array (used in place, not copied), on oneDNN's ``gemm:jit:f32`` matmul: at one row
    its gemv kernel streams that layout ~1.2-1.4x faster than the brgemm kernel streams its packed
    blocks (``bench/gemv_layouts.py``; GPT-2's decode products). None when not expressible or oneDNN
    does not offer that implementation."""
    a_shape = tuple(int(d) for d in a_shape)
    if bt.ndim != 2 or bt.dtype != _F32 or not bt.flags.c_contiguous or not a_shape or a_shape[-1] != bt.shape[1] \
            or bt.size == 0:
        return None
    n, k = bt.shape
    ops = _post_ops((k, n), bias, a_shape, unary, residual, 0)
    if ops is None:
        return None
    rows, bc, post = ops
    try:
        p = _Plan(((rows, k), (k, 1)), ((k, n), (1, k)), ((rows, n), (n, 1)),
                  ((1, n), (n, 1)) if bc is not None else None, post, impl=GEMV_IMPL)
    except capi.DnnlError:
        return None
    assert p.wei is not None
    p.wei.set(capi.ptr(bt))  # (never re-pointed: the plan's weight for good)
    return _bound(p, bc, a_shape, n, (bt,), Packing.NONE)


def _gemm_ok(op: str) -> Any:
    return lambda s: isinstance(s, GemmSpec) and s.op_type == op and s.dtype == "float32"


ALGORITHMS: list[Implementation] = [
    Implementation(ONEDNN_MATMUL, _gemm_ok("MatMul"), matmul,
              "oneDNN C API matmul (brgemm, AVX-512), operands by strides, batch broadcast; numpy below 1 MFLOP"),
    Implementation(ONEDNN_GEMM, _gemm_ok("Gemm"), gemm,
              "oneDNN C API matmul with alpha (eltwise linear) and beta*C (bias or binary add) as post-ops"),
]
