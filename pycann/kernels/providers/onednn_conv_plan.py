"""One oneDNN (de)convolution bound to fixed shapes, weight, geometry and post-ops (``_Plan``): its
primitive, the weight packed once (``onednn_packed``), memories re-pointed per call, the input
reorder into channels-last, the in-place ("sum") form, and the channels-last layout helpers
(``empty_channels_last``, ``_cl_strides``, ``_fits``) it and the Winograd plans use.

Separate from ``onednn`` (the provider: availability, the plan cache, the conv entry points and
``ALGORITHMS``), which makes these plans and calls them; a forked child renews their locks here.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.errors import OperandError
from pycann.kernels.providers import aligned, onednn_packed, openmp
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers import onednn_impl_search as impl_search
from pycann.kernels.providers import onednn_kernel_store as kernel_store
from pycann.kernels.providers.native_args import address
from pycann.kernels.providers.onednn_conv_descs import ConvDescs
from pycann.kernels.providers.onednn_eltwise import Unaries, Unary
from pycann.ops.nn.spatial import Window


def _cl_strides(shape: Sequence[int], itemsize: int = 4) -> tuple[int, ...]:
    """Byte strides of a dense channels-last array of logical shape (N, C, *spatial)."""
    sp = [int(d) for d in shape[2:]]
    inner = [itemsize * int(shape[1])]  # stride of the last spatial dim, then outwards
    for d in reversed(sp):
        inner.insert(0, inner[0] * d)
    return (inner[0], itemsize, *inner[1:])


def empty_channels_last(shape: Sequence[int]) -> np.ndarray:
    """A new float32 array of logical shape (N, C, *spatial) laid out channels-last, starting on a
    cache line (``aligned``)."""
    k = len(shape)
    return aligned.empty((shape[0], *shape[2:], shape[1])).transpose(0, k - 1, *range(1, k - 1))


def _fits(a: np.ndarray, strides: tuple[int, ...]) -> bool:
    """``a`` has these byte strides (ignoring dims of size 1, whose stride never matters)."""
    return a.strides == strides or all(s == t or d == 1 for s, t, d in zip(a.strides, strides, a.shape))


class _Plan:
    """One oneDNN (de)convolution for fixed shapes, weight, geometry and post-ops, ready to run."""

    def __init__(self, x_shape: tuple[int, ...], w: np.ndarray, with_bias: bool, group: int, win: Window,
                 out_sp: tuple[int, ...], transpose: bool, unary: Unary | Unaries | None, residual: bool,
                 sum_first: bool = False, shared: ConvDescs | None = None,
                 fixed_bias: tuple[int, capi.Memory] | None = None) -> None:
        n, c = x_shape[0], x_shape[1]
        m = w.shape[1] * group if transpose else w.shape[0]
        self.x_shape, self.m = tuple(x_shape), m
        self.y_shape = (n, m) + tuple(out_sp)
        self.x_strides, self.y_strides = _cl_strides(x_shape), _cl_strides(self.y_shape)
        src = capi.MemoryDesc.strided(x_shape, [s // 4 for s in self.x_strides])
        dst = capi.MemoryDesc.strided(self.y_shape, [s // 4 for s in self.y_strides])
        w_in = w  # (the model's array: a contiguous copy would be new for every plan)
        if shared is None or not shared.serves(w, with_bias, group, transpose, unary, c):
            shared = ConvDescs(w, with_bias, group, transpose, unary, c)
        w = shared.w
        bias = shared.bias
        if transpose:
            full = [(x_shape[2 + i] - 1) * win.strides[i] + win.span(i) for i in range(len(out_sp))]
            pad_r = [f - p - o for f, p, o in zip(full, win.pads_begin, out_sp)]
        else:
            pad_r = list(win.pads_end)
        # (tuples of ints: not objects the cyclic GC keeps walking)
        geo = (tuple(win.strides), tuple(d - 1 for d in win.dilations), tuple(win.pads_begin), tuple(pad_r))
        # the residual as a binary-add post-op (any output buffer), or with ``sum_first`` (the caller
        # writes the output over the residual) as the "sum" post-op alone: one primitive, not two
        self.mode = ("sum" if sum_first else "binary") if residual else ""
        # what ``_make`` needs, as attributes (a closure over them was eight more objects per bound
        # conv for the cyclic GC to walk: a shape-generic plan binds one per node and shape)
        self._descs: tuple[Any, ...] | None = (geo, shared)

        def make() -> capi.PrimitiveDesc:
            return self._make(None, src, dst)

        self._in_place: capi.Primitive | None | bool = False  # built on first use; None: not available
        try:
            pd = make()
        except capi.DnnlError:
            if not residual:
                raise
            self.mode = "sum"  # residual copied into the destination first
            pd = make()
        # only deconvolutions are remembered: none of oneDNN's f32 ones is a ``jit*`` implementation
        # whatever the sizes, so the kind (no pads or spatial size) decides it. A convolution's jit
        # kernel can refuse one geometry (pads >= kernel, tiny inputs) and take the next: a kind
        # remembered from that one would leave every later shape of every same-shaped weight on
        # brgconv and its process-wide kernel store (the growth ``_own_kernels`` exists to stop)
        kind = (group, tuple(w.shape), tuple(win.strides), tuple(win.dilations), self.mode,
                tuple(shared.eltwise)) if transpose else None
        pd = _own_kernels(pd, make, w_in, kind)
        if impl_search.eligible(group, c, transpose):
            # a first conv (few input channels): oneDNN's ranking is often not its fastest there
            mds = [(capi.ARG_SRC, src), (capi.ARG_DST, dst)] + ([(capi.ARG_BIAS, bias)] if bias is not None else []) \
                + ([(capi.arg_post_op_src1(0), dst)] if self.mode == "binary" else [])
            flops = 2 * n * math.prod(w.shape) * math.prod(out_sp)  # (group 1: w is M x C x kernel)
            pd = impl_search.fastest(pd, make, (group, tuple(w.shape), geo, self.mode, tuple(shared.eltwise),
                                                openmp.team()), mds, flops)
        while not transpose and impl_search.thread_bound(pd.impl_info()):
            # oneDNN's gemm convolution (its first choice where pads reach the kernel size) crashed the
            # process when another thread than its maker executed it, as a plan's kernels are (a thread
            # pool serving a model): the next implementation, else the caller's numpy fallback
            if not pd.next_impl():
                raise capi.DnnlError(f"convolution: oneDNN offers only {pd.impl_info()}, bound to its thread", 3)
        self.impl = pd.fast_impl()
        # (its memory keeps the packed layout's descriptor: ``in_place`` compares with it)
        self.weights = onednn_packed.packed(w, shared.w_user, pd.query_md(capi.QUERY_WEIGHTS_MD))
        # The memories and the primitive keep no descriptor (oneDNN copies them when it makes
        # those): ``in_place`` of a binary-residual plan makes them again from the shapes if asked
        if self.mode != "binary":
            self._descs = None
        self.src, self.dst = capi.Memory(src, 0, keep_md=False), capi.Memory(dst, 0, keep_md=False)
        args = [(capi.ARG_SRC, self.src), (capi.ARG_WEIGHTS, self.weights), (capi.ARG_DST, self.dst)]
        # ``fixed_bias``: (address, a memory over it) that every run reads, shared by a node's plans
        # and never re-pointed (``ConvDescs.bias_memory``); else a memory ``run`` re-points
        self.bias_ptr = fixed_bias[0] if fixed_bias is not None else 0
        self.bias = None if bias is None else fixed_bias[1] if fixed_bias is not None else \
            capi.Memory(bias, 0, keep_md=False)
        if self.bias is not None:
            args.append((capi.ARG_BIAS, self.bias))
        self.res = capi.Memory(dst, 0, keep_md=False) if self.mode == "binary" else None
        if self.res is not None:
            args.append((capi.arg_post_op_src1(0), self.res))
        self.prim = capi.Primitive(pd, args, keep_pd=False, keep_memories=False)  # (held here: src ... res)
        self.lock = threading.Lock()
        self.bound_key: tuple[int, int, int] | None = None  # (src, dst, residual) the handles hold
        with _live_plans_lock:
            _live_plans.add(self)  # (its lock renewed in a forked child: ``_renew_plans_in_child``)
        # input strides -> (reorder primitive, its source and destination memories)
        self.reorders: dict[tuple[int, ...], tuple[capi.Primitive, capi.Memory, capi.Memory]] = {}
        # the channels-last copy of a converted input (an image stem's NCHW feed), made on first use and
        # reused: a new 0.6 MB array per run met fresh heap pages in a model (~100 us of page faults on
        # a 3x224x224 image, 4x the reorder), with ``x_lock`` held from the copy to the conv's end
        self.x_scratch: np.ndarray | None = None
        self.x_lock = threading.Lock()

    def _make(self, mode: str | None = None, src: capi.MemoryDesc | None = None,
              dst: capi.MemoryDesc | None = None) -> capi.PrimitiveDesc:
        """The (de)convolution's descriptor with the residual as ``mode`` ("binary", "sum" or ""),
        X and Y described by ``src`` and ``dst`` (made from the plan's shapes when not given)."""
        assert self._descs is not None  # (dropped once built, but for a binary-residual plan's ``in_place``)
        geo, shared = self._descs
        if src is None or dst is None:
            src = capi.MemoryDesc.strided(self.x_shape, [s // 4 for s in self.x_strides])
            dst = capi.MemoryDesc.strided(self.y_shape, [s // 4 for s in self.y_strides])
        mode = self.mode if mode is None else mode
        attr = capi_ops.Attr([("binary_add", dst), *shared.eltwise]) if mode == "binary" else shared.attr(mode == "sum")
        strides, dilates, pad_l, pad_r = geo
        return capi_ops.convolution_pd(src, shared.w_any, shared.bias, dst, strides, dilates, pad_l, pad_r, attr,
                                   deconvolution=shared.transpose)

    def in_place(self) -> capi.Primitive | None:
        """This conv with the residual as oneDNN's "sum" post-op, which accumulates into the
        destination: run with the destination holding the residual (the executor planned the
        output over the residual's buffer), it reads one tensor less than the binary-add form
        (ResNet-50 batch 8: ~25% less time in those convs). None without a residual, or when
        oneDNN would want another packed weight layout for it."""
        if self._in_place is False:
            prim: capi.Primitive | None = None
            if self.mode == "sum":
                prim = self.prim
            elif self.mode == "binary":
                try:
                    pd = self._make("sum")
                    if not self.impl.startswith(_GLOBAL_KERNELS):  # (else: this weight's first plan)
                        pd = _own_kernels(pd, lambda: self._make("sum"))
                    if pd.impl_info() != self.impl:
                        # a first conv's measured choice (impl_search): its packed weights' layout is
                        # that implementation's, so the "sum" form takes it too where oneDNN offers it
                        pd = impl_search.walk_to(lambda: self._make("sum"), self.impl) or pd
                    packed_md = self.weights.md
                    if packed_md is not None and not impl_search.thread_bound(pd.impl_info()) \
                            and pd.query_md(capi.QUERY_WEIGHTS_MD).equals(packed_md):
                        pd.fast_impl()
                        args = [(capi.ARG_SRC, self.src), (capi.ARG_WEIGHTS, self.weights), (capi.ARG_DST, self.dst)]
                        if self.bias is not None:
                            args.append((capi.ARG_BIAS, self.bias))
                        prim = capi.Primitive(pd, args, keep_pd=False, keep_memories=False)
                except capi.DnnlError:
                    prim = None
            self._in_place = prim
        return self._in_place if isinstance(self._in_place, capi.Primitive) else None

    def input_reorder(self, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
        """The reorder of an input of these byte strides into channels-last (made once per strides;
        None for strides oneDNN cannot describe)."""
        r = self.reorders.get(strides)
        if r is None and int(np.prod(shape)) and all(st > 0 and st % 4 == 0 for st in strides):
            src_md = capi.MemoryDesc.strided(shape, [st // 4 for st in strides])
            dst_md = capi.MemoryDesc.strided(shape, [st // 4 for st in _cl_strides(shape)])
            src_m, dst_m = capi.Memory(src_md, 0, keep_md=False), capi.Memory(dst_md, 0, keep_md=False)
            r = (capi.Primitive(capi.reorder_pd(src_md, dst_md), [(capi.ARG_FROM, src_m), (capi.ARG_TO, dst_m)],
                                keep_pd=False), src_m, dst_m)
            self.reorders[strides] = r
        return r

    def _to_channels_last(self, x: np.ndarray, xc: np.ndarray | None = None) -> np.ndarray:
        """``x`` copied into a channels-last array (``xc``, else a new one) by a oneDNN reorder
        (multi-threaded jit; a numpy copy is ~5x slower on the 3x640x640 image of a detector's first
        conv), cached per input strides; numpy's copy for strides oneDNN cannot describe."""
        if xc is None:
            xc = empty_channels_last(x.shape)
        r = self.input_reorder(x.shape, x.strides) if x.dtype == np.float32 else None
        if r is None:
            np.copyto(xc, x)
            return xc
        prim, src_m, dst_m = r
        with self.lock:
            src_m.set(capi.ptr(x))
            dst_m.set(capi.ptr(xc))
            prim.execute()
        return xc

    def run(self, x: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None,
            out: np.ndarray | None = None) -> np.ndarray:
        """The result as a channels-last array: ``out`` when it is one of the right shape, else
        new (``x`` is converted first when it is not channels-last)."""
        if not _fits(x, self.x_strides):
            if x.shape != self.x_shape:
                return self._run(self._to_channels_last(x), b, residual, out)
            with self.x_lock:  # (the plan's one input copy: held until the conv has read it)
                if self.x_scratch is None:
                    self.x_scratch = empty_channels_last(self.x_shape)
                return self._run(self._to_channels_last(x, self.x_scratch), b, residual, out)
        return self._run(x, b, residual, out)

    def _run(self, x: np.ndarray, b: np.ndarray | None, residual: np.ndarray | None,
             out: np.ndarray | None) -> np.ndarray:
        """``run`` for a channels-last ``x``."""
        fits = out is not None and out.dtype == np.float32 and out.flags.writeable and out.shape == self.y_shape and \
            _fits(out, self.y_strides) and not np.may_share_memory(out, x)
        y = out if fits and out is not None else empty_channels_last(self.y_shape)
        if residual is not None:
            if self.mode == "sum":
                try:
                    np.copyto(y, residual)
                except ValueError as e:
                    raise OperandError(f"conv residual {list(residual.shape)} does not broadcast to the output "
                                       f"{list(self.y_shape)}: {e}") from None
            elif residual.dtype != np.float32 or residual.shape != self.y_shape or not _fits(residual, self.y_strides) \
                    or (y is out and np.may_share_memory(residual, y)):  # dst may hold partial sums
                r = empty_channels_last(self.y_shape)
                try:
                    np.copyto(r, residual)  # broadcasts / casts / re-lays out
                except ValueError as e:
                    raise OperandError(f"conv residual {list(residual.shape)} does not broadcast to the output "
                                       f"{list(self.y_shape)}: {e}") from None
                residual = r
        # every operand is exactly what the primitive reads or writes (native_args): no pointer
        # to a short bias, a differently shaped input or a residual of another layout gets through
        xp = address("conv input X", x, self.x_shape, strides=self.x_strides)
        yp = address("conv output Y", y, self.y_shape, strides=self.y_strides)
        # (b None with a bias memory: the bias bound_conv_nhwc set once stays)
        bp = address("conv bias B", b, (self.m,)) if self.bias is not None and b is not None else 0
        if bp and self.bias_ptr:
            if bp != self.bias_ptr:  # (its memory is shared by other plans: not re-pointed)
                raise OperandError("conv bias B: this conv was bound to another bias")
            bp = 0
        rp = address("conv residual", residual, self.y_shape, strides=self.y_strides) \
            if self.res is not None and residual is not None else 0
        with self.lock:
            self.bound_key = None  # (bound_conv_nhwc's kernel skips re-pointing while this matches)
            self.src.set(xp)
            self.dst.set(yp)
            if bp:
                self.bias.set(bp)  # type: ignore[union-attr]
            if rp:
                self.res.set(rp)  # type: ignore[union-attr]
            self.prim.execute()
        return y


# Which implementation keeps its JIT kernels where (the process-wide brgemm store or the primitive):
# onednn_kernel_store.py
_GLOBAL_KERNELS, _no_jit, _own_kernels = kernel_store.GLOBAL_KERNELS, kernel_store.no_jit, kernel_store.own_kernels


# Every live plan, for a forked child: a parent thread inside a run of a plan at the fork held its
# lock, and is not in the child, whose runs of that conv waited for it for ever (the bound conv's
# kernel reads ``lock`` per call); it may also have re-pointed some handles and not yet recorded
# that in ``bound_key``, which the child therefore forgets (the next call re-points them all).
_live_plans: weakref.WeakSet[_Plan] = weakref.WeakSet()
_live_plans_lock = threading.Lock()


def _renew_plans_in_child() -> None:
    global _live_plans_lock
    _live_plans_lock = threading.Lock()
    for p in list(_live_plans):
        p.lock = threading.Lock()
        p.x_lock = threading.Lock()
        p.bound_key = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_plans_in_child)
