"""The plan cache: least recently used, bounded by bytes and plans, counters, evicted plans
closed, weights packed once per model across shapes, the specialise/generic policy, and the
environment knobs of pycann/config.py. Values are checked against ONNX Runtime; no timings."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import ConfigError, PlanBuild, PlanCacheConfig, PlanPolicy, parse_bytes, plan_cache_config
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.ge.run.plan_cache import PlanCache, trim_heap
from pycann.kernels.providers import onednn, onednn_packed
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(7)


def _conv_model(hw: tuple[int | str, int | str] = ("H", "W")) -> object:
    """Conv(3x3, 16 -> 32) + Relu + Conv(1x1, 32 -> 16); H and W dynamic unless ``hw`` fixes them."""
    w1 = numpy_helper.from_array(RNG.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1, "w1")
    b1 = numpy_helper.from_array(RNG.standard_normal(32).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(RNG.standard_normal((16, 32, 1, 1)).astype(np.float32) * 0.1, "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, *hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, *hw])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _mlp_model() -> object:
    """x [B, S, 64] -> MatMul(64x256) + bias -> Relu -> MatMul(256x64) -> Reshape(B*S, 64)."""
    w1 = numpy_helper.from_array(RNG.standard_normal((64, 256)).astype(np.float32) * 0.1, "w1")
    b1 = numpy_helper.from_array(RNG.standard_normal(256).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(RNG.standard_normal((256, 64)).astype(np.float32) * 0.1, "w2")
    shape = numpy_helper.from_array(np.array([-1, 64], np.int64), "shape")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["m"]),
             helper.make_node("Reshape", ["m", "shape"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 64])], [w1, b1, w2, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _load(model: object, **cfg: object) -> LoadedModel:
    """The model with these plan-cache settings; plans built inline unless ``build`` says otherwise
    (the cache mechanics below count plans per call; background builds: their own tests)."""
    cfg.setdefault("build", PlanBuild.INLINE)
    return LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(**cfg))  # type: ignore[arg-type]


def _check(lm: LoadedModel, model: object, x: np.ndarray) -> None:
    got = lm.run([x])[0]
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-4, atol=1e-4)


def _img(h: int, w: int) -> np.ndarray:
    return RNG.standard_normal((1, 16, h, w)).astype(np.float32)


def _keys(lm: LoadedModel) -> list[tuple[int, ...]]:
    """The cached signatures' input shapes, least recently used first."""
    return [k[0][0] for k in lm.executor._cache._entries]


def test_least_recently_used_plan_is_evicted() -> None:
    m = _conv_model()
    lm = _load(m, max_plans=3)
    a, b, c, d = _img(8, 8), _img(8, 12), _img(12, 8), _img(10, 10)
    for x in (a, b, c, a, d):  # a is used again before d arrives: b is the least recently used
        _check(lm, m, x)
    assert _keys(lm) == [c.shape, a.shape, d.shape]
    st = lm.plan_cache_stats()
    assert (st.hits, st.misses, st.built, st.evictions, st.plans) == (1, 4, 4, 1, 3)
    assert st.generic_runs == 0  # a graph with convolutions specialises every signature (auto, inline)


def test_byte_bound_evicts_and_counts_bytes() -> None:
    m = _conv_model()
    lm = _load(m)
    _check(lm, m, _img(16, 16))
    one = lm.plan_cache_stats().bytes_held
    assert one > 0 and one == sum(p.nbytes for p, _ in lm.executor._cache.values())
    small = _load(m, max_bytes=int(one * 2.5))  # room for two plans of this size
    shapes = [(16, 16), (16, 17), (17, 16), (18, 18), (16, 16)]
    for h, w in shapes:
        _check(small, m, _img(h, w))
    st = small.plan_cache_stats()
    assert st.bytes_held <= st.max_bytes
    assert st.plans <= 2 and st.evictions == st.built - st.plans
    assert st.built == 5 and st.hits == 0  # (16, 16) had been evicted before it came back
    assert st.peak_bytes <= st.max_bytes


def test_newest_plan_kept_over_budget() -> None:
    m = _conv_model()
    lm = _load(m, max_bytes=1)
    for h in (8, 9, 10):
        _check(lm, m, _img(h, 8))
    st = lm.plan_cache_stats()
    assert st.plans == 1 and st.evictions == 2 and st.over_budget >= 1


def test_evicted_plan_is_closed() -> None:
    m = _conv_model()
    lm = _load(m, max_plans=1)
    _check(lm, m, _img(8, 8))
    (first, _), = lm.executor._cache.values()
    assert first.steps and first.nbytes > 0
    _check(lm, m, _img(9, 9))
    assert first.steps == [] and first._fast is None and first._arenas == []


@pytest.mark.skipif(not onednn.available(), reason="oneDNN (libdnnl.so.3) not available")
def test_weights_packed_once_across_shapes() -> None:
    m = _conv_model()
    lm = _load(m)
    before = onednn_packed.stats()
    for h, w in [(14, 14), (14, 20), (20, 14), (22, 22)]:
        _check(lm, m, _img(h, w))
    after = onednn_packed.stats()
    assert lm.plan_cache_stats().built == 4
    # two convolution weights: at most two layouts each (the first plan's, which may be a brgemm
    # layout, and the jit layout of every later shape: onednn_conv_plan._own_kernels), never one per shape
    assert after.packed - before.packed <= 4
    assert after.reused - before.reused >= 4  # 8 primitives: at most 4 packings, the rest reused


def test_non_vision_graph_runs_new_signatures_generic() -> None:
    m = _mlp_model()
    lm = _load(m)
    for s in (3, 4, 5, 6, 3):
        x = RNG.standard_normal((2, s, 64)).astype(np.float32)
        _check(lm, m, x)
    st = lm.plan_cache_stats()
    # new signatures run generic; one that comes back (s=3) is specialised then (a model used at
    # a few shapes gets the fastest plan from each one's second call)
    assert (st.built, st.generic_runs, st.hits) == (1, 4, 0)
    _check(lm, m, RNG.standard_normal((2, 3, 64)).astype(np.float32))
    assert lm.plan_cache_stats().hits == 1


def test_non_vision_graph_with_a_shape_per_call_stays_generic() -> None:
    """More than ``AUTO_SIGNATURES`` distinct signatures (a decoder's past length): a signature
    coming back later is not specialised any more."""
    m = _mlp_model()
    lm = _load(m)
    n = lm.executor.AUTO_SIGNATURES + 1
    for s in [*range(1, n + 1), 1, 2]:
        _check(lm, m, RNG.standard_normal((1, s, 64)).astype(np.float32))
    st = lm.plan_cache_stats()
    assert (st.built, st.generic_runs) == (0, n + 2)


@pytest.mark.parametrize("policy, built, generic", [(PlanPolicy.SPECIALIZE, 3, 0), (PlanPolicy.GENERIC, 0, 3)])
def test_policy_option(policy: PlanPolicy, built: int, generic: int) -> None:
    m = _mlp_model()
    lm = _load(m, policy=policy)
    for s in (3, 4, 5):
        _check(lm, m, RNG.standard_normal((1, s, 64)).astype(np.float32))
    st = lm.plan_cache_stats()
    assert (st.built, st.generic_runs) == (built, generic)


def test_plan_for_always_specialises() -> None:
    lm = _load(_mlp_model(), policy=PlanPolicy.GENERIC)
    plan, _ = lm.executor.plan_for([np.zeros((1, 4, 64), np.float32)])
    assert plan is not lm.executor.generic_plan() and lm.plan_cache_stats().built == 1


def test_cache_unit_lru_and_bytes() -> None:
    class P:
        def __init__(self, n: int) -> None:
            self.nbytes, self.closed = n, False

        def close(self) -> None:
            self.closed = True

    c: PlanCache[P] = PlanCache(PlanCacheConfig(max_bytes=100, max_plans=10))
    ps = {k: P(40) for k in "abc"}
    c.put("a", ps["a"])
    c.put("b", ps["b"])
    assert c.get("a") is ps["a"]  # refresh a: b is now the oldest
    c.put("c", ps["c"])  # 120 > 100: evict b
    assert "b" not in c and ps["b"].closed and not ps["a"].closed
    assert c.stats().bytes_held == 80 and c.stats().evictions == 1
    assert c.get("zz") is None and c.stats().misses == 1
    c.clear()
    assert len(c) == 0 and ps["a"].closed and c.stats().bytes_held == 0


def test_trim_heap_runs() -> None:
    assert trim_heap() in (True, False)  # glibc: True; other C libraries have no malloc_trim


def test_config_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_bytes("512M") == 512 << 20 and parse_bytes("2g") == 2 << 30 and parse_bytes("1000") == 1000
    assert parse_bytes("1.5KiB") == 1536
    monkeypatch.setenv("PYCANN_PLAN_CACHE_BYTES", "64M")
    monkeypatch.setenv("PYCANN_PLAN_CACHE_PLANS", "8")
    monkeypatch.setenv("PYCANN_PLAN_POLICY", "Generic")
    # (PYCANN_ADAPTIVE_THREADS=off: tests/conftest.py)
    assert plan_cache_config() == PlanCacheConfig(64 << 20, 8, PlanPolicy.GENERIC, adaptive_threads=False)
    lm = LoadedModel.from_compiled(compile_model(_mlp_model()))
    assert lm.plan_cache_stats().max_bytes == 64 << 20 and lm.plan_cache_stats().policy == "generic"


def test_a_config_made_with_some_fields_takes_the_others_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PlanCacheConfig(max_plans=3)`` had the dataclass's fixed defaults for the other fields (512M,
    auto, background, adaptive threads on) whatever PYCANN_PLAN_* said, while a model loaded without
    a config (``plan_cache_config()``) honoured them: two sources of defaults. Expected: a field not
    given comes from its variable (else the documented default), a given one wins, and a bad variable
    of a field not given is the same ConfigError naming it."""
    from pycann.config import DEFAULT_PLAN_CACHE_BYTES, DEFAULT_PLAN_CACHE_PLANS, PlanBuild

    for var in ("PYCANN_PLAN_CACHE_BYTES", "PYCANN_PLAN_CACHE_PLANS", "PYCANN_PLAN_POLICY", "PYCANN_PLAN_BUILD",
                "PYCANN_ADAPTIVE_THREADS"):
        monkeypatch.delenv(var, raising=False)
    assert PlanCacheConfig() == plan_cache_config() == PlanCacheConfig(
        DEFAULT_PLAN_CACHE_BYTES, DEFAULT_PLAN_CACHE_PLANS, PlanPolicy.AUTO, PlanBuild.BACKGROUND, True)
    assert (DEFAULT_PLAN_CACHE_BYTES, DEFAULT_PLAN_CACHE_PLANS) == (512 << 20, 256)  # (the documented table)
    monkeypatch.setenv("PYCANN_PLAN_CACHE_BYTES", "2M")
    monkeypatch.setenv("PYCANN_PLAN_CACHE_PLANS", "5")
    monkeypatch.setenv("PYCANN_PLAN_POLICY", "generic")
    monkeypatch.setenv("PYCANN_PLAN_BUILD", "inline")
    monkeypatch.setenv("PYCANN_ADAPTIVE_THREADS", "off")
    cfg = PlanCacheConfig(max_plans=3)
    assert (cfg.max_bytes, cfg.max_plans, cfg.policy, cfg.build, cfg.adaptive_threads) == (
        2 << 20, 3, PlanPolicy.GENERIC, PlanBuild.INLINE, False)
    assert PlanCacheConfig() == plan_cache_config() == PlanCacheConfig(2 << 20, 5, "generic", "inline", False)
    cfg = PlanCacheConfig(policy=PlanPolicy.SPECIALIZE, adaptive_threads="on")  # type: ignore[arg-type]
    assert (cfg.policy, cfg.adaptive_threads, cfg.max_bytes) == (PlanPolicy.SPECIALIZE, True, 2 << 20)
    # a model given such a config runs with it: the executor's bounds are the merged ones
    lm = LoadedModel.from_compiled(compile_model(_mlp_model()), plan_cache=PlanCacheConfig(max_plans=4))
    st = lm.plan_cache_stats()
    assert (st.max_bytes, st.max_plans, st.policy) == (2 << 20, 4, "generic")
    monkeypatch.setenv("PYCANN_PLAN_POLICY", "fast")
    with pytest.raises(ConfigError, match="PYCANN_PLAN_POLICY='fast'"):
        PlanCacheConfig(max_plans=3)
    assert PlanCacheConfig(policy="auto").policy is PlanPolicy.AUTO  # (given: the variable is not read)
    with pytest.raises(ConfigError, match="adaptive_threads"):
        PlanCacheConfig(policy="auto", adaptive_threads="sometimes")  # type: ignore[arg-type]


@pytest.mark.parametrize("var, value", [("PYCANN_PLAN_CACHE_BYTES", "lots"), ("PYCANN_PLAN_CACHE_BYTES", "-5M"),
                                        ("PYCANN_PLAN_CACHE_PLANS", "0"), ("PYCANN_PLAN_POLICY", "fast")])
def test_bad_knob_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=var):
        plan_cache_config()


def test_pass_pipeline_runs_once_for_every_shape() -> None:
    """The pipeline runs once per symbolic signature; each new shape only gets inference,
    folding and the size-dependent choices (specialize.specialize), with the same values."""
    m = _conv_model()
    lm = _load(m)
    shapes = [(8, 8), (9, 11), (13, 7), (16, 16), (5, 23)]
    for h, w in shapes:
        _check(lm, m, _img(h, w))
    memo = lm.executor._memo
    assert (memo.pipeline_runs, memo.specialized, len(memo.templates)) == (1, len(shapes), 1)
    st = lm.plan_cache_stats()
    assert (st.built, st.pipelines) == (len(shapes), 1) and "pass pipeline runs 1" in st.summary()


def test_counters_in_log_profiler_and_atc_line(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from pycann.ge.run.executor import is_vision
    from pycann.ge.run.plan_cache import describe
    from pycann.profiler.session import Profiler

    m = _conv_model()
    lm = _load(m, max_plans=1)
    prof = Profiler(chart=False).start()
    with caplog.at_level(logging.INFO, logger="pycann.ge.run.plan_cache"):
        _check(lm, m, _img(8, 8))
        _check(lm, m, _img(9, 8))
    prof.stop()
    assert "[PlanCache] built plan 2 for [1x16x9x8 f4]" in caplog.text and "evicted" in caplog.text
    assert "plan cache: 1 plans" in prof.summary_text and "evictions 1" in prof.summary_text
    line = describe(["x"], is_vision(lm.graph))
    assert "dynamic inputs x" in line and "each input signature gets its own plan while the model has shown at most 16" in line
    assert describe([], False) == "plan cache: static shapes, one plan"
