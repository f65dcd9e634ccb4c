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
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["ASYNC_SIGNALS", "keep_warm", "library", "max_threads", "on_workers", "set_max_threads", "shield_workers",
           "team"]

_SONAME = "libgomp.so.1"
_lib: Any = None
_keep: Any = None  # (GOMP_parallel, the address of libc's free) once libgomp is loaded


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


def keep_warm() -> None:
    """An empty parallel region on the calling thread's team (``free(NULL)`` on each thread): the
    workers start spinning afresh. No-op when no libgomp is loaded or the team has one thread.

    Why: a worker that finds no region for ``GOMP_SPINCOUNT`` spins (``config.BRIEF_SPINCOUNT``: ~100 us
    on an AMX Xeon, ~250 us on Zen 5) goes to sleep, and the next region waits ~15-30 us on a VM for it to wake (oneDNN's
    static split: the whole region ends that much later). A kernel with a single-threaded stretch
    between two regions (SqueezeExcite's channel means and 1x1 convs between the conv before it and
    its gate multiply) calls this inside the stretch, while the worker still spins: ~1.3 us, and the
    next region starts on a warm team (EfficientNet-B0 ~6 % faster; bench/RESULTS.md). Calling it
    after the worker fell asleep costs the wake-up it was meant to avoid, so only where the stretch
    before is short."""
    global _keep
    keep = _keep
    if keep is None:
        lib = _loaded()
        if lib is None:
            return
        libc = ctypes.CDLL(None)
        keep = _keep = (lib.GOMP_parallel, ctypes.cast(libc.free, ctypes.c_void_p).value)
    # free(NULL) is a no-op by the C standard and has GOMP_parallel's callback signature void (*)(void *)
    keep[0](keep[1], None, 0, 0)  # 0 threads: the team size of the calling thread (its ICV)


#: Process-directed signals a process gets from outside (timers, children, terminals, process managers):
#: the ones the OpenMP workers block (``shield_workers``). Not the synchronous ones (SIGSEGV, SIGBUS,
#: SIGFPE, SIGILL, SIGTRAP), which the faulting thread itself must take, nor the real-time signals,
#: which libraries aim at chosen threads (``timer_create`` with ``SIGEV_THREAD_ID``).
ASYNC_SIGNALS: frozenset[int] = frozenset(
    int(getattr(signal, name)) for name in (
        "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGCHLD", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM", "SIGHUP",
        "SIGQUIT", "SIGIO", "SIGURG", "SIGWINCH", "SIGPWR")
    if hasattr(signal, name))
_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_shielded = threading.local()  # .team: the largest team of this thread whose workers block ASYNC_SIGNALS


def shield_workers() -> bool:
    """Block ``ASYNC_SIGNALS`` in the workers of the calling thread's OpenMP team (threads ``1..n-1``;
    each sets its own mask inside one parallel region, as ``omp_affinity`` pins them), once per thread
    and team size; True when they are blocked now (or the team has one thread). No-op (False) when no
    libgomp is loaded or ``signal.pthread_sigmask`` is missing.

    Why: oneDNN's JIT gemm kernels keep data below the stack pointer, and a signal handler's frame
    pushed there corrupts it (``runtime/signal_stack.py``). The thread that runs a model gets an
    alternate signal stack; its OpenMP workers run the same kernels, and a process-directed signal
    (``setitimer``'s SIGALRM, SIGCHLD) may be delivered to any thread that does not block it. Blocked
    in the workers, such a signal goes to a thread that takes it on its alternate stack (Python runs
    its handlers on the main thread anyway). libgomp keeps a team's threads for the thread that
    started it, so this holds until the team grows (``torch.set_num_threads``), which makes it run again.
    In a forked child the forking thread does nothing (``omp_fork.stale``); the thread that runs the
    child's plans shields its own team (``omp_fork.run_fresh``)."""
    lib = _loaded()
    mask = getattr(signal, "pthread_sigmask", None)
    if lib is None or mask is None:
        return False
    from pycann.kernels.providers import omp_fork

    if omp_fork.stale():
        return False  # a forked child's forking thread: its pool is the parent's (a region would hang)
    n = int(lib.omp_get_max_threads())
    if n <= getattr(_shielded, "team", 1):
        return True

    def block(i: int) -> bool:
        try:
            mask(signal.SIG_BLOCK, ASYNC_SIGNALS)
        except (OSError, ValueError):
            return False
        return True

    if on_workers(block, n) != list(range(1, n)):
        return False
    _shielded.team = n
    return True


def on_workers(work: Callable[[int], bool], team: int) -> list[int] | None:
    """``work(i)`` on threads ``1..team-1`` of the calling thread's OpenMP team, each on its own
    thread inside one parallel region (a thread's mask, affinity or signal state is set by that
    thread only); the sorted ``i`` for which it returned True, or None when no libgomp is loaded.
    ``work`` runs with the GIL (a ctypes callback), so it should be short."""
    lib = _loaded()
    if lib is None:
        return None
    done: list[int] = []

    def body(_: object) -> None:
        i = int(lib.omp_get_thread_num())
        if i and work(i):
            done.append(i)

    cb = _CALLBACK(body)
    lib.GOMP_parallel(ctypes.cast(cb, ctypes.c_void_p), None, team, 0)
    return sorted(done)


def _forked() -> None:
    # a child's teams are new (its worker threads start from their caller's mask); the forking thread's
    # own pool is the parent's and never runs a region (``omp_fork``: plans run on a fresh thread)
    _shielded.team = 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
