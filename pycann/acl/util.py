"""``acl.util``: pointers to and from Python buffers (cann-interfaces.md §1.5).

``numpy_to_ptr`` / ``bytes_to_ptr`` register the caller's buffer with the runtime's address
space and return its real address; the registry keeps the object alive (least recently used
first out beyond 512 MiB), so later ``memcpy`` calls can check both sides. ``ptr_to_numpy``
returns a zero-copy view of *host* memory; ``ptr_to_bytes`` copies host memory.
Errors (bad pointer, device pointer, size past the end) raise ``ValueError``: these functions
return a value, not a code.
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.acl import _state
from pycann.acl import constants as C
from pycann.acl._state import as_int
from pycann.acl.errors import ArgTypeError
from pycann.runtime.errors import RtError
from pycann.runtime.memory import HOST_KINDS

NPY_TYPES: dict[int, np.dtype] = {
    C.NPY_BOOL: np.dtype(np.bool_), C.NPY_BYTE: np.dtype(np.int8), C.NPY_UBYTE: np.dtype(np.uint8),
    C.NPY_SHORT: np.dtype(np.int16), C.NPY_USHORT: np.dtype(np.uint16), C.NPY_INT: np.dtype(np.int32),
    C.NPY_UINT: np.dtype(np.uint32), C.NPY_LONG: np.dtype(np.int64), C.NPY_ULONG: np.dtype(np.uint64),
    C.NPY_LONGLONG: np.dtype(np.int64), C.NPY_ULONGLONG: np.dtype(np.uint64), C.NPY_FLOAT: np.dtype(np.float32),
    C.NPY_DOUBLE: np.dtype(np.float64), C.NPY_HALF: np.dtype(np.float16),
}


def _register(obj: Any) -> int:
    try:
        return _state.space.register_user(obj)
    except TypeError as e:
        raise ArgTypeError(str(e)) from None


def numpy_to_ptr(array: np.ndarray) -> int:
    """The address of ``array``'s data (no copy). Warns, as pyACL does, on a non-contiguous array."""
    if not isinstance(array, np.ndarray):
        raise ArgTypeError(f"numpy_to_ptr needs a numpy.ndarray, not {type(array).__name__}")
    if not array.flags.c_contiguous:
        warnings.warn("The input ndarray is discontiguous. Please use acl.util.numpy_contiguous_to_ptr instead.",
                      stacklevel=2)
    return _register(array)


def numpy_contiguous_to_ptr(array: np.ndarray) -> tuple[int, np.ndarray]:
    """``ptr, arr``: the pointer of a C-contiguous version of ``array`` (keep ``arr`` alive)."""
    if not isinstance(array, np.ndarray):
        raise ArgTypeError(f"numpy_contiguous_to_ptr needs a numpy.ndarray, not {type(array).__name__}")
    arr = np.ascontiguousarray(array)
    return _register(arr), arr


def bytes_to_ptr(data: bytes | bytearray | memoryview) -> int:
    """The address of a bytes-like object's buffer. ``bytes`` are read-only: copying into them
    fails with ``ACL_ERROR_INVALID_PARAM`` (use a ``bytearray``)."""
    if isinstance(data, np.ndarray) or not isinstance(data, (bytes, bytearray, memoryview)):
        raise ArgTypeError(f"bytes_to_ptr needs bytes, bytearray or memoryview, not {type(data).__name__}")
    return _register(data)


def _host_view(ptr: int, nbytes: int) -> np.ndarray:
    try:
        return _state.space.view(ptr, nbytes, HOST_KINDS)
    except RtError as e:
        raise ValueError(f"{e} (only host memory can be viewed: malloc_host or a registered buffer)") from None


def ptr_to_numpy(ptr: int, shape: tuple[int, ...] | list[int], npy_type: int) -> np.ndarray:
    """A zero-copy array over host memory at ``ptr`` (``npy_type``: NumPy type number, §1.5)."""
    p, t = as_int(ptr, "ptr"), as_int(npy_type, "npy_type")
    if t not in NPY_TYPES:
        raise ValueError(f"unsupported NumPy type number {t}; supported: {sorted(NPY_TYPES)}")
    if not isinstance(shape, (tuple, list)):
        raise ArgTypeError(f"shape must be a tuple, not {type(shape).__name__}")
    dims = tuple(as_int(d, "dim") for d in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"invalid shape {dims}")
    dt = NPY_TYPES[t]
    n = math.prod(dims) * dt.itemsize  # (np.prod wrapped around int64: "cannot reshape array of size 0")
    return _host_view(p, n).view(dt).reshape(dims)


def ptr_to_bytes(ptr: int, size: int) -> bytes:
    """A copy of ``size`` bytes of host memory at ``ptr``."""
    p, n = as_int(ptr, "ptr"), as_int(size, "size")
    if n < 0:
        raise ValueError(f"invalid size {n}")
    try:
        return _state.space.read(p, n, HOST_KINDS).tobytes()
    except RtError as e:
        raise ValueError(f"{e} (only host memory can be read: malloc_host or a registered buffer)") from None


_threads: dict[int, threading.Thread] = {}
_tids = itertools.count(1)


def start_thread(fn: Callable[..., Any], args: Any) -> tuple[int, int]:
    """``tid, ret``: run ``fn(args_list)`` in a Python thread (used with callbacks in pyACL).

    As pyACL documents it (``def thr_func(args_list)``), the function gets the list itself as its one
    argument: CANN's samples write ``start_thread(self._thread_entry, [])`` with
    ``def _thread_entry(self, args_list)`` and ``context, timeout = args_list``; unpacking the list
    made the first fail (missing ``args_list``) and handed the second its first item."""
    if not callable(fn):
        raise ArgTypeError("fn must be callable")
    if not isinstance(args, (list, tuple)):
        raise ArgTypeError(f"args_list must be a list, not {type(args).__name__}")
    t = threading.Thread(target=fn, args=(args,), daemon=True)
    tid = next(_tids)
    _threads[tid] = t
    t.start()
    return tid, C.ACL_SUCCESS


def stop_thread(tid: int) -> int:
    """Wait for the thread of ``start_thread`` to end."""
    t = _threads.pop(as_int(tid, "tid"), None)
    if t is None:
        return C.ACL_ERROR_INVALID_PARAM
    t.join()
    return C.ACL_SUCCESS
