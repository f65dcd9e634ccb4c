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
child drops the parent's descriptors (they name the parent's threads) and lists its own. At most
``MAX_FDS`` descriptors (and an eighth of ``RLIMIT_NOFILE``) are held, the reading thread's first: a
process of many threads near its descriptor limit keeps the rest for its own files (threads past the
bound are not counted). A descriptor closed or reused by other code is dropped, never closed again.
Where the files cannot be read (not Linux, no ``CONFIG_SCHED_INFO``) ``RunDelay.available`` is False
and the governor decides from ``/proc/stat`` alone, as before.
"""

from __future__ import annotations

import os
import threading
import time
import weakref

__all__ = ["MAX_FDS", "RELIST", "RunDelay"]

RELIST = 0.25  # seconds between two listings of this process's threads
MAX_FDS = 64  # descriptors held at most (one per thread read)
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
        self._ids: dict[str, tuple[int, int]] = {}  # (st_dev, st_ino) of each descriptor when opened
        self._listed = -RELIST
        self._lock = threading.Lock()
        self._gone = 0  # ns: threads that ended (their last value) minus threads' values when first seen
        self._last: dict[str, int] = {}
        self.available = self._probe()
        _INSTANCES.add(self)

    def _forget(self) -> None:
        """In a forked child: the descriptors name the parent's threads; start over with the child's."""
        for t in list(self._fds):
            self._close(t)
        self._fds, self._ids, self._last, self._gone, self._listed = {}, {}, {}, 0, -RELIST
        self._lock = threading.Lock()  # (another parent thread may have held it at the fork)

    def _probe(self) -> bool:
        try:
            with open(os.path.join(self._tasks, str(threading.get_native_id()), "schedstat"), "rb") as f:
                return len(f.read().split()) >= 2
        except (OSError, AttributeError, ValueError):
            return False

    def _close(self, t: str) -> None:
        """Drop thread ``t``'s descriptor (keeping its last value in the sum); closed only while it is
        still the file opened (other code may have closed the number and opened its own file on it)."""
        fd, ident = self._fds.pop(t), self._ids.pop(t, None)
        self._gone += self._last.pop(t, 0)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == ident:
                os.close(fd)
        except OSError:
            pass

    def _relist(self) -> None:
        try:
            names = set(os.listdir(self._tasks))
        except OSError:
            return
        for t in [t for t in self._fds if t not in names]:
            self._close(t)
        try:
            import resource

            bound = min(MAX_FDS, max(1, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 8))
        except (ImportError, OSError, ValueError):
            bound = MAX_FDS
        me = str(threading.get_native_id())
        for t in sorted(names - self._fds.keys(), key=lambda t: (t != me, len(t), t)):
            if len(self._fds) >= bound:
                break
            try:
                fd = os.open(os.path.join(self._tasks, t, "schedstat"), os.O_RDONLY)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                first = int(os.pread(fd, 128, 0).split()[1])
            except (OSError, ValueError, IndexError):
                os.close(fd)
                continue
            # a thread seen for the first time adds only what it waits from now on (the sum never jumps)
            self._fds[t], self._ids[t], self._last[t] = fd, (st.st_dev, st.st_ino), first
            self._gone -= first

    def read(self) -> float | None:
        """Seconds this process's threads have waited on run queues so far (monotonic; None when
        unavailable or when no thread's file could be read)."""
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
                    self._close(t)  # the thread ended since the listing: keep its last value
            if not self._fds:
                return None
            return (self._gone + sum(self._last.values())) / 1e9
