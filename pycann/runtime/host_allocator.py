"""Host allocator policy of the CPU device: keep freed memory for the next inference.

Kernels allocate their outputs with numpy, which takes memory from the C library's ``malloc``.
glibc serves blocks above a (dynamically raised, at most 32 MiB) threshold with ``mmap`` and
gives the heap's free top back to the OS above ``M_TRIM_THRESHOLD``; the next inference then
touches fresh pages, and every 4 KiB page costs a fault (a 10 MB activation ~1.5 ms). On the
PP-OCRv4 detector that was 47 ms against 30 ms per run once pages are kept (bench/RESULTS.md).
ONNX Runtime avoids this with its own arena; CANN's runtime keeps device memory in pools.

``keep_freed_memory()`` sets glibc's ``M_MMAP_THRESHOLD`` to its maximum and ``M_TRIM_THRESHOLD``
high, through ``mallopt`` (process-wide, like ORT's arena it trades returning memory to the OS
between runs for speed; peak RSS is unchanged). It runs once, when the first model is loaded;
``PYCANN_KEEP_FREED_MEMORY=0`` turns it off. On a C library without ``mallopt`` (musl, macOS,
Windows) it does nothing.
"""

from __future__ import annotations

import ctypes
import threading

from pycann import config

# glibc <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # glibc's largest accepted value on 64-bit (HEAP_MAX_SIZE / 2)
TRIM_THRESHOLD = 1 << 30

_lock = threading.Lock()
_done: bool | None = None


def keep_freed_memory() -> bool:
    """Apply the policy once per process; True when glibc accepted it (see module doc)."""
    global _done
    with _lock:
        if _done is not None:
            return _done
        _done = False
        if not config.keep_freed_memory():
            return False
        try:
            # the process's own symbols, which hold the C library's (find_library would import
            # subprocess and read ldconfig's cache: ~5 ms of every first model load)
            libc = ctypes.CDLL(None)
            mallopt = libc.mallopt
        except (OSError, AttributeError):
            return False
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt.restype = ctypes.c_int
        _done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
        return _done
