"""Adversarial tests of the background builder's process-wide gate (``ge/run/plan_builder.hold``):
fork while the gate is held or the worker waits on it, ``wait`` beside (or inside) held calls, a call
that raises inside the hold, concurrent new shapes on two models, and the knobs that take no hold."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import numpy as np
import pytest

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.errors import PycannError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run import plan_builder
from pycann.ge.run.model import LoadedModel
from tests.ge.test_plan_cache import _conv_model, _img
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")


def _load(model: object, **cfg: object) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(**cfg))  # type: ignore[arg-type]


class _Holder:
    """A thread inside ``plan_builder.hold()`` until ``release``: a call that never ends, or a stream
    of first calls with no quiet moment between them."""

    def __init__(self) -> None:
        self._entered = threading.Event()
        self._release = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        assert self._entered.wait(30)

    def _run(self) -> None:
        with plan_builder.hold():
            self._entered.set()
            self._release.wait(600)  # (released by the test; longer than any of its polls)

    def release(self) -> None:
        self._release.set()
        self._t.join(30)


def _in_child(check: Callable[[], object]) -> int:
    """Fork; the child runs ``check`` and exits 0 when it is true (2 when false, 1 when it raised);
    the parent returns that exit code (``_wait_child``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (3.12+: fork of a multi-threaded process)
        pid = os.fork()
    if pid == 0:  # the child: always leaves through os._exit
        code = 1
        try:
            code = 0 if check() else 2
        finally:
            os._exit(code)
    return _wait_child(pid)


def _wait_child(pid: int, limit: float = 90.0) -> int:
    """The child's exit code; it is killed (and the test fails) when it hangs past ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked child hung")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_builds_although_the_parent_held_the_gate_and_its_worker_waited() -> None:
    # was: the child inherited the hold count of a thread that does not exist in it (every build of
    # the child waited forever) and the builder's remembered worker (submit never started one)
    built: list[object] = []
    b = plan_builder.BackgroundBuilder(lambda sig, shapes, values: built.append(sig))
    h = _Holder()
    try:
        assert b.submit("parent", [], {})  # its worker now waits on the gate
        time.sleep(0.05)
        assert not built
        assert _in_child(lambda: b.submit("child", [], {}) and b.wait(timeout=30) and built == ["child"]
                         and b.pending() == 0) == 0
    finally:
        h.release()
    assert b.wait(timeout=60) and built == ["parent"]


def test_wait_returns_beside_a_thread_that_keeps_holding() -> None:
    # was: wait() (Executor.wait_builds) blocked as long as other threads kept calls on the generic
    # plan back to back: a service warming up beside its traffic never got past it
    built: list[object] = []
    b = plan_builder.BackgroundBuilder(lambda sig, shapes, values: built.append(sig))
    h = _Holder()
    try:
        assert b.submit("a", [], {})
        assert b.wait(timeout=60) and built == ["a"]
    finally:
        h.release()


def test_wait_inside_a_held_call_does_not_deadlock() -> None:
    # was: a thread inside a hold (e.g. a custom kernel or callback of a call on the generic plan)
    # that waited for the builds waited on itself
    built: list[object] = []
    b = plan_builder.BackgroundBuilder(lambda sig, shapes, values: built.append(sig))
    with plan_builder.hold():
        assert b.submit("a", [], {})
        assert b.wait(timeout=60) and built == ["a"]
    # and the gate works as before once nobody waits
    with plan_builder.hold():
        assert b.submit("b", [], {})
        time.sleep(0.05)
        assert built == ["a"]
    assert b.wait(timeout=60) and built == ["a", "b"]


def test_a_call_that_raises_inside_the_hold_releases_it() -> None:
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    bad = np.zeros((1, 8, 9, 9), np.float32)  # 8 channels where the weights take 16
    for _ in range(3):
        with pytest.raises((PycannError, ValueError)):
            lm.run([bad])
    assert plan_builder._gate.holds == 0
    x = _img(10, 14)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert ex.wait_builds(timeout=120)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert lm.plan_cache_stats().hits >= 1


def test_two_models_many_threads_new_shapes_concurrently() -> None:
    m1, m2 = _conv_model(), _conv_model()
    models = [(m1, _load(m1)), (m2, _load(m2))]
    shapes = [(6 + i, 7 + j) for i in range(3) for j in range(2)]
    xs = {s: _img(*s) for s in shapes}
    want = {(k, s): run_ort(m, {"x": xs[s]})[0] for k, (m, _) in enumerate(models) for s in shapes}
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            for r in range(2):
                for i, s in enumerate(shapes):
                    k = (t + i + r) % 2
                    got = models[k][1].run([xs[s]])[0]
                    np.testing.assert_allclose(got, want[(k, s)], rtol=1e-4, atol=1e-4)
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a caller hung"
    assert not errors, errors[0]
    assert plan_builder._gate.holds == 0
    for _, lm in models:
        assert lm.executor.wait_builds(timeout=120) and lm.executor.pending_builds() == 0
        assert lm.plan_cache_stats().built == len(shapes)


@pytest.mark.parametrize("cfg", [{"build": PlanBuild.INLINE}, {"policy": PlanPolicy.GENERIC},
                                 {"policy": PlanPolicy.SPECIALIZE}])
def test_knobs_without_background_builds_take_no_hold(cfg: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> None:
    holds: list[int] = []
    real = plan_builder.hold

    @contextmanager
    def counted() -> Iterator[None]:
        holds.append(1)
        with real():
            yield

    def hold() -> AbstractContextManager[None]:
        return counted()

    monkeypatch.setattr(plan_builder, "hold", hold)
    m = _conv_model()
    lm = _load(m, **cfg)
    for s in [(8, 8), (8, 9), (8, 8)]:
        x = _img(*s)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert not holds and lm.executor.pending_builds() == 0


def test_a_shape_that_keeps_coming_between_new_shapes_gets_its_plan() -> None:
    # was: a shape called again and again between first calls of new shapes (another thread's, or
    # its own thread's: the holder below stands for them) ran generic for as long as new shapes came
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    s = _img(8, 8)
    want = run_ort(m, {"x": s})[0]
    h = _Holder()
    try:
        for i in range(ex.HOLD_CALLS + 2):
            np.testing.assert_allclose(lm.run([s])[0], want, rtol=1e-4, atol=1e-4)
            lm.run([_img(9 + i, 11)])  # a new shape each time: its first call holds
        deadline = time.monotonic() + 120
        while lm.plan_cache_stats().built < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [k[0][0] for k in ex._cache._entries] == [(1, 16, 8, 8)]  # only the recurring shape
        assert ex.pending_builds() == ex.HOLD_CALLS + 2  # the new shapes still wait for a quiet moment
        np.testing.assert_allclose(lm.run([s])[0], want, rtol=1e-4, atol=1e-4)
        assert lm.plan_cache_stats().hits >= 1
    finally:
        h.release()
    assert ex.wait_builds(timeout=120) and lm.plan_cache_stats().built == ex.HOLD_CALLS + 3


def test_the_reduced_team_generic_twin_is_built_while_new_shapes_keep_holding() -> None:
    # was: on busy CPUs a stream of new shapes (each call holding) kept the one-thread twin of the
    # generic plan, which those very calls would run on, from being built for as long as it lasted
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    h = _Holder()  # the stream's held calls
    try:
        for i in range(3):
            x = _img(7 + i, 9)
            with plan_builder.hold():
                got = ex._generic_outputs([x], 1)[0]
            np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
        deadline = time.monotonic() + 120
        while 1 not in ex._generic_teams and time.monotonic() < deadline:
            time.sleep(0.01)
        assert list(ex._generic_teams) == [1]
        x = _img(11, 9)
        np.testing.assert_allclose(ex._generic_outputs([x], 1)[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
        assert lm.plan_cache_stats().team_runs >= 1
    finally:
        h.release()
    assert ex.wait_builds(timeout=120)


def test_a_shape_that_keeps_coming_gets_its_plan_past_a_full_queue() -> None:
    # was: once MAX_QUEUED shapes that never came again waited on held calls, a shape that kept
    # coming was never even queued while new shapes kept coming
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    ex.MAX_QUEUED = ex._builder.max_queued = 4  # (instance attributes: a small queue)
    h = _Holder()
    try:
        for i in range(ex.MAX_QUEUED):
            lm.run([_img(9 + i, 11)])  # new shapes fill the queue; held, none builds
        assert ex.pending_builds() == ex.MAX_QUEUED
        s = _img(8, 8)
        for _ in range(ex.HOLD_CALLS + 1):
            lm.run([s])
        deadline = time.monotonic() + 120
        while lm.plan_cache_stats().built < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [k[0][0] for k in ex._cache._entries] == [(1, 16, 8, 8)]
    finally:
        h.release()
    assert ex.wait_builds(timeout=120) and lm.plan_cache_stats().built == ex.MAX_QUEUED + 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_builds_although_a_parent_thread_held_the_plan_lock() -> None:
    # was: a fork while the background builder (or an inline build) held the executor's plan lock
    # left it taken in the child for good: the child's builds, and wait_builds(), never finished
    m = _conv_model()
    lm = _load(m)
    ex = lm.executor
    taken, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with ex._lock:  # as a build in progress does
            taken.set()
            release.wait(60)

    t = threading.Thread(target=hold_lock)
    t.start()
    try:
        assert taken.wait(10)
        def child() -> bool:
            x = _img(9, 11)
            y = lm.run([x])[0]
            ok = ex.wait_builds(timeout=30) and lm.plan_cache_stats().built >= 1
            return bool(ok and np.allclose(y, run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4))

        assert _in_child(child) == 0
    finally:
        release.set()
        t.join()
