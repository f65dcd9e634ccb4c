"""Nearest-neighbour upsampling by integer factors as oneDNN's resampling primitive (C API, see
``onednn_capi``): the x2 / x4 / x8 upsampling of FPN and DB necks, multi-threaded, any of oneDNN's
layouts (NCHW, channels-last), float32 or bfloat16.

Semantics: output pixel (i, j) is input pixel (i // kh, j // kw) for every image and channel, a copy
(oneDNN's ``resampling_nearest`` maps output index o to floor((o + 0.5) / k), which is o // k for an
integer factor k; tests/kernels/test_bind_resize.py holds it to the repeat and to ONNX Runtime).
The caller (``kernels/bind_resize.py``) binds only nodes whose ONNX Resize attributes map pixels so.
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
from pycann.kernels.providers.native_args import address

__all__ = ["NearestUpsample"]

_MAX_LAYOUTS = 8  # (input strides, output strides) pairs one kernel keeps a primitive for


def _dt(dtype: np.dtype) -> int | None:
    return capi.F32 if dtype == np.float32 else capi.BF16 if is_bfloat16(dtype) else None


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
        if self._dt is not None and all(s > 0 for s in xs + ys):
            item = self.dtype.itemsize
            try:
                src = capi.MemoryDesc.strided(self.x_shape, [s // item for s in xs], dt=self._dt)
                dst = capi.MemoryDesc.strided(self.y_shape, [s // item for s in ys], dt=self._dt)
                pd = capi.resampling_pd(capi.RESAMPLING_NEAREST, src, dst)
                pd.fast_impl()  # (raises on oneDNN's reference loop: numpy's copy is faster)
                sm, dm = capi.Memory(src, 0), capi.Memory(dst, 0)
                made = (capi.Primitive(pd, [(capi.ARG_SRC, sm), (capi.ARG_DST, dm)]), sm, dm)
            except capi.DnnlError:
                made = None
        if len(self._prims) >= _MAX_LAYOUTS:
            self._prims.clear()
        self._prims[key] = made
        return made

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
