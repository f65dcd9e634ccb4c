"""bfloat16 ConvTranspose whose kernel equals its stride (the patch upsampling of DB / FPN heads) in
oneDNN's native bf16 matmul: the bf16 precision modes' FusedConvTranspose without widening.

Semantics: ONNX ConvTranspose-11/22 with 2-D kernel == stride, no padding, no dilation, one group,
output = input x stride (``specs.patch_geometry``). Nothing overlaps, so every input pixel writes
its own kh x kw patch: ``Y[n, m, h*kh + i, w*kw + j] = post(sum_c X[n, c, h, w] W[c, m, i, j] + B[m])``,
a product of the channels-last input (pixels, C) with the weight rearranged as (C, kh * kw * M), as
``onednn_pointwise.PatchDeconv`` computes it in float32. Here the operands stay bf16 and oneDNN
accumulates in float32, adds the bias and applies the activation (eltwise post-ops) to the float32
sum, then rounds once to the bf16 result: what the native bf16 convolutions do (``onednn_bf16.conv``).

Why: without it the bf16 modes widened the input to float32 and rounded the result back, each a
single-threaded ml_dtypes pass (PP-OCRv4 det at 640 x 640: its two heads 2.1 + 1.6 ms in
``allow_fp32_to_bf16`` against 1.3 + 1.1 ms in float32; docs/precision.md).

Two forms, as PatchDeconv's: one batched product per kernel row ``i`` ((N*H) products of (W, C) x
(C, kw*M)) written straight into the strided rows of the channels-last output; or, when a patch row
is narrow (kw * M <= ``NARROW_COLUMNS``: a 1-channel probability map, where the batched form runs
N * H tiny products), one dense product (pixels, C) x (C, kh*kw*M) and a copy of its rows into the
patches. Primitives are per input shape (a static plan has one) and weight; bf16 inputs are treated
as the native bf16 kernels treat them (a subnormal input counts as zero in AVX512_BF16's dot
products).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from pycann.dtypes import bfloat16, is_bfloat16
from pycann.kernels.providers import omp_fork, onednn_bf16
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.onednn_eltwise import Unaries, Unary, _chain
from pycann.kernels.providers.onednn_pointwise import NARROW_COLUMNS
from pycann.kernels.providers.specs import patch_geometry
from pycann.ops.nn.spatial import Window

__all__ = ["conv_transpose_patches", "stats"]

_BF16 = capi.BF16
_counts = {"patch_deconv": 0}


def stats() -> dict[str, int]:
    """Calls served here in this process (tests check the path ran)."""
    return dict(_counts)


class _PatchPlan:
    """The primitive(s) of one weight (C, M, kh, kw), input shape (N, C, H, W), bias and post-ops."""

    def __init__(self, x_shape: tuple[int, ...], w: np.ndarray, with_bias: bool, post: Unaries) -> None:
        n, c, h, wd = x_shape
        _, m, kh, kw = (int(d) for d in w.shape)
        cols = kw * m
        self.kh, self.cols, self.wd = kh, cols, wd
        self.y_shape = (n, m, h * kh, wd * kw)
        self.dense = cols <= NARROW_COLUMNS
        ops = [("eltwise", *u) for u in post]
        if self.dense:
            pixels, width = n * h * wd, kh * cols
            # column (i * kw + j) * M + o holds W[c, o, i, j]
            self.weights = [np.array(w.transpose(0, 2, 3, 1).reshape(c, width), order="C", copy=True)]
            src = capi.MemoryDesc.strided((pixels, c), (c, 1), dt=_BF16)
            wei = capi.MemoryDesc.strided((c, width), (width, 1), dt=_BF16)
            bias = capi.MemoryDesc.strided((1, width), (width, 1)) if with_bias else None
            dst = capi.MemoryDesc.strided((pixels, width), (width, 1), dt=_BF16)
        else:
            width = cols
            # kernel row i as (C, kw * M): column j * M + o holds W[c, o, i, j]
            rows = np.array(w.transpose(2, 0, 3, 1).reshape(kh, c, cols), order="C", copy=True)
            self.weights = [rows[i] for i in range(kh)]
            src = capi.MemoryDesc.strided((n * h, wd, c), (wd * c, c, 1), dt=_BF16)
            wei = capi.MemoryDesc.strided((1, c, cols), (c * cols, cols, 1), dt=_BF16)
            bias = capi.MemoryDesc.strided((1, 1, cols), (cols, cols, 1)) if with_bias else None
            # output row h * kh + i of image n is batch n * H + h of kernel row i's product
            dst = capi.MemoryDesc.strided((n * h, wd, cols), (kh * wd * cols, cols, 1), dt=_BF16)
        self.width = width
        pd = capi_ops.matmul_pd(src, wei, bias, dst, capi_ops.Attr(ops))
        self.impl = pd.fast_impl()
        self.src, self.wei, self.dst = capi.Memory(src, 0), capi.Memory(wei, 0), capi.Memory(dst, 0)
        args = [(capi.ARG_SRC, self.src), (capi.ARG_WEIGHTS, self.wei), (capi.ARG_DST, self.dst)]
        self.bias = capi.Memory(bias, 0) if bias is not None else None
        if self.bias is not None:
            args.append((capi.ARG_BIAS, self.bias))
        self.prim = capi.Primitive(pd, args)
        self.lock = omp_fork.fork_safe(threading.Lock())  # the memories are re-pointed per call

    def run(self, x: np.ndarray, b: np.ndarray | None, y: np.ndarray) -> None:
        """``x``: bf16 channels-last of the plan's input shape; ``y``: bf16 channels-last output."""
        tiled = None
        if self.bias is not None:
            assert b is not None
            tiled = np.tile(np.asarray(b, dtype=np.float32), self.width // b.shape[0])  # column (.., o) gets B[o]
        t = np.empty((x.shape[0] * x.shape[2] * x.shape[3], self.width), bfloat16()) if self.dense else None
        with self.lock:
            self.src.set(capi.ptr(x))
            if self.bias is not None and tiled is not None:
                self.bias.set(capi.ptr(tiled))
            if t is not None:
                self.wei.set(capi.ptr(self.weights[0]))
                self.dst.set(capi.ptr(t))
                self.prim.execute()
            else:
                for i in range(self.kh):
                    self.wei.set(capi.ptr(self.weights[i]))
                    self.dst.set(capi.ptr(y) + i * self.wd * self.cols * 2)
                    self.prim.execute()
        if t is not None:
            n, _, h, wd = x.shape
            # pixel (n, h, w)'s patch row i lands in output row h * kh + i, columns w * kw .. (j, o)
            src = t.reshape(n, h, wd, self.kh, self.cols).transpose(0, 1, 3, 2, 4)
            dst = y.transpose(0, 2, 3, 1).reshape(n, h, self.kh, wd, self.cols)  # (a view: y is channels-last)
            # the bits as they are (no conversion), a patch row's kw * M values as one item when they
            # fill 4 or 8 bytes: numpy's strided copy of 2-byte items is ~5x slower per byte
            size = next(k for k in (8, 4, 2) if (2 * self.cols) % k == 0 and capi.ptr(y) % k == 0 and capi.ptr(t) % k == 0)
            item = np.dtype(f"u{size}")
            np.copyto(dst.view(item), src.view(item))


def conv_transpose_patches(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                           out_sizes: Sequence[int], post: Unary | Unaries | None = None,
                           out: np.ndarray | None = None) -> np.ndarray | None:
    """``post(ConvTranspose(x, w, b))`` (ConvTranspose-11/22; ``win`` and ``out_sizes`` from
    ``conv_transpose_geometry``) for bfloat16 ``x`` (N, C, H, W, any strides) and ``w`` (C, M, kh, kw)
    with kernel == stride (module doc); ``b``: (M,) of any float dtype, used as float32; ``post``:
    oneDNN eltwise post-ops on the float32 sum. The bf16 result is channels-last, written into ``out``
    when that is a writable bf16 channels-last array of the output's shape. None when the native bf16
    kernels are not here, the geometry is another, or oneDNN rejects it (the caller widens)."""
    if not onednn_bf16.native() or not is_bfloat16(x.dtype) or not is_bfloat16(w.dtype) or x.ndim != 4 \
            or w.ndim != 4 or not patch_geometry(w.shape, group, win, x.shape, out_sizes) or 0 in x.shape \
            or 0 in w.shape or (b is not None and b.shape != (w.shape[1],)):
        return None
    x = onednn_bf16._to_channels_last(x)
    if not x.flags.aligned or any(d > 1 and s != 2 * e for d, s, e in zip(x.shape, x.strides, capi.layout_strides(x.shape, True))):
        # a channels-last view that is not dense (a channel slice, a step in H or W): the primitives
        # read the input as dense (pixels, C) rows, so it is made dense first
        dense = onednn_bf16._channels_last(x.shape)
        dense.view(np.uint16)[...] = x.view(np.uint16)
        x = dense
    x_shape = tuple(int(d) for d in x.shape)
    post_ops = _chain(post)
    key = ("patch_deconv", capi.ptr(w), w.shape, w.strides, x_shape, x.strides, b is not None, post_ops)
    try:
        plan = onednn_bf16._cached(key, lambda: _PatchPlan(x_shape, w, b is not None, post_ops), w)
    except capi.DnnlError:
        return None
    y_shape = plan.y_shape
    cl = tuple(2 * s for s in capi.layout_strides(y_shape, True))
    if out is not None and is_bfloat16(out.dtype) and out.shape == y_shape and out.flags.writeable \
            and out.strides == cl and not np.may_share_memory(out, x):
        y = out
    else:
        y = onednn_bf16._channels_last(y_shape)
    try:
        plan.run(x, b, y)
    except capi.DnnlError:
        return None
    _counts["patch_deconv"] += 1
    return y
