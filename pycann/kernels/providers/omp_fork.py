"""Runs in a forked child whose forking thread had used OpenMP: on a fresh thread, not on that one.

libgomp keeps a pool of worker threads per thread that started a parallel region (its "master"),
and it has no fork handler: in a child of ``os.fork`` (``multiprocessing``'s default start method on
Linux) only the forking thread exists, yet its pool still lists the parent's workers, so the first
parallel region waits at a barrier for threads that are not there, for ever (a model loaded and run
in the parent, then run in a ``multiprocessing.Pool`` worker, hung on its first call; GCC's libgomp
documents fork as unsupported after OpenMP was used). A thread started in the child has no pool yet
and gets a new one. So when the forking thread used OpenMP before the fork, ``stale()`` is true on
that thread in the child, and ``run_fresh(fn, *args)`` runs ``fn`` on one worker thread the child
starts for it (kept for later calls; ~20-50 us a call), returning its result or raising its error.
A thread-local would not do: the child's thread is the parent's, with the parent's thread-locals.

The kernels' own locks (a bound primitive's, whose memories a call re-points) are ``fork_safe``: a
thread of the parent that held one at the fork is not in the child, so the child's first call of
that kernel waited for it for ever. The child releases each such lock it finds taken.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from pycann.kernels.providers import openmp

__all__ = ["fork_safe", "forked_after_openmp", "renew_in_child", "run_fresh", "stale"]

T = TypeVar("T")
L = TypeVar("L")

_stale_ident: int | None = None  # the forking thread, in a child, when it had a libgomp pool
_worker: tuple[threading.Thread, queue.Queue[Any]] | None = None
_worker_lock = threading.Lock()
# the kernels' locks (``fork_safe``); weak, so a dropped kernel takes its lock with it
_LOCKS: weakref.WeakSet[Any] = weakref.WeakSet()


def fork_safe(lock: L) -> L:
    """``lock`` (a ``threading.Lock``), released in a forked child when a thread of the parent held
    it at the fork. For a kernel's lock that guards the memories a call re-points: a call sets
    them all before it executes, so what the parent's thread left half done is not read. Not for a
    lock held around ``os.fork`` by the forking thread itself (its release in the child would
    then fail), nor for an ``RLock`` (only its owner releases it: ``renew_in_child`` makes a new one).
    Raises ``TypeError`` for an ``RLock`` (it has no ``locked()`` here: in the set, every fork's
    child handler stopped at it, leaving the locks after it taken and the forking thread's libgomp
    pool unmarked)."""
    if not isinstance(lock, _LOCK_TYPE):
        raise TypeError(f"omp_fork.fork_safe takes a threading.Lock, not {type(lock).__name__}")
    _LOCKS.add(lock)
    return lock


_LOCK_TYPE = type(threading.Lock())


def _after_fork_in_child() -> None:
    global _stale_ident, _worker, _worker_lock
    _worker, _worker_lock = None, threading.Lock()
    # libgomp loaded: the thread may have a pool (one that never ran a region has none, and then
    # a run on it would be fine; not knowing which, every run of the forking thread moves)
    _stale_ident = threading.get_ident() if openmp.library() is not None else None
    for lock in list(_LOCKS):
        if lock.locked():
            lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def renew_in_child(namespace: dict[str, Any], **factories: Callable[[], Any]) -> None:
    """In a forked child, ``namespace[name] = factory()`` for each name: a module's locks, which a
    thread of the parent may have held at the fork (that thread is not in the child, and the child's
    next use would wait for it for ever). Call with the module's ``globals()``."""
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: namespace.update({k: f() for k, f in factories.items()}))


def forked_after_openmp() -> bool:
    """This process is a forked child of one that had loaded libgomp (``stale`` on its forking thread)."""
    return _stale_ident is not None


def stale() -> bool:
    """The calling thread is a forked child's forking thread, whose libgomp pool is the parent's."""
    return _stale_ident is not None and threading.get_ident() == _stale_ident


def _serve(jobs: queue.Queue[Any]) -> None:
    while True:
        fn, args, done = jobs.get()
        try:
            openmp.shield_workers()  # (this thread's team runs the child's plans: LoadedModel.run's shield)
            done.put((True, fn(*args)))
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
            done.put((False, e))


def run_fresh(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the child's worker thread (started on first use); its result, or its exception
    raised here."""
    global _worker
    with _worker_lock:
        if _worker is None:
            jobs: queue.Queue[Any] = queue.Queue()
            t = threading.Thread(target=_serve, args=(jobs,), name="pycann-omp-after-fork", daemon=True)
            t.start()
            _worker = (t, jobs)
        jobs = _worker[1]
    done: queue.Queue[Any] = queue.Queue(maxsize=1)
    jobs.put((fn, args, done))
    ok, value = done.get()
    if ok:
        return value  # type: ignore[no-any-return]
    raise value
