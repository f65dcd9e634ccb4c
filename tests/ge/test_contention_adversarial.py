"""Adversarial checks of the thread governor's run-delay evidence (ge/run/contention.py, ge/run/run_delay.py).

Scripted samplers and delay sources as in test_contention.py; the run-delay reader on a hand-written task
folder or on this process's own /proc/self/task."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pycann.ge.run import contention, run_delay
from pycann.ge.run.run_delay import RunDelay
from tests.ge.test_contention import _measured_governor, _window


def _real_run_delay() -> RunDelay:
    rd = RunDelay()
    if not rd.available:
        pytest.skip("no /proc/self/task/*/schedstat here")
    return rd


# ------------------------------------------------------------------ the verdict with sparse runs
def test_sparse_runs_beside_a_neighbour_still_shrink_the_team(monkeypatch: pytest.MonkeyPatch) -> None:
    """One 5 ms run per window (a short model called a few times a second) while a neighbour runs during
    every run: no single window holds MIN_MEASURED of runs, so the verdict must build up over windows
    rather than stay at its initial "no overlap" for ever (the /proc/stat-only governor shrank here)."""
    g, s, d, clock = _measured_governor(monkeypatch)
    s.load = (2.0, 1.0)
    teams = [_window(g, d, clock, rate=0.7, runs=1, run_s=0.005) for _ in range(8)]
    assert teams[-1] == 1, teams


def test_a_stale_calm_verdict_does_not_keep_pinning_beside_a_neighbour(monkeypatch: pytest.MonkeyPatch) -> None:
    """Busy windows with no waiting make quiet() True (pinning); when a neighbour then runs during the
    (now sparse) runs, quiet() must not stay True for ever on the old measured calm."""
    g, s, d, clock = _measured_governor(monkeypatch)
    s.load = (2.0, 1.9)
    [_window(g, d, clock, rate=0.0) for _ in range(4)]
    assert g.quiet() is True
    s.load = (2.0, 1.0)
    [_window(g, d, clock, rate=0.7, runs=1, run_s=0.005) for _ in range(8)]
    assert g.quiet() is False


# ------------------------------------------------------------------ the reader's descriptors
def test_run_delay_leaves_descriptors_for_the_process() -> None:
    """A process with many threads near its descriptor limit: the reader must not take every descriptor
    left (one per thread, kept open), so that the process's own open() still works."""
    _real_run_delay()
    code = (
        "import resource, threading\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))\n"
        "from pycann.ge.run.run_delay import RunDelay\n"
        "rd = RunDelay()\n"
        "ev = threading.Event()\n"
        "ts = [threading.Thread(target=ev.wait) for _ in range(300)]\n"
        "[t.start() for t in ts]\n"
        "try:\n"
        "    assert rd.read() is not None\n"
        "    fs = [open('/dev/null') for _ in range(64)]\n"
        "    [f.close() for f in fs]\n"
        "finally:\n"
        "    ev.set(); [t.join() for t in ts]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_run_delay_read_never_raises_nor_closes_a_descriptor_it_no_longer_owns() -> None:
    """Code that closes descriptors it did not open (a daemon's closerange, a library's cleanup): the next
    read must not raise EBADF into the user's run, nor close the user's file that now has the number."""
    rd = _real_run_delay()
    ev = threading.Event()
    t = threading.Thread(target=ev.wait)
    t.start()
    try:
        rd._listed = -1.0
        rd.read()
        fds = sorted(rd._fds.values())
        assert len(fds) >= 2
        for fd in fds:
            os.close(fd)
        # the user's own file takes the lowest number freed
        mine = os.open(os.devnull, os.O_RDONLY)
        assert mine == fds[0]
        try:
            rd.read()  # must not raise
            os.fstat(mine)  # still open: the reader did not close it
        finally:
            os.close(mine)
        rd.read()
    finally:
        ev.set()
        t.join()


def test_an_unreadable_task_folder_falls_back_to_proc_stat(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/self/task cannot be listed (or no thread's file can be opened: EMFILE): the reader reads no
    thread and its sum stays 0. That is no evidence of calm: the governor must decide from /proc/stat as
    without the reader (shrink beside a neighbour, no pinning), not measure "no waiting" for ever."""
    _real_run_delay()

    def denied(path: str) -> list[str]:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(run_delay.os, "listdir", denied)
    rd = RunDelay()
    assert rd.available  # (this thread's own file can still be opened)
    g, s, _d, clock = _measured_governor(monkeypatch)
    g._delays = rd.read
    s.load = (2.0, 1.0)
    teams = []
    for _ in range(4):  # the neighbour runs during the runs: real waiting the reader cannot see
        for _ in range(4):
            team = g.team(2)
            tok = g.probe_begin(team == 2)
            clock[0] += 0.01
            if tok is not None:
                g.probe_end(tok)
            clock[0] += 0.05
        clock[0] = max(clock[0], g._next)
        teams.append(team)
    assert teams[-1] == 1 and g.quiet() is False, (teams, g.delay_fraction)


# ------------------------------------------------------------------ fork
def test_a_child_forked_while_another_thread_holds_the_governors_locks_does_not_hang(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """os.fork (multiprocessing's default start on Linux) while another thread is inside probe_end or a
    sample: the child inherits the locks held, and its first measured run (probe_end) or sample waited
    for ever. Its CPU time also starts again at 0, so the parent's last sample must not be kept."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    g, _s, d, _clock = _measured_governor(monkeypatch)
    monkeypatch.setattr(contention, "_governor", g)
    g.team(2)
    tok = g.probe_begin(True)
    assert tok is not None
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with g._acc_lock, g._lock:
            held.set()
            release.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        pid = os.fork()
        if pid == 0:  # the child: a hang ends in SIGALRM (status != 0)
            code = 1
            try:
                import signal

                signal.alarm(5)
                g.probe_end(tok)
                ok = g._lock.acquire(blocking=False)
                code = 0 if ok and g._last is None else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        release.set()
        t.join()
    assert os.waitstatus_to_exitcode(status) == 0
