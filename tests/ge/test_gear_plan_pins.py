"""A gear model's plans (--dynamic_batch_size / --dynamic_dims) under a plan-cache byte bound smaller
than they hold together: each gear keeps the plan built at load (pinned), a warning names the knob
and a size that fits, and every gear gives ONNX Runtime's values with no plan built after the load.

Before: each gear's plan built at load evicted the one before (only the last survived); each gear's
first call then missed, ran the shape-generic plan and queued a rebuild that evicted the next gear's.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.ge.run.plan_cache import PlanCache
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(11)


@functools.cache
def _convs() -> onnx.ModelProto:
    """Conv(3 -> 16) + Relu + Conv(16 -> 16) + Relu on x [N, 3, 24, 24]: an arena of ~N x 72 KiB a plan
    (made once: the golden runs the weights the .om was compiled from)."""
    w1 = numpy_helper.from_array(RNG.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3, "w1")
    w2 = numpy_helper.from_array(RNG.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1, "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c2"], ["y"])]
    g = helper.make_graph(nodes, "gear_convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 24, 24])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 24, 24])], [w1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


CASES = {  # compile options, then the input shape of each gear
    "dynamic_batch_size": (dict(input_shape={"x": [-1, 3, 24, 24]}, dynamic_batch_size=[1, 2, 4, 8]),
                           [(1, 3, 24, 24), (2, 3, 24, 24), (4, 3, 24, 24), (8, 3, 24, 24)]),
    "dynamic_dims": (dict(input_shape={"x": [-1, 3, 24, 24]}, input_format="ND", dynamic_dims=[[1], [3], [6]]),
                     [(1, 3, 24, 24), (3, 3, 24, 24), (6, 3, 24, 24)]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def gear_om(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, ...]]]:
    opts, shapes = CASES[request.param]
    p = tmp_path_factory.mktemp("gears") / f"{request.param}.om"
    compile_model(_convs(), CompileOptions(**opts)).save(p)  # type: ignore[arg-type]
    return p, shapes


def _run_every_gear_twice(lm: LoadedModel, shapes: list[tuple[int, ...]]) -> None:
    m = _convs()
    for shape in [*shapes, *reversed(shapes)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("how", ["config", "environment"])
def test_gear_plans_stay_under_a_small_byte_bound(gear_om: tuple[Path, list[tuple[int, ...]]], how: str,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    path, shapes = gear_om
    n = len(shapes)
    caplog.set_level(logging.WARNING, logger="pycann.ge.run.model")
    if how == "environment":
        monkeypatch.setenv("PYCANN_PLAN_CACHE_BYTES", "64K")
        lm = LoadedModel.from_file(path)
    else:
        lm = LoadedModel.from_file(path, plan_cache=PlanCacheConfig(max_bytes=64 << 10))
    st = lm.plan_cache_stats()
    assert (st.plans, st.built, st.evictions) == (n, n, 0)  # every gear's plan is there after the load
    assert st.max_bytes == 64 << 10 and st.bytes_held > st.max_bytes
    need_mib = -(-st.bytes_held // 2**20)
    warned = [r.getMessage() for r in caplog.records if r.name == "pycann.ge.run.model"]
    assert len(warned) == 1, warned
    assert "PYCANN_PLAN_CACHE_BYTES" in warned[0] and f"PYCANN_PLAN_CACHE_BYTES={need_mib}M" in warned[0]
    assert f"its {n} gears" in warned[0]
    _run_every_gear_twice(lm, shapes)
    lm.executor.wait_builds(timeout=120)
    st = lm.plan_cache_stats()
    # no gear was re-planned or ran the shape-generic plan: every call hit its gear's plan
    assert (st.plans, st.built, st.evictions, st.misses, st.generic_runs, st.hits) == (n, n, 0, 0, 0, 2 * n)


def test_no_warning_when_the_gear_plans_fit(gear_om: tuple[Path, list[tuple[int, ...]]],
                                            caplog: pytest.LogCaptureFixture) -> None:
    path, shapes = gear_om
    caplog.set_level(logging.WARNING, logger="pycann.ge.run.model")
    lm = LoadedModel.from_file(path, plan_cache=PlanCacheConfig(max_bytes=512 << 20))
    assert not [r for r in caplog.records if r.name == "pycann.ge.run.model"]
    _run_every_gear_twice(lm, shapes)
    st = lm.plan_cache_stats()
    assert (st.plans, st.built, st.evictions, st.misses) == (len(shapes), len(shapes), 0, 0)


class _P:
    def __init__(self, n: int) -> None:
        self.nbytes, self.closed = n, False

    def close(self) -> None:
        self.closed = True


def test_pinned_entries_are_never_evicted_and_the_others_make_room() -> None:
    c: PlanCache[_P] = PlanCache(PlanCacheConfig(max_bytes=100, max_plans=10))
    ps = {k: _P(40) for k in "abcde"}
    c.put("a", ps["a"])
    assert c.pin("a") and not c.pin("zz")
    c.put("b", ps["b"])
    c.pin("b")
    c.put("c", ps["c"])  # 120 > 100: a and b are pinned, c is the newest: all stay
    assert list(c._entries) == ["a", "b", "c"] and c.pinned_bytes == 80 and c.stats().evictions == 0
    c.put("d", ps["d"])  # c (unpinned, not the newest) goes
    assert list(c._entries) == ["a", "b", "d"] and ps["c"].closed and not ps["a"].closed
    c.put("a", _P(10))  # a new plan for a pinned key stays pinned
    c.put("e", ps["e"])
    assert "a" in c and "b" in c and "d" not in c and c.pinned_bytes == 50
    c.clear()
    assert len(c) == 0 and c.pinned_bytes == 0
