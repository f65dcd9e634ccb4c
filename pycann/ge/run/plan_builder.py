"""Background plan builds: one daemon thread per model specialising queued input signatures.

``Executor`` (``PlanBuild.BACKGROUND``, graphs with convolutions under ``auto``) runs a new
signature's call on the shape-generic plan and hands the signature here; the builder thread calls
``build(signature, shapes, values)`` for each queued one in order, so the next calls of that shape
find its specialised plan in the cache (docs/dynamic-shapes.md, "Background builds").

A signature is queued once, at most ``max_queued`` wait (beyond that a new one is dropped: its
call ran and the next call of that shape queues it again), and a build that raises is recorded in
``failed`` so the executor builds that signature inline on its next call, where the error is
reported with its node. The thread is a daemon started on demand and ends when the queue is empty,
so a model never holds the interpreter at exit; it runs niced (``NICE``), so on busy cores the
calls are scheduled before the build (the GIL is still shared with them for its Python part).
A build does not start while a call ``hold``s the builder (the first call of a new shape, which the
executor runs on the shape-generic plan meanwhile) or within ``QUIET`` of one. Beside a thread running Python, a call gets the
GIL back only after the interpreter's switch interval (5 ms) at each release (a pure-Python thread
made PP-OCRv4 det's first calls 40x slower, 25 ms alone); a build started between two such calls
would slow the second. Later calls of a shape do not hold, so a stream of new shapes defers the
builds, and the shapes that come again get their plans.
Each build runs with the OpenMP thread count of the thread that queued it (libgomp keeps it per
thread and oneDNN fixes a primitive's threads when it is created: ``providers.openmp``), so
``torch.set_num_threads(1)`` in the caller gives one-thread primitives here too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from pycann.ge.run.plan_cache import short_signature
from pycann.kernels.providers import openmp

__all__ = ["BackgroundBuilder", "hold"]

log = logging.getLogger("pycann.ge.run.plan_builder")

Shapes = list[tuple[int, ...] | None]


NICE = 10  # the builder thread's niceness increment: the calls it works for keep the CPU first
QUIET = 0.01  # s without a held call before a build starts


def _lower_priority() -> None:
    """Nice this thread alone (Linux: ``setpriority`` on a thread id affects that thread), so on
    busy cores the calls that run meanwhile are scheduled before the build. Best effort."""
    try:
        tid = threading.get_native_id()
        # an increment over the thread's own niceness: in a process run under ``nice`` an absolute
        # NICE would raise the builder above the calls (and root may do that)
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + NICE, 19))
    except (AttributeError, OSError):  # not Linux, or not permitted
        pass


class _Gate:
    """Process-wide: the calls that no build of any model may start beside, and when the last one
    ended (a detector's first call must not run beside the recogniser's build either)."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.holds = 0
        self.released = 0.0  # time.monotonic() when the last hold ended
        # threads in BackgroundBuilder.wait: while one waits, builds start regardless of holds (a
        # waiter beside a stream of new shapes, or one inside a held call, would else wait forever)
        self.waiters = 0

    @contextmanager
    def hold(self) -> Iterator[None]:
        with self.cond:
            self.holds += 1
        try:
            yield
        finally:
            with self.cond:
                self.holds -= 1
                if not self.holds:
                    self.released = time.monotonic()
                    self.cond.notify_all()

    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Lets builds start beside held calls while the block runs (someone waits for them)."""
        with self.cond:
            self.waiters += 1
            self.cond.notify_all()
        try:
            yield
        finally:
            with self.cond:
                self.waiters -= 1

    def wait_quiet(self, urgent: Callable[[], bool] = lambda: False) -> None:
        """Until no call holds and none did for ``QUIET`` s: a stream of first calls leaves no room
        for a build between two of them. At once while a thread waits for the builds or ``urgent()``
        (read under the gate's lock; its setter notifies ``cond``)."""
        with self.cond:
            while True:
                self.cond.wait_for(lambda: not self.holds or self.waiters or urgent())
                if self.waiters or urgent():
                    return
                left = QUIET - (time.monotonic() - self.released)
                if left <= 0:
                    return
                self.cond.wait(left)


_gate = _Gate()
_BUILDERS: weakref.WeakSet[BackgroundBuilder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The threads that held the gate, or ran a builder's worker, do not exist in a forked child: a
    # hold counted (or the gate's lock taken) at the fork kept every build of the child waiting
    # forever, and a builder that remembered its worker never started one again (wait() hung).
    global _gate
    _gate = _Gate()
    for b in list(_BUILDERS):
        b._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def hold() -> AbstractContextManager[None]:
    """No background build (of any model) starts while the caller's block runs, nor within
    ``QUIET`` after; a build already running goes on."""
    return _gate.hold()


class BackgroundBuilder:
    """A FIFO of (signature, input shapes, control values) built by one worker thread.

    ``build`` must be thread-safe with respect to the caller's runs (the executor takes its plan
    lock in it)."""

    def __init__(self, build: Callable[[Hashable, Shapes, dict[str, Any]], Any], max_queued: int = 64,
                 name: str = "pycann-plan-builder") -> None:
        self._build = build
        self.max_queued = max_queued
        self.name = name
        self._queue: deque[tuple[Hashable, Shapes, dict[str, Any], int | None]] = deque()
        self._queued: set[Hashable] = set()
        self._cond = threading.Condition(threading.Lock())
        self._worker: threading.Thread | None = None
        self.failed: set[Hashable] = set()  # signatures whose build raised
        self.built = 0
        # queued signatures that keep coming (``submit(hot=True)``): built first, beside held calls
        self._hot: set[Hashable] = set()
        self._building: Hashable | None = None  # the signature the worker is building now (queue[0])
        _BUILDERS.add(self)

    def _after_fork(self) -> None:
        """In a forked child: no worker, nothing queued (the parent's worker, maybe mid-build, is not
        here; the child's calls queue their shapes again)."""
        self._cond = threading.Condition(threading.Lock())
        self._worker = None
        self._queue.clear()
        self._queued.clear()
        self._hot.clear()
        self._building = None

    def submit(self, sig: Hashable, shapes: Shapes, values: dict[str, Any], threads: int | None = None,
               hot: bool = False) -> bool:
        """Queue ``sig`` unless it is queued already or the queue is full; True when queued. Its build
        runs with ``threads`` OpenMP threads (default: the calling thread's count). A ``hot`` one keeps
        coming: it is built next, even while calls hold (``hold``), and may take up to ``max_queued``
        places more. Without that, a shape called again and again between other threads' (or its own
        thread's) first calls of new shapes ran generic for as long as new shapes kept coming, and a
        queue filled by shapes that never came again kept it out for as long."""
        with self._cond:
            queued = sig not in self._queued and len(self._queued) < self.max_queued * (2 if hot else 1)
            if queued:
                self._queued.add(sig)
                self._queue.append((sig, shapes, values, threads if threads is not None else openmp.max_threads()))
                if self._worker is None:
                    self._worker = threading.Thread(target=self._loop, name=self.name, daemon=True)
                    self._worker.start()
            promoted = hot and sig in self._queued and sig not in self._hot
            if promoted:
                self._hot.add(sig)
        if promoted:
            gate = _gate
            with gate.cond:
                gate.cond.notify_all()  # (the worker may wait on the gate)
        return queued

    def _loop(self) -> None:
        _lower_priority()
        while True:
            # (at once when nothing is left to build: ``drop_waiting`` emptied the queue, its model gone)
            _gate.wait_quiet(lambda: bool(self._hot) or not self._queue)
            with self._cond:
                if not self._queue:
                    self._worker = None
                    self._cond.notify_all()
                    return
                if self._hot:  # a promoted signature first (only this thread pops the queue)
                    for i, entry in enumerate(self._queue):
                        if entry[0] in self._hot:
                            if i:
                                del self._queue[i]
                                self._queue.appendleft(entry)
                            break
                sig, shapes, values, threads = self._queue[0]
                self._building = sig  # (``drop_waiting`` keeps it)
            try:
                openmp.set_max_threads(threads)
                self._build(sig, shapes, values)
                self.built += 1
            except Exception as e:  # noqa: BLE001 - the executor rebuilds it inline, where the error names the node
                # (a plan for a smaller team is not rebuilt: its signature keeps the full team's plan)
                log.info("background plan build of %s failed: %s", short_signature(sig), e)
                self.failed.add(sig)
            with self._cond:
                self._building = None
                if self._queue and self._queue[0][0] == sig:
                    self._queue.popleft()
                self._queued.discard(sig)
                self._hot.discard(sig)

    def drop_waiting(self) -> int:
        """Forget the queued signatures whose build has not started (the one being built stays);
        returns how many were dropped. Their next calls queue them again if the executor still
        specialises them."""
        with self._cond:
            keep = [self._queue[0]] if self._queue and self._queue[0][0] == self._building else []
            dropped = len(self._queue) - len(keep)
            self._queue = deque(keep)
            self._queued = {e[0] for e in keep}
            self._hot &= self._queued
            self._cond.notify_all()  # (``wait`` may now be satisfied sooner)
        gate = _gate
        with gate.cond:
            gate.cond.notify_all()  # (the worker may wait on the gate with nothing left to build: it ends)
        return dropped

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every build queued so far is done; False when ``timeout`` seconds passed first.
        Builds start beside held calls meanwhile (``hold``)."""
        with _gate.waiting(), self._cond:
            return self._cond.wait_for(lambda: not self._queue, timeout)

    def pending(self) -> int:
        """Signatures queued or being built now."""
        with self._cond:
            return len(self._queue)
