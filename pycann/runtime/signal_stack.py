"""An alternate signal stack for the threads that run kernels.

oneDNN's JIT sgemm kernels (the ``gemm:jit`` matmul the shape-generic plan runs pointwise convs and
small matmuls on) keep data below the stack pointer, past the 128-byte red zone a signal handler's
frame skips. A signal delivered to a thread inside one of them (``signal.setitimer`` for a
per-request timeout, SIGCHLD, SIGUSR1 of a process manager, ...) pushed the handler's frame over
that data: heap corruption ("corrupted size vs. prev_size", "double free or corruption") and an
abort within a second of a 5 kHz timer, even with a handler that does nothing. Python installs its
handlers with ``SA_ONSTACK``: with an alternate signal stack they run there, off the thread's stack.

``ensure()`` gives the calling thread one (64 KiB) unless it has one already (``faulthandler.enable()``
makes one for the main thread); ``LoadedModel.run`` and the single-op entry call it, a thread-local
check after the first call. The stack is switched off and freed when the thread ends. Without a C
library ``sigaltstack`` (Windows) it does nothing.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

SIZE = 1 << 16
_SS_DISABLE = 2


class _StackT(ctypes.Structure):
    _fields_ = [("ss_sp", ctypes.c_void_p), ("ss_flags", ctypes.c_int), ("ss_size", ctypes.c_size_t)]


_tls = threading.local()
_sigaltstack: Any = None
_loaded = False


def _function() -> Any:
    global _sigaltstack, _loaded
    if not _loaded:
        try:
            fn = ctypes.CDLL(None).sigaltstack
            fn.argtypes = [ctypes.POINTER(_StackT), ctypes.POINTER(_StackT)]
            fn.restype = ctypes.c_int
            _sigaltstack = fn
        except (OSError, AttributeError, TypeError):  # pragma: no cover - no C library sigaltstack
            _sigaltstack = None
        _loaded = True
    return _sigaltstack


class _AltStack:
    """The calling thread's alternate stack; switched off (if still the thread's) when it goes. Its
    ``__del__`` uses only what the instance holds (at interpreter exit the module's globals are
    gone); a stack it cannot switch off is kept (never freed under a possible signal)."""

    _kept: list[Any] = []

    def __init__(self, fn: Any) -> None:
        self.fn, self.byref = fn, ctypes.byref
        self.buf = ctypes.create_string_buffer(SIZE)
        self.addr = ctypes.addressof(self.buf)
        self.cur, self.off = _StackT(), _StackT(None, _SS_DISABLE, 0)
        self.kept = self._kept

    def __del__(self) -> None:  # (the thread's locals are dropped by the thread as it ends)
        try:
            if self.fn(None, self.byref(self.cur)) != 0 or self.cur.ss_sp != self.addr:
                return  # (not this thread's stack any more)
            if self.fn(self.byref(self.off), None) == 0:
                return
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
        self.kept.append(self.buf)


def current() -> tuple[int, int, int] | None:
    """``(ss_sp, ss_flags, ss_size)`` of the calling thread's alternate signal stack (None without
    ``sigaltstack``)."""
    fn = _function()
    if fn is None:
        return None
    cur = _StackT()
    if fn(None, ctypes.byref(cur)) != 0:
        return None
    return int(cur.ss_sp or 0), int(cur.ss_flags), int(cur.ss_size)


def ensure() -> None:
    """Give the calling thread an alternate signal stack unless it has one (see the module doc)."""
    if getattr(_tls, "done", False):
        return
    _tls.done = True
    fn = _function()
    if fn is None:
        return
    cur = _StackT()
    if fn(None, ctypes.byref(cur)) != 0 or not cur.ss_flags & _SS_DISABLE:
        return  # (one is set already: faulthandler's, or the application's)
    alt = _AltStack(fn)
    if fn(ctypes.byref(_StackT(alt.addr, 0, SIZE)), None) == 0:
        _tls.stack = alt
