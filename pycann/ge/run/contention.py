"""Contention: how many OpenMP threads a plan's run should use while other processes keep the CPUs busy.

A oneDNN primitive runs its parallel regions on the team it was created with, and each region ends
in a barrier. When another process keeps a core busy, the scheduler time-slices one of the team's
threads with it, and every barrier waits for that thread's next slice: on 2 cores with one busy-loop
neighbour, a 2-thread ResNet-50 plan took 42.5 ms where ORT took 37.9 and a 1-thread plan 33.3
(MobileNetV2: 9.5 / 4.5-5.8 / 3.8 ms; bench/RESULTS.md, "Contention"). So while other processes use
the cores this process may run on, a plan bound for fewer threads wins, and when they stop, the
full team wins again.

``ThreadGovernor`` measures the CPU time *other* processes take on this process's CPUs: every
``window`` seconds it reads the busy time of those CPUs (``/proc/stat``: user, nice, system, irq,
softirq and steal, a VM's time taken by its host) and subtracts this process's own CPU time
(``time.process_time``). The CPUs left over, ``available = len(cpus) - others``, bound the team:

* the full team (the caller's ``omp_get_max_threads()``) while ``available >= full - SLACK``;
* else ``max(1, round(available))`` threads, never more than ``full - 1``.

Overlap: ``/proc/stat`` says how much CPU others took over a window, not whether they took it while this
process ran. Where the kernel keeps per-thread run-queue delays (``ge/run/run_delay.py``), the governor
also measures, over up to ``MEASURE`` s of full-team runs per window, how long this process's threads
waited for a CPU per second of run: the team shrinks only while that is at least ``DELAY`` (two services
taking turns on the CPUs keep their full teams), and a reduced team runs one window in ``PROBE_EVERY`` on
the full team to measure again. Two measured windows without waiting also count as quiet for pinning.

The reduction needs two windows in a row that show it (a compile or a short job beside the model does
not rebuild plans); going back to the full team takes one. Reading ``/proc/stat`` costs ~20 us per
window; a call between samples reads one clock. Where ``/proc/stat`` cannot be read (not Linux) the
governor always answers the full team. ``PYCANN_ADAPTIVE_THREADS=off`` turns it off
(``config.adaptive_threads``). The executor keys plans by the team (``ge/run/executor.py``) and
builds a reduced-team plan in the background the first time contention asks for it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pycann.ge.run.run_delay import RunDelay

__all__ = ["CpuSample", "ThreadGovernor", "governor", "read_sample", "team_for"]

SLACK = 0.5  # CPUs others may take before the team shrinks (background noise, this process's other threads)
# CPUs others may take while the team is still pinned one thread per CPU (kernels/providers/omp_affinity.py).
# Lower than SLACK because pinning hides a neighbour: a pinned two-thread team beside one busy loop held
# ~1.5 of 2 CPUs (others ~0.5, right at SLACK) where the same team unpinned left it ~1 (others ~0.9-1.0)
QUIET = 0.25
WINDOW = 0.25  # seconds between two samples
# Run-queue delay of this process's threads per second of its full-team runs (ge/run/run_delay.py) at or
# above which other processes are taken to overlap its runs: a 2-thread team beside a busy loop on 2 CPUs
# measured 0.55-0.78, alone or beside a process taking turns with it ~0 (median; ~0.1 with some overlap)
DELAY = 0.25
MEASURE = 0.04  # seconds of full-team runs per window whose delay is measured (then no reads till the next)
MIN_MEASURED = 0.008  # a window with fewer seconds of measured runs keeps the previous verdict (its runs carry over)
PROBE_EVERY = 8  # windows on a reduced team before one runs the full team again to measure the overlap
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system (idle iowait) irq softirq steal; guest is inside user


@dataclass(frozen=True)
class CpuSample:
    """One reading: ``wall`` (``time.monotonic``, s), ``busy`` (non-idle seconds summed over the CPUs
    watched, from ``/proc/stat``), ``own`` (this process's CPU seconds, all threads)."""

    wall: float
    busy: float
    own: float


def read_sample(cpus: frozenset[int], path: str = "/proc/stat") -> CpuSample | None:
    """A ``CpuSample`` of the CPUs ``cpus``; None when ``path`` cannot be read or parsed (not Linux)."""
    try:
        with open(path, "rb") as f:
            text = f.read().decode("ascii", "replace")
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    ticks = 0
    seen = 0
    for line in text.splitlines():
        if not line.startswith("cpu") or line.startswith("cpu "):
            continue
        name, *fields = line.split()
        try:
            cpu = int(name[3:])
            if cpu in cpus:
                ticks += sum(int(fields[i]) for i in _BUSY_FIELDS if i < len(fields))
                seen += 1
        except ValueError:
            return None
    if not seen:
        return None
    return CpuSample(time.monotonic(), ticks / hz, time.process_time())


def _allowed_cpus() -> frozenset[int]:
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


class ThreadGovernor:
    """The team size for a plan run now, from the CPU time other processes take (module doc).

    ``sampler`` returns a ``CpuSample`` (or None: no data, the full team); ``ncpu`` is how many CPUs it
    watches. Thread-safe: a caller that finds another thread sampling uses the current answer."""

    def __init__(self, sampler: Callable[[], CpuSample | None], ncpu: int, window: float = WINDOW,
                 delays: Callable[[], float | None] | None = None) -> None:
        self._sampler = sampler
        self.ncpu = ncpu
        self.window = window
        self._last: CpuSample | None = None
        self._next = 0.0  # monotonic time of the next sample
        self._lock = threading.Lock()
        self._history: list[float] = []  # available CPUs of the last two windows
        self.available: float | None = None  # CPUs left by other processes, as the decision reads it
        self.samples = 0
        # the run-delay evidence (module doc, "Overlap"): ``delays`` reads this process's threads' summed
        # run-queue delay in seconds; without it /proc/stat alone decides (others are taken to overlap)
        self._delays = delays
        self._acc = [0.0, 0.0]  # this window's measured run delay and run time (s), full-team runs
        self._acc_lock = threading.Lock()
        self._overlap = delays is None  # the last measured window's verdict: others ran while this did
        self._calm = 0  # measured windows in a row whose full-team runs did not wait (pinning may go on)
        self._reduced = 0  # windows in a row answered with a smaller team
        self._probe = False  # this window runs the full team to measure whether the overlap goes on
        self.delay_fraction: float | None = None  # the last measured window's delay per second of run

    def _after_fork(self) -> None:
        """In a forked child: locks another parent thread may have held at the fork are made anew, and
        the parent's last sample is dropped (the child's CPU time starts again at 0)."""
        self._lock, self._acc_lock = threading.Lock(), threading.Lock()
        self._acc = [0.0, 0.0]
        self._last, self._history, self.available, self._next = None, [], None, 0.0

    def contended(self) -> float | None:
        """The CPUs other processes leave to this one (a new sample when one is due) while that is
        fewer than all it may run on minus ``SLACK``; None on a quiet machine or without data. One
        clock read between samples: callers ask it on every run."""
        if time.monotonic() >= self._next:
            self._sample()
        avail = self.available
        if avail is None or avail >= self.ncpu - SLACK or not self._overlap or self._probe:
            return None
        return avail

    def quiet(self) -> bool:
        """Both of the last two windows saw other processes take at most ``QUIET`` CPUs (a new sample
        when one is due): the caller may pin its team (``ge/run/generic_runs._pinned_run``). False before
        two windows were seen and without data."""
        if time.monotonic() >= self._next:
            self._sample()
        hist = self._history
        if len(hist) != 2:
            return False
        # others took next to nothing, or took CPU only while this process waited (two measured windows)
        return min(hist) >= self.ncpu - QUIET or (self._calm >= 2 and not self._overlap)

    def probe_begin(self, full: bool) -> tuple[float, float] | None:
        """Call before a run (``full``: on the full team); returns a token for ``probe_end`` while this
        window still measures run delays, else None (no read: most runs)."""
        if self._delays is None or not full or self._acc[1] >= MEASURE:
            return None
        d = self._delays()
        if d is None:
            # no thread's delay could be read (the task folder unreadable, no descriptor left): that is
            # no evidence of calm; decide from /proc/stat alone, as without the reader, till a read works
            self._overlap, self._calm = True, 0
            return None
        return (time.monotonic(), d)

    def probe_end(self, token: tuple[float, float]) -> None:
        """Call after the run ``probe_begin`` returned ``token`` for: adds its delay and duration."""
        assert self._delays is not None
        d = self._delays()
        if d is None:
            return
        wall = time.monotonic() - token[0]
        with self._acc_lock:
            self._acc[0] += max(0.0, d - token[1])
            self._acc[1] += wall

    def _verdict(self) -> None:
        """At a window's end: the overlap verdict from its measured runs, and the reduced-team probe."""
        with self._acc_lock:
            delay, ran = self._acc
            # fewer seconds than MIN_MEASURED carry over to the next windows (a short model called a few
            # times a second): else no window would ever be measured and the verdict would never change
            if ran >= MIN_MEASURED:
                self._acc = [0.0, 0.0]
        if ran >= MIN_MEASURED:
            self.delay_fraction = delay / ran
            self._overlap = self.delay_fraction >= DELAY
            self._calm = 0 if self._overlap else self._calm + 1
        avail = self.available
        reduced = avail is not None and avail < self.ncpu - SLACK and self._overlap and not self._probe
        self._reduced = self._reduced + 1 if reduced else 0
        # a smaller team leaves room for the neighbour, so its runs cannot show whether the neighbour
        # still runs while this process does (taking turns with it now): every PROBE_EVERY windows one
        # window runs the full team and measures
        self._probe = self._delays is not None and self._reduced >= PROBE_EVERY
        if self._probe:
            self._reduced = 0

    def team(self, full: int) -> int:
        """Threads for a run whose full team is ``full`` (>= 1): ``full`` on a quiet machine, fewer while
        other processes take this process's CPUs (module doc)."""
        return team_for(self.contended(), full)

    def _sample(self) -> None:
        if not self._lock.acquire(blocking=False):
            return  # another thread is sampling
        try:
            now = self._sampler()
            self._next = time.monotonic() + self.window
            if now is None:
                # no data: the full team (class doc), not the last answer kept for ever; shrinking
                # again needs two windows of samples once the sampler answers
                self._last, self._history, self.available = None, [], None
                return
            last, self._last = self._last, now
            if last is None or now.wall - last.wall < self.window / 2:
                return
            span = now.wall - last.wall
            others = max(0.0, (now.busy - last.busy) - (now.own - last.own)) / span
            self._history = (self._history + [max(0.0, self.ncpu - others)])[-2:]
            self.samples += 1
            # shrink only when both windows saw the contention; grow back as soon as one is free
            self.available = max(self._history) if len(self._history) == 2 else None
            self._verdict()
        finally:
            self._lock.release()


def team_for(available: float | None, full: int) -> int:
    """The team for ``available`` CPUs left by other processes (``ThreadGovernor.contended``; None:
    quiet) and a full team of ``full``: ``full`` while it fits within ``SLACK``, else
    ``round(available)`` threads, at least 1 and fewer than ``full``."""
    if available is None or full <= 1 or available >= full - SLACK:
        return full
    return max(1, min(full - 1, int(available + 0.5)))


_governor: ThreadGovernor | None = None
_governor_lock = threading.Lock()


def _after_fork_in_child() -> None:
    global _governor_lock
    _governor_lock = threading.Lock()
    if _governor is not None:
        _governor._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def governor() -> ThreadGovernor:
    """The process's governor over the CPUs it may run on (one per process: every model asks it)."""
    global _governor
    if _governor is None:
        with _governor_lock:
            if _governor is None:
                cpus = _allowed_cpus()
                rd = RunDelay()
                _governor = ThreadGovernor(lambda: read_sample(cpus), len(cpus),
                                           delays=rd.read if rd.available else None)
    return _governor
