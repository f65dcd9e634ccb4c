"""GlobalAveragePool of a static 4-D float32 X as a matrix-vector product: the channel sums are
``ones @ X`` viewed (N, H*W, C) when X is channels-last (a conv chain's array), ``X @ ones`` viewed
(N, C, H*W) when it is C-contiguous, then divided by H*W (summed first, as ONNX Runtime's kernel:
a float32 sum that overflows is inf).

Why: numpy's mean over the two spatial axes of a channels-last array takes a slow strided path
(GoogLeNet's final 1x1024x7x7: ~100 us in the model, ORT ~6 us), and oneDNN's pooling primitive
costs a call and an OpenMP fork for a few thousand values; OpenBLAS's sgemv reads the tensor once,
bandwidth-bound on one thread (19 us on 32x112x112, as fast as the pooling primitive's two threads).
A call with another layout, shape or dtype runs the reference kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.kernels.bound import BoundKernel

_F32 = np.dtype(np.float32)
# Module switch read when a plan binds its kernels (bench/knob_ab.py's A/B: False binds oneDNN's
# pooling or numpy's mean as before)
ENABLED = True


def bound_global_average_pool(x_shape: tuple[int, ...], generic: Any) -> BoundKernel:
    """The kernel for float32 X of ``x_shape`` (N, C, H, W; H * W > 0): ``run(inputs, attrs, out=None)
    -> [Y]`` with Y (N, C, 1, 1), written into ``out`` when given (the executor's arena view)."""
    n, c, h, w = x_shape
    hw = h * w
    row, col = np.ones((1, hw), np.float32), np.ones((hw, 1), np.float32)
    cl_strides = (hw * c * 4, 4, w * c * 4, c * 4)
    dense_strides = (c * hw * 4, hw * 4, w * 4, 4)
    scale = np.float32(hw)

    def fits(a: np.ndarray, strides: tuple[int, ...]) -> bool:
        return all(s == t or d == 1 for s, t, d in zip(a.strides, strides, x_shape))

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        x = inputs[0]
        o = out[0] if out is not None else None
        if x.__class__ is not np.ndarray or x.dtype != _F32 or x.shape != x_shape:
            s = None
        elif fits(x, cl_strides):  # (a 1-channel or 1x1 X fits both: either view is right)
            s = np.matmul(row, x.transpose(0, 2, 3, 1).reshape(n, hw, c)).reshape(n, c)
        elif fits(x, dense_strides):
            s = np.matmul(x.reshape(n, c, hw), col).reshape(n, c)
        else:
            s = None
        if s is None:
            y = generic(inputs, attrs)[0]
        else:
            np.divide(s, scale, out=s)  # the sums, then the means (inf stays inf, as ORT's)
            y = s.reshape(n, c, 1, 1)
        if o is None:
            return [y]
        o[...] = y  # the executor reads its arena view
        return [o]

    return BoundKernel(kernel, writes_out=True, keep=(row, col), impl="sgemv")
