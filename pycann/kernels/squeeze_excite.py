"""SqueezeExcite bound to one static signature (``ops/squeeze_excite.py`` for the semantics).

The channel means are one matrix-vector product with a constant vector of ones (OpenBLAS's
sgemv reads the tensor once, bandwidth-bound on one thread: as fast as oneDNN's two-thread
average pooling in a loop, 19 vs 21 us on EfficientNet's 32x112x112, 124 vs 122 us on 96x160x160,
with no primitive to create at load), then a division by H*W of
the N x C sums: summed first, as ONNX Runtime's GlobalAveragePool, the reference kernel and
oneDNN's pooling do, so a sum that overflows float32 is inf here too (scaling each term by
1/(H*W) first kept it finite, and a NaN gate in ORT finite here); the two 1x1 convs on the
N x C means are small numpy matrix products with weights transposed once here; the gate is
applied by oneDNN's binary Mul with the gate broadcast over H, W (multi-threaded, into the
executor's arena view: over X itself when the memory plan puts Y there, ``inplace``), or by numpy
below ``onednn_binary.MIN_ELEMENTS`` or without oneDNN.

Inside a plan whose kernels use OpenMP the executor holds OpenBLAS to one thread
(``providers.thread_pools.blas_single_thread``), which is what the product wants anyway (it is bandwidth-bound).
A call with another layout, dtype or shape than bound runs the reference kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.kernels.algorithm import Layout, Threads
from pycann.kernels.bind_base import Kernel
from pycann.kernels.bind_base import static_shape as _static
from pycann.kernels.bound import BoundKernel
from pycann.kernels.global_pool import ChannelMeans
from pycann.kernels.providers import openmp
from pycann.kernels.providers.native_args import same_view
from pycann.ops.fused import apply_activation
from pycann.ops.squeeze_excite import _k_squeeze_excite as _reference
from pycann.ops.squeeze_excite import activations, matrices

_F32 = np.dtype(np.float32)


def _mul_primitive(shapes: list[tuple[int, ...]], channels_last: bool) -> Any:
    """oneDNN's binary Mul of X by a gate that broadcasts (``shapes``: X's, the gate's), or None (no
    oneDNN, or too small)."""
    from pycann.kernels.providers import available

    if not available("onednn"):
        return None
    from pycann.kernels.providers import onednn_binary

    return onednn_binary.bound_chain([("Mul", 1, False)], shapes, channels_last)


# Channels-last X whose pixels hold fewer values than this is multiplied as (N, H*W/k, k*C) rows with the
# gate repeated k times: oneDNN's per-channel broadcast over short pixels is slow (EfficientNet-B0's
# 32x112x112: 53 us, the (1, 392, 1024) view 27 us; 96x56x56 41 -> 22 us; from C = 240 on, equal).
TILE_ROW = 512


def tiling(c: int, hw: int) -> int:
    """k for the tiled gate multiply: the smallest divisor of ``hw`` with ``k * c >= TILE_ROW``; 1 (not
    tiled) when ``c`` is that long already or that divisor would repeat the gate into more than
    ``16 * TILE_ROW`` values (a prime H*W: the repeated gate as large as X, built on every call)."""
    if c >= TILE_ROW:
        return 1
    k = next((k for k in range(2, hw + 1) if hw % k == 0 and k * c >= TILE_ROW), 1)
    return k if k * c <= 16 * TILE_ROW else 1


class GateMul:
    """``Y = X * gate`` for float32 X of ``x_shape`` (N, C, H, W) in the bound layout and an (N, C) gate:
    oneDNN's binary Mul (tiled rows for channels-last X, ``TILE_ROW``), numpy below
    ``onednn_binary.MIN_ELEMENTS`` or without oneDNN. Written into ``o`` when it can be (the executor's
    arena view, X itself when planned in place: elementwise, so safe)."""

    def __init__(self, x_shape: tuple[int, ...], channels_last: bool) -> None:
        n, c, h, w = x_shape
        self.x_shape, self.channels_last = x_shape, channels_last
        self.k = tiling(c, h * w) if channels_last else 1
        if self.k > 1:
            kc = self.k * c
            self.rows = (n, h * w // self.k, kc)
            self.prim = _mul_primitive([self.rows, (n, 1, kc)], False)
        else:
            self.prim = _mul_primitive([x_shape, (n, c, 1, 1)], channels_last)

    @property
    def impl(self) -> str:
        return "numpy" if self.prim is None else self.prim.impl + (f" (rows of {self.k} pixels)" if self.k > 1 else "")

    def __call__(self, x: np.ndarray, g: np.ndarray, o: np.ndarray | None) -> np.ndarray:
        n, c, h, w = self.x_shape
        y = None
        if self.prim is not None and self.k > 1:
            y = self._tiled(x, g, o)
        elif self.prim is not None:
            y = self.prim.run([x, g.reshape(n, c, 1, 1)], o)
        if y is None:
            if o is not None and (not np.may_share_memory(o, x) or same_view(o, x)):
                y = o
            elif self.channels_last:
                y = np.empty((n, h, w, c), np.float32).transpose(0, 3, 1, 2)
            else:
                y = np.empty(self.x_shape, np.float32)
            np.multiply(x, g.reshape(n, c, 1, 1), out=y)
        return y

    def _tiled(self, x: np.ndarray, g: np.ndarray, o: np.ndarray | None) -> np.ndarray | None:
        """The (N, H*W/k, k*C) view's product viewed back as (N, C, H, W); None when X is not one
        dense NHWC block (the caller multiplies with numpy)."""
        n, c, h, w = self.x_shape
        xt = x.transpose(0, 2, 3, 1)
        if not xt.flags.c_contiguous:
            return None
        gt = np.empty((n, self.k, c), np.float32)
        gt[...] = g.reshape(n, 1, c)
        o3 = None
        if o is not None:
            ot = o.transpose(0, 2, 3, 1)
            o3 = ot.reshape(self.rows) if ot.flags.c_contiguous else None  # (a reshape of a strided view would copy)
        assert self.prim is not None
        y3 = self.prim.run([xt.reshape(self.rows), gt.reshape(n, 1, self.k * c)], o3)
        if y3 is None:
            return None
        return o if y3 is o3 else y3.reshape(n, h, w, c).transpose(0, 3, 1, 2)  # (o itself: no copy back)


# A 1x1 conv of the gate whose weight has at least this many elements runs as oneDNN's matmul: in a
# model the weight comes from L3 or memory, and two threads read it faster than one numpy thread
# (MobileNetV3's 960 x 240 blocks: ~80 us a block against ~87); smaller ones (EfficientNet's C/24
# reductions, 55K elements at most) stay numpy calls, cheaper than a primitive call (bench/RESULTS.md).
FC_ONEDNN_MIN = 1 << 16
# Keep the OpenMP team spinning between the conv before the block and the gate multiply (the means and
# the small convs run on the calling thread; ``openmp.keep_warm``). Read when a plan binds its kernels.
KEEP_WARM = True


def _fc(wt: np.ndarray, b: np.ndarray | None, n: int) -> Any:
    """``z = s @ wt + b`` for N x K means ``s``: oneDNN's bound matmul for a large ``wt``, else None."""
    from pycann.kernels.providers import available

    if wt.size < FC_ONEDNN_MIN or not available("onednn"):
        return None
    from pycann.kernels.providers import onednn_matmul

    return onednn_matmul.bound_matmul(wt, b, (n, wt.shape[0]), None, min_flops=0)


def bound_squeeze_excite(x_shape: tuple[int, ...], w1t: np.ndarray, b1: np.ndarray | None, w2t: np.ndarray,
                         b2: np.ndarray | None, acts: tuple[tuple[str, float, float], tuple[str, float, float]],
                         channels_last: bool) -> BoundKernel:
    """The kernel for float32 X of ``x_shape`` (N, C, H, W; H * W > 0) laid out channels-last or
    C-contiguous: ``run(inputs, attrs, out=None) -> [Y]`` (``inputs``: X, W1, B1, W2, B2; the
    weights are the ones given here, transposed: W1 as C x R, W2 as R x C, float32)."""
    n, c, h, w = x_shape
    means = ChannelMeans(x_shape)
    mul = GateMul(x_shape, channels_last)
    # per 1x1 conv: (oneDNN's bound matmul or None, transposed weight, bias, activation)
    convs = [(_fc(wt, b, n), wt, b, act) for wt, b, act in ((w1t, b1, acts[0]), (w2t, b2, acts[1]))]
    warm = openmp.keep_warm if KEEP_WARM else None

    def excite(s: np.ndarray) -> np.ndarray:
        for fc, wt, b, act in convs:
            if fc is None:
                s = s @ wt
                if b is not None:
                    s += b
            else:
                s = fc.run([s], None)[0]
            apply_activation(s, *act)
        return s

    def gated(x: np.ndarray, o: np.ndarray | None) -> np.ndarray:
        """Y for an X of the bound layout: into ``o`` when the primitive (or numpy) can write there."""
        s = means.of(x, channels_last)
        if warm is not None:
            warm()  # the gate multiply's team: still spinning from the conv before (the means took ~5-25 us)
        return mul(x, excite(s), o)

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any],
               out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        x = inputs[0]
        o = out[0] if out is not None else None
        if not means.fits(x, channels_last):
            y = _reference(inputs, attrs)[0]
        else:
            y = gated(x, o)
        if o is None:
            return [y]
        if y is not o:
            o[...] = y  # the executor reads its arena view
        return [o]

    uses_omp = mul.prim is not None or any(fc is not None for fc, _, _, _ in convs)
    # (inplace: the executor may plan Y over X's buffer; the means are taken before the gate is written)
    return BoundKernel(kernel, writes_out=True, inplace=True, threads=Threads.OPENMP if uses_omp else Threads.BLAS,
                       layout=Layout.NHWC if channels_last else Layout.NCHW, keep=(means, convs, mul),
                       impl="sgemv+" + ("onednn:matmul" if any(fc is not None for fc, _, _, _ in convs) else "numpy") + "+"
                       + mul.impl)


SEOperands = tuple[tuple[int, ...], np.ndarray, "np.ndarray | None", np.ndarray, "np.ndarray | None",
                   tuple[tuple[str, float, float], tuple[str, float, float]]]


def block_operands(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None],
                   consts: Sequence[np.ndarray | None]) -> SEOperands | None:
    """(X's static shape, W1 as C x R, B1, W2 as R x C, B2, the activations) of a block whose X is static
    float32 and whose weights and biases (when given) are constant float32; else None (the reference
    kernel runs, and raises for operands that do not fit)."""
    xs = _static(ins[0]) if ins else None
    if xs is None or len(xs) != 4 or ins[0].dtype != 1 or 0 in xs:  # type: ignore[union-attr]
        return None
    cs = list(consts[:5]) + [None] * (5 - len(consts[:5]))
    given = [i < len(ins) and ins[i] is not None for i in range(5)]
    if cs[1] is None or cs[3] is None or any(given[i] and cs[i] is None for i in (2, 4)):
        return None  # a weight or bias computed at run time
    if any(a is not None and a.dtype != _F32 for a in cs[1:5]):
        return None
    try:
        w1t, b1, w2t, b2 = matrices(cs[1], cs[2], cs[3], cs[4], xs[1])
        return xs, w1t, b1, w2t, b2, activations(attrs)
    except ValueError:
        return None


def prepare_squeeze_excite(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None],
                           consts: Sequence[np.ndarray | None], outs: Sequence[TensorDesc | None]) -> Kernel | None:
    """The plan's kernel for a SqueezeExcite of static float32 X with constant float32 weights (and
    biases, when given), else None (the reference kernel runs)."""
    ops = block_operands(attrs, ins, consts)
    if ops is None:
        return None
    xs, w1t, b1, w2t, b2, acts = ops
    return bound_squeeze_excite(xs, w1t, b1, w2t, b2, acts, attrs.get("_layout") == "NHWC")  # type: ignore[return-value]
