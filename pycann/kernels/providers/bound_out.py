"""Where a plan-time (bound) oneDNN kernel writes its result: into the executor's arena view
(``out``, when the plan gives one and it fits) or a new array, and the copy back when it had to
use a new array (the executor reads the arena view, not the return value, for ``writes_out``
kernels). Shared by ``onednn_matmul``, ``onednn_norm``, ``onednn_softmax``, ``onednn_attention``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

_F32 = np.dtype(np.float32)


def dest(out: Any, shape: tuple[int, ...], reads: Sequence[np.ndarray] = (),
         same_ok: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """``(y, o)``: ``o`` the arena view (``out[0]``) or None; ``y`` the array to compute into:
    ``o`` when it is C-contiguous float32 of ``shape`` and overlaps none of ``reads`` (``same_ok``
    may be exactly the same buffer: an in-place primitive), else a new array."""
    o = None if out is None else out[0]
    if o is not None and o.dtype == _F32 and o.flags.c_contiguous and o.shape == shape:
        base = o.__array_interface__["data"][0]
        if not any(np.may_share_memory(o, r) for r in reads) and (
                same_ok is None or same_ok.__array_interface__["data"][0] == base
                or not np.may_share_memory(o, same_ok)):
            return o, o
    return np.empty(shape, _F32), o


def finish(y: np.ndarray, o: np.ndarray | None) -> list[np.ndarray]:
    """``[y]``, copied into the arena view first when the kernel computed elsewhere."""
    if o is not None and y is not o:
        o[...] = y
    return [y]
