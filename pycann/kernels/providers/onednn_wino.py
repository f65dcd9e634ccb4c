"""``onednn:conv_winograd``: 3x3 stride-1 convolutions by oneDNN v2's Winograd kernels.

Winograd F(2x2, 3x3) / F(4x4, 3x3) computes a 3x3 convolution with 2.25-4x fewer multiplications
than the direct form; oneDNN's AVX-512 JIT kernels for it (``jit_fp32_wino_2x3``,
``jit_wino_4x3``) run ResNet-50's 3x3 convs 1.5-2.2x faster than its direct ``brgconv`` on Zen 5
(bench/RESULTS.md). oneDNN v3 removed them for CPUs, so this algorithm drives ``libdnnl.so.2``
(``onednn2_capi``) beside the v3 library the rest of the provider uses; without it the algorithm
is simply unavailable.

Precision: the transforms round differently from a direct sum; on ResNet-50's shapes the largest
difference is ~2e-6 of the output's range (tests/kernels/test_onednn_wino.py). That is CANN's
``--op_select_implmode high_performance`` (its default); ``high_precision`` keeps every conv on the
direct algorithm (``KernelSelection`` never records this one then). Run-time choices made without a
recorded ``_algo`` (dynamic shapes, single ops) never pick it either (``Algorithm.exact``).

Layout: the kernels want oneDNN's blocked ``nChw16c`` activations, so each call is three
primitives: a reorder from the channels-last input (pycann's conv chains are NHWC), the
convolution with its bias and eltwise post-ops, and a reorder into the channels-last output
(~5-25 us each at ResNet-50 batch 1). The blocked buffers are shared by all plans (one lock), so
they cost the largest conv's activations once, not per conv.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Layout, Packing, Threads
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import omp_fork, onednn, onednn_conv_plan, openmp
from pycann.kernels.providers import onednn2_capi as c2
from pycann.kernels.providers.native_args import address, check
from pycann.kernels.providers.onednn_capi import (
    ARG_BIAS,
    ARG_DST,
    ARG_FROM,
    ARG_SRC,
    ARG_TO,
    ARG_WEIGHTS,
    ELTWISE,
    DnnlError,
    ptr,
)
from pycann.kernels.providers.onednn_eltwise import Unaries, Unary, _chain
from pycann.ops.nn.spatial import Window

_NAMES = {v: k for k, v in ELTWISE.items()}  # v3 dnnl_alg_kind_t -> name
_available: bool | None = None
_available_lock = threading.RLock()
# Below this many output pixels per image Winograd loses inside a model: ResNet-50's 512-channel
# 7x7 layers keep 17 MB of transformed weights per conv (1.8x the direct form's), streamed from
# memory on every call: 0.58 vs 0.53 ms at batch 1, 1.1-1.3x slower at batch 4-8 (its 4x3 kernel
# on tiles that mostly pad). Measured on Zen 5 with bench/profile_ops.py.
MIN_PIXELS = 14 * 14
# Fewer input channels leave the transformed GEMMs too small to pay for the transforms and the two
# reorders: 16 and 40 channels tie with the direct conv, 32 -> 8 loses; 48 -> 48 at 80x80 gains 1.5x.
MIN_CHANNELS = 48


def available() -> bool:
    """True when ``libdnnl.so.2`` loads and a small Winograd conv matches the direct one."""
    global _available
    if _available is None:
        with _available_lock:  # (two threads binding their first convs at once probe once)
            if _available is None:
                _available = _probe()
    return _available


def _probe() -> bool:
    try:
        c2.load()
        x = onednn.empty_channels_last((1, 16, 6, 6))
        x[...] = onednn.probe_values(x.shape, 0)
        w, b = onednn.probe_values((16, 16, 3, 3), 1), onednn.probe_values((16,), 2)
        win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (6, 6))
        y = _Plan(x.shape, w, b, win, None).run(x, None)
        ref = onednn.conv_nhwc(x, w, b, 1, win) if onednn.available() else None
        return ref is None or bool(np.allclose(y, ref, rtol=1e-4, atol=1e-4))
    except (OSError, DnnlError, AttributeError):
        return False


def eligible(x_shape: Sequence[int], w_shape: Sequence[int], group: int, win: Window) -> bool:
    """A 2-D float32 conv oneDNN's Winograd kernels take and that runs faster there: 3x3 kernel,
    stride 1, no dilation, one group, pads of at most 1, input channels a multiple of 16 (its
    blocking) and at least ``MIN_CHANNELS``, at least 16 output channels (padded to 16s: PP-OCR
    det's 96->24 convs still gain 1.3-1.5x), and an output of at least ``MIN_PIXELS`` per image."""
    if len(x_shape) != 4 or group != 1 or tuple(win.kernel) != (3, 3) or tuple(win.strides) != (1, 1) \
            or tuple(win.dilations) != (1, 1) or any(p > 1 for p in (*win.pads_begin, *win.pads_end)):
        return False
    n, c, m = int(x_shape[0]), int(x_shape[1]), int(w_shape[0])
    if c % 16 or c < MIN_CHANNELS or m < 16 or n < 1:
        return False
    return int(np.prod(win.out)) >= MIN_PIXELS


def takes_post_ops(unary: Unary | Unaries | None) -> bool:
    """Whether the Winograd kernels can apply this eltwise chain: none, or one plain ReLU (v2.6's
    ``wino_2x3`` / ``wino_4x3`` accept ``eltwise_relu`` with alpha 0 only; anything else makes
    ``plan`` return None, so the direct conv runs)."""
    chain = _chain(unary)
    return not chain or (len(chain) == 1 and chain[0][0] == ELTWISE["relu"] and chain[0][1] == 0.0)


def _v2_eltwise(unary: Unary | Unaries | None) -> list[tuple[str, float, float]]:
    return [(_NAMES.get(alg, f"{alg:#x}"), float(a), float(b)) for alg, a, b in _chain(unary)]


_lock = threading.RLock()  # every libdnnl.so.2 call: creation and execution (see plan())
_scratch: list[np.ndarray] = [np.empty(0, np.uint8) for _ in range(3)]


def _scratch_ptrs(*sizes: int, touch: bool = False) -> list[int]:
    """Addresses of the shared buffers (blocked source, blocked destination, the kernel's
    scratchpad), grown to these sizes in bytes (64-byte aligned). ``touch``: a grown buffer gets
    every page written now (a plan bound at load: else its first run faults in some MB of them,
    GoogLeNet's first Winograd conv 6-12 ms against 1 ms later). Call with ``_lock`` held."""
    out = []
    for i, need in enumerate(sizes):
        if _scratch[i].size < need + 64:
            _scratch[i] = np.empty(need + 64, np.uint8)
            if touch:
                ctypes.memset(ptr(_scratch[i]), 0, _scratch[i].nbytes)
        p = ptr(_scratch[i])
        out.append(p + (-p) % 64)
    return out


class _Plan:
    """One Winograd conv for fixed shapes, weight, bias and post-ops: reorder in, conv, reorder out."""

    def __init__(self, x_shape: Sequence[int], w: np.ndarray, b: np.ndarray | None, win: Window,
                 unary: Unary | Unaries | None) -> None:
        n = int(x_shape[0])
        m = int(w.shape[0])
        self.x_shape = tuple(int(d) for d in x_shape)
        self.y_shape = (n, m, *(int(o) for o in win.out))
        self.y_strides = onednn_conv_plan._cl_strides(self.y_shape)
        w = np.ascontiguousarray(w, dtype=np.float32)
        self.b = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
        bias_md = None if self.b is None else c2.MemoryDesc.strided((m,), (1,))
        pd = c2.winograd_pd(c2.MemoryDesc.tagged(self.x_shape, c2.FORMAT_ANY),
                            c2.MemoryDesc.tagged(w.shape, c2.FORMAT_ANY), bias_md,
                            c2.MemoryDesc.tagged(self.y_shape, c2.FORMAT_ANY), win.pads_begin, win.pads_end,
                            _v2_eltwise(unary))
        self.impl = pd.impl_info()
        if "wino" not in self.impl:
            raise DnnlError(f"no Winograd kernel ({self.impl})", 3)
        src_md, dst_md = pd.query_md(c2.QUERY_SRC_MD), pd.query_md(c2.QUERY_DST_MD)
        self.src_bytes, self.dst_bytes = src_md.size(), dst_md.size()
        self.weights = c2.reorder(c2.MemoryDesc.strided(w.shape, [s // 4 for s in w.strides]), ptr(w),
                                  pd.query_md(c2.QUERY_WEIGHTS_MD), keep=w, lock=_lock)
        scratch_md = pd.query_md(c2.QUERY_SCRATCHPAD_MD)
        self.scratch_bytes = scratch_md.size()
        self.src, self.dst, self.scratch = c2.Memory(src_md, 0), c2.Memory(dst_md, 0), c2.Memory(scratch_md, 0)
        args = [(ARG_SRC, self.src), (ARG_WEIGHTS, self.weights), (ARG_DST, self.dst),
                (c2.ARG_SCRATCHPAD, self.scratch)]
        if self.b is not None and bias_md is not None:
            args.append((ARG_BIAS, c2.Memory(bias_md, address("Winograd conv bias B", self.b, (m,)))))
        self.conv = c2.Primitive(pd, args)
        self.src_md = src_md
        self.y_user = c2.Memory(c2.MemoryDesc.strided(self.y_shape, [s // 4 for s in self.y_strides]), 0)
        self.y_reorder = c2.Primitive(c2.reorder_pd(dst_md, self.y_user.md), [(ARG_FROM, self.dst),
                                                                              (ARG_TO, self.y_user)])
        # input strides (bytes) -> (reorder into the blocked source, its user-side memory)
        self.x_reorders: dict[tuple[int, ...], tuple[c2.Primitive, c2.Memory]] = {}

    def reserve(self) -> None:
        """What the first run would make, made now (the plan is bound at load): the shared buffers
        grown to this conv's sizes with their pages written, and the input reorder for a
        channels-last X (the layout GE gives a conv chain)."""
        with _lock:
            _scratch_ptrs(self.src_bytes, self.dst_bytes, self.scratch_bytes, touch=True)
            self._x_reorder(onednn_conv_plan._cl_strides(self.x_shape))

    def _x_reorder(self, strides: tuple[int, ...]) -> tuple[c2.Primitive, c2.Memory]:
        """The reorder of an X with these byte strides into the blocked source (made once per strides)."""
        r = self.x_reorders.get(strides)
        if r is None:
            user = c2.Memory(c2.MemoryDesc.strided(self.x_shape, [s // 4 for s in strides]), 0)
            r = (c2.Primitive(c2.reorder_pd(user.md, self.src_md), [(ARG_FROM, user), (ARG_TO, self.src)]), user)
            self.x_reorders[strides] = r
        return r

    def run(self, x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """``x`` (float32, logical NCHW, any positive strides in whole elements) convolved; the
        result channels-last, in ``out`` when it is a channels-last float32 array of the right
        shape that does not overlap ``x``, else new."""
        if x.dtype != np.float32 or any(s <= 0 or s % 4 for s in x.strides):
            x = np.ascontiguousarray(x, dtype=np.float32)
        check("Winograd conv input X", x, self.x_shape, strides=x.strides)  # (the reorder takes its strides)
        y = out if out is not None and out.dtype == np.float32 and out.shape == self.y_shape \
            and onednn_conv_plan._fits(out, self.y_strides) and not np.may_share_memory(out, x) \
            else onednn.empty_channels_last(self.y_shape)
        ticket = self.weights.ticket  # (read once: a concurrent first run may clear it)
        if ticket is not None:  # queued by a plan build: wait outside the lock its job takes
            ticket.wait()
            self.weights.ticket = None
        with _lock:
            x_reorder, x_user = self._x_reorder(x.strides)
            s, d, sp = _scratch_ptrs(self.src_bytes, self.dst_bytes, self.scratch_bytes)
            x_user.set(ptr(x))
            self.src.set(s)
            self.dst.set(d)
            self.scratch.set(sp)
            self.y_user.set(address("Winograd conv output Y", y, self.y_shape, strides=self.y_strides))
            x_reorder.execute()
            self.conv.execute()
            self.y_reorder.execute()
        return y


# Plans per (weight identity, shapes, geometry, post-ops); None: oneDNN v2 has no Winograd kernel for it.
_plans: dict[tuple[Any, ...], _Plan | None] = {}


def _applies(x_shape: Sequence[int], w: np.ndarray, win: Window, unary: Unary | Unaries | None) -> bool:
    return available() and w.dtype == np.float32 and eligible(x_shape, w.shape, 1, win) and takes_post_ops(unary)


def _create(x_shape: Sequence[int], w: np.ndarray, b: np.ndarray | None, win: Window,
            unary: Unary | Unaries | None, reserve: bool = False) -> _Plan | None:
    with _lock:  # (creating a primitive while another thread runs one crashed oneDNN v2.6)
        try:
            p = _Plan(x_shape, w, b, win, unary)
        except DnnlError:
            return None
        if reserve:  # (under the same hold of the lock: a plan build's helper takes it for long)
            p.reserve()
        return p


def new_plan(x_shape: Sequence[int], w: np.ndarray, b: np.ndarray | None, win: Window,
             unary: Unary | Unaries | None, reserve: bool = False) -> _Plan | None:
    """A plan of its own (not cached) for one bound kernel, or None (the direct algorithm then);
    ``reserve``: with what its first run would make made now (``_Plan.reserve``)."""
    return _create(x_shape, w, b, win, unary, reserve) if _applies(x_shape, w, win, unary) else None


def plan(x_shape: Sequence[int], w: np.ndarray, b: np.ndarray | None, win: Window,
         unary: Unary | Unaries | None) -> _Plan | None:
    """The cached plan for this call (the generic, per-call path), or None when it must take the
    direct algorithm. Cached per weight array and input shape until the weight is collected, as
    ``onednn._plan`` does."""
    if not _applies(x_shape, w, win, unary):
        return None
    # the bias by value: the plan binds a float32 copy of it, so a new bias array that happens to
    # reuse a dropped one's id and address must not find the old plan (found by an adversarial test)
    key = (id(w), ptr(w), w.shape, tuple(x_shape), None if b is None else (b.dtype.str, b.shape, b.tobytes()), win,
           unary, openmp.team())
    with _lock:
        if key not in _plans:
            _plans[key] = _create(x_shape, w, b, win, unary)
            weakref.finalize(w, _plans.pop, key, None)
        return _plans[key]


def conv_winograd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                  out: np.ndarray | None = None, *, residual: np.ndarray | None = None, relu: bool = False,
                  unary: Unary | Unaries | None = None) -> np.ndarray:
    """Conv (ONNX semantics) by Winograd where ``eligible`` and oneDNN v2 has a kernel, else by
    ``onednn.conv_nhwc`` (total: any valid Conv). ``unary`` (else ReLU when ``relu``) is applied
    as eltwise post-ops; a ``residual`` always takes the direct form (its binary post-op has no
    Winograd kernel). Result channels-last (or ``out``)."""
    post: Unary | Unaries | None = unary if unary is not None else onednn.RELU if relu else None
    p = plan(x.shape, w, b, win, post) if residual is None and group == 1 and x.dtype == np.float32 else None
    if p is None:
        return onednn.conv_nhwc(x, w, b, group, win, out, residual=residual, unary=post)
    y = p.run(x, out)
    return onednn._deliver(y, out)


def bound_conv_winograd(w: np.ndarray, b: np.ndarray | None, win: Window, x_shape: tuple[int, ...],
                        unary: Unary | Unaries | None) -> Any:
    """``conv_winograd`` for one static signature as a plan kernel ``k(inputs, attrs, out=None) -> [y]``
    writing into the executor's arena view when it fits; None when there is no Winograd kernel for
    it (the caller binds the direct conv instead). The plan (with its transformed weight) belongs to
    the kernel: it goes when the executor drops the plan that bound it (a model re-planned for many
    input shapes keeps only the plans its executor caches)."""
    p = new_plan(x_shape, w, b, win, unary, reserve=True)
    if p is None:
        return None
    run = p.run

    def kernel(inputs: Any, attrs: Any, out: Any = None) -> list[np.ndarray]:
        o = out[0] if out is not None else None
        y = run(inputs[0], o)
        if o is not None and y is not o:
            o[...] = y
            return [o]
        return [y]

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, layout=Layout.NHWC,
                       packing=Packing.TRANSFORMED, keep=(w, p.b))


# the locks anew in a forked child (a fork beside a loading or running GoogLeNet: the child's next
# load waited for the parent's thread)
omp_fork.renew_in_child(globals(), _lock=threading.RLock, _available_lock=threading.RLock)
