"""Weight reorders of a plan build run on a helper thread, beside the build's Python work.

Binding a static plan packs every conv and matmul weight into the blocked layout its oneDNN
primitive asks for (``onednn_capi_ops.reorder``), and the Winograd convs transform theirs. That is
native work (DenseNet-121: ~30 ms of a ~120 ms load, 36 MB written by 167 reorders) done while
the building thread's Python waits; ctypes releases the GIL around the calls, so on a second core
it can run while the build goes on with the next nodes (the load's other native work, creating
primitives, stays on the building thread: the primitive is needed to bind the next steps).

``packing()`` opens a block on the calling thread: ``submit`` queues a reorder there and returns
at once with a ``Ticket``; the block's end waits for every queued reorder (and raises the first
failure), so a plan is complete when its constructor returns. Outside a block, or on another
thread, ``submit`` runs the job at once. Nested blocks (the plans of If/Loop bodies) join the
outer one. The helper runs its reorders with one OpenMP thread (oneDNN reads the count when a
primitive executes): the building thread keeps the other core, and no second team is spawned.

Whoever reads a packed memory before the block ends must ``Ticket.wait()`` for it first: the
shared-weights cache (``onednn_packed``) does when a plan built on another thread (the background
plan builder) finds a packing this block has not finished yet. Nothing else reads packed weights
during a build: plans execute only after their constructor returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pycann.kernels.providers import omp_fork, openmp

__all__ = ["Ticket", "active", "inline", "packing", "submit"]

#: Off switch for debugging (``knob_ab.py --knob pycann.kernels.providers.background_pack:ENABLED``).
ENABLED = True


class Ticket:
    """One queued reorder: ``wait()`` blocks until it ran and re-raises its error, if any."""

    __slots__ = ("_done", "error", "owner")

    def __init__(self) -> None:
        self._done = threading.Event()
        self.error: BaseException | None = None
        self.owner = threading.get_ident()  # the thread whose block queued it

    def done(self) -> bool:
        """True once the job ran (or failed)."""
        return self._done.is_set()

    def wait(self) -> None:
        """Wait for the job; raise what it raised."""
        self._done.wait()
        if self.error is not None:
            raise self.error

    def settle(self) -> None:
        """Wait for the job without raising (``error`` tells how it went)."""
        self._done.wait()

    def _finish(self, error: BaseException | None) -> None:
        self.error = error
        self._done.set()


_DONE = Ticket()
_DONE._finish(None)


class _Packer:
    """The helper thread of one block (started at the first job) and its FIFO queue."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], object], Any, Ticket] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None  # the first job's failure

    def submit(self, job: Callable[[], object], keep: Any) -> Ticket:
        if self._thread is None:
            thread = threading.Thread(target=self._work, name="pycann-pack", daemon=True)
            try:
                thread.start()
            except RuntimeError:  # no thread to be had (the process at its limit): the job runs here
                job()
                return _DONE
            self._thread = thread
        ticket = Ticket()
        self._jobs.put((job, keep, ticket))
        return ticket

    def _work(self) -> None:
        try:
            openmp.set_max_threads(1)  # this thread's own ICV: its reorders run serially, no second team
        except Exception:  # noqa: BLE001 - (then they run on a team of their own: slower, not wrong)
            pass
        self._drain()

    def _drain(self) -> None:
        """Run queued jobs until a stop mark (``None``)."""
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, keep, ticket = item
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the ticket
                if self.error is None:
                    self.error = e
                ticket._finish(e)
            else:
                ticket._finish(None)
            del item, job, keep, ticket  # (the sources may go as soon as their reorder ran)

    def close(self) -> None:
        """Run the jobs still queued on this thread too, beside the helper, then stop the helper.

        A model whose weights outweigh its binding work (ResNet-50: ~85 ms of reorders and Winograd
        transforms on one thread against ~60 ms of binding) would otherwise leave this thread idle
        while the helper finishes; both threads take jobs from the queue, one OpenMP thread each."""
        if self._thread is None:
            return
        self._jobs.put(None)  # the helper's stop mark
        if not omp_fork.stale():  # (a forked child's forking thread must not enter its libgomp pool)
            self._jobs.put(None)  # this thread's, which the helper's may precede
            team = openmp.max_threads()
            try:
                openmp.set_max_threads(1)  # (the helper has the other core)
                self._drain()
            finally:
                openmp.set_max_threads(team)
        self._thread.join()


_local = threading.local()


def active() -> bool:
    """True inside a ``packing()`` block of the calling thread."""
    return getattr(_local, "packer", None) is not None


@contextmanager
def packing() -> Iterator[None]:
    """Queue this thread's weight reorders (``submit``) on a helper thread until the block ends;
    the end waits for them and raises the first one's error (``DnnlError``) if the block itself
    did not raise. Nested blocks share the outermost one's helper."""
    packer: _Packer | None = getattr(_local, "packer", None)
    if packer is not None or not ENABLED or getattr(_local, "inline", False):  # nested: the outermost waits
        yield
        return
    packer = _local.packer = _Packer()
    try:
        yield
    finally:
        _local.packer = None
        packer.close()
    if packer.error is not None:
        raise packer.error


@contextmanager
def inline() -> Iterator[None]:
    """Inside, ``packing()`` blocks of this thread queue nothing: every job runs at once, on this
    thread. For the background plan builder, whose builds already run beside the caller's runs:
    a helper of its own would take the core those runs need."""
    prior = getattr(_local, "inline", False)
    _local.inline = True
    try:
        yield
    finally:
        _local.inline = prior


def submit(job: Callable[[], object], keep: Any = None) -> Ticket:
    """Run ``job`` (a reorder's execute) on the block's helper thread, holding ``keep`` (its source
    array) until it ran; outside a ``packing()`` block run it now. The returned ticket is done
    when ``job`` returned."""
    packer: _Packer | None = getattr(_local, "packer", None)
    if packer is None:
        job()
        return _DONE
    return packer.submit(job, keep)
