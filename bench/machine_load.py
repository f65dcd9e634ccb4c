"""How busy the machine is: other processes' CPU time from ``/proc/stat`` (used by ``run_bench.py``)."""

from __future__ import annotations

import os
import resource
import time


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return sum(fields) - idle, sum(fields)


def busy_fraction(seconds: float = 0.3) -> float:
    """How many CPUs' worth of time other processes used over ``seconds`` (0 = idle, 2 = both cores)."""
    try:
        b0, t0 = _cpu_times()
        time.sleep(seconds)
        b1, t1 = _cpu_times()
    except OSError:
        return float("nan")
    ncpu = os.cpu_count() or 1
    return round(ncpu * (b1 - b0) / max(1, t1 - t0), 2)


def wait_idle(max_wait: float, threshold: float) -> float:
    """Wait up to ``max_wait`` s for the machine's busy fraction to drop below ``threshold``; return the last."""
    deadline = time.monotonic() + max_wait
    busy = busy_fraction()
    while busy > threshold and time.monotonic() < deadline:
        busy = busy_fraction(1.0)
    return busy


class OtherLoad:
    """CPUs' worth of time used by *other* processes while a child runs: machine busy time minus the child's."""

    def __init__(self) -> None:
        self.hz = os.sysconf("SC_CLK_TCK")
        self.t0 = time.perf_counter()
        self.ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            self.busy0: int | None = _cpu_times()[0]
        except OSError:
            self.busy0 = None

    def stop(self) -> float:
        """The average number of CPUs other processes kept busy since construction."""
        wall = time.perf_counter() - self.t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if self.busy0 is None or wall <= 0:
            return float("nan")
        machine = (_cpu_times()[0] - self.busy0) / self.hz
        child = (ru1.ru_utime - self.ru0.ru_utime) + (ru1.ru_stime - self.ru0.ru_stime)
        return round(max(0.0, machine - child) / wall, 2)
