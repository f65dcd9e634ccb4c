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
