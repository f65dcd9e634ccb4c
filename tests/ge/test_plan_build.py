"""Background plan builds (PlanBuild.BACKGROUND, the default for graphs with convolutions): the
first call of a new input shape runs the shape-generic plan (the graph compiled once, kernels
resolving sizes per call) and the shape's specialised plan is built after it on a worker thread;
later calls of that shape hit it. Values against ONNX Runtime; counts of plans built,
specialisations (pass-pipeline runs) and generic runs; no timings."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.config import ConfigError, PlanBuild, PlanCacheConfig, PlanPolicy, plan_cache_config
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.test_plan_cache import _check, _conv_model, _img, _mlp_model

pytestmark = pytest.mark.usefixtures("default_providers")


def _load(model: object, **cfg: object) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(**cfg))  # type: ignore[arg-type]


def test_new_shape_runs_generic_then_hits_the_background_plan() -> None:
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    shapes = [(8, 8), (8, 12), (12, 8)]
    for h, w in shapes:  # first calls: the generic plan, each queues its shape's build
        _check(lm, m, _img(h, w))
    assert ex.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    assert (st.generic_runs, st.built, st.plans, st.hits) == (3, 3, 3, 0)
    assert ex._memo.specialized == 3  # one specialisation per shape, none on the calls
    for h, w in shapes * 2:  # later calls: their plans, nothing built
        _check(lm, m, _img(h, w))
    st = lm.plan_cache_stats()
    assert (st.generic_runs, st.built, st.hits) == (3, 3, 6) and ex._memo.specialized == 3
    assert ex.pending_builds() == 0 and ex._memo.pipeline_runs == 1  # the pass pipeline: once


def test_a_shape_is_queued_once() -> None:
    m = _conv_model()
    lm = _load(m)
    x = _img(9, 9)
    with lm.executor._lock:  # hold the builder: the same shape comes three times before it builds
        for _ in range(3):
            _check(lm, m, x)
        assert lm.executor.pending_builds() == 1
    assert lm.executor.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    assert (st.generic_runs, st.built) == (3, 1)


def test_failed_background_build_is_rebuilt_inline_with_its_error(monkeypatch: pytest.MonkeyPatch) -> None:
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    real = ex._specialize
    calls = []

    def once_broken(*a: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("broken specialisation")
        return real(*a)  # type: ignore[misc]

    monkeypatch.setattr(ex, "_specialize", once_broken)
    x = _img(10, 10)
    _check(lm, m, x)  # generic; the queued build fails
    assert ex.wait_builds(timeout=120) and lm.plan_cache_stats().built == 0
    _check(lm, m, x)  # built inline now (and would raise there, naming the problem)
    st = lm.plan_cache_stats()
    assert (st.generic_runs, st.built) == (1, 1) and len(calls) == 2


def test_inline_build_and_other_graphs_do_not_queue() -> None:
    m = _conv_model()
    lm = _load(m, build=PlanBuild.INLINE)
    _check(lm, m, _img(8, 8))
    st = lm.plan_cache_stats()
    assert (st.generic_runs, st.built) == (0, 1) and lm.executor.pending_builds() == 0
    mlp = _mlp_model()
    lm2 = _load(mlp)  # no convolutions: generic, nothing queued
    _check(lm2, mlp, np.random.default_rng(0).standard_normal((1, 5, 64)).astype(np.float32))
    assert lm2.plan_cache_stats().generic_runs == 1 and lm2.executor.pending_builds() == 0
    lm3 = _load(m, policy=PlanPolicy.SPECIALIZE)  # an explicit policy builds inline
    _check(lm3, m, _img(8, 8))
    assert lm3.plan_cache_stats().built == 1 and lm3.executor.pending_builds() == 0


def test_plan_build_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_PLAN_BUILD", "Inline")
    assert plan_cache_config().build is PlanBuild.INLINE
    monkeypatch.setenv("PYCANN_PLAN_BUILD", "later")
    with pytest.raises(ConfigError, match="PYCANN_PLAN_BUILD='later'"):
        plan_cache_config()


def test_plan_cache_config_takes_the_knobs_spelled_as_strings() -> None:
    """``PlanCacheConfig(policy="generic", build="background")``, the environment's spellings: the
    members they name (a plain "background" string used to build inline, and "generic" failed at the
    first call with an AttributeError); a bad value is a ConfigError naming the field."""
    cfg = PlanCacheConfig(policy="Generic", build="background")  # type: ignore[arg-type]
    assert cfg.policy is PlanPolicy.GENERIC and cfg.build is PlanBuild.BACKGROUND
    m = _conv_model()
    lm = _load(m, build="background")
    _check(lm, m, _img(8, 8))  # generic, its build queued: as PlanBuild.BACKGROUND
    assert lm.executor.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    assert (st.generic_runs, st.built, st.misses) == (1, 1, 1)
    lm2 = _load(m, policy="generic")
    _check(lm2, m, _img(8, 8))
    _check(lm2, m, _img(8, 8))
    st = lm2.plan_cache_stats()
    assert (st.generic_runs, st.built) == (2, 0)
    with pytest.raises(ConfigError, match="policy='fast'"):
        PlanCacheConfig(policy="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="build='later'"):
        PlanCacheConfig(build="later")  # type: ignore[arg-type]


def test_generic_plan_is_built_at_load_when_it_will_be_used() -> None:
    m, mlp = _conv_model(), _mlp_model()
    assert _load(m).executor._generic is not None  # background builds: first calls run it
    assert _load(mlp).executor._generic is not None  # no convolutions: new signatures run it
    assert _load(m, build=PlanBuild.INLINE).executor._generic is None
    assert _load(mlp, policy=PlanPolicy.SPECIALIZE).executor._generic is None


def test_builder_thread_is_niced_and_process_priority_unchanged() -> None:
    import os
    import threading

    from pycann.ge.run.plan_builder import NICE, BackgroundBuilder

    seen: list[int] = []
    go = threading.Event()
    before = os.getpriority(os.PRIO_PROCESS, 0)

    def build(sig: object, shapes: object, values: object) -> None:
        go.wait(60)
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    b = BackgroundBuilder(build)
    assert b.submit("s", [(1,)], {}) and not b.submit("s", [(1,)], {})  # queued once
    assert b.pending() == 1
    go.set()
    assert b.wait(timeout=60) and b.built == 1 and b.pending() == 0
    assert seen == [min(before + NICE, 19)]
    assert os.getpriority(os.PRIO_PROCESS, 0) == before  # only the builder thread was niced


def test_no_build_starts_while_a_call_holds_or_within_quiet_after() -> None:
    import threading
    import time

    from pycann.ge.run import plan_builder

    started: list[float] = []
    b = plan_builder.BackgroundBuilder(lambda sig, shapes, values: started.append(time.monotonic()))
    with plan_builder.hold():
        assert b.submit("a", [], {})
        time.sleep(0.1)
        assert not started  # held: the queued build waits
        released = time.monotonic()
    deadline = time.monotonic() + 10  # polled: a thread in wait() lets builds start at once
    while not started and time.monotonic() < deadline:
        time.sleep(0.001)
    assert b.wait(timeout=10) and len(started) == 1
    assert started[0] - released >= plan_builder.QUIET * 0.9  # (monotonic clock; no upper bound asserted)
    # the gate is process-wide: another builder waits for a hold taken for this one's model too
    other = plan_builder.BackgroundBuilder(lambda sig, shapes, values: started.append(time.monotonic()))
    gate = threading.Event()

    def hold_until_set() -> None:
        with plan_builder.hold():
            gate.wait(10)

    t = threading.Thread(target=hold_until_set)
    t.start()
    time.sleep(0.05)
    other.submit("b", [], {})
    time.sleep(0.1)
    assert len(started) == 1
    gate.set()
    t.join()
    assert other.wait(timeout=10) and len(started) == 2


def test_a_shape_that_keeps_coming_gets_its_plan_built_beside_its_calls() -> None:
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    x = _img(8, 12)
    for _ in range(ex.HOLD_CALLS + 2):  # back to back: no quiet moment for the builder
        _check(lm, m, x)
    assert ex.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    assert st.built == 1 and st.generic_runs >= ex.HOLD_CALLS  # the first HOLD_CALLS held the build off
    _check(lm, m, x)
    assert lm.plan_cache_stats().hits >= 1


def test_past_the_vision_signature_limit_new_shapes_stay_generic(monkeypatch: pytest.MonkeyPatch) -> None:
    """A vision model showing more than AUTO_VISION_SIGNATURES distinct shapes takes them for a
    stream: the builds still waiting are dropped, new shapes run the shape-generic plan for good, and
    the plans built before keep serving their shapes (values as ORT's throughout)."""
    from pycann.ge.run.executor import Executor

    monkeypatch.setattr(Executor, "AUTO_VISION_SIGNATURES", 3)
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    _check(lm, m, _img(8, 8))
    assert ex.wait_builds(timeout=120) and lm.plan_cache_stats().built == 1  # (8, 8) has its plan
    with ex._lock:  # hold the builder: two more shapes queue, then a fourth trips the limit
        for h, w in ((8, 12), (12, 8)):
            _check(lm, m, _img(h, w))
        assert ex.pending_builds() >= 1
        _check(lm, m, _img(10, 10))
        assert ex.pending_builds() <= 1  # only a build already started may remain
    assert ex.wait_builds(timeout=120)
    built = lm.plan_cache_stats().built
    assert built <= 2
    for h, w in ((8, 8), (8, 12), (12, 8), (10, 10), (6, 14)) * 2:  # nothing new is built from here on
        _check(lm, m, _img(h, w))
    assert ex.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    assert st.built == built and st.hits >= 2  # (8, 8) kept its plan
    assert ex.pending_builds() == 0


def test_drop_waiting_keeps_the_build_in_progress() -> None:
    import threading

    from pycann.ge.run.plan_builder import BackgroundBuilder

    started, release, done = threading.Event(), threading.Event(), []

    def build(sig: object, shapes: object, values: object) -> None:
        started.set()
        release.wait(30)
        done.append(sig)

    b = BackgroundBuilder(build)
    for s in ("a", "b", "c"):
        assert b.submit(s, [], {}, hot=True)
    assert started.wait(30)
    assert b.drop_waiting() == 2 and b.pending() == 1
    release.set()
    assert b.wait(30) and done == ["a"]
    assert b.submit("b", [], {}, hot=True)  # a dropped signature can be queued again
    assert b.wait(30) and done == ["a", "b"]


def test_drop_waiting_before_any_build_started_drops_all() -> None:
    from pycann.ge.run import plan_builder

    built: list[object] = []
    b = plan_builder.BackgroundBuilder(lambda sig, shapes, values: built.append(sig))
    with plan_builder.hold():  # a call holds the builder: nothing starts
        for s in ("a", "b"):
            assert b.submit(s, [], {})
        assert b.drop_waiting() == 2 and b.pending() == 0
    assert b.wait(30) and built == []


def test_a_dropped_model_is_not_kept_alive_by_its_waiting_builds() -> None:
    """A model dropped while builds of its new shapes wait (another call holds them back: a service
    making a model per request, or reloading one, while traffic goes on) is freed, and its builder thread
    ends without building. (The builder held the executor: it stayed alive, weights and plans with it,
    until the builds ran for nobody: up to 260 such models and threads at once on two threads, ~1.5 GB
    with PP-OCRv4 rec.)"""
    import gc
    import weakref

    from pycann.ge.run import plan_builder

    m = _conv_model()
    lm = _load(m)
    with plan_builder.hold():  # (a call of another model in flight: no build starts)
        _check(lm, m, _img(9, 10))
        ex = lm.executor
        builder = ex._builder
        assert ex.pending_builds() == 1
        worker = builder._worker
        assert worker is not None
        gone = weakref.ref(ex)
        del lm, ex
        gc.collect()
        assert gone() is None, [type(r).__name__ for r in gc.get_referrers(gone())]
        worker.join(10)
        assert not worker.is_alive() and builder.pending() == 0 and builder.built == 0 and not builder.failed
