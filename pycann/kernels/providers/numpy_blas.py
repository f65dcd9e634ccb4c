"""The numpy provider: pycann's own kernels, GEMMs through ``np.matmul`` (the wheel's BLAS).

Always available. Its Conv algorithms are the ones in ``pycann.ops.nn.im2col``; each is total:
``gemm_1x1`` and ``depthwise`` hand shapes they were not made for to ``im2col_gemm``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.kernels.providers import Algorithm, ConvSpec, GemmSpec
from pycann.ops.nn.im2col import conv_1x1, conv_depthwise, conv_im2col, conv_transpose_col2im
from pycann.ops.nn.spatial import Window

_FLOATS = ("float32", "float64")


def available() -> bool:
    """numpy is a hard dependency."""
    return True


def add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """``y += b`` over the channel axis (1), in place; returns ``y``."""
    if b is not None and y.size:
        y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


def _pointwise(x: np.ndarray, w: np.ndarray, win: Window) -> bool:
    return all(k == 1 for k in win.kernel) and not win.padded


def conv_gemm_1x1(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                  out: np.ndarray | None = None) -> np.ndarray:
    """1x1 unpadded conv as one GEMM per group on the (C, H*W) view (else ``im2col_gemm``)."""
    if not _pointwise(x, w, win):
        return conv_im2col_gemm(x, w, b, group, win, out)
    return add_bias(conv_1x1(x, w, group, win, out), b)


def conv_dw(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
            out: np.ndarray | None = None) -> np.ndarray:
    """Depthwise conv (group == C_in == C_out): batched GEMV or shifted multiply-adds."""
    if not (group > 1 and group == x.shape[1] == w.shape[0]):
        return conv_im2col_gemm(x, w, b, group, win, out)
    return add_bias(conv_depthwise(x, w, win, out), b)


def conv_im2col_gemm(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                     out: np.ndarray | None = None) -> np.ndarray:
    """Any conv: patch matrix + one GEMM (1x1 and depthwise shapes take their fast paths)."""
    if _pointwise(x, w, win):
        return add_bias(conv_1x1(x, w, group, win, out), b)
    if group > 1 and group == x.shape[1] == w.shape[0]:
        return add_bias(conv_depthwise(x, w, win, out), b)
    return add_bias(conv_im2col(x, w, group, win, out), b)


def conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, group: int, win: Window,
                   out_sizes: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
    """ConvTranspose as GEMM + col2im (``out`` unused: the result is a crop of a scatter buffer)."""
    y = conv_transpose_col2im(x, w, group, win, out_sizes)
    if b is not None and y.size:
        y = y + b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


# A 2-D B at least this big is read once for all rows of a batched A: numpy's matmul loops over
# A's leading dims (one GEMV per row at decode), reading B again each time once it is out of
# cache (GPT-2's LM head 768 x 50257 at batch 4: 41 ms looped vs 23 ms folded, one thread).
# Smaller weights stay cached between those GEMVs, where the loop is as fast or faster.
FOLD_BYTES = 16 << 20


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul`` (BLAS for float32/float64), into ``out`` when it fits. A C-contiguous A of
    rank > 2 against a 2-D B of ``FOLD_BYTES`` or more is folded into one (rows, K) product."""
    fits = out is not None and out.dtype == np.result_type(a, b)
    if a.ndim > 2 and b.ndim == 2 and b.nbytes >= FOLD_BYTES and a.flags.c_contiguous and a.shape[-1] == b.shape[0]:
        shape = a.shape[:-1] + (b.shape[1],)
        a2 = a.reshape(-1, a.shape[-1])
        if fits and out is not None and out.shape == shape and out.flags.c_contiguous:
            np.matmul(a2, b, out=out.reshape(-1, b.shape[1]))
            return out
        return np.matmul(a2, b).reshape(shape)
    if fits:
        return np.matmul(a, b, out=out)
    return np.matmul(a, b)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: float, beta: float,
         out: np.ndarray | None = None) -> np.ndarray:
    """alpha * a @ b + beta * c for floats; BLAS writes into ``out`` when it has the dtype.

    beta == 0 drops C altogether (ONNX Runtime does not evaluate 0 * C).
    """
    acc = a.dtype
    y = np.matmul(a, b, out=out if out is not None and out.dtype == acc else None)
    if alpha != 1.0:
        y *= acc.type(alpha)
    if c is not None and beta != 0.0:
        cc = c.astype(acc, copy=False)
        y += cc if beta == 1.0 else cc * acc.type(beta)
    return y


def _conv_float(spec: Any) -> bool:
    return isinstance(spec, ConvSpec) and spec.op_type == "Conv" and spec.dtype in _FLOATS


def _gemm_float(op: str) -> Any:
    return lambda spec: isinstance(spec, GemmSpec) and spec.op_type == op and spec.dtype in _FLOATS


ALGORITHMS: list[Algorithm] = [
    Algorithm("numpy:gemm_1x1", "Conv", lambda s: _conv_float(s) and s.pointwise, conv_gemm_1x1,
              "1x1 unpadded conv: np.matmul on the (C, H*W) view, no copy"),
    Algorithm("numpy:depthwise", "Conv", lambda s: _conv_float(s) and s.depthwise, conv_dw,
              "depthwise: batched GEMV (small maps) or per-tap multiply-adds in cache-sized blocks"),
    Algorithm("numpy:im2col_gemm", "Conv", _conv_float, conv_im2col_gemm,
              "any conv: strided patch view copied once + np.matmul"),
    Algorithm("numpy:col2im", "ConvTranspose",
              lambda s: isinstance(s, ConvSpec) and s.op_type == "ConvTranspose" and s.dtype in _FLOATS,
              conv_transpose, "ConvTranspose: np.matmul then scatter-add per kernel tap", False),
    Algorithm("numpy:matmul", "MatMul", _gemm_float("MatMul"), matmul, "np.matmul"),
    Algorithm("numpy:gemm", "Gemm", _gemm_float("Gemm"), gemm, "np.matmul + alpha/beta/C in place"),
]
