"""Process state of the pyACL facade: init/finalize flag, the parsed ``acl.json`` (``config``),
the runtime, the handle table (ints standing for C pointers, cann-interfaces.md §1.1) and the
``api`` decorator that turns exceptions into pyACL's return shapes and ``aclError`` codes.
"""

from __future__ import annotations

import functools
import itertools
import logging
import operator
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pycann import config as knobs  # (``config`` here is the parsed acl.json)
from pycann.acl import constants as C
from pycann.acl._config import AclConfig
from pycann.acl.errors import AclFault, ArgTypeError, CallbackRaised, code_for, fault
from pycann.profiler import hooks
from pycann.runtime import AddressSpace, Runtime

log = logging.getLogger("pycann.acl")
lock = threading.RLock()
initialized = False
ever_initialized = False
config: AclConfig | None = None
"""The ``acl.json`` read by the last ``acl.init`` (``None`` before init); for profiler/dump."""
runtime: Runtime | None = None
space = AddressSpace()
"""The process's pointer registry; it outlives init/finalize so util pointers work before init."""
last_leak_report: list[str] = []
"""What the last ``acl.finalize`` found still allocated / loaded / alive (one line each)."""
_tls = threading.local()
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

F = TypeVar("F", bound=Callable[..., Any])


class Handles:
    """Maps handle ints to (kind, object). Handles are never reused, so a stale one is detected."""

    def __init__(self) -> None:
        self._objs: dict[int, tuple[str, Any]] = {}
        self._rev: dict[int, int] = {}
        self._counter = itertools.count(1)
        self._lock = threading.Lock()

    def add(self, kind: str, obj: Any) -> int:
        with self._lock:
            h = 0x7A00_0000_0000 + next(self._counter) * 0x40
            self._objs[h] = (kind, obj)
            self._rev[id(obj)] = h
            return h

    def get(self, kind: str, h: Any, what: str = "") -> Any:
        """The object of handle ``h``. Raises ``AclFault(ACL_ERROR_INVALID_RESOURCE_HANDLE)``."""
        h = as_int(h, what or kind)
        entry = self._objs.get(h)
        if entry is None or entry[0] != kind:
            got = f" (it is a {entry[0]} handle)" if entry else ""
            raise fault(C.ACL_ERROR_INVALID_RESOURCE_HANDLE,
                        f"{what or kind} 0x{h:x} is not a live {kind} handle{got}")
        return entry[1]

    def pop(self, kind: str, h: Any, what: str = "") -> Any:
        """Remove and return the object of handle ``h`` (as ``get`` checks it). Atomic: of two threads
        releasing one handle at once, one gets the object and the other the error."""
        h = as_int(h, what or kind)
        with self._lock:
            entry = self._objs.get(h)
            if entry is not None and entry[0] == kind:
                del self._objs[h]
                self._rev.pop(id(entry[1]), None)
                return entry[1]
        return self.get(kind, h, what)  # (raises: not live, or another kind)

    def handle_of(self, obj: Any) -> int:
        """The handle of a registered object (0 if none)."""
        return self._rev.get(id(obj), 0)

    def live(self, kind: str) -> list[Any]:
        with self._lock:
            return [o for k, o in self._objs.values() if k == kind]

    def clear(self, kinds: tuple[str, ...]) -> None:
        with self._lock:
            for h, (k, o) in list(self._objs.items()):
                if k in kinds:
                    del self._objs[h]
                    self._rev.pop(id(o), None)


handles = Handles()


def _renew_locks_in_child() -> None:
    """A forked child's locks: a thread of the parent that held one at the fork (inside an acl call)
    is not in the child, whose next acl call waited for it for ever."""
    global lock
    lock = threading.RLock()
    handles._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks_in_child)


def as_int(x: Any, what: str) -> int:
    """``x`` as an int (numpy ints accepted). Raises ``ArgTypeError`` like pyACL's parser."""
    try:
        return operator.index(x)
    except TypeError:
        raise ArgTypeError(f"{what} must be an int, not {type(x).__name__}") from None


def require_init() -> Runtime:
    """The runtime. Raises ``AclFault(ACL_ERROR_UNINITIALIZE)`` before ``acl.init``."""
    rt = runtime
    if not initialized or rt is None:
        raise fault(C.ACL_ERROR_UNINITIALIZE, "pyACL is not initialised: call acl.init() first")
    return rt


def user_site() -> str:
    """``file:line`` of the first caller frame outside pycann (for leak reports)."""
    f = sys._getframe(1)
    while f is not None and os.path.abspath(f.f_code.co_filename).startswith(_PKG_DIR):
        f = f.f_back  # type: ignore[assignment]
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "?"


def record_error(name: str, code: int, message: str) -> None:
    text = f"{name}: {C.error_name(code)} ({code}): {message}"
    _tls.msg = text
    if knobs.slog_to_stdout():
        print(f"[ERROR] PYCANN({os.getpid()}) {text}", flush=True)
    else:
        # CANN logs every failed call at error level; with no logging set up Python prints
        # this to stderr, so the reason for a non-zero code is never hidden
        log.error(text)


def recent_error() -> str:
    return getattr(_tls, "msg", "")


_NOTHING = object()


def api(out: tuple[Any, ...] = (), bare: Any = _NOTHING, name: str = "") -> Callable[[F], F]:
    """Wrap a facade function: on failure return ``code`` (ret-only functions), ``(*out, code)``
    (functions returning a tuple ending in ret) or ``bare`` (functions returning a plain value)."""

    def deco(fn: F) -> F:
        qual = name or f"acl.{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}".replace("acl.base.", "acl.")

        track = "memcpy" if "memcpy" in qual else "api"

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            timed = hooks.active()  # host API calls appear on the profile's timeline when profiling
            t0 = time.perf_counter_ns() if timed else 0
            try:
                return fn(*args, **kwargs)
            except ArgTypeError:
                raise
            except Exception as e:  # noqa: BLE001 - every failure becomes an aclError code
                code = code_for(e)
                msg = str(e)
                own = isinstance(e, AclFault) or isinstance(getattr(e, "cause", None), CallbackRaised)
                if code == C.ACL_ERROR_INTERNAL_ERROR and not own:
                    msg = f"internal error {type(e).__name__}: {e}"
                    log.debug("%s failed", qual, exc_info=True)
                record_error(qual, code, msg)
                if bare is not _NOTHING:
                    return bare
                return (*out, code) if out else code
            finally:
                if timed:
                    hooks.record_api(qual, t0, time.perf_counter_ns(), track=track)

        return wrapper  # type: ignore[return-value]

    return deco
