"""The numpy provider: pycann's own kernels, GEMMs through ``np.matmul`` (the wheel's BLAS).

Always available. Its algorithms are the numpy reference kernels of ``pycann.ops`` (``ops/nn/im2col.py``,
``ops/matmul.py``); each is total:
``gemm_1x1`` and ``depthwise`` hand shapes they were not made for to ``im2col_gemm``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.kernels.algorithm import (
    NUMPY_COL2IM,
    NUMPY_DEPTHWISE,
    NUMPY_GEMM,
    NUMPY_GEMM_1X1,
    NUMPY_IM2COL_GEMM,
    NUMPY_MATMUL,
)
from pycann.kernels.providers.specs import ConvSpec, GemmSpec, Implementation
from pycann.ops.matmul import FOLD_BYTES, gemm, matmul
from pycann.ops.nn.im2col import add_bias, conv_1x1, conv_depthwise, conv_im2col_gemm, conv_transpose
from pycann.ops.nn.spatial import Window

_FLOATS = ("float32", "float64")


def available() -> bool:
    """numpy is a hard dependency."""
    return True


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


def _conv_float(spec: Any) -> bool:
    return isinstance(spec, ConvSpec) and spec.op_type == "Conv" and spec.dtype in _FLOATS


def _gemm_float(op: str) -> Any:
    return lambda spec: isinstance(spec, GemmSpec) and spec.op_type == op and spec.dtype in _FLOATS


ALGORITHMS: list[Implementation] = [
    Implementation(NUMPY_GEMM_1X1, lambda s: _conv_float(s) and s.pointwise, conv_gemm_1x1,
              "1x1 unpadded conv: np.matmul on the (C, H*W) view, no copy"),
    Implementation(NUMPY_DEPTHWISE, lambda s: _conv_float(s) and s.depthwise, conv_dw,
              "depthwise: batched GEMV (small maps) or per-tap multiply-adds in cache-sized blocks"),
    Implementation(NUMPY_IM2COL_GEMM, _conv_float, conv_im2col_gemm,
              "any conv: strided patch view copied once + np.matmul"),
    Implementation(NUMPY_COL2IM, lambda s: isinstance(s, ConvSpec) and s.op_type == "ConvTranspose" and s.dtype in _FLOATS,
              conv_transpose, "ConvTranspose: np.matmul then scatter-add per kernel tap"),
    Implementation(NUMPY_MATMUL, _gemm_float("MatMul"), matmul, "np.matmul"),
    Implementation(NUMPY_GEMM, _gemm_float("Gemm"), gemm, "np.matmul + alpha/beta/C in place"),
]


__all__ = ["ALGORITHMS", "FOLD_BYTES", "add_bias", "available", "conv_dw", "conv_gemm_1x1", "conv_im2col_gemm",
           "conv_transpose", "gemm", "matmul"]
