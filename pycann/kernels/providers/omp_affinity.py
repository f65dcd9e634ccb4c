"""One CPU per thread of the OpenMP team while a plan runs: the team's workers pinned, the caller pinned per run.

Why: on a VM (KVM, 2 vCPUs) a service that calls a model every 30 ms ran MobileNetV2 in 10.6 ms where
back-to-back calls take 2.3 and ONNX Runtime takes 2.4 either way (bench/RESULTS.md, "Idle gaps between
calls"). Between calls the team's worker sleeps; the first region of the next call wakes it, and the
guest scheduler often queues it on the CPU of the thread that woke it (the idle vCPU counts as
"preempted" to the guest once its host thread halted), so the two threads of a two-thread team share
one CPU for the whole call: every barrier waits for a time slice (process CPU time = wall time, ~100
voluntary switches per call). Pinning worker ``i`` to CPU ``i`` and the calling thread to CPU ``0``
for the duration of a run keeps them apart: 3.2-3.6 ms at the same 30 ms gaps, back-to-back unchanged.

How:

* **Workers**: ``GOMP_parallel`` runs a callback on each thread of the caller's team; thread ``i > 0``
  sets its own mask to ``cpus[i]``. libgomp keeps those threads docked and reuses them for every later
  region of that caller (oneDNN's primitives, v2 and v3, share the one libgomp), so they stay pinned
  until they are let go the same way.
* **The caller**, only around ``Plan.run`` of a full-team plan (``pinned_caller``): its mask is read,
  set to ``{cpus[0]}`` and set back after the run, so the user's thread is never left pinned and a
  thread it starts later inherits its own mask (~3 us a run).
* **Only while no other process is busy on these CPUs** (``ge/run/contention.ThreadGovernor.quiet``:
  others took at most 0.25 CPU in each of the last two 0.25 s windows). Pinned threads cannot move away
  from a busy neighbour, and they hide it: a pinned two-thread ResNet-50 beside one busy loop held ~1.5
  of 2 CPUs, so the governor (which shrinks the team at 0.5 CPU taken by others) did not see it and the
  calls stayed at 45-55 ms instead of ~33 on one thread. So the first busy window lets the workers go,
  and the governor sees the neighbour as before.

Only when it is safe to own the CPUs: ``PYCANN_OMP_BIND=auto`` (default; ``off`` never pins, config.py),
the user set none of ``OMP_PROC_BIND``, ``OMP_PLACES``, ``GOMP_CPU_AFFINITY`` (their binding wins),
libgomp is loaded, and the team (``omp_get_max_threads``) is exactly the CPUs this process may use
(``sched_getaffinity``) and has two or more threads: a process given fewer threads than its CPUs (one of
several services on a machine) is never pinned. Only the first thread that runs a plan owns the pinned
team (another thread has its own libgomp team and runs as before; once the owner has exited, the next
thread that runs a plan takes the team over: a service that runs each request on a new thread). The
owner is known by a thread-local, not by its ident: glibc hands a finished thread's ident to the next
thread it starts, and that thread's team (new workers, started by it inside its first pinned run) would
inherit the one CPU of the caller. Runs on a smaller team
(``ge/run/contention.py``) are not pinned, nor are plans with torch kernels (torch's own OpenMP pool
could be created inside a pinned run and would inherit the one CPU). A forked child starts unpinned
and decides again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from pycann import config
from pycann.kernels.providers import omp_fork, openmp

__all__ = ["Pinning", "pinned_caller", "pinning", "reset"]

@dataclass
class Pinning:
    """The team that may be pinned: ``cpus`` (the process's CPUs at decision time, sorted; worker ``i``
    runs on ``cpus[i]`` and the owner, the thread whose libgomp team it is, on ``cpus[0]`` during pinned
    runs), ``team`` (threads, owner included), ``workers_pinned`` (whether the workers are on their CPUs
    now: they are let go again while other processes are busy), ``thread`` (the owner, to see it exit; the
    owner itself knows it by a thread-local, ``_mine``)."""

    cpus: tuple[int, ...]
    team: int
    workers_pinned: bool = False
    thread: threading.Thread | None = field(default=None, repr=False, compare=False)  # the owner's


_lock = threading.Lock()
_state: Pinning | None = None
_decided = False  # the decision is made once per process (``reset`` after a fork)
# the Pinning the calling thread owns: a thread-local dies with its thread, where an ident is reused
_mine = threading.local()


def reset() -> None:
    """Forget the decision (a forked child, tests): the next ``pinned_caller`` decides again."""
    global _state, _decided
    _state, _decided = None, False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=reset)


def _eligible() -> tuple[int, ...] | None:
    """The CPUs to pin the calling thread's team to, or None when pinning is off or unsafe (module doc)."""
    if config.omp_bind() == "off" or config.user_omp_binding():
        return None
    if not hasattr(os, "sched_getaffinity"):
        return None
    team = openmp.max_threads()
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    if team is None or team < 2 or team != len(cpus):
        return None
    return cpus


def _set_workers(p: Pinning, pin: bool) -> bool:
    """Threads ``1..n-1`` of the caller's team each on ``cpus[i]`` (``pin``) or back on all of ``cpus``;
    True when every one did (each thread sets its own mask, inside one parallel region)."""

    def pin_one(i: int) -> bool:
        try:
            os.sched_setaffinity(0, {p.cpus[i]} if pin else set(p.cpus))
        except (OSError, IndexError):
            return False
        return True

    return openmp.on_workers(pin_one, p.team) == list(range(1, p.team))


def pinning() -> Pinning | None:
    """The team that may be pinned, decided on the first call (module doc); None when it never is."""
    global _state, _decided
    if _decided:
        return _state
    with _lock:
        if not _decided and openmp.library() is not None:  # no libgomp yet: decide once one is loaded
            cpus = _eligible()
            _state = _owned_here(Pinning(cpus, len(cpus))) if cpus is not None else None
            _decided = True
    return _state


def _owned_here(p: Pinning) -> Pinning:
    """``p`` owned by the calling thread (thread-local mark, the thread object to see it exit)."""
    p.thread = threading.current_thread()
    _mine.pinning = p
    return p


def _owner(p: Pinning) -> Pinning | None:
    """The team the calling thread owns: ``p`` when it is the owner; a fresh ``Pinning`` (workers not
    pinned yet: its team is its own) when ``p``'s owner has exited and this thread takes over; else None."""
    global _state
    if getattr(_mine, "pinning", None) is p:
        return p
    if p.thread is None or p.thread.is_alive():
        return None
    with _lock:
        if _state is p:  # the owner's team ended with it
            _state = _owned_here(Pinning(p.cpus, p.team))
            return _state
    return None


def _let_go(p: Pinning) -> None:
    """The workers back on all of ``p.cpus`` if they are pinned (the owner's call)."""
    if p.workers_pinned:
        p.workers_pinned = not _set_workers(p, False)


@contextmanager
def pinned_caller(quiet: bool) -> Iterator[None]:
    """Run the body with the team pinned when ``quiet`` (no other process busy on these CPUs: the caller
    asks ``ge/run/contention``) and the calling thread owns the team at full size: the workers on their
    CPUs (pinned once, kept), the caller on ``cpus[0]`` (its own mask set back after, also on errors).
    When not ``quiet`` the workers are let go (pinned threads cannot move away from a busy neighbour, and
    hide it from the governor) and the body runs as is; likewise for another thread, a smaller team or a
    mask the user narrowed."""
    global _state
    if omp_fork.stale():  # a forked child's forking thread: a parallel region here would hang (omp_fork)
        yield
        return
    p = pinning()
    p = _owner(p) if p is not None else None
    if p is None or openmp.max_threads() != p.team or getattr(_mine, "inside", False):
        yield  # (a run inside a pinned run of this thread, on its one CPU, is not a user's narrowing)
        return
    if not quiet:
        _let_go(p)
        yield
        return
    try:
        saved = os.sched_getaffinity(0)
    except OSError:
        yield
        return
    if saved != set(p.cpus):  # the user narrowed this thread: theirs wins, and the workers go (a worker
        _let_go(p)            # pinned to the one CPU left to the caller would share it with the caller)
        yield
        return
    if not p.workers_pinned:
        if not _set_workers(p, True):
            _set_workers(p, False)
            _state = None  # a team that cannot be pinned is never tried again
            yield
            return
        p.workers_pinned = True
    try:
        _mine.inside = True
        os.sched_setaffinity(0, {p.cpus[0]})
        yield
    finally:
        _mine.inside = False
        os.sched_setaffinity(0, saved)
