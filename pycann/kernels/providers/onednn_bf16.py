"""bfloat16 convolutions and matmuls in oneDNN's native bf16 kernels (AVX512_BF16 / AMX), C API.

Used by the bf16 precision modes (``allow_fp32_to_bf16``, ``allow_mix_precision_bf16``; docs/precision.md):
their matrix ops read bfloat16 activations and weights (the PrecisionMode pass converted the
weights once at compile time). Here oneDNN multiplies the bf16 operands with float32 accumulation,
as the NPU's cube unit does, and the casts are part of the primitive, not separate passes:

* Conv / FusedConv: bf16 source (any strides), bf16 weight reordered once into the primitive's
  blocked layout (``onednn_packed``, per weight array), float32 bias, the residual add and the
  activation as post-ops applied to the float32 accumulator, one rounding to the bf16 destination,
  which is channels-last (the executor's arena buffer when LayoutSelection made the chain NHWC).
* MatMul / FusedMatMul: bf16 operands, float32 destination (the caller's float32 epilogue reads it).

Without a CPU with ``avx512_bf16`` or ``amx_bf16`` (Linux ``/proc/cpuinfo``) or without libdnnl,
``native()`` is False and every entry point returns None: the callers keep the float32-emulated
path (widen, compute in float32, round), which gives the same numbers more slowly.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pycann.dtypes import bfloat16, is_bfloat16
from pycann.kernels.algorithm import ONEDNN_CONV_BF16, ONEDNN_MATMUL_BF16, ONEDNN_MATMUL_BF16_PACKED
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import omp_fork, onednn_packed, openmp
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.onednn_eltwise import Unaries, Unary, _chain
from pycann.kernels.providers.specs import ConvSpec, GemmSpec, Implementation
from pycann.ops.nn.spatial import Window

__all__ = ["ALGORITHMS", "BF16", "bf16_choice", "conv", "cpu_has_bf16", "kernel_note", "matmul", "matmul_plan", "native",
           "relu_keeping_nan", "stats"]

BF16 = capi.BF16  # dnnl_data_type_t dnnl_bf16
_MAX_PLANS = 512
_lock = threading.Lock()
_plans: dict[tuple[Any, ...], Any] = {}
_counts = {"conv": 0, "matmul": 0}


@lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (Linux ``/proc/cpuinfo``; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split())
    except OSError:
        pass
    return frozenset()


def cpu_has_bf16() -> bool:
    """True when the CPU advertises bfloat16 dot products (``avx512_bf16`` or ``amx_bf16``)."""
    return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())


@lru_cache(maxsize=1)
def native() -> bool:
    """bf16 kernels run natively here: the CPU has them and libdnnl (oneDNN v3 C API) loads."""
    if not cpu_has_bf16():
        return False
    from pycann.kernels.providers import onednn

    return onednn.available()


def _cpu_has_fp16() -> bool:
    return bool({"avx512_fp16", "amx_fp16"} & _cpu_flags())


def kernel_note(labels: set[str]) -> str:
    """What computes the reduced-precision matrix ops of a compiled graph on this machine, for the
    PrecisionMode pass's ``atc --log=info`` line (``labels``: its compute-dtype labels, "bf16" / "fp16")."""
    note = ""
    if "bf16" in labels:
        note += ("; bf16 matrix ops: oneDNN native bf16 kernels (avx512_bf16/amx_bf16, fp32 accumulation; "
                 "ConvTranspose: native when its kernel equals its stride, else its bf16 operands computed in float32)"
                 if native() else
                 "; bf16 matrix ops: emulated in float32 (widen, compute, round; " +
                 ("libdnnl not loadable)" if cpu_has_bf16() else "this CPU has no avx512_bf16/amx_bf16)"))
    if "fp16" in labels:
        note += ("; fp16 matrix ops: emulated in float32 (pycann has no native float16 kernels" +
                 (")" if _cpu_has_fp16() else "; this CPU has no avx512_fp16/amx_fp16 either)"))
    return note


def stats() -> dict[str, int]:
    """Calls served by the native bf16 kernels in this process (tests check the path ran)."""
    return dict(_counts)


def _md(shape: Sequence[int], a_strides: Sequence[int], itemsize: int, dt: int) -> capi.MemoryDesc:
    return capi.MemoryDesc.strided(shape, _canonical(tuple(shape), [s // itemsize for s in a_strides]), dt=dt)


def _canonical(shape: tuple[int, ...], st: list[int]) -> list[int]:
    """Element strides with those of size-1 dims replaced by the dense channels-last or NCHW value
    the others imply: numpy leaves them arbitrary (an SE block's (1, C, 1, 1) channels-last view has
    strides (C, 1, 1, 1)), and oneDNN then matches no JIT layout and takes its reference kernel.
    For an image (rank 4 and up) channels-last first: where both fit (a 1 x 1 map, one channel)
    that is the layout of oneDNN's brgemm bf16 convolutions; as NCHW a (1, C, 1, 1) SE conv took the
    bf16 ``gemm:jit`` one, which fails (invalid_arguments) when executed on another thread than the
    one that made it, as a plan's kernels are (a forked child's plans run on a fresh thread: it then
    fell back to torch, which crashed there). A rank-3 matmul operand keeps row-major first."""
    if len(shape) < 3 or 1 not in shape:
        return st
    orders = (range(len(shape)), (0, *range(2, len(shape)), 1))
    for order in orders if len(shape) < 4 else orders[::-1]:
        dense, acc = [0] * len(shape), 1
        for i in reversed(list(order)):
            dense[i], acc = acc, acc * shape[i]
        if all(s == d or n == 1 for s, d, n in zip(st, dense, shape)):
            return dense
    return st


def _channels_last(shape: tuple[int, ...]) -> np.ndarray:
    """An uninitialised bf16 array of logical ``shape`` (N, C, *spatial) laid out channels-last."""
    perm = (0, *range(2, len(shape)), 1)
    inv = tuple(int(i) for i in np.argsort(perm))
    return np.empty([shape[p] for p in perm], bfloat16()).transpose(inv)


def _to_channels_last(a: np.ndarray) -> np.ndarray:
    if a.ndim < 3 or a.strides[1] == a.itemsize:
        return a
    if not is_bfloat16(a.dtype):
        out = np.empty(a.shape, a.dtype)
        out[...] = a
        return out
    out = _channels_last(a.shape)
    if a.size >= _RELAYOUT_MIN:
        try:  # a oneDNN reorder: ml_dtypes copies one 2-byte element at a time (1.3 ms for a 3 x 640 x 640 stem input)
            _relayout(a, out)
            return out
        except capi.DnnlError:
            pass
    out.view(np.uint16)[...] = a.view(np.uint16)  # (integer items: ~25 % faster than the bf16 dtype's copy)
    return out


_RELAYOUT_MIN = 1 << 15
_relayouts: dict[tuple[Any, ...], capi.Reorder] = {}


def _relayout(a: np.ndarray, out: np.ndarray) -> None:
    """Copy bf16 ``a`` into ``out`` (same shape, other strides) with a cached oneDNN reorder."""
    key = (a.shape, a.strides, out.strides, openmp.team())
    with _lock:
        p = _relayouts.get(key)
    if p is None:
        p = capi.Reorder(_md(a.shape, a.strides, 2, BF16), _md(out.shape, out.strides, 2, BF16))
        with _lock:
            if len(_relayouts) >= 64:
                _relayouts.clear()
            _relayouts[key] = p
    p.run(capi.ptr(a), capi.ptr(out))


def _post_ops(residual: np.ndarray | None, post: Unaries, in_place: bool = False) -> tuple[Any, list[tuple[Any, ...]]]:
    """(the residual's memory desc or None, the attr's post-ops): a binary add of the residual
    (bf16 or float32, as given), or with ``in_place`` (the destination holds the residual) oneDNN's
    "sum" post-op, then the eltwise chain ``post``."""
    ops: list[tuple[Any, ...]] = []
    res_md = None
    if in_place:
        ops.append(("sum", 1.0))  # acc + dst (bf16 widened exactly), as the binary add computes it
    elif residual is not None:
        res_md = _md(residual.shape, residual.strides, residual.itemsize,
                     BF16 if is_bfloat16(residual.dtype) else capi.F32)
        ops.append(("binary_add", res_md))
    ops += [("eltwise", *u) for u in post]
    return res_md, ops


def _optional_args(args: list[tuple[int, Any]], bias_md: Any, res_md: Any) -> tuple[Any, Any]:
    """Memories for the optional bias and residual operands (None when absent), appended to ``args``."""
    bias = capi.Memory(bias_md, 0) if bias_md is not None else None
    if bias is not None:
        args.append((capi.ARG_BIAS, bias))
    res = capi.Memory(res_md, 0) if res_md is not None else None
    if res is not None:
        args.append((capi.arg_post_op_src1(0), res))
    return bias, res


_AMX_RELO = "jit:avx512_core_amx"  # not brgconv:avx512_core_amx, brgconv_1x1:avx512_core_amx


class _ConvPlan:
    """One bf16 convolution primitive for fixed shapes, strides, weight and post-ops."""

    def __init__(self, x: np.ndarray, w: np.ndarray, with_bias: bool, group: int, win: Window,
                 y: np.ndarray, residual: np.ndarray | None, post: Unaries, finite: bool = False,
                 in_place: bool = False) -> None:
        m = w.shape[0]
        src = _md(x.shape, x.strides, 2, BF16)
        dst = _md(y.shape, y.strides, 2, BF16)
        ws = [s // 2 for s in w.strides]
        wdims, wstr = [group, m // group, *w.shape[1:]], [m // group * ws[0], *ws]
        if group == 1:
            wdims, wstr = wdims[1:], wstr[1:]
        w_user = capi.MemoryDesc.strided(wdims, wstr, dt=BF16)
        bias = capi.MemoryDesc.strided((m,), (1,)) if with_bias else None
        res_md, ops = _post_ops(residual, post, in_place)
        geo = (win.strides, [d - 1 for d in win.dilations], win.pads_begin, win.pads_end)
        pd = capi_ops.convolution_pd(src, capi.MemoryDesc.any(wdims, dt=BF16), bias, dst, *geo, capi_ops.Attr(ops))
        self.impl = pd.impl_info()
        while self.impl.startswith(_AMX_RELO) and not finite:
            # oneDNN's AMX "reduced lowering" kernel (small input channel counts: an RGB stem) packs
            # kw x ic into the reduction with zero weights for the padding, multiplied by the
            # neighbouring pixels: an inf or NaN input turns outputs outside its receptive field into
            # NaN (0 x inf), where the spec's (and ONNX Runtime's) result is finite. The next
            # implementation oneDNN offers (jit_bf16, brgconv) multiplies only the window; a caller
            # that proved every input value finite (``finite``: the NaN guard's bound) keeps the
            # AMX kernel (ResNet-50's 7x7 stem: ~3x faster than jit_bf16 on an AMX Xeon).
            if not pd.next_impl():
                raise capi.DnnlError(f"bf16 convolution ({self.impl}: NaN outside the window)", 3)
            self.impl = pd.fast_impl()
        if "gemm" in self.impl:
            # oneDNN's bf16 gemm convolution fails when another thread than its maker executes it
            # (see ``_canonical``): not taken; the caller's fallback computes the conv
            raise capi.DnnlError(f"bf16 convolution ({self.impl}: runs on its making thread only)", 3)
        self.weights = onednn_packed.packed(w, w_user, pd.query_md(capi.QUERY_WEIGHTS_MD))  # once per weight
        self.src, self.dst = capi.Memory(src, 0), capi.Memory(dst, 0)
        args = [(capi.ARG_SRC, self.src), (capi.ARG_WEIGHTS, self.weights), (capi.ARG_DST, self.dst)]
        self.bias, self.res = _optional_args(args, bias, res_md)
        self.prim = capi.Primitive(pd, args)
        self.lock = omp_fork.fork_safe(threading.Lock())

    def run(self, x: np.ndarray, b: np.ndarray | None, y: np.ndarray, residual: np.ndarray | None) -> None:
        with self.lock:
            self.src.set(capi.ptr(x))
            self.dst.set(capi.ptr(y))
            if self.bias is not None and b is not None:
                self.bias.set(capi.ptr(b))
            if self.res is not None and residual is not None:
                self.res.set(capi.ptr(residual))
            self.prim.execute()


def _cached(key: tuple[Any, ...], make: Any, weight: np.ndarray | None = None) -> Any:
    """The plan for ``key``, made on first use. A plan holding a packed ``weight`` is dropped when
    the array owning the weight's memory goes away: its address may be reused by another weight."""
    key = (*key, openmp.team())  # a primitive's team is fixed at creation
    with _lock:
        plan = _plans.get(key)
    if plan is None:
        plan = make()
        with _lock:
            if len(_plans) >= _MAX_PLANS:
                _plans.pop(next(iter(_plans)))
            _plans[key] = plan
        if weight is not None:
            weakref.finalize(onednn_packed.owner(weight), _forget, key)
    return plan


def _forget(key: tuple[Any, ...]) -> None:
    with _lock:
        _plans.pop(key, None)


def _layout_key(a: np.ndarray | None) -> tuple[Any, ...] | None:
    return None if a is None else (a.shape, a.strides, a.dtype.str)


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
         residual: np.ndarray | None = None, post: Unary | Unaries | None = None,
         out: np.ndarray | None = None, finite: bool = False) -> np.ndarray | None:
    """bf16 Conv (ONNX Conv semantics, 1-3 spatial dims) ``post(x (*) w + b + residual)``.

    ``x``, ``w``: bfloat16 (ml_dtypes); ``b``: any float dtype (used as float32); ``residual``: the
    output's shape, bfloat16 or float32, any strides; ``post``: oneDNN eltwise post-ops
    (``onednn_eltwise.onednn_unary``). Accumulation, bias, residual and ``post`` are float32; the
    result is rounded once to bfloat16 and written into ``out`` (bfloat16, the output's shape, any
    strides) or a new channels-last array, which is returned. ``finite``: the caller proved every
    value of ``x`` (and ``residual``) finite, which lets an AMX kernel that multiplies zero weights by
    pixels outside the window run (``_ConvPlan``). None when the native kernels are not available
    here or oneDNN rejects the shape (the caller computes in float32)."""
    if not native() or not is_bfloat16(x.dtype) or not is_bfloat16(w.dtype) or not 1 <= len(win.kernel) <= 3:
        return None
    y_shape = (x.shape[0], w.shape[0], *win.out)
    # oneDNN's bf16 JIT convolutions want channels-last (or blocked) data: on a plain NCHW source
    # only its reference kernel accepts the mix, ~1000x slower. One copy (a chain's entry) instead.
    x = _to_channels_last(x)
    if residual is not None:
        residual = _to_channels_last(residual)
    if out is None or not is_bfloat16(out.dtype) or out.shape != y_shape:
        out = _channels_last(y_shape)
    if residual is not None:
        if not (is_bfloat16(residual.dtype) or residual.dtype == np.float32):
            residual = residual.astype(np.float32)
        if residual.shape != y_shape:
            residual = np.ascontiguousarray(np.broadcast_to(residual, y_shape))
    b32 = None if b is None else np.ascontiguousarray(b, dtype=np.float32)
    post_ops = _chain(post)
    # the executor planned the output over a bf16 residual's buffer (FusedConv's in-place form): the
    # destination holds the summand, accumulated by a "sum" post-op
    in_place = residual is not None and is_bfloat16(residual.dtype) and capi.ptr(residual) == capi.ptr(out) \
        and residual.strides == out.strides
    if residual is not None and not in_place and np.may_share_memory(residual, out):
        out = _channels_last(y_shape)  # (a partial overlap: the binary add would read what it wrote)
    key = ("conv", capi.ptr(w), w.shape, w.strides, _layout_key(x), b is not None, group, win,
           _layout_key(out), _layout_key(residual), post_ops, finite, in_place)
    try:
        plan = _cached(key, lambda: _ConvPlan(x, w, b is not None, group, win, out, residual, post_ops, finite,
                                              in_place), w)
        plan.run(x, b32, out, None if in_place else residual)
    except capi.DnnlError:
        return None
    _counts["conv"] += 1
    return out


def relu_keeping_nan(y: np.ndarray) -> np.ndarray:
    """``max(y, 0)`` in place on a bfloat16 array, NaN kept (ONNX Relu; oneDNN's fused ReLU maps NaN
    to 0). Exact on the rounded values: rounding and ReLU commute. Returns ``y``."""
    v = y.astype(np.float32)
    np.maximum(v, 0, out=v)
    y[...] = v.astype(y.dtype)
    return y


class _MatMulPlan:
    """One bf16 x bf16 matmul primitive for fixed shapes, strides and post-ops; ``packed``: B is a
    constant (a weight), reordered once into the primitive's blocked layout."""

    def __init__(self, a: np.ndarray, b: np.ndarray, y: np.ndarray, bias: np.ndarray | None,
                 residual: np.ndarray | None, post: Unaries, packed: bool) -> None:
        amd, bmd = _md(a.shape, a.strides, 2, BF16), _md(b.shape, b.strides, 2, BF16)
        ymd = _md(y.shape, y.strides, y.itemsize, BF16 if is_bfloat16(y.dtype) else capi.F32)
        bias_md = _md(bias.shape, bias.strides, 4, capi.F32) if bias is not None else None
        res_md, ops = _post_ops(residual, post)
        want = capi.MemoryDesc.any(b.shape, dt=BF16) if packed else bmd
        pd = capi_ops.matmul_pd(amd, want, bias_md, ymd, capi_ops.Attr(ops))
        self.a, self.y = capi.Memory(amd, 0), capi.Memory(ymd, 0)
        self.packed = packed
        self.b = onednn_packed.packed(b, bmd, pd.query_md(capi.QUERY_WEIGHTS_MD)) if packed else capi.Memory(bmd, 0)
        args = [(capi.ARG_SRC, self.a), (capi.ARG_WEIGHTS, self.b), (capi.ARG_DST, self.y)]
        self.bias, self.res = _optional_args(args, bias_md, res_md)
        self.prim = capi.Primitive(pd, args)
        self.lock = omp_fork.fork_safe(threading.Lock())

    def run(self, a: np.ndarray, b: np.ndarray, y: np.ndarray, bias: np.ndarray | None,
            residual: np.ndarray | None) -> None:
        with self.lock:
            self.a.set(capi.ptr(a))
            if not self.packed:
                self.b.set(capi.ptr(b))
            self.y.set(capi.ptr(y))
            if self.bias is not None and bias is not None:
                self.bias.set(capi.ptr(bias))
            if self.res is not None and residual is not None:
                self.res.set(capi.ptr(residual))
            self.prim.execute()
        _counts["matmul"] += 1  # (every native bf16 product: matmul() and bound callers)


def matmul_plan(a: np.ndarray, b: np.ndarray, y: np.ndarray, bias: np.ndarray | None, residual: np.ndarray | None,
                post: Unary | Unaries | None, packed: bool) -> Any:
    """The primitive ``matmul`` runs for these operands (2-D bfloat16 ``a`` and ``b``; ``y`` bfloat16 or
    float32; ``bias`` float32 of shape (1, N); ``residual`` of ``y``'s shape) as an object whose
    ``run(a, b, y, bias, residual)`` re-points the handles and executes: for a caller that binds the
    operands' layouts once (``kernels/bf16_matmul.py``). Raises ``capi.DnnlError`` where oneDNN
    declines."""
    return _MatMulPlan(a, b, y, bias, residual, _chain(post), packed)


def matmul(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, residual: np.ndarray | None = None,
           post: Unary | Unaries | None = None, out_dtype: Any = np.float32, packed: bool = False,
           out: np.ndarray | None = None) -> np.ndarray | None:
    """``post(numpy.matmul(a, b) + bias + residual)`` of bfloat16 operands with float32 accumulation.

    Handled: a 2-D ``b`` (``a`` of any rank >= 2, leading dims folded into rows) and equal-rank
    operands with equal batch dims (attention's batched products). ``bias``: broadcasts along the
    last dim (any float dtype, used as float32); ``residual``: the result's shape (bfloat16 or
    float32); ``post``: oneDNN eltwise post-ops; all applied to the float32 accumulator. The result
    is ``out_dtype`` (float32 or bfloat16), written into ``out`` when it has that dtype, the
    result's shape and C order. ``packed``: ``b`` is a constant (a weight: its packed copy is cached
    by its memory, so it must never change). None when not handled or the native kernels are not
    available (the caller computes in float32)."""
    if not native() or not is_bfloat16(a.dtype) or not is_bfloat16(b.dtype) or a.ndim < 2 or b.ndim < 2:
        return None
    shape = (*a.shape[:-1], b.shape[-1])
    if b.ndim == 2:
        a = a.reshape(-1, a.shape[-1])
    elif not (a.ndim == b.ndim and a.shape[:-2] == b.shape[:-2]):
        return None
    if a.shape[-1] != b.shape[-2] or 0 in a.shape or 0 in b.shape:
        return None
    flat = (*a.shape[:-1], b.shape[-1])
    odt = np.dtype(out_dtype)
    y = out.reshape(flat) if out is not None and out.dtype == odt and out.shape == shape and out.flags.c_contiguous \
        else np.empty(flat, odt)
    b32 = None
    if bias is not None:
        if bias.size != b.shape[-1]:
            return None
        b32 = np.ascontiguousarray(bias, dtype=np.float32).reshape((1,) * (len(flat) - 1) + (b.shape[-1],))
    r = None
    if residual is not None:
        if residual.shape != shape:
            return None
        r = residual if is_bfloat16(residual.dtype) or residual.dtype == np.float32 else residual.astype(np.float32)
        r = r.reshape(flat)
    post_ops = _chain(post)
    key = ("matmul", _layout_key(a), _layout_key(b), capi.ptr(b) if packed else None, packed, _layout_key(y),
           _layout_key(b32), _layout_key(r), post_ops)
    try:
        _cached(key, lambda: _MatMulPlan(a, b, y, b32, r, post_ops, packed), b if packed else None).run(a, b, y, b32, r)
    except capi.DnnlError:
        return None
    return y.reshape(shape)


# ------------------------------------------------------------------ recorded algorithms
# KernelSelection records these on bf16 matrix nodes (so LayoutSelection makes conv chains
# channels-last); the kernels reach ``conv`` / ``matmul`` through the bf16 branches of
# ``pycann.kernels.conv`` / ``fused`` / ``gemm``. ``fn`` is only the float32 fallback (a node whose
# bf16 call was declined): numpy's kernels, so the recorded choice is total.


def _f32_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
              out: np.ndarray | None = None, residual: np.ndarray | None = None, relu: bool = False,
              unary: Any = None) -> np.ndarray:
    y = nb.conv_im2col_gemm(x, w, b, group, win, out)
    if residual is not None:
        y += residual
    if relu:
        np.maximum(y, 0, out=y)
    return y


def _conv_ok(s: Any) -> bool:
    return isinstance(s, ConvSpec) and s.op_type == "Conv" and 1 <= s.n_spatial <= 3


def _matmul_ok(s: Any) -> bool:
    return isinstance(s, GemmSpec) and s.op_type == "MatMul"


def _never(s: Any) -> bool:
    """Specs carry the compute dtype (float32 for bf16 nodes too), so these algorithms are never a
    candidate of the float32 selection; ``bf16_choice`` records them on bfloat16 nodes."""
    return False


ALGORITHMS: list[Implementation] = [
    Implementation(ONEDNN_CONV_BF16, _never, _f32_conv,
                   "oneDNN bf16 conv (AVX512_BF16/AMX), fp32 accumulation, bias/residual/activation post-ops, "
                   "channels-last bf16 result"),
    Implementation(ONEDNN_MATMUL_BF16, _never, lambda a, b, out=None: nb.matmul(a, b, out),
                   "oneDNN bf16 matmul (AVX512_BF16/AMX), fp32 accumulation, B read as it is"),
    Implementation(ONEDNN_MATMUL_BF16_PACKED, _never, lambda a, b, out=None: nb.matmul(a, b, out),
                   "oneDNN bf16 matmul, constant B packed once; bias/residual/activation post-ops"),
]


def bf16_choice(spec: Any, constant_b: bool = False) -> Implementation | None:
    """The native bf16 algorithm for the spec of a Conv/MatMul node with bfloat16 operands on this
    machine (``constant_b``: its B is an initializer, packed once), or None (no bf16 CPU / no
    libdnnl / another op family)."""
    if not native():
        return None
    if _conv_ok(spec):
        return ALGORITHMS[0]
    return (ALGORITHMS[2] if constant_b else ALGORITHMS[1]) if _matmul_ok(spec) else None


# a thread of the parent holding it at an os.fork is not in the child, whose next bf16 call would wait
# for it for ever: the child starts with a fresh one (the relayouts' own locks are never waited for)
omp_fork.renew_in_child(globals(), _lock=threading.Lock)
