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


class ChannelMeans:
    """The (N, C) channel means of a float32 X of ``x_shape`` (N, C, H, W; H * W > 0): ``means(x)``,
    or None when X is not that shape and dtype laid out channels-last or C-contiguous."""

    def __init__(self, x_shape: tuple[int, ...]) -> None:
        self.x_shape = x_shape
        n, c, h, w = x_shape
        self.n, self.c, self.hw = n, c, h * w
        self.row, self.col = np.ones((1, h * w), np.float32), np.ones((h * w, 1), np.float32)
        self.cl_strides = (h * w * c * 4, 4, w * c * 4, c * 4)
        self.dense_strides = (c * h * w * 4, h * w * 4, w * 4, 4)
        self.scale = np.float32(h * w)

    def fits(self, a: np.ndarray, channels_last: bool) -> bool:
        """``a`` is laid out as this shape's channels-last (or C-contiguous) float32 array."""
        strides = self.cl_strides if channels_last else self.dense_strides
        return a.__class__ is np.ndarray and a.dtype == _F32 and a.shape == self.x_shape \
            and all(s == t or d == 1 for s, t, d in zip(a.strides, strides, self.x_shape))

    def __call__(self, x: Any) -> np.ndarray | None:
        if self.fits(x, True):  # (a 1-channel or 1x1 X fits both: either view is right)
            return self.of(x, True)
        if self.fits(x, False):
            return self.of(x, False)
        return None

    def of(self, x: np.ndarray, channels_last: bool) -> np.ndarray:
        """The means of an X the caller checked ``fits`` this layout."""
        n, c, hw = self.n, self.c, self.hw
        if channels_last:
            s = np.matmul(self.row, x.transpose(0, 2, 3, 1).reshape(n, hw, c)).reshape(n, c)
        else:
            s = np.matmul(x.reshape(n, c, hw), self.col).reshape(n, c)
        np.divide(s, self.scale, out=s)  # the sums, then the means (inf stays inf, as ORT's)
        return s  # type: ignore[no-any-return]


def bound_global_average_pool(x_shape: tuple[int, ...], generic: Any) -> BoundKernel:
    """The kernel for float32 X of ``x_shape`` (N, C, H, W; H * W > 0): ``run(inputs, attrs, out=None)
    -> [Y]`` with Y (N, C, 1, 1), written into ``out`` when given (the executor's arena view)."""
    means = ChannelMeans(x_shape)
    n, c = x_shape[:2]

    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        s = means(inputs[0])
        y = generic(inputs, attrs)[0] if s is None else s.reshape(n, c, 1, 1)
        if out is None:
            return [y]
        out[0][...] = y  # the executor reads its arena view
        return [out[0]]

    return BoundKernel(kernel, writes_out=True, keep=means, impl="sgemv")
