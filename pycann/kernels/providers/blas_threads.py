"""numpy's OpenBLAS held to one thread while oneDNN's OpenMP pool runs (``thread_pools.blas_single_thread``).

``threadpoolctl`` finds the BLAS of any numpy build, but finding it walks every library the process
has loaded (~4.5 ms at the first model run, about a third of a small CNN's first inference).
numpy's own wheels ship one OpenBLAS, built with pthreads, in ``numpy.libs/`` next to the
package: ``numpy_wheel_openblas`` opens that one directly (it is already loaded: no new library)
and sets its thread count through its own API. Any other numpy (conda's MKL or system OpenBLAS,
an OpenMP OpenBLAS) returns None, and the caller keeps threadpoolctl.
"""

from __future__ import annotations

import ctypes
import os
from types import TracebackType
from typing import Any

import numpy as np

# OpenBLAS's symbol names in numpy's wheels (scipy-openblas, 64-bit ints) and in older wheels
_PREFIXES = ("scipy_openblas", "openblas")
_SUFFIXES = ("64_", "_64", "")
_PTHREADS = 1  # openblas_get_parallel(): 0 sequential, 1 pthreads, 2 OpenMP


class OneThread:
    """Context manager: OpenBLAS at one thread inside, its previous count restored after (~1 us)."""

    def __init__(self, get: Any, set_: Any) -> None:
        self._get, self._set = get, set_
        self._before: list[int] = []

    def __enter__(self) -> OneThread:
        n = int(self._get())
        self._before.append(n)
        if n != 1:
            self._set(1)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        n = self._before.pop()
        if n != 1:
            self._set(n)


def numpy_wheel_openblas() -> tuple[Any, Any] | None:
    """(get_num_threads, set_num_threads) of the pthreads OpenBLAS in numpy's wheel folder
    ``numpy.libs``, or None when numpy was not installed from a wheel that ships one."""
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(np.__file__))), "numpy.libs")
    try:
        names = sorted(f for f in os.listdir(folder) if "openblas" in f and ".so" in f)
    except OSError:
        return None
    if len(names) != 1:
        return None  # none, or more than one: which one numpy uses is threadpoolctl's job
    try:
        lib = ctypes.CDLL(os.path.join(folder, names[0]))
    except OSError:
        return None
    for prefix in _PREFIXES:
        for suffix in _SUFFIXES:
            get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
            set_ = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
            parallel = getattr(lib, f"{prefix}_get_parallel{suffix}", None)
            if get is None or set_ is None or parallel is None:
                continue
            get.restype, get.argtypes = ctypes.c_int, []
            set_.restype, set_.argtypes = None, [ctypes.c_int]
            parallel.restype, parallel.argtypes = ctypes.c_int, []
            return (get, set_) if parallel() == _PTHREADS else None
    return None
