"""The check every operand passes before its address reaches native code (oneDNN through ctypes).

A oneDNN memory object reads and writes exactly the bytes its descriptor names: a bias of the
wrong length, an input of another shape or layout than the primitive was built for, or a
float64 array where float32 is expected would be read past its end or misread, silently (heap
garbage in the output) or fatally (a segfault off the end of a mapped .om). ``address`` checks
dtype, shape and byte strides (or C-contiguity) against what the primitive was built for and
returns the data address; anything else raises ``OperandError`` naming the operand, what the
primitive expects and what it was given. One comparison of small tuples: cheap enough for the
bound kernels' per-call paths (~1.3 us, most of it reading the address).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.errors import OperandError

__all__ = ["address", "check", "conform"]

_F32 = np.dtype(np.float32)


def check(what: str, a: np.ndarray, shape: Sequence[int], dtype: np.dtype = _F32,
          strides: Sequence[int] | None = None) -> None:
    """Raise ``OperandError`` unless ``a`` is a ``dtype`` array of exactly ``shape`` with byte
    ``strides`` (dims of size 1 may have any stride), or C-contiguous when ``strides`` is None."""
    if not isinstance(a, np.ndarray):
        raise OperandError(f"{what}: expected a numpy array, got {type(a).__name__}")
    shape = tuple(int(d) for d in shape)
    problem = ""
    if a.dtype != dtype:
        problem = f"dtype {a.dtype}, expected {np.dtype(dtype)}"
    elif a.shape != shape:
        problem = f"shape {list(a.shape)}, expected {list(shape)}"
    elif strides is None:
        if not a.flags.c_contiguous:
            problem = f"strides {a.strides} are not C-contiguous"
    elif a.strides != tuple(strides) and any(s != t and d != 1 for s, t, d in zip(a.strides, strides, a.shape)):
        problem = f"strides {a.strides}, expected {tuple(strides)}"
    if problem:
        raise OperandError(f"{what}: the native primitive was built for {np.dtype(dtype)}{list(shape)} but got {problem}")


def address(what: str, a: np.ndarray, shape: Sequence[int], dtype: np.dtype = _F32,
            strides: Sequence[int] | None = None) -> int:
    """``check`` then the data address of ``a`` (what a oneDNN memory's data handle is set to)."""
    # the bound kernels' usual call (an ndarray exactly as built for; ``shape`` / ``strides`` the
    # tuples they precomputed) in four comparisons: ~1.3 us instead of ~2.8 for ``check``'s tuple
    # rebuild and per-dim loop, and 20-100 of these run per decode step. Anything else, including
    # any-stride unit dims, gets the full check and its error message. (``shape`` / ``strides`` must
    # be tuples here: ``tuple == ndarray`` compares elementwise and its truth value raises.)
    if a.__class__ is np.ndarray and a.dtype == dtype and shape.__class__ is tuple and a.shape == shape \
            and (a.flags.c_contiguous if strides is None else strides.__class__ is tuple and a.strides == strides):
        return a.__array_interface__["data"][0]  # type: ignore[no-any-return]
    check(what, a, shape, dtype, strides)
    return a.__array_interface__["data"][0]  # type: ignore[no-any-return]


def conform(what: str, a: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """``a`` as a C-contiguous float32 array of ``shape`` (a copy when its dtype or layout differ,
    a reshape when only unit dims differ); ``OperandError`` when it has another element count or
    is not an array (a bound kernel handed the wrong tensor)."""
    shape = tuple(int(d) for d in shape)
    if a.__class__ is np.ndarray and a.dtype == _F32 and a.shape == shape and a.flags.c_contiguous:
        return a
    if not isinstance(a, np.ndarray):
        raise OperandError(f"{what}: expected a numpy array, got {type(a).__name__}")
    n = 1
    for d in shape:
        n *= d
    if a.size != n:
        raise OperandError(f"{what}: the native primitive was built for shape {list(shape)} ({n} elements) "
                           f"but got {a.dtype}{list(a.shape)}")
    return np.ascontiguousarray(a, dtype=_F32).reshape(shape)


def same_view(a: np.ndarray, b: Any) -> bool:
    """``b`` is an array over exactly ``a``'s elements: same first address, shape and strides (an
    output planned over its own input, which an elementwise kernel may write in place)."""
    return isinstance(b, np.ndarray) and a.shape == b.shape and a.strides == b.strides \
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
