"""Nearest-neighbour upsampling by integer factors as oneDNN's resampling primitive (C API, see
``onednn_capi``): the x2 / x4 / x8 upsampling of FPN and DB necks, multi-threaded, NCHW or
channels-last.

Semantics: output pixel (i, j) is input pixel (i // kh, j // kw) for every image and channel, a copy
(oneDNN's ``resampling_nearest`` maps output index o to floor((o + 0.5) / k), which is o // k for an
integer factor k; tests/kernels/test_bind_resize.py holds it to the repeat and to ONNX Runtime).
The caller (``kernels/bind_resize.py``) binds only nodes whose ONNX Resize attributes map pixels so.
The copy must be exact, bits included: float32 is (oneDNN moves the values as they are), but a
bfloat16 resampling goes through float32 and back, which flushes subnormals to zero and rewrites NaN
payloads. So a bfloat16 (any 2-byte) map is resampled as its bytes: channels-last, a pixel's C
values are 2C bytes side by side, i.e. a u8 map of 2C channels, whose copy is exact; a bfloat16 map
in another layout keeps numpy's copy.
Why: numpy's broadcast copy runs on one core (PP-OCRv4 det's 96 x 80 x 80 -> 160 x 160 map 0.3 ms
alone, 0.6 ms in the plan); the primitive copies on every OpenMP thread (~0.12 ms).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from pycann.dtypes import is_bfloat16
from pycann.kernels.providers import omp_fork, openmp
from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops
from pycann.kernels.providers.native_args import address

__all__ = ["NearestUpsample"]

_MAX_LAYOUTS = 8  # (input strides, output strides) pairs one kernel keeps a primitive for


_U8 = 6  # dnnl_data_type_t dnnl_u8 (dnnl_common_types.h, v3.2)


def _dt(dtype: np.dtype) -> int | None:
    return capi.F32 if dtype == np.float32 else _U8 if is_bfloat16(dtype) else None


class NearestUpsample:
    """``y`` = ``x`` repeated along H and W for fixed shapes (N, C, H, W) -> (N, C, H*kh, W*kw) and
    dtype; a primitive per pair of layouts met (made on first use)."""

    def __init__(self, x_shape: tuple[int, ...], y_shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.x_shape, self.y_shape, self.dtype = x_shape, y_shape, dtype
        self._dt = _dt(dtype)
        self._prims: dict[tuple[Any, ...], tuple[capi.Primitive, capi.Memory, capi.Memory] | None] = {}
        self._lock = omp_fork.fork_safe(threading.Lock())  # (the memories are re-pointed per call)

    def _primitive(self, xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[capi.Primitive, capi.Memory, capi.Memory] | None:
        key = (xs, ys, openmp.team())  # (oneDNN fixes a primitive's team when it creates it)
        if key in self._prims:
            return self._prims[key]
        made = None
        shapes = self._as_bytes(xs, ys) if self._dt == _U8 else (self.x_shape, self.y_shape)
        if self._dt is not None and shapes is not None and all(s > 0 for s in xs + ys):
            if self._dt == _U8:  # byte strides, the 2C bytes of a pixel adjacent
                x_st, y_st = [xs[0], 1, *xs[2:]], [ys[0], 1, *ys[2:]]
            else:
                x_st, y_st = [s // self.dtype.itemsize for s in xs], [s // self.dtype.itemsize for s in ys]
            try:
                src = capi.MemoryDesc.strided(shapes[0], x_st, dt=self._dt)
                dst = capi.MemoryDesc.strided(shapes[1], y_st, dt=self._dt)
                pd = capi_ops.resampling_pd(capi_ops.RESAMPLING_NEAREST, src, dst)
                pd.fast_impl()  # (raises on oneDNN's reference loop: numpy's copy is faster)
                sm, dm = capi.Memory(src, 0), capi.Memory(dst, 0)
                made = (capi.Primitive(pd, [(capi.ARG_SRC, sm), (capi.ARG_DST, dm)]), sm, dm)
            except capi.DnnlError:
                made = None
        if len(self._prims) >= _MAX_LAYOUTS:
            self._prims.clear()
        self._prims[key] = made
        return made

    def _as_bytes(self, xs: tuple[int, ...], ys: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The (N, 2C, H, W) u8 shapes of 2-byte maps whose C values are adjacent (C stride = the item
        size) in both ``x`` and ``y``; None for another layout (numpy's copy then)."""
        item = self.dtype.itemsize
        if xs[1] != item and self.x_shape[1] > 1 or ys[1] != item and self.y_shape[1] > 1:
            return None
        n, c, h, w = self.x_shape
        return (n, c * item, h, w), (n, c * item, *self.y_shape[2:])

    def run(self, x: np.ndarray, y: np.ndarray) -> bool:
        """Upsample ``x`` into ``y`` (the bound shapes and dtype, any positive strides, not
        overlapping); False when oneDNN takes no such layout (nothing written)."""
        if x.dtype != self.dtype or y.dtype != self.dtype or x.shape != self.x_shape or y.shape != self.y_shape \
                or np.may_share_memory(x, y):
            return False
        with self._lock:
            p = self._primitive(x.strides, y.strides)
            if p is None:
                return False
            prim, sm, dm = p
            sm.set(address("Resize input X", x, self.x_shape, self.dtype, strides=x.strides))
            dm.set(address("Resize output Y", y, self.y_shape, self.dtype, strides=y.strides))
            prim.execute()
        return True
