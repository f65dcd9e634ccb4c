"""Fewer OpenMP threads while other processes keep the CPUs busy (ge/run/contention.py).

The governor is driven by scripted CPU samples (no timing, no real load): its decisions, its
hysteresis and the /proc/stat parsing are checked exactly; the executor's reduced-team plan is
checked for values against ONNX Runtime, for the team its oneDNN primitives were created with,
and for the caller's OpenMP team being restored after the run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from pycann.config import ConfigError, PlanCacheConfig, PlanPolicy, plan_cache_config
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run import contention
from pycann.ge.run.contention import CpuSample, ThreadGovernor, read_sample
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import onednn, openmp
from tests.ge.test_plan_cache import RNG, _check, _conv_model, _mlp_model

pytestmark = pytest.mark.usefixtures("default_providers")


class Script:
    """A sampler whose every sample advances 1 s of wall time with ``busy`` CPU-seconds on the
    watched CPUs, ``own`` of them this process's."""

    def __init__(self) -> None:
        self.wall = self.busy = self.own = 0.0
        self.load = (0.0, 0.0)  # (busy CPUs, this process's CPUs) per second from now on

    def __call__(self) -> CpuSample:
        self.wall += 1.0
        self.busy += self.load[0]
        self.own += self.load[1]
        return CpuSample(self.wall, self.busy, self.own)


def _governor(ncpu: int = 2) -> tuple[ThreadGovernor, Script]:
    s = Script()
    return ThreadGovernor(s, ncpu, window=0.0), s


def test_quiet_machine_keeps_the_full_team() -> None:
    g, s = _governor()
    s.load = (2.0, 1.8)  # this process alone keeps both CPUs busy: others 0.2
    assert [g.team(2) for _ in range(5)] == [2] * 5
    assert g.available == pytest.approx(1.8) and g.contended() is None


def test_a_busy_neighbour_shrinks_the_team_after_two_windows_and_it_grows_back_after_one() -> None:
    g, s = _governor()
    s.load = (2.0, 1.9)
    g.team(2), g.team(2)  # two quiet windows
    s.load = (2.0, 1.1)  # a neighbour takes 0.9 CPU
    assert g.team(2) == 2  # one window shows it: not yet
    assert g.team(2) == 1  # two in a row: one thread
    assert g.contended() == pytest.approx(1.1)
    s.load = (2.0, 1.0)
    assert g.team(2) == 1  # stays while the neighbour runs
    s.load = (1.0, 1.0)  # it stopped
    assert g.team(2) == 2  # one free window is enough


def test_team_bounds_many_cpus_and_a_single_thread() -> None:
    g, s = _governor(16)
    s.load = (16.0, 6.0)  # others take 10 of 16 CPUs
    g.team(16), g.team(16)
    assert g.team(16) == 6  # round(available)
    assert g.team(4) == 4  # a team of 4 still fits in the 6 left
    assert g.team(1) == 1
    s.load = (16.0, 0.2)  # others take everything
    g.team(16), g.team(16)
    assert g.team(16) == 1  # never below one thread
    g2, s2 = _governor(2)
    s2.load = (2.0, 0.0)
    g2.team(8), g2.team(8)
    assert g2.team(8) == 1 and g2.team(3) == 1


def test_no_data_means_the_full_team() -> None:
    g = ThreadGovernor(lambda: None, 2, window=0.0)
    assert [g.team(2) for _ in range(3)] == [2, 2, 2] and g.available is None


def test_read_sample_sums_the_busy_fields_of_the_watched_cpus(tmp_path: Path) -> None:
    import os

    hz = os.sysconf("SC_CLK_TCK")
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  9 9 9 9 9 9 9 9 0 0\n"
                    "cpu0 100 1 10 5000 7 2 3 4 50 0\n"
                    "cpu1 200 0 20 6000 0 0 0 0 0 0\n"
                    "cpu2 999 0 0 0 0 0 0 0 0 0\n"
                    "intr 12345\n")
    s = read_sample(frozenset({0, 1}), str(stat))
    assert s is not None
    # cpu0: 100+1+10+2+3+4 (idle, iowait and guest, inside user already, left out); cpu1: 220; cpu2 not watched
    assert s.busy == pytest.approx((120 + 220) / hz)
    assert read_sample(frozenset({5}), str(stat)) is None
    assert read_sample(frozenset({0}), str(tmp_path / "missing")) is None


def test_read_sample_of_this_machine() -> None:
    s = read_sample(contention._allowed_cpus())
    if s is None:
        pytest.skip("no /proc/stat here")
    assert s.busy > 0 and s.own > 0


def test_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_ADAPTIVE_THREADS", "off")
    assert plan_cache_config().adaptive_threads is False
    monkeypatch.setenv("PYCANN_ADAPTIVE_THREADS", "on")
    assert plan_cache_config().adaptive_threads is True
    monkeypatch.delenv("PYCANN_ADAPTIVE_THREADS")
    assert plan_cache_config().adaptive_threads is True
    monkeypatch.setenv("PYCANN_ADAPTIVE_THREADS", "sometimes")
    with pytest.raises(ConfigError, match="PYCANN_ADAPTIVE_THREADS='sometimes'"):
        plan_cache_config()


@pytest.fixture
def busy_neighbour(monkeypatch: pytest.MonkeyPatch) -> Iterator[Script]:
    """The process's governor replaced by a scripted one that sees a neighbour taking a whole CPU."""
    g, s = _governor(2)
    s.load = (2.0, 1.0)
    g.team(2), g.team(2)
    monkeypatch.setattr(contention, "_governor", g)
    yield s


def _img(h: int, w: int) -> np.ndarray:
    return RNG.standard_normal((1, 16, h, w)).astype(np.float32)


def test_executor_runs_a_one_thread_plan_beside_a_busy_neighbour(busy_neighbour: Script) -> None:
    m = _conv_model()
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(adaptive_threads=True))
    ex = lm.executor
    x = _img(48, 48)
    _check(lm, m, x)  # the generic plan; the shape's full-team plan is queued
    assert ex.wait_builds(timeout=120)
    full = openmp.max_threads()
    if not full or full < 2:
        pytest.skip("one OpenMP thread here: nothing to reduce")
    _check(lm, m, x)  # the full team's plan exists: the one-thread plan is queued, this call runs full
    assert ex.wait_builds(timeout=120)
    keys = list(ex._cache._entries)
    assert keys[-1][-1] == ("threads", 1) and keys[-1][:-1] == keys[0]
    _check(lm, m, x)
    _check(lm, m, x)
    st = lm.plan_cache_stats()
    assert st.team_runs == 2 and st.built == 2 and "smaller team" in st.summary()
    assert openmp.max_threads() == full  # the caller's team is restored after each run
    # each plan's primitives were created on a thread whose OpenMP team was the plan's
    assert [ex._cache.peek(k).plan.team for k in keys] == [full, 1]  # type: ignore[union-attr]
    busy_neighbour.load = (1.0, 1.0)  # the neighbour stopped: back to the full team's plan
    _check(lm, m, x)
    assert lm.plan_cache_stats().team_runs == 2


@pytest.mark.skipif(not onednn.available(), reason="oneDNN not installed")
def test_primitive_caches_key_the_team() -> None:
    """A primitive made for one team is never handed to a caller of another (oneDNN fixes the team
    at creation): the unbound conv path's cache holds one primitive per team."""
    from pycann.ops.nn.conv import conv_window

    x = RNG.standard_normal((1, 8, 12, 12)).astype(np.float32)
    w = RNG.standard_normal((16, 8, 3, 3)).astype(np.float32)
    win = conv_window(x.shape, w.shape, {"pads": [1, 1, 1, 1]})
    full = openmp.max_threads()
    if not full or full < 2:
        pytest.skip("one OpenMP thread here")
    ys = []
    for team in (full, 1):
        openmp.set_max_threads(team)
        try:
            ys.append(onednn.conv_nhwc(x, w, None, 1, win))
        finally:
            openmp.set_max_threads(full)
    assert {k[-1] for k in onednn._plans if k[0] == id(w)} == {full, 1}
    np.testing.assert_allclose(ys[0], ys[1], rtol=1e-5, atol=1e-5)


def test_adaptive_threads_off_never_reduces(busy_neighbour: Script) -> None:
    m = _conv_model()
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(adaptive_threads=False))
    x = _img(20, 20)
    for _ in range(3):
        _check(lm, m, x)
        assert lm.executor.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    assert st.team_runs == 0 and st.built == 1


def test_the_shape_generic_plan_gets_a_one_thread_twin(busy_neighbour: Script) -> None:
    """A decoder's calls (a new shape each, the shape-generic plan): the twin bound for one thread is
    built on the builder thread, then runs every call, with ORT's values; quiet again, the full plan."""
    m = _mlp_model()
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                               adaptive_threads=True))
    ex = lm.executor
    x = RNG.standard_normal((2, 3, 64)).astype(np.float32)
    _check_mlp(lm, m, x)
    full = openmp.max_threads()
    if not full or full < 2:
        pytest.skip("one OpenMP thread here: nothing to reduce")
    assert ex.wait_builds(timeout=120)
    assert [p.team for p in ex._generic_teams.values()] == [1]
    for s_len in (4, 5, 6):  # a new shape per call, as a decoder's past length
        _check_mlp(lm, m, RNG.standard_normal((2, s_len, 64)).astype(np.float32))
    st = lm.plan_cache_stats()
    assert st.team_runs == 3 and st.generic_runs == 4 and st.built == 0
    assert openmp.max_threads() == full
    busy_neighbour.load = (1.0, 1.0)
    _check_mlp(lm, m, x)
    assert lm.plan_cache_stats().team_runs == 3


def _check_mlp(lm: LoadedModel, model: object, x: np.ndarray) -> None:
    from tests.ops.oracle import run_ort

    np.testing.assert_allclose(lm.run([x])[0], run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_quiet_needs_two_windows_with_others_at_most_quiet() -> None:
    """Pinning the team (kernels/providers/omp_affinity.py) waits for two quiet windows and stops at the
    first window where others take more than ``QUIET`` CPUs, well before the team would shrink."""
    g, s = _governor()
    s.load = (2.0, 1.9)  # others 0.1 CPU
    assert [g.quiet(), g.quiet(), g.quiet()] == [False, False, True]  # no window yet, one window, two
    s.load = (2.0, 1.6)  # others 0.4: above QUIET, below SLACK
    assert g.quiet() is False and g.team(2) == 2
    s.load = (2.0, 1.9)
    assert g.quiet() is False  # the busy window is still one of the last two
    assert g.quiet() is True


# ------------------------------------------------------------------ overlap: run-queue delay during runs
class Delays:
    """A scripted run-delay source: the seconds this process's threads have waited so far (``total``)."""

    def __init__(self) -> None:
        self.total = 0.0

    def __call__(self) -> float:
        return self.total


def _measured_governor(monkeypatch: pytest.MonkeyPatch) -> tuple[ThreadGovernor, Script, Delays, list[float]]:
    """A governor with scripted /proc/stat samples and run delays; ``clock[0]`` is its monotonic time."""
    s, d, clock = Script(), Delays(), [100.0]
    monkeypatch.setattr(contention.time, "monotonic", lambda: clock[0])
    g = ThreadGovernor(s, 2, window=0.25, delays=d)
    return g, s, d, clock


def _window(g: ThreadGovernor, d: Delays, clock: list[float], rate: float, runs: int = 4, run_s: float = 0.01) -> int:
    """One window: ``runs`` runs of ``run_s`` s whose threads wait ``rate`` s per s; returns the team of
    the last run (as the executor asks: team first, then the probe)."""
    team = 2
    for _ in range(runs):
        team = g.team(2)
        tok = g.probe_begin(team == 2)
        clock[0] += run_s
        d.total += rate * run_s
        if tok is not None:
            g.probe_end(tok)
        clock[0] += 0.05  # idle between runs
    clock[0] = max(clock[0], g._next)  # the window closes at the next run's first question
    return team


def test_a_neighbour_taking_turns_keeps_the_full_team(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/stat shows a neighbour taking 1 CPU, but this process's threads never wait during its runs:
    the neighbour runs while this one idles (two services taking turns). The full team stays."""
    g, s, d, clock = _measured_governor(monkeypatch)
    s.load = (2.0, 1.0)
    teams = [_window(g, d, clock, rate=0.0) for _ in range(6)]
    assert teams == [2] * 6
    assert g.available is not None and g.available < 2 - contention.SLACK  # /proc/stat alone would shrink
    assert g.delay_fraction == pytest.approx(0.0)
    assert g.quiet() is True  # measured calm: pinning may go on


def test_a_neighbour_running_during_the_runs_shrinks_the_team_and_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    g, s, d, clock = _measured_governor(monkeypatch)
    s.load = (2.0, 1.0)
    teams = [_window(g, d, clock, rate=0.7) for _ in range(4)]
    assert teams[-1] == 1 and g.delay_fraction == pytest.approx(0.7)
    assert g.quiet() is False
    # the neighbour goes on: a reduced team's runs are not measured; one window in PROBE_EVERY runs the
    # full team, still waits, and the team shrinks again
    teams = [_window(g, d, clock, rate=0.7) for _ in range(2 * contention.PROBE_EVERY)]
    assert 1 <= teams.count(2) <= 4 and teams[-1] == 1
    # the neighbour now takes turns: the next probe sees no waiting and the full team stays
    seen = [_window(g, d, clock, rate=0.0) for _ in range(contention.PROBE_EVERY + 3)]
    assert seen[-3:] == [2, 2, 2]


def test_windows_without_measured_runs_keep_the_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    g, s, d, clock = _measured_governor(monkeypatch)
    s.load = (2.0, 1.0)
    [_window(g, d, clock, rate=0.7) for _ in range(3)]
    assert g.team(2) == 1
    for _ in range(3):  # idle windows: /proc/stat still sees the neighbour, nothing measured
        clock[0] += 0.3
        assert g.team(2) == 1


def test_measuring_stops_after_measure_seconds_of_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    g, _s, d, clock = _measured_governor(monkeypatch)
    g.team(2)
    tokens = 0
    for _ in range(20):
        tok = g.probe_begin(True)
        clock[0] += 0.01
        if tok is not None:
            tokens += 1
            g.probe_end(tok)
    assert tokens == round(contention.MEASURE / 0.01)
    assert g.probe_begin(False) is None  # reduced-team runs are never measured


def test_run_delay_reads_this_process(tmp_path: Path) -> None:
    from pycann.ge.run.run_delay import RunDelay

    rd = RunDelay()
    if not rd.available:
        pytest.skip("no /proc/self/task/*/schedstat here")
    a = rd.read()
    b = rd.read()
    assert a is not None and b is not None and 0.0 <= a <= b
    # a task folder written by hand: threads appear and end, the sum never jumps or goes back
    tasks = tmp_path / "task"
    for tid, delay in (("1", 500), ("2", 7000)):
        (tasks / tid).mkdir(parents=True)
        (tasks / tid / "schedstat").write_text(f"100 {delay} 3\n")
    fake = RunDelay(str(tasks))
    assert fake.available is False  # this thread's own file is not there: not usable
    fake.available = True
    assert fake.read() == 0.0  # threads seen for the first time add only what they wait from now on
    (tasks / "2" / "schedstat").write_text("100 9000 4\n")
    assert fake.read() == pytest.approx(2e-6)
    (tasks / "3").mkdir()
    (tasks / "3" / "schedstat").write_text("1 123456 1\n")
    import shutil

    shutil.rmtree(tasks / "1")
    fake._listed = -1.0  # relist now
    assert fake.read() == pytest.approx(2e-6)
    (tasks / "3" / "schedstat").write_text("1 124456 1\n")
    assert fake.read() == pytest.approx(3e-6)


def test_run_delay_in_a_forked_child_reads_the_childs_threads() -> None:
    import os

    from pycann.ge.run.run_delay import RunDelay

    rd = RunDelay()
    if not rd.available or not hasattr(os, "fork"):
        pytest.skip("no /proc/self/task/*/schedstat or fork here")
    rd.read()
    parent = set(rd._fds)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own thread ids only
        try:
            rd.read()
            ok = set(rd._fds) == set(os.listdir("/proc/self/task")) and not (set(rd._fds) & parent)
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    os.close(r)
