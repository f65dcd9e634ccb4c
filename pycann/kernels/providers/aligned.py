"""Host buffers whose first byte sits on a cache line (64 bytes).

numpy's allocator returns addresses that are 16-byte aligned only (glibc's ``malloc`` puts a
large block 16 or 32 bytes past a page boundary), so every 64-byte AVX-512 load or store of a
kernel that walks such a buffer straddles two cache lines. oneDNN's convolutions writing to an
arena 16 bytes off a line ran 1.1-1.5x slower than into an aligned one on an AMX Xeon
(SqueezeNet's stem 627 vs 408 us, ResNet-50's 7x7 stem 1029 vs 897; docs/kernels.md), as
ONNX Runtime's and oneDNN's own allocators know (both align to 64).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ALIGN", "empty"]

ALIGN = 64  # bytes: one cache line, the width of an AVX-512 register


def empty(shape: Sequence[int] | int, dtype: Any = np.float32) -> np.ndarray:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data starts on an
    ``ALIGN``-byte boundary (a view into a slightly larger numpy buffer, which it keeps alive)."""
    dt = np.dtype(dtype)
    dims = (int(shape),) if isinstance(shape, int | np.integer) else tuple(int(d) for d in shape)
    nbytes = math.prod(dims) * dt.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dt).reshape(dims)
