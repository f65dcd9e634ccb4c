"""How long this process's threads waited for a CPU: the run-queue delay the kernel keeps per thread.

``/proc/self/task/<tid>/schedstat`` holds three numbers per thread: time on a CPU (ns), time spent
runnable but waiting on a run queue (ns, "run_delay") and the number of slices. The kernel updates
both at every switch (``CONFIG_SCHED_INFO``), to the nanosecond, unlike ``/proc/stat``'s busy times,
which a 250 Hz tick samples and ``/proc/stat`` shows in 10 ms units: too coarse to tell what another
process did during one 3-10 ms model run.

Why the thread governor (``ge/run/contention.py``) needs it: ``/proc/stat`` says how much CPU other
processes took over a window, not whether they took it *while this process ran*. Two services taking
turns (each busy while the other waits) each see the other take ~1 CPU and would shrink their teams,
though neither ever waits for the other: measured, a GPT-2 6L decode step beside an ONNX Runtime
process taking turns ran on one thread 93 % of the time (14.4 ms against 12.3 on two). The run delay
of this process's threads during its runs separates the cases: a two-thread team beside a busy loop
on 2 CPUs waited 0.55-0.78 thread-seconds per second of run (MobileNetV2, GPT-2 decode), alone or
taking turns ~0 (median).

Reading: one ``pread`` of a file descriptor kept open per thread (~1 us each); the set of threads is
listed again at most every ``RELIST`` seconds (threads come and go: builder, OpenMP workers). A forked
child drops the parent's descriptors (they name the parent's threads) and lists its own.
Where the files cannot be read (not Linux, no ``CONFIG_SCHED_INFO``) ``RunDelay.available`` is False
and the governor decides from ``/proc/stat`` alone, as before.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

__all__ = ["RELIST", "RunDelay"]

RELIST = 0.25  # seconds between two listings of this process's threads
_TASKS = "/proc/self/task"
_INSTANCES: weakref.WeakSet[RunDelay] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for rd in list(_INSTANCES):
        rd._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class RunDelay:
    """The summed run-queue delay (seconds) of this process's threads. Thread-safe."""

    def __init__(self, tasks: str = _TASKS) -> None:
        self._tasks = tasks
        self._fds: dict[str, int] = {}
        self._listed = -RELIST
        self._lock = threading.Lock()
        self._gone = 0  # ns: threads that ended (their last value) minus threads' values when first seen
        self._last: dict[str, int] = {}
        self.available = self._probe()
        _INSTANCES.add(self)

    def _forget(self) -> None:
        """In a forked child: the descriptors name the parent's threads; start over with the child's."""
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds, self._last, self._gone, self._listed = {}, {}, 0, -RELIST
        self._lock = threading.Lock()  # (another parent thread may have held it at the fork)

    def _probe(self) -> bool:
        try:
            with open(os.path.join(self._tasks, str(threading.get_native_id()), "schedstat"), "rb") as f:
                return len(f.read().split()) >= 2
        except (OSError, AttributeError, ValueError):
            return False

    def _relist(self) -> None:
        try:
            names = set(os.listdir(self._tasks))
        except OSError:
            return
        for t in [t for t in self._fds if t not in names]:
            os.close(self._fds.pop(t))
            self._gone += self._last.pop(t, 0)
        for t in names - self._fds.keys():
            try:
                fd = os.open(os.path.join(self._tasks, t, "schedstat"), os.O_RDONLY)
            except OSError:
                continue
            try:
                first = int(os.pread(fd, 128, 0).split()[1])
            except (OSError, ValueError, IndexError):
                os.close(fd)
                continue
            # a thread seen for the first time adds only what it waits from now on (the sum never jumps)
            self._fds[t], self._last[t] = fd, first
            self._gone -= first

    def read(self) -> float | None:
        """Seconds this process's threads have waited on run queues so far (monotonic; None when
        unavailable)."""
        if not self.available:
            return None
        with self._lock:
            now = time.monotonic()
            if now - self._listed >= RELIST:
                self._listed = now
                self._relist()
            for t, fd in list(self._fds.items()):
                try:
                    self._last[t] = int(os.pread(fd, 128, 0).split()[1])
                except (OSError, ValueError, IndexError):
                    os.close(self._fds.pop(t))  # the thread ended since the listing: keep its last value
                    self._gone += self._last.pop(t, 0)
            return (self._gone + sum(self._last.values())) / 1e9
