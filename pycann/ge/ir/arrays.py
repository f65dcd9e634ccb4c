"""Owned, C-contiguous copies of constant arrays, as the compile passes store them in a graph.

Why a function of its own: the passes that fold a transpose into a weight (``Gemm`` with
``transB=1`` -> ``MatMul``, a constant ``Transpose``) copy a 2-D transposed view, and numpy copies
such a view element by element along the source's columns: a 1000 x 1024 float32 classifier weight
took ~7 ms, ResNet-50's 2048 x 1000 one ~14 ms of its compile. Copied in 256 x 256 tiles (each
tile's rows and columns stay in the caches) the same copy takes ~1.2 ms; other arrays are copied
as numpy does.
"""

from __future__ import annotations

import numpy as np

__all__ = ["owned_copy"]

_TILE = 256
_TILED_FROM = 1 << 16  # elements: below this numpy's own copy is as fast (the tiles' Python is the cost)


def owned_copy(a: np.ndarray) -> np.ndarray:
    """A new C-contiguous array equal to ``a`` (same shape, dtype and values; a 0-d array stays 0-d,
    which ``np.ascontiguousarray`` would make 1-d). A 2-D array laid out as the transpose of a
    C-contiguous one (``w.T``) is copied in tiles (module doc)."""
    if a.ndim != 2 or a.size < _TILED_FROM or a.flags.c_contiguous or not a.T.flags.c_contiguous:
        return np.array(a, order="C", copy=True)
    out = np.empty(a.shape, a.dtype)
    n, m = a.shape
    for i in range(0, n, _TILE):
        for j in range(0, m, _TILE):
            out[i:i + _TILE, j:j + _TILE] = a[i:i + _TILE, j:j + _TILE]
    return out
