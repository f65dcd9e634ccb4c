"""The onednn provider: oneDNN's convolutions (and, in ``onednn_matmul``, matmul / Gemm) through
its C API (ctypes), without torch.

Optional: needs ``libdnnl.so.3`` (the ``onednn-cpu-gomp`` wheel, or ``$PYCANN_DNNL_LIB``); see
``onednn_capi``. Loading it costs ~14 MB of RSS against ~180 MB for ``import torch``.

Layout: activations are numpy arrays of logical NCHW shape; results are channels-last (NHWC
strides: ``np.empty((N, H, W, C)).transpose(0, 3, 1, 2)``), so the next conv reads them with
no reorder and numpy ops downstream see ordinary strided arrays. Descriptors carry the arrays'
exact strides, so no format tags are needed; a non channels-last input is converted once.

Each (weight array, shapes, geometry, post-ops) gets a ``_Plan`` (``onednn_conv_plan``): the primitive, the weight
reordered once into the layout the primitive chose (a library-owned buffer shared by every
plan of the same weight and layout: ``onednn_packed``), and memory
objects whose data handles are re-pointed per call. Plans are dropped when the weight array is
garbage-collected (``weakref.finalize``), as ``torch_onednn._packed_weight`` does.

Post-ops run in the order residual add (binary add; sum into a pre-filled destination when the
binary form is unavailable) then activation, i.e. ``act(conv(x) + b + residual)``.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.config import ConfigError
from pycann.kernels.algorithm import (
    ONEDNN_CONV_NHWC,
    ONEDNN_CONV_TRANSPOSE_NHWC,
    ONEDNN_CONV_WINOGRAD,
    Layout,
    Packing,
    Threads,
)
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import (
    omp_fork,
    onednn_bf16,
    onednn_matmul,
    openmp,
)
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers.native_args import address
from pycann.kernels.providers.onednn_conv_descs import ConvDescs
from pycann.kernels.providers.onednn_conv_plan import (
    _Plan,
    # not used here: ``onednn.empty_channels_last`` is a documented name (docs/kernels.md, __all__)
    empty_channels_last,
)
from pycann.kernels.providers.onednn_eltwise import (
    RELU,
    E,
    Unaries,
    Unary,
    _numpy_unary,
    onednn_unary,
)
from pycann.kernels.providers.specs import ConvSpec, Implementation
from pycann.ops.nn.spatial import Window

__all__ = ["E", "RELU", "Unaries", "Unary", "accepts", "available", "bound_conv_nhwc", "conv_nhwc",
           "conv_transpose_nhwc", "empty_channels_last", "native", "onednn_unary"]

_available: bool | None = None
_available_lock = threading.RLock()


def probe_values(shape: tuple[int, ...], salt: int = 0) -> np.ndarray:
    """Deterministic float32 values in [-1, 1] of ``shape`` for the providers' self-checks: irregular enough
    to catch a wrong kernel, without ``numpy.random`` (importing it costs ~8 ms of every model load)."""
    n = math.prod(shape)
    return np.sin(np.arange(n, dtype=np.float64) * 12.9898 + 78.233 * (salt + 1)).astype(np.float32).reshape(shape)


def available() -> bool:
    """True when libdnnl v3 loads, its enums check out and a tiny conv matches numpy."""
    global _available
    if _available is None:
        with _available_lock:  # (two threads binding their first convs at once probe once)
            if _available is None:
                _available = _probe()
    return _available


def _probe() -> bool:
    try:
        capi.load()
        capi.self_check()
        x, w, b = (probe_values(s, i) for i, s in enumerate(((1, 3, 5, 5), (4, 3, 3, 3), (4,))))
        win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (5, 5))
        y = conv_nhwc(x, w, b, 1, win, relu=True)
        ref = np.maximum(nb.conv_im2col_gemm(x, w, b, 1, win), 0)
        return bool(y.strides[1] == 4 and np.allclose(y, ref, rtol=1e-4, atol=1e-4))
    except ConfigError:
        raise  # a bad PYCANN_OMP_WAIT_POLICY / PYCANN_NUM_THREADS is the user's to fix, not "oneDNN missing"
    except Exception:
        return False


def native(x: np.ndarray, w: np.ndarray, win: Window) -> bool:
    """True when ``conv_nhwc`` hands this call to oneDNN (1-3 spatial dims, float32, non-empty)."""
    return accepts(x.dtype, x.size, w, win)


def accepts(x_dtype: np.dtype, x_size: int, w: np.ndarray, win: Window) -> bool:
    """``native`` for an input known only by its dtype and element count (a plan's static signature)."""
    return 1 <= len(win.kernel) <= 3 and x_dtype == np.float32 and w.dtype == np.float32 and x_size > 0 \
        and w.size > 0


# Pointwise convs, and ConvTransposes whose kernel is their stride, not bound to one shape run as
# matmuls with run-time dims (onednn_pointwise): no descriptor or JIT code per new input size.
POINTWISE_ANY_SIZE = True

# Plans by (weight identity, shapes, geometry, post-ops); None records a call oneDNN does not
# implement (or only in its reference loops), which then runs in the numpy provider.
_plans: dict[tuple[Any, ...], _Plan | None] = {}
_MAX_PLANS = 512


def _plan(x_shape: tuple[int, ...], w: np.ndarray, with_bias: bool, group: int, win: Window,
          out_sp: tuple[int, ...], transpose: bool, unary: Unary | Unaries | None, residual: bool) -> _Plan | None:
    key = (id(w), capi.ptr(w), w.shape, w.strides, x_shape, with_bias, group, win, out_sp, transpose, unary, residual,
           openmp.team())
    if key in _plans:
        return _plans[key]
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()  # bounded: a generic plan fed ever new shapes re-creates primitives instead of growing
    try:
        p: _Plan | None = _Plan(x_shape, w, with_bias, group, win, out_sp, transpose, unary, residual)
    except capi.DnnlError:
        p = None
    weakref.finalize(w, _plans.pop, key, None)
    _plans[key] = p
    return p


def _bias(b: np.ndarray | None) -> np.ndarray | None:
    return None if b is None else np.ascontiguousarray(b, dtype=np.float32)


def _deliver(y: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """``y`` copied into ``out`` (reshaped, its layout) when given and it fits, else ``y``."""
    if out is not None and out is not y and out.dtype == np.float32 and out.flags.c_contiguous \
            and out.size == y.size:
        o = out.reshape(y.shape)
        np.copyto(o, y)
        return o
    return y


def conv_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
              out: np.ndarray | None = None, *, residual: np.ndarray | None = None, relu: bool = False,
              unary: Unary | Unaries | None = None) -> np.ndarray:
    """Conv (ONNX semantics, any pads) in oneDNN; result channels-last (or copied into ``out``).

    ``residual`` is added after the bias, then ``unary`` (from ``onednn_unary``; else ReLU when
    ``relu``) is applied, all as post-ops. Non-float32 or empty inputs, or other ranks, go to
    the numpy provider with the same epilogue in numpy.
    """
    post: Unary | Unaries | None = unary if unary is not None else RELU if relu else None
    ok = native(x, w, win)
    if POINTWISE_ANY_SIZE and ok:
        from pycann.kernels.providers import onednn_pointwise as pw

        if pw.pointwise(w, group, win):
            k = pw.plan(w, b is not None, post, residual is not None)
            if k is not None:
                return _deliver(k.run(x, _bias(b), residual, out), out)
    p = _plan(tuple(x.shape), w, b is not None, group, win, tuple(win.out), False, post, residual is not None) \
        if ok else None
    if p is None:
        y = nb.conv_im2col_gemm(x, w, b, group, win, out)
        if residual is not None:
            y += residual
        return _numpy_unary(y, post) if post is not None else y
    return _deliver(p.run(x, _bias(b), residual, out), out)


def _transpose_ok(x: np.ndarray, w: np.ndarray, win: Window, out_sizes: Sequence[int]) -> bool:
    """oneDNN expresses this ConvTranspose: pads_begin >= 0 and an end pad > -stride."""
    if not native(x, w, win) or any(o <= 0 for o in out_sizes):
        return False
    for i, o in enumerate(out_sizes):
        full = (x.shape[2 + i] - 1) * win.strides[i] + win.span(i)
        if win.pads_begin[i] < 0 or full - win.pads_begin[i] - o + win.strides[i] <= 0:
            return False
    return True


def transpose_activation_in_numpy(x: np.ndarray, w: np.ndarray, group: int, win: Window,
                                  out_sizes: Sequence[int], with_bias: bool,
                                  unary: Unary | Unaries | None) -> bool:
    """True when ``conv_transpose_nhwc`` runs these shapes as ``PatchDeconv``'s dense numpy form,
    which applies the activation in numpy (NaN kept as numpy does): its caller's NaN guard, a read
    of the whole input, has nothing to guard (PP-OCRv4 det's 24 -> 1 channel head: 2.4 M values).
    The plan itself is asked (``patch_plan``, cached): when oneDNN rejects it, the call runs in the
    per-shape deconvolution with the activation as a post-op, which the guard must see."""
    if not POINTWISE_ANY_SIZE or not _transpose_ok(x, w, win, out_sizes):
        return False
    from pycann.kernels.providers import onednn_pointwise as pw

    if not (pw.patch_deconv(w, group, win, tuple(x.shape), tuple(out_sizes)) and pw.dense_patches(w)):
        return False
    k = pw.patch_plan(w, with_bias, unary)
    return k is not None and k.dense is not None


def conv_transpose_nhwc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                        out_sizes: tuple[int, ...], out: np.ndarray | None = None,
                        unary: Unary | Unaries | None = None) -> np.ndarray:
    """ConvTranspose (``win`` from ``conv_transpose_geometry``: pads_begin are the output
    offsets) as a oneDNN deconvolution; result channels-last (or copied into ``out``). ``unary``:
    eltwise post-ops applied to the result (FusedConvTranspose's activation). Shapes oneDNN cannot
    express (output offsets beyond its padding rules) go to the numpy provider (then ``unary`` in
    numpy)."""
    ok = _transpose_ok(x, w, win, out_sizes)
    if POINTWISE_ANY_SIZE and ok:
        from pycann.kernels.providers import onednn_pointwise as pw

        if pw.patch_deconv(w, group, win, tuple(x.shape), tuple(out_sizes)):
            k = pw.patch_plan(w, b is not None, unary)
            if k is not None:
                return _deliver(k.run(x, _bias(b), out), out)
    p = _plan(tuple(x.shape), w, b is not None, group, win, tuple(out_sizes), True, unary, False) if ok else None
    if p is None:
        y = nb.conv_transpose(x, w, b, group, win, out_sizes, out)
        return _numpy_unary(y, unary) if unary is not None else y
    return _deliver(p.run(x, _bias(b), None, out), out)


def bound_conv_nhwc(w: np.ndarray, b: np.ndarray | None, group: int, win: Window, x_shape: tuple[int, ...],
                    unary: Unary | Unaries | None, residual: bool, in_place: bool = False,
                    shared: ConvDescs | None = None) -> Any:
    """``conv_nhwc`` for one static signature as a plan kernel ``k(inputs, attrs, out=None) -> [y]``
    (``inputs``: x, w, b[, residual]; float32): primitive, packed weight and bias memory built
    once, so a call re-points the data handles and executes. With ``out`` (the executor's arena
    views, ``k.writes_out``) the result is written there: no allocation, no page faults. ``in_place``: the
    executor planned the output over the residual's buffer, so only the "sum" form is built (any other
    call still works: it copies the residual into the output first). None when oneDNN does not
    implement this conv (the caller keeps its generic kernel). The kernel is
    ``onednn_bound_conv.BoundConv``. ``shared``: the node's shape-independent descriptors, when it
    binds a plan per input shape (``ConvDescs``; made here otherwise)."""
    x_shape = tuple(int(d) for d in x_shape)
    bc = _bias(b)
    # (a node binding a plan per shape shares its bias memory: ``_Plan.run`` never re-points it)
    fixed = shared.bias_memory(bc) if shared is not None and bc is not None and shared.bias is not None else None
    try:
        p = _Plan(tuple(x_shape), w, bc is not None, group, win, tuple(win.out), False, unary, residual, in_place,
                  shared, fixed)
    except capi.DnnlError:
        return None
    if bc is not None and p.bias is not None and fixed is None:
        p.bias.set(address("conv bias B", bc, (p.m,)))
    if len(x_shape) == 4 and x_shape[1] <= 4:
        # an image stem reads the caller's NCHW array: its reorder made now, not in the first run
        # (~0.3-0.5 ms of every CNN's first inference)
        p.input_reorder(x_shape, tuple(4 * math.prod(x_shape[i + 1:]) for i in range(4)))  # (C order)
    from pycann.kernels.providers.onednn_bound_conv import BoundConv

    # (inplace: output 0 may be planned over input 3, the residual, which the post-op reads first)
    return BoundKernel(BoundConv(p, x_shape, residual).kernel(), writes_out=True, inplace=residual,
                       threads=Threads.OPENMP, layout=Layout.NHWC, packing=Packing.PACKED,
                       keep=(w, bc) if shared is None else shared.keep(w, bc))


_F32 = np.dtype(np.float32)
def _conv_ok(s: Any) -> bool:
    return isinstance(s, ConvSpec) and s.op_type == "Conv" and s.dtype == "float32" and s.n_spatial in (1, 2, 3)


def _transpose_spec_ok(s: Any) -> bool:
    return isinstance(s, ConvSpec) and s.op_type == "ConvTranspose" and s.dtype == "float32" \
        and s.n_spatial in (1, 2, 3)


def _wino_ok(s: Any) -> bool:
    """3x3 stride-1 convs Winograd takes (onednn_wino.eligible), when oneDNN v2's library is there."""
    if not (_conv_ok(s) and s.n_spatial == 2):
        return False
    from pycann.kernels.providers import onednn_wino  # (it imports this module)

    return onednn_wino.eligible(s.x_shape, s.w_shape, s.group, s.win) and onednn_wino.available()


def conv_winograd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                  out: np.ndarray | None = None, **post: Any) -> np.ndarray:
    """``onednn_wino.conv_winograd`` (Winograd where it applies, else ``conv_nhwc``)."""
    from pycann.kernels.providers import onednn_wino

    return onednn_wino.conv_winograd(x, w, b, group, win, out, **post)


ALGORITHMS: list[Implementation] = [
    Implementation(ONEDNN_CONV_NHWC, _conv_ok, conv_nhwc,
              "oneDNN C API conv, channels-last, weight packed once, bias/residual/activation post-ops"),
    Implementation(ONEDNN_CONV_WINOGRAD, _wino_ok, conv_winograd,
              "oneDNN v2 Winograd F(2x2|4x4, 3x3) for 3x3 stride-1 convs (libdnnl.so.2), channels-last I/O; "
              "not exact: op_select_implmode high_performance only"),
    Implementation(ONEDNN_CONV_TRANSPOSE_NHWC, _transpose_spec_ok, conv_transpose_nhwc,
              "oneDNN C API deconvolution, channels-last result"),
    *onednn_matmul.ALGORITHMS,  # MatMul / Gemm (onednn_matmul.py)
    *onednn_bf16.ALGORITHMS,  # bfloat16 Conv / MatMul (onednn_bf16.py)
]


# the locks anew in a forked child (a fork beside a loading or running GoogLeNet: the child's next
# load waited for the parent's thread)
omp_fork.renew_in_child(globals(), _available_lock=threading.RLock)
