"""SqueezeExciteProject bound to one static signature (``ops/squeeze_excite.py`` for the semantics).

Channels-last X (N, C, H, W) is N images of H*W rows of C values; the projection is a matrix product
of those rows with Wp^T (C x M). The gate scales that matrix instead of X: per image,
``B[n] = Wp^T * g[n][:, None]`` (C x M numbers, numpy), then one oneDNN matmul over the batch,
``Y[n] = X[n] @ B[n] + Bp (+ Z[n])`` (bias and residual as the matmul's bias and binary-add post-op),
written into the executor's channels-last arena view. Against SqueezeExcite + the conv: X is read
twice (the means, the product) instead of three times and the gated tensor never written
(EfficientNet-B0's 32 x 112 x 112 block and its projection to 16 channels: ~99 -> ~60 us in a loop;
bench/RESULTS.md). B is a run-time operand, so oneDNN repacks it on every call: that is the M x C
cost the GE pass weighs against the C x H x W of the Mul it removes (``fuse_se_project.py``).

The channel means, the two small convs and the gate are the SqueezeExcite kernel's
(``ChannelMeans``, ``ops.squeeze_excite.gate``). A call with another layout, dtype or shape than
bound runs the reference kernel.
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
from pycann.kernels.squeeze_excite import block_operands
from pycann.ops.squeeze_excite import _project as _reference
from pycann.ops.squeeze_excite import gate

_F32 = np.dtype(np.float32)


def _nhwc_rows(a: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """``a`` (N, C, H, W) laid out channels-last as its dense (N, H*W, C) view, or None."""
    if a.__class__ is not np.ndarray or a.dtype != _F32 or a.shape != shape:
        return None
    t = a.transpose(0, 2, 3, 1)
    if not t.flags.c_contiguous:
        return None  # (a reshape of a strided view would be a copy)
    return t.reshape(shape[0], shape[2] * shape[3], shape[1])


class _Product:
    """``Y = A @ B + bias (+ R)`` over (N, HW, C) A and run-time (N, C, M) B by one oneDNN matmul."""

    def __init__(self, n: int, hw: int, c: int, m: int, bias: bool, residual: bool) -> None:
        from pycann.kernels.providers import onednn_matmul

        d = ((n, hw, m), (hw * m, m, 1))
        post = [("binary_add", d)] if residual else []
        self.plan = onednn_matmul.MatmulPlan(((n, hw, c), (hw * c, c, 1)), ((n, c, m), (c * m, m, 1)), d,
                                             ((1, 1, m), (m, m, 1)) if bias else None, post)
        self.impl = self.plan.impl

    def run(self, a: np.ndarray, b: np.ndarray, y: np.ndarray, bias: np.ndarray | None, r: np.ndarray | None) -> None:
        self.plan.run(a.__array_interface__["data"][0], b.__array_interface__["data"][0],
                      y.__array_interface__["data"][0], None if bias is None else bias.__array_interface__["data"][0],
                      None if r is None else r.__array_interface__["data"][0])


def bound_squeeze_excite_project(x_shape: tuple[int, ...], se: tuple[Any, ...], wp: np.ndarray,
                                 bp: np.ndarray | None, residual: bool) -> BoundKernel | None:
    """The kernel for channels-last float32 X of ``x_shape`` (N, C, H, W): ``run(inputs, attrs, out=None)
    -> [Y]`` (``inputs``: X, W1, B1, W2, B2, Wp, Bp, Z; ``se``: the block's (W1 as C x R, B1, W2 as R x C,
    B2, activations), ``wp``: (M, C, 1, 1), ``bp``: M values or None). None when oneDNN declines the
    product (the reference kernel runs)."""
    from pycann.kernels.providers import onednn_capi as capi

    n, c, h, w = x_shape
    m = int(wp.shape[0])
    hw = h * w
    y_shape = (n, m, h, w)
    try:
        product = _Product(n, hw, c, m, bp is not None, residual)
    except capi.DnnlError:
        return None
    w1t, b1, w2t, b2, acts = se
    wpt = np.ascontiguousarray(wp.reshape(m, c).T, dtype=_F32)  # C x M
    bias = None if bp is None else np.ascontiguousarray(bp, dtype=_F32).reshape(1, 1, m)
    means = ChannelMeans(x_shape)

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any],
               out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        x = inputs[0]
        a = _nhwc_rows(x, x_shape)
        r = None
        if residual:
            z = inputs[7] if len(inputs) > 7 else None
            if not isinstance(z, np.ndarray) or z.shape != y_shape:
                a = None
            else:  # the post-op reads a dense (N, HW, M) residual
                r = _nhwc_rows(z, y_shape)
                if r is None:
                    r = np.ascontiguousarray(z.astype(_F32, copy=False).transpose(0, 2, 3, 1)).reshape(n, hw, m)
        if a is None:
            return _finish(_reference(inputs, attrs)[0], out)
        s = means.of(x, True)
        openmp.keep_warm()  # the product's team: still spinning from the conv before X
        g = gate(s, w1t, b1, w2t, b2, acts)  # N x C
        b = wpt[None, :, :] * g[:, :, None]  # N x C x M: the projection's weights, gated
        o = out[0] if out is not None else None
        yrows = _nhwc_rows(o, y_shape) if o is not None else None
        if yrows is not None and (np.may_share_memory(o, x) or (r is not None and np.may_share_memory(o, r))):
            yrows = None  # (the product writes partial sums before its post-op reads the residual)
        if yrows is None:
            y = np.empty((n, h, w, m), _F32).transpose(0, 3, 1, 2)
            yrows = y.transpose(0, 2, 3, 1).reshape(n, hw, m)
        else:
            y = o  # type: ignore[assignment]
        product.run(a, b, yrows, bias, r)  # (the plan's own lock guards its memory handles)
        return _finish(y, out)

    return BoundKernel(kernel, writes_out=True, threads=Threads.OPENMP, layout=Layout.NHWC,
                       keep=(means, product, wpt, bias), impl=f"sgemv+numpy+{product.impl}")


def _finish(y: np.ndarray, out: Sequence[np.ndarray] | None) -> list[np.ndarray]:
    if out is None:
        return [y]
    o = out[0]
    if y is not o:
        o[...] = y  # the executor reads its arena view
    return [o]


def prepare_squeeze_excite_project(attrs: Mapping[str, Any], ins: Sequence[TensorDesc | None],
                                   consts: Sequence[np.ndarray | None], outs: Sequence[TensorDesc | None]) -> Kernel | None:
    """The plan's kernel for a SqueezeExciteProject of static float32 X laid out channels-last with
    constant float32 weights and biases, on oneDNN; else None (the reference kernel runs)."""
    from pycann.kernels.providers import available

    if attrs.get("_layout") != "NHWC" or not available("onednn"):
        return None
    ops = block_operands(attrs, ins, consts)
    cs = list(consts) + [None] * (8 - len(consts))
    wp, bp = cs[5], cs[6]
    if ops is None or wp is None or wp.dtype != _F32 or (bp is not None and bp.dtype != _F32):
        return None
    xs = ops[0]
    m = wp.shape[0] if wp.ndim == 4 else -1
    if wp.shape[1:] != (xs[1], 1, 1) or (bp is not None and bp.shape != (m,)) \
            or (len(ins) > 6 and ins[6] is not None and bp is None):
        return None  # (a bias computed at run time)
    residual = len(ins) > 7 and ins[7] is not None
    if residual and (_static(ins[7]) != (xs[0], m, xs[2], xs[3]) or ins[7].dtype != 1):  # type: ignore[union-attr]
        return None
    return bound_squeeze_excite_project(xs, ops[1:], wp, bp, residual)  # type: ignore[return-value]
