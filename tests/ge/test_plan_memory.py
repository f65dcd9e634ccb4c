"""Memory stays bounded when plans are evicted and rebuilt over and over (issue 14 item 3).

A dynamic conv model under a one-plan cache is re-planned on every call; after the first cycle
over its shapes nothing may accumulate: live oneDNN handles, packed weights, the NaN guard's
proven bounds, the plan cache's bytes, and the C heap's bytes in use (glibc ``mallinfo2``; the
oneDNN 3.x brgemm convolutions kept every rebuilt primitive's kernels in a process-wide store,
~0.4 MB a rebuild on PP-OCRv4 rec: ``onednn_conv_plan._own_kernels``). Values are checked against ONNX
Runtime; no timings. The long version is ``scripts/soak_plans.py``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Iterator

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.ge.run.plan_cache import trim_heap
from pycann.kernels.providers import nan_guard, onednn, onednn_conv_plan, onednn_packed
from pycann.kernels.providers import onednn_capi as capi
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(11)
WIDTHS = (24, 40, 56, 72)  # one cycle; every call a rebuild under max_plans=1


def _pointwise_model() -> object:
    """x [1, 32, 8, W] -> 1x1 Conv(32 -> 64)+Relu -> depthwise 3x3 -> 1x1 Conv(64 -> 32) + x
    (residual) -> 3x3 Conv(32 -> 32)+Relu: the shapes oneDNN gives brgemm implementations."""
    def w(*shape: int) -> np.ndarray:
        return (RNG.standard_normal(shape) * 0.2).astype(np.float32)

    inits = [numpy_helper.from_array(a, n) for n, a in
             (("w1", w(64, 32, 1, 1)), ("b1", w(64)), ("wd", w(64, 1, 3, 3)), ("w2", w(32, 64, 1, 1)),
              ("b2", w(32)), ("w3", w(32, 32, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd"], ["d"], group=64, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "w2", "b2"], ["c2"]), helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Conv", ["s", "w3"], ["c3"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c3"], ["y"])]
    g = helper.make_graph(nodes, "pointwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 8, "W"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _conv_plans(lm: LoadedModel, x: np.ndarray) -> list[onednn_conv_plan._Plan]:
    """The oneDNN conv plans bound into the specialised plan of ``x``'s shape."""
    plan, _ = lm.executor.plan_for([x])
    found: list[onednn_conv_plan._Plan] = []

    def add(p: onednn_conv_plan._Plan) -> None:
        if all(p is not q for q in found):
            found.append(p)

    def walk(fn: object, depth: int = 0) -> None:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                v = cell.cell_contents
            except ValueError:
                continue
            owner = getattr(v, "__self__", None)
            if isinstance(v, onednn_conv_plan._Plan) or isinstance(owner, onednn_conv_plan._Plan):
                add(v if isinstance(v, onednn_conv_plan._Plan) else owner)
            elif isinstance(getattr(v, "plan", None), onednn_conv_plan._Plan):  # (a bound conv's state: BoundConv)
                add(v.plan)
            elif callable(v) and depth < 3:
                walk(v, depth + 1)

    for step in plan.steps:
        walk(step.run)
    return found


def _heap_in_use() -> int | None:
    """Bytes the C heap has handed out and not got back (glibc ``mallinfo2().uordblks``), or None."""
    name = ctypes.util.find_library("c")
    lib = ctypes.CDLL(name) if name else None
    if lib is None or not hasattr(lib, "mallinfo2"):
        return None

    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    lib.mallinfo2.restype = MallInfo2
    return int(lib.mallinfo2().uordblks)


def _live_handles() -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, capi._Owned))


@pytest.fixture
def model() -> Iterator[tuple[object, LoadedModel]]:
    """The model under a one-plan cache, with oneDNN's own primitive cache off: a rebuild then
    creates every primitive again (as a model with more shapes than that cache's 1024 entries
    does), instead of getting the last plan's primitives back."""
    if not onednn.available():
        pytest.skip("oneDNN not available")
    lib = capi.load()
    cap = ctypes.c_int()
    assert lib.dnnl_get_primitive_cache_capacity(ctypes.byref(cap)) == 0
    assert lib.dnnl_set_primitive_cache_capacity(ctypes.c_int(0)) == 0
    try:
        m = _pointwise_model()
        yield m, LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(max_bytes=64 << 20, max_plans=1,
                                                                                    build=PlanBuild.INLINE))
    finally:
        lib.dnnl_set_primitive_cache_capacity(cap)


def test_later_plans_use_implementations_that_own_their_kernels(model: tuple[object, LoadedModel]) -> None:
    m, lm = model
    first, later = (RNG.standard_normal((1, 32, 8, w)).astype(np.float32) for w in (40, 56))
    for x in (first, later, first):  # (the first shape's plan is rebuilt: max_plans=1)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    plans = _conv_plans(lm, first)  # (built again by plan_for: yet another rebuild)
    assert len(plans) >= 3, [p.impl for p in plans]
    kept = [p.impl for p in plans if p.impl.startswith(onednn_conv_plan._GLOBAL_KERNELS)]
    assert not kept, f"brgemm implementations keep their kernels for good: {kept}"
    assert any(p.impl.startswith("jit_1x1") for p in plans), [p.impl for p in plans]


def test_rebuilds_do_not_accumulate(model: tuple[object, LoadedModel]) -> None:
    m, lm = model
    xs = [RNG.standard_normal((1, 32, 8, w)).astype(np.float32) for w in WIDTHS]
    want = [run_ort(m, {"x": x})[0] for x in xs]
    cycles = 8

    def cycle() -> None:
        for x, y in zip(xs, want):
            np.testing.assert_allclose(lm.run([x])[0], y, rtol=1e-4, atol=1e-4)

    for _ in range(2):  # warm-up: every shape's primitives, packings and Python caches made once
        cycle()
    trim_heap()
    handles, packed, heap = _live_handles(), onednn_packed.stats(), _heap_in_use()
    for _ in range(cycles):
        cycle()
        st = lm.plan_cache_stats()
        assert st.plans == 1 and st.bytes_held <= max(st.max_bytes, st.peak_bytes)
    trim_heap()
    st = lm.plan_cache_stats()
    assert st.built == (cycles + 2) * len(WIDTHS) and st.evictions == st.built - 1
    assert _live_handles() <= handles, "oneDNN handles (primitives, memories) accumulate with rebuilds"
    now = onednn_packed.stats()
    assert (now.packed, now.bytes_held, now.weights) == (packed.packed, packed.bytes_held, packed.weights)
    assert len(nan_guard._proven) <= nan_guard._PROVEN_MAX
    if heap is not None:
        grown = _heap_in_use() - heap  # type: ignore[operator]
        rebuilds = cycles * len(WIDTHS)
        # brgemm convs kept ~27 KB a rebuild of this model (the jit ones ~0.5 KB: bounded caches filling)
        assert grown < rebuilds * 4096, f"C heap grew {grown / 1024:.0f} KiB over {rebuilds} rebuilds"


def test_models_loaded_past_the_budget_use_implementations_that_own_their_kernels(
        model: tuple[object, LoadedModel], monkeypatch: pytest.MonkeyPatch) -> None:
    """Each new weight memory's first primitive may take a brgemm implementation, whose kernels oneDNN
    keeps for good; a process loading and dropping models again and again (two threads, a PP-OCRv4 rec
    each time: RSS 366 -> 1022 MB over 876 loads) grew by them with every load. Past
    ``onednn_kernel_store.MAX_FIRSTS`` weights a new model's convs take jit implementations (here the
    budget is set to what the first model used), with ORT's values."""
    from pycann.kernels.providers import onednn_kernel_store as store

    m, lm = model
    x = RNG.standard_normal((1, 32, 8, 40)).astype(np.float32)
    want = run_ort(m, {"x": x})[0]
    np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)
    if not any(p.impl.startswith(store.GLOBAL_KERNELS) for p in _conv_plans(lm, x)):
        pytest.skip("oneDNN ranks no brgemm implementation first for these convs on this CPU")
    used = getattr(store, "granted", lambda: 0)()
    monkeypatch.setattr(store, "MAX_FIRSTS", used, raising=False)
    again = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(max_plans=1, build=PlanBuild.INLINE))
    np.testing.assert_allclose(again.run([x])[0], want, rtol=1e-4, atol=1e-4)
    impls = [p.impl for p in _conv_plans(again, x)]
    assert impls and not [i for i in impls if i.startswith(store.GLOBAL_KERNELS)], impls
    assert getattr(store, "granted", lambda: 0)() == used
