"""The OpenMP runtime the oneDNN and torch kernels share (libgomp), seen from Python.

oneDNN fixes a primitive's thread count from ``omp_get_max_threads()`` of the thread that creates
it, and libgomp keeps that value per thread (``omp_set_num_threads``, as ``torch.set_num_threads``
calls it, changes the calling thread's only). A plan built on another thread (the background plan
builder, ``pycann.ge.run.plan_builder``) must therefore adopt the count of the thread that asked for
it, or a process held to one thread would still get two-thread primitives.

Only a libgomp that is loaded already is used (``RTLD_NOLOAD``): asking must not load one before
``pycann.config.apply_omp_wait_policy`` has set its environment.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

__all__ = ["library", "max_threads", "set_max_threads", "team"]

_SONAME = "libgomp.so.1"
_lib: Any = None


def _loaded() -> Any:
    """The process's libgomp when one is loaded, else None (nothing is loaded here)."""
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL(_SONAME, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        except (OSError, AttributeError):  # not loaded yet (or not glibc): ask again next time
            return None
        _lib.omp_get_max_threads.restype = ctypes.c_int
        _lib.omp_set_num_threads.argtypes = [ctypes.c_int]
        _lib.omp_get_thread_num.restype = ctypes.c_int
        _lib.GOMP_parallel.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        _lib.GOMP_parallel.restype = None
    return _lib


def library() -> Any:
    """The process's libgomp (ctypes handle) when one is loaded, else None; never loads one."""
    return _loaded()


def max_threads() -> int | None:
    """``omp_get_max_threads()`` of the calling thread: the team size its next parallel region (and a
    oneDNN primitive created now) gets; None when no libgomp is loaded."""
    lib = _loaded()
    return int(lib.omp_get_max_threads()) if lib is not None else None


def set_max_threads(n: int | None) -> None:
    """``omp_set_num_threads(n)`` for the calling thread; no-op for None or when no libgomp is loaded.
    Raises ValueError for ``n < 1``."""
    if n is None:
        return
    if n < 1:
        raise ValueError(f"OpenMP thread count {n}: must be >= 1")
    lib = _loaded()
    if lib is not None and lib.omp_get_max_threads() != n:
        lib.omp_set_num_threads(n)


def team() -> int:
    """The team a oneDNN primitive created now on the calling thread gets (``max_threads``; 0 when no
    libgomp is loaded). Part of the key of every cache of primitives: a plan built for another thread
    count (``ge.run.contention``: one thread while other processes keep the cores busy) must not be
    handed the primitives of the other one, whose team oneDNN fixed when it created them."""
    return max_threads() or 0
