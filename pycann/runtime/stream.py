"""Streams: ordered task queues, each run by its own worker thread (cann-interfaces.md §1.3).

A task is a plain callable. Tasks of one stream run one after another in submission order;
tasks of different streams run concurrently. ``wait_event`` enqueues a task that blocks the
stream until the event's latest record has run, which is how work is ordered across streams.
A task that raises does not stop the stream: the error is kept and reported by the next
``synchronize`` (as CUDA and CANN report asynchronous failures at synchronisation).

A forked child has none of its parent's threads: its streams start a new worker on their next
task, and the tasks that were queued or running when the process forked (which the child will never
run) are reported by the stream's next ``synchronize`` as failed (``LostInFork``), their events
completed, rather than leaving ``synchronize`` to wait forever.

A task (a ``launch_callback`` callback) that synchronizes or destroys its own stream, or waits for an
event recorded behind it on that stream, would wait for itself: that raises ``WaitOnOwnWorker``.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from pycann.runtime.errors import InvalidHandle, LostInFork, TaskFailed, WaitOnOwnWorker, WaitTimeout

if TYPE_CHECKING:
    from pycann.runtime.event import Event

_ids = itertools.count(1)
_live: weakref.WeakSet[Stream] = weakref.WeakSet()  # (for the forked child: _after_fork_in_child)


class Task:
    """One queued callable; ``done`` is set when it has run (``error`` holds what it raised)."""

    __slots__ = ("fn", "name", "done", "error", "start", "end", "stream")

    def __init__(self, fn: Callable[[], object], name: str, stream: Stream | None = None) -> None:
        self.fn = fn
        self.name = name
        self.stream = stream
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.start = 0.0
        self.end = 0.0


class Stream:
    """An ordered queue of tasks run by a worker thread (started on first use)."""

    def __init__(self, device_id: int = 0, name: str = "", site: str = "") -> None:
        self.id = next(_ids)
        self.device_id = device_id
        self.name = name or f"stream {self.id}"
        self.site = site
        self._q: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._pending = 0
        self._errors: list[Task] = []
        self._unfinished: dict[Task, None] = {}  # queued or running, in order (what a fork leaves behind)
        self._thread: threading.Thread | None = None
        self.destroyed = False
        self.tasks_run = 0
        _live.add(self)

    def submit(self, fn: Callable[[], object], name: str = "task") -> Task:
        """Queue ``fn``; returns its ``Task``. Raises ``InvalidHandle`` on a destroyed stream."""
        task = Task(fn, name, self)
        with self._cv:
            if self.destroyed:
                raise InvalidHandle(f"{self.name} was destroyed")
            self._pending += 1
            self._unfinished[task] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=f"pycann-{self.name}", daemon=True)
                self._thread.start()
        self._q.put(task)
        return task

    def _loop(self) -> None:
        while True:
            task = self._q.get()
            if task is None:
                return
            task.start = time.perf_counter()
            try:
                task.fn()
            except BaseException as e:  # noqa: BLE001 - reported at synchronize
                task.error = e
            task.end = time.perf_counter()
            task.done.set()
            with self._cv:
                if task.error is not None:
                    self._errors.append(task)
                self._unfinished.pop(task, None)
                self.tasks_run += 1
                self._pending -= 1
                if self._pending == 0:
                    self._cv.notify_all()

    def on_worker(self) -> bool:
        """True when called from this stream's own worker (inside one of its tasks)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def refuse_on_worker(self, what: str) -> None:
        """Raises ``WaitOnOwnWorker`` when called from this stream's worker: ``what`` would wait for
        the task that is calling it."""
        if self.on_worker():
            raise WaitOnOwnWorker(f"{what} from a task running on {self.name} (a callback) would wait forever: "
                                  "the stream cannot go on until that task returns; wait from another thread, or "
                                  "queue the work behind the callback instead")

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until every queued task has run. Raises ``TaskFailed`` for the first task that
        failed since the last synchronize (the errors are then cleared), ``WaitTimeout``,
        ``WaitOnOwnWorker`` from one of this stream's tasks."""
        self.refuse_on_worker(f"synchronizing {self.name}")
        with self._cv:
            if not self._cv.wait_for(lambda: self._pending == 0, timeout):
                raise WaitTimeout(f"{self.name}: {self._pending} tasks still running after {timeout} s")
            failed, self._errors = self._errors, []
        if failed:
            t = failed[0]
            more = f" (and {len(failed) - 1} more failed tasks)" if len(failed) > 1 else ""
            raise TaskFailed(f"{self.name}: task {t.name} failed: {t.error}{more}", t.error)

    def query(self) -> bool:
        """True when every queued task has run."""
        with self._cv:
            return self._pending == 0

    def wait_event(self, event: Event) -> None:
        """Later tasks of this stream wait until ``event``'s latest record (if any) has run. Raises
        ``InvalidHandle`` for an event destroyed (or of a destroyed context)."""
        marker = event.check().marker
        if marker is not None and not marker.done.is_set():
            self.submit(marker.done.wait, "stream_wait_event")

    def destroy(self, timeout: float | None = None) -> bool:
        """Run what is queued, then stop the worker. Errors of queued tasks are dropped.
        Returns False if the queue did not drain within ``timeout`` (the worker is abandoned). From
        one of its own tasks: ``WaitOnOwnWorker`` without a timeout, else abandoned at once."""
        if timeout is None:
            self.refuse_on_worker(f"destroying {self.name}")
        elif self.on_worker():
            timeout = 0  # (finalize / reset_device from a callback: the worker ends after this task)
        with self._cv:
            if self.destroyed:
                raise InvalidHandle(f"{self.name} was already destroyed")
            self.destroyed = True
            drained = self._cv.wait_for(lambda: self._pending == 0, timeout)
            thread, self._thread = self._thread, None
        if thread is not None:
            self._q.put(None)
            if drained:
                thread.join()
        return drained

    def _after_fork(self) -> None:
        """In a forked child: fresh queue, lock and worker (started by the next ``submit``); the
        parent's unfinished tasks fail (their ``done`` set) and are reported by ``synchronize``."""
        lost, self._unfinished = list(self._unfinished), {}
        self._q = queue.SimpleQueue()
        self._cv = threading.Condition()
        self._thread = None
        self._pending = 0
        for t in lost:
            t.error = LostInFork("it was queued or running when the process forked, and a forked child does not "
                                 "run its parent's stream tasks (submit it again in the child)")
            t.done = threading.Event()  # (the parent's may be locked by a thread the child does not have)
            t.done.set()
            self._errors.append(t)

    def describe(self) -> str:
        return f"{self.name} (created at {self.site})" if self.site else self.name


def _after_fork_in_child() -> None:
    for st in list(_live):
        st._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
