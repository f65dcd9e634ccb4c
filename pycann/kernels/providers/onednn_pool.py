"""oneDNN's pooling primitive (C API, see ``onednn_capi``) for the ``onednn`` provider:
float32 MaxPool and AveragePool over 1-3 spatial dims, NCHW or channels-last.

Semantics (ONNX Operators.md MaxPool-12, AveragePool-19): the caller resolves the window
(``ops/nn/pool._pool_window``: pads after ``auto_pad``, output sizes after ``ceil_mode``, and
the end padding actually reached), and oneDNN gets that end padding, so the output sizes are
ONNX's. Max pooling never lets padding win (as -inf padding); average pooling divides by the
in-input count (``count_include_pad=0``) or by the full window, which equals ONNX's rule only
when ``ceil_mode`` reaches no further than the pads (the caller checks).

NaN and -inf: pycann's numpy kernel skips a NaN unless the whole window is NaN (ONNX Runtime's own
result depends on where the NaN sits in the window; the spec does not say). oneDNN's
max starts from the lowest finite float and skips NaN, so a window of only NaN (or only -inf)
comes out as -3.4e38 instead of NaN (-inf). Checking the input would cost a pass over it; the
bound kernel checks its (smaller) output instead: a minimum that is not above the lowest
finite float (or is NaN) sends the call to the generic kernel, which is exact. No check at all
when the NaN guard proved X finite (``nan_guard.proven``: X is the arena output of a guarded conv
that ran fused, as ResNet's stem conv before its MaxPool); Y then gets X's bound on record.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from pycann.kernels.providers import nan_guard, omp_fork, onednn
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.native_args import address

_F32 = np.dtype(np.float32)
_LOWEST = np.finfo(np.float32).min



def empty(shape: Sequence[int], channels_last: bool) -> np.ndarray:
    """A new float32 array of logical shape (N, C, *spatial), NCHW or channels-last."""
    return onednn.empty_channels_last(shape) if channels_last else np.empty(tuple(shape), _F32)


def _fits(a: np.ndarray, strides: tuple[int, ...]) -> bool:
    """``a``'s element strides are ``strides`` (dims of size 1 excepted)."""
    return all(s == 4 * t or d == 1 for s, t, d in zip(a.strides, strides, a.shape))


class _Bound:
    """One pooling primitive for a fixed shape and layout, memories re-pointed per call."""

    def __init__(self, alg: str, x_shape: tuple[int, ...], y_shape: tuple[int, ...], channels_last: bool,
                 kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                 pads_begin: Sequence[int], pads_end: Sequence[int]) -> None:
        self.x_shape, self.y_shape, self.channels_last = x_shape, y_shape, channels_last
        self.is_max = alg == "max"
        # a dilated window's taps can all fall in the padding although its span reaches the input
        # (the binder only refuses spans inside the padding): only dense windows trust a proven bound
        self.dense = all(int(d) == 1 for d in dilations)
        # oneDNN's average sums a window in float32 before it divides: with |x| <= B that sum is
        # below window * B, which must stay finite too (16 values of 2.4e37 sum to inf, and inf / 16
        # is inf although every value and the true mean are below the bound)
        self.window = float(np.prod([int(k) for k in kernel], dtype=np.float64))
        self.xs, self.ys = capi.layout_strides(x_shape, channels_last), capi.layout_strides(y_shape, channels_last)
        self.x_bytes, self.y_bytes = tuple(4 * t for t in self.xs), tuple(4 * t for t in self.ys)  # byte strides
        src = capi.MemoryDesc.strided(x_shape, self.xs)
        dst = capi.MemoryDesc.strided(y_shape, self.ys)
        pd = capi_ops.pooling_pd(capi.POOLING[alg], src, dst, strides, kernel, [d - 1 for d in dilations],
                             pads_begin, pads_end)
        self.impl = pd.fast_impl()
        self.src, self.dst = capi.Memory(src, 0), capi.Memory(dst, 0)
        self.prim = capi.Primitive(pd, [(capi.ARG_SRC, self.src), (capi.ARG_DST, self.dst)])
        self.lock = omp_fork.fork_safe(threading.Lock())

    def _average_bound(self, b: float) -> float | None:
        return b if b * self.window < nan_guard._F32_SAFE else None

    def pool(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
        """Y for this X: ``out`` when it is a float32 array in the bound shape and layout (the
        executor's arena view: no allocation, ~50 us of page faults on ResNet-50's 0.8 MB), else
        a new array; None when X is not float32 in the bound shape and layout, or a max window
        held only NaN / -inf (the caller then runs its generic kernel)."""
        if x.dtype != _F32 or x.shape != self.x_shape or not _fits(x, self.xs):
            return None
        usable = out is not None and out.dtype == _F32 and out.shape == self.y_shape and _fits(out, self.ys) \
            and not np.may_share_memory(out, x)
        y = out if usable and out is not None else empty(self.y_shape, self.channels_last)
        self.run(x, y)
        if not self.is_max:
            # an average of values within a recorded bound stays within it (NaN would stay NaN),
            # when the window's float32 sum cannot overflow on the way
            if y is out and self.dense:
                nan_guard.pass_on(y, x, self._average_bound)
            elif y is out:
                nan_guard.record(y, None)
            return y
        if self.is_max:
            # X proven finite by the guarded conv before it: every window has a finite max, and
            # max |Y| <= max |X|, so the guarded convs after it need not read Y either. Otherwise any
            # bound an earlier run left on this view is forgotten before Y can hold a NaN.
            bound = nan_guard.proven(x) if self.dense else None
            if y is out:
                nan_guard.record(y, bound)
            if bound is None and not y.min() > _LOWEST:
                return None  # an all-NaN / all -inf window (or a NaN): see the module docstring
        return y

    def run(self, x: np.ndarray, y: np.ndarray) -> None:
        """Execute on these arrays (the bound shapes and layouts: ``native_args`` checks them)."""
        xp = address("pooling input X", x, self.x_shape, strides=self.x_bytes)
        yp = address("pooling output Y", y, self.y_shape, strides=self.y_bytes)
        with self.lock:
            self.src.set(xp)
            self.dst.set(yp)
            self.prim.execute()


def bound_pool(alg: str, x_shape: Sequence[int], y_shape: Sequence[int], channels_last: bool,
               kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
               pads_begin: Sequence[int], pads_end: Sequence[int]) -> _Bound | None:
    """A pooling primitive bound to float32 X of static ``x_shape`` and Y of ``y_shape``, both
    NCHW or both channels-last (``channels_last``); ``.pool(x)`` runs it.

    ``alg``: ``"max"``, ``"avg_exclude_padding"`` or ``"avg_include_padding"`` (``POOLING``);
    ``dilations`` ONNX-style (1 = dense); ``pads_end`` the end padding the window reaches.
    None when oneDNN does not implement the signature (or offers only its reference loops)."""
    x_shape, y_shape = tuple(int(d) for d in x_shape), tuple(int(d) for d in y_shape)
    if not 3 <= len(x_shape) <= 5 or 0 in x_shape or 0 in y_shape:
        return None
    try:
        b = _Bound(alg, x_shape, y_shape, channels_last, kernel, strides, dilations, pads_begin, pads_end)
    except capi.DnnlError:
        return None
    return b
