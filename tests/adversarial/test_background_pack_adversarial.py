"""Adversarial tests of the plan build's weight-packing helper thread
(``kernels/providers/background_pack.py``): packings shared across models and threads, failed and
interrupted packings, nested (If) plans, gears, background plan builds, eviction, bf16 and int8
paths, fork. Numbers against ONNX Runtime; every wait on another thread is bounded."""

from __future__ import annotations

import gc
import inspect
import os
import select
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run import plan as plan_mod
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import background_pack, omp_fork, onednn, onednn_packed, onednn_wino
from pycann.kernels.providers import onednn_capi as capi
from pycann.ops.nn.spatial import Window
from tests.adversarial.threads import run_threads
from tests.kernels.pack_faults import fail_queued_reorders as _fail_on_helper
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
needs_onednn = pytest.mark.skipif(not onednn.available(), reason="oneDNN (libdnnl.so.3) missing")
TIMEOUT = 30.0  # s: a join past this is a hang


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(20261205 + seed)


def _pack_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pycann-pack"]


@pytest.fixture(autouse=True)
def _no_leaked_helpers() -> Iterator[None]:
    yield
    for t in _pack_threads():
        t.join(TIMEOUT)
    assert not _pack_threads(), "a pycann-pack helper thread outlived its block"


def _close(got: np.ndarray, want: np.ndarray, tol: float = 1e-4) -> None:
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


def _conv(rng: np.random.Generator, name: str, i: str, o: str, m: int, c: int, k: int
          ) -> tuple[onnx.NodeProto, onnx.TensorProto]:
    wt = (rng.standard_normal((m, c, k, k)) * np.sqrt(2.0 / (c * k * k))).astype(np.float32)
    return helper.make_node("Conv", [i, name], [o], pads=[k // 2] * 4), numpy_helper.from_array(wt, name)


def _mixed_model(seed: int = 0, batch: int | str = 2, hw: tuple[int | str, int | str] = (20, 20)) -> onnx.ModelProto:
    """Winograd-eligible 3x3 convs (64 channels), a 1x1 conv, a residual, a MatMul and a Gemm head."""
    rng = _rng(seed)
    n1, w1 = _conv(rng, "w1", "x", "a", 64, 64, 3)
    n2, w2 = _conv(rng, "w2", "ar", "b", 64, 64, 3)
    n3, w3 = _conv(rng, "w3", "s", "c", 32, 64, 1)
    mm = numpy_helper.from_array((rng.standard_normal((32, 48)) * 0.2).astype(np.float32), "mm")
    fc = numpy_helper.from_array((rng.standard_normal((48, 10)) * 0.2).astype(np.float32), "fc")
    fb = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fb")
    nodes = [n1, helper.make_node("Relu", ["a"], ["ar"]), n2, helper.make_node("Add", ["b", "x"], ["s"]), n3,
             helper.make_node("GlobalAveragePool", ["c"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "mm"], ["h"]), helper.make_node("Relu", ["h"], ["hr"]),
             helper.make_node("Gemm", ["hr", "fc", "fb"], ["y"])]
    g = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 64, *hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], [w1, w2, w3, mm, fc, fb])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _x(seed: int, shape: tuple[int, ...] = (2, 64, 20, 20)) -> np.ndarray:
    return _rng(100 + seed).standard_normal(shape).astype(np.float32)


def _plain_copy(mem: capi.Memory, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, np.float32)
    user = capi.MemoryDesc.strided(shape, [s // 4 for s in out.strides])
    capi.Primitive(capi.reorder_pd(mem.md, user),
                   [(capi.ARG_FROM, mem), (capi.ARG_TO, capi.Memory(user, capi.ptr(out)))]).execute()
    return out


def _column_major(shape: tuple[int, int]) -> capi.MemoryDesc:
    return capi.MemoryDesc.strided(shape, (1, shape[0]))


# ------------------------------------------------------------------ failed packings


@needs_onednn
def test_a_failed_packing_is_not_served_from_the_shared_cache_later() -> None:
    """A reorder that failed on the helper left its (never written) memory in ``onednn_packed``:
    the next packing of that weight got it as a hit and read garbage (or, bound to a primitive,
    skipped the done-with-error ticket)."""
    w = _rng(1).standard_normal((40, 24)).astype(np.float32)
    src, dst = capi.MemoryDesc.strided(w.shape, [s // 4 for s in w.strides]), _column_major((40, 24))
    failed: list[capi.Memory] = []
    with pytest.raises(capi.DnnlError), background_pack.packing():
        gate = threading.Event()
        background_pack.submit(gate.wait)  # the reorder below is still queued when packed() returns

        def boom() -> None:
            raise capi.DnnlError("dnnl_primitive_execute", 5)

        real_submit = background_pack._Packer.submit
        try:
            background_pack._Packer.submit = lambda self, job, keep: real_submit(self, boom, keep)  # type: ignore[method-assign]
            failed.append(onednn_packed.packed(w, src, dst))
        finally:
            background_pack._Packer.submit = real_submit  # type: ignore[method-assign]
            gate.set()
    # a primitive bound to the failed memory raises instead of reading it
    with pytest.raises(capi.DnnlError):
        _plain_copy(failed[0], w.shape)
    again = onednn_packed.packed(w, src, dst)  # packed afresh, not the failed one
    assert again is not failed[0]
    np.testing.assert_array_equal(_plain_copy(again, w.shape), w)


@needs_onednn
def test_another_build_that_found_the_queued_packing_survives_its_failure() -> None:
    """Thread B binds the packing thread A's build queued (the shared cache hands it over), then
    A's reorder fails: A's build fails, B's must not be left with a primitive that raises A's error
    at every run (before the helper, B would have packed the weight itself)."""
    w = _rng(2).standard_normal((56, 32)).astype(np.float32)
    src, dst = capi.MemoryDesc.strided(w.shape, [s // 4 for s in w.strides]), _column_major((56, 32))
    gate, b_bound = threading.Event(), threading.Event()
    got: list[Any] = []

    def other() -> None:  # B: a build of its own that shares the weight
        try:
            with background_pack.packing():
                mem = onednn_packed.packed(w, src, dst)
            b_bound.set()
            got.append(_plain_copy(mem, w.shape))
        except BaseException as e:  # noqa: BLE001 - reported below
            got.append(e)
        finally:
            b_bound.set()

    def boom() -> None:
        raise capi.DnnlError("dnnl_primitive_execute", 5)

    t = threading.Thread(target=other)
    with pytest.raises(capi.DnnlError), background_pack.packing():  # A
        background_pack.submit(gate.wait)
        real_submit = background_pack._Packer.submit
        try:
            background_pack._Packer.submit = lambda self, job, keep: real_submit(self, boom, keep)  # type: ignore[method-assign]
            onednn_packed.packed(w, src, dst)
        finally:
            background_pack._Packer.submit = real_submit  # type: ignore[method-assign]
        try:
            t.start()
            b_bound.wait(0.3)  # B has the queued memory (or waits for it)
        finally:
            gate.set()
    t.join(TIMEOUT)
    assert not t.is_alive()
    assert len(got) == 1 and isinstance(got[0], np.ndarray), got
    np.testing.assert_array_equal(got[0], w)


@needs_onednn
def test_a_load_after_a_failed_load_of_the_same_weights_gives_right_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loads of one compiled model share its weight arrays: the first load's primitives take the
    brgemm layouts, later loads the jit ones. A failed second load left its jit packings cached
    unwritten; the third load reused them and returned ~1e30."""
    model = _mixed_model(1)
    cm = compile_model(model)
    x = _x(1)
    (want,) = run_ort(model, {"x": x})
    first = LoadedModel.from_compiled(cm)
    failing = [True]
    _fail_on_helper(monkeypatch, lambda: failing[0])
    with pytest.raises(capi.DnnlError):
        LoadedModel.from_compiled(cm)
    failing[0] = False
    third = LoadedModel.from_compiled(cm)
    _close(first.run([x])[0], want)
    _close(third.run([x])[0], want)


@needs_onednn
def test_a_failed_background_build_is_rebuilt_inline_with_right_numbers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dynamic model's background build whose packing fails is rebuilt inline on the shape's
    next call (``BackgroundBuilder.failed``): that rebuild must not reuse the failed packings."""
    model = _mixed_model(2, batch=1, hw=("H", "W"))
    lm = LoadedModel.from_compiled(compile_model(model))
    ex = lm.executor
    failing = [True]
    _fail_on_helper(monkeypatch, lambda: failing[0])
    x = _x(2, (1, 64, 16, 16))
    (want,) = run_ort(model, {"x": x})
    _close(lm.run([x])[0], want)  # the generic plan; the background build of 16x16 fails
    assert ex.wait_builds(timeout=TIMEOUT)
    failing[0] = False
    for _ in range(2):
        _close(lm.run([x])[0], want)  # built inline now
    assert lm.plan_cache_stats().built >= 1


@needs_onednn
def test_an_interrupt_inside_the_build_stops_the_helper_and_leaves_good_packings(monkeypatch: pytest.MonkeyPatch) -> None:
    """KeyboardInterrupt raised by the building thread after reorders were queued: it propagates,
    the helper ends, and the packings it finished serve the next load correctly."""
    model = _mixed_model(3)
    cm = compile_model(model)
    LoadedModel.from_compiled(cm)  # (the brgemm layouts: the next loads share the jit ones)
    real = plan_mod.bound
    calls = [0]

    def interrupted(*a: Any, **k: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(plan_mod, "bound", interrupted)
    with pytest.raises(KeyboardInterrupt):
        LoadedModel.from_compiled(cm)
    monkeypatch.setattr(plan_mod, "bound", real)
    assert not background_pack.active()
    x = _x(3)
    _close(LoadedModel.from_compiled(cm).run([x])[0], run_ort(model, {"x": x})[0])


@needs_onednn
def test_no_thread_to_be_had_the_load_packs_on_the_building_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """``Thread.start`` failing (a process at its thread limit): the helper never started, and the
    block's end joined it anyway ("cannot join thread before it is started"), hiding the cause
    and failing a load that could have packed inline."""
    real = threading.Thread.start

    def no_thread(self: threading.Thread) -> None:
        if self.name == "pycann-pack":
            raise RuntimeError("can't start new thread")
        real(self)

    monkeypatch.setattr(threading.Thread, "start", no_thread)
    model = _mixed_model(14)
    x = _x(14)
    _close(LoadedModel.from_compiled(compile_model(model)).run([x])[0], run_ort(model, {"x": x})[0])


@needs_onednn
def test_first_runs_of_a_static_model_on_two_threads_share_the_warm_arena_safely() -> None:
    model = _mixed_model(15)
    lm = LoadedModel.from_compiled(compile_model(model))
    xs = [_x(15), _x(16)]
    wants = [run_ort(model, {"x": x})[0] for x in xs]
    got: list[Any] = [None, None]

    def work(i: int) -> None:
        got[i] = [lm.run([xs[i]])[0] for _ in range(3)]

    run_threads(work, 2, TIMEOUT)
    for i in range(2):
        assert isinstance(got[i], list), got[i]
        for y in got[i]:
            _close(y, wants[i])


@needs_onednn
@pytest.mark.parametrize("dynamic", [False, True])
def test_a_mapped_om_whose_pages_are_released_between_packings(dynamic: bool, tmp_path: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """From a .om file: the build drains the helper and drops the mapped weights' pages after
    every packed node (``_RELEASE_EVERY`` 1), on the loading thread and on the background builder
    while the caller runs; the queued reorders must still read the weights."""
    monkeypatch.setattr(plan_mod, "_RELEASE_EVERY", 1)
    model = _mixed_model(17, batch=1, hw=("H", "W") if dynamic else (16, 16))
    compile_model(model).save(tmp_path / "m.om")
    lm = LoadedModel.from_file(tmp_path / "m.om")
    shapes = [(16, 16), (14, 18), (18, 14)] if dynamic else [(16, 16)]
    xs = [_x(170 + i, (1, 64, *s)) for i, s in enumerate(shapes)]
    wants = [run_ort(model, {"x": x})[0] for x in xs]
    for _ in range(2):
        for x, want in zip(xs, wants):
            _close(lm.run([x])[0], want)
        assert lm.executor.wait_builds(timeout=TIMEOUT)


# ------------------------------------------------------------------ Winograd


@pytest.mark.skipif(not onednn_wino.available(), reason="oneDNN v2 Winograd missing")
def test_two_first_runs_of_a_winograd_plan_at_once() -> None:
    """Two threads' first runs of one Winograd plan whose weights were queued: the one that reads
    ``weights.ticket`` after the other cleared it must not call ``None.wait()``."""
    rng = _rng(4)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    x = onednn.empty_channels_last((1, 64, 16, 16))
    x[...] = rng.standard_normal(x.shape)
    win = Window((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), (16, 16))
    gate = threading.Event()
    with background_pack.packing():
        background_pack.submit(gate.wait)
        try:
            wp = onednn_wino.new_plan(x.shape, w, None, win, None)
        finally:
            gate.set()
    assert wp is not None and wp.weights.ticket is not None  # done, not yet cleared by a run
    want = onednn.conv_nhwc(x, w, None, 1, win)
    lines = inspect.getsourcelines(onednn_wino._Plan.run)
    wait_line = next(lines[1] + i for i, s in enumerate(lines[0]) if ".wait()" in s)
    paused, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    results: list[np.ndarray] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is onednn_wino._Plan.run.__code__:
            def local(frame: Any, event: str, arg: Any) -> Any:
                if event == "line" and frame.f_lineno == wait_line and not paused.is_set():
                    paused.set()
                    resume.wait(TIMEOUT)
                return local
            return local
        return None

    def second() -> None:
        sys.settrace(tracer)
        try:
            results.append(wp.run(x, None))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            sys.settrace(None)

    t = threading.Thread(target=second)
    t.start()
    try:
        assert paused.wait(TIMEOUT)  # past its ``ticket is not None`` check
        results.append(wp.run(x, None))  # the first run clears the ticket meanwhile
    finally:
        resume.set()
        t.join(TIMEOUT)
    assert not t.is_alive()
    assert not errors, errors
    for r in results:
        _close(r, want)


# ------------------------------------------------------------------ concurrency


@needs_onednn
def test_threads_loading_and_running_one_compiled_model_at_once() -> None:
    model = _mixed_model(5)
    cm = compile_model(model)
    xs = [_x(10 + i) for i in range(4)]
    wants = [run_ort(model, {"x": x})[0] for x in xs]

    def work(i: int) -> None:
        for _ in range(2):
            lm = LoadedModel.from_compiled(cm)
            for j in (i, (i + 1) % 4):
                _close(lm.run([xs[j]])[0], wants[j])

    run_threads(work, 4, TIMEOUT)


@needs_onednn
def test_background_builds_beside_runs_of_other_shapes() -> None:
    """The builder thread binds (and packs, on its own helper) while the caller runs other shapes
    on the generic plan and on plans built before; the same weights are shared throughout."""
    model = _mixed_model(6, batch=1, hw=("H", "W"))
    lm = LoadedModel.from_compiled(compile_model(model))
    shapes = [(14, 14), (16, 16), (18, 14), (14, 18), (20, 20)]
    xs = {s: _x(20 + i, (1, 64, *s)) for i, s in enumerate(shapes)}
    wants = {s: run_ort(model, {"x": x})[0] for s, x in xs.items()}
    for _ in range(2):
        for s in shapes:
            _close(lm.run([xs[s]])[0], wants[s])
    assert lm.executor.wait_builds(timeout=TIMEOUT)
    for s in shapes:
        _close(lm.run([xs[s]])[0], wants[s])
    assert lm.plan_cache_stats().built >= len(shapes)


@needs_onednn
def test_eviction_with_one_plan_while_another_thread_runs() -> None:
    model = _mixed_model(7, batch=1, hw=("H", "W"))
    lm = LoadedModel.from_compiled(compile_model(model),
                                   plan_cache=PlanCacheConfig(max_plans=1, build=PlanBuild.INLINE))
    shapes = [(14, 14), (16, 16), (18, 18)]
    xs = {s: _x(30 + i, (1, 64, *s)) for i, s in enumerate(shapes)}
    wants = {s: run_ort(model, {"x": x})[0] for s, x in xs.items()}
    orders = (shapes, shapes[::-1])

    def work(i: int) -> None:
        for s in orders[i] * 3:
            _close(lm.run([xs[s]])[0], wants[s])

    run_threads(work, 2, TIMEOUT)


@needs_onednn
def test_threads_with_their_own_dynamic_loads_of_shared_weights_evicting_and_building() -> None:
    """Three loads of one compiled dynamic model (the same weight arrays: packings shared through
    ``onednn_packed`` across their builder threads and callers), two plans each at most, shapes
    coming in different orders: background builds, evictions and rebuilds at once."""
    model = _mixed_model(18, batch=1, hw=("H", "W"))
    cm = compile_model(model)
    shapes = [(14, 14), (16, 16), (18, 14), (14, 18)]
    xs = {s: _x(180 + i, (1, 64, *s)) for i, s in enumerate(shapes)}
    wants = {s: run_ort(model, {"x": x})[0] for s, x in xs.items()}

    def work(i: int) -> None:
        lm = LoadedModel.from_compiled(cm, plan_cache=PlanCacheConfig(max_plans=2))
        order = shapes[i:] + shapes[:i]
        for s in order * 3:
            _close(lm.run([xs[s]])[0], wants[s])
        assert lm.executor.wait_builds(timeout=TIMEOUT)
        for s in order:
            _close(lm.run([xs[s]])[0], wants[s])

    run_threads(work, 3, TIMEOUT)


# ------------------------------------------------------------------ nested plans, gears


def _if_model(seed: int) -> onnx.ModelProto:
    """If(mean(x) > t), t an input, with a Winograd-eligible conv in one branch and a 1x1 conv in
    the other, a Loop of two conv steps, then a 3x3 conv; the condition depends on the data, so the
    bodies stay subgraphs (their plans are built inside the outer plan's build)."""
    rng = _rng(seed)
    n_then, w_then = _conv(rng, "wt", "x", "t0", 64, 64, 3)
    n_else, w_else = _conv(rng, "we", "x", "e0", 64, 64, 1)
    then_g = helper.make_graph([n_then, helper.make_node("Relu", ["t0"], ["out_t"])], "then", [],
                               [helper.make_tensor_value_info("out_t", TensorProto.FLOAT, None)], [w_then])
    else_g = helper.make_graph([n_else, helper.make_node("Sigmoid", ["e0"], ["out_e"])], "else", [],
                               [helper.make_tensor_value_info("out_e", TensorProto.FLOAT, None)], [w_else])
    n_body, w_body = _conv(rng, "wb", "h_in", "h0", 64, 64, 3)
    body = helper.make_graph(
        [n_body, helper.make_node("Tanh", ["h0"], ["h_out"]), helper.make_node("Identity", ["c_in"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("h_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("h_out", TensorProto.FLOAT, None)], [w_body])
    n_out, w_out = _conv(rng, "wo", "z", "y", 16, 64, 3)
    nodes = [helper.make_node("ReduceMean", ["x"], ["mu"], keepdims=0),
             helper.make_node("Greater", ["mu", "t"], ["cond"]),
             helper.make_node("If", ["cond"], ["z0"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Loop", ["trips", "true", "z0"], ["z"], body=body),
             n_out]
    inits = [w_out, numpy_helper.from_array(np.array(2, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "true")]
    g = helper.make_graph(nodes, "ifm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 16, 16]),
                                         helper.make_tensor_value_info("t", TensorProto.FLOAT, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@needs_onednn
def test_if_and_loop_bodies_with_convs_bound_in_the_outer_block(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _if_model(8)
    x = _x(40, (1, 64, 16, 16))
    mean = float(x.mean())
    for enabled in (True, False):
        monkeypatch.setattr(background_pack, "ENABLED", enabled)
        lm = LoadedModel.from_compiled(compile_model(model))
        for _ in range(2):
            for t in (mean - 1.0, mean + 1.0):  # then, else
                feeds = {"x": x, "t": np.array(t, np.float32)}
                _close(lm.run(list(feeds.values()))[0], run_ort(model, feeds)[0])


@needs_onednn
def test_each_batch_gear_plan_with_packed_weights() -> None:
    model = _mixed_model(9, batch="N")
    lm = LoadedModel.from_compiled(compile_model(model, CompileOptions(input_shape={"x": [-1, 64, 20, 20]},
                                                                        dynamic_batch_size=[1, 2, 3])))
    for n in (3, 1, 2, 1):
        x = _x(50 + n, (n, 64, 20, 20))
        _close(lm.run([x])[0], run_ort(model, {"x": x})[0])


# ------------------------------------------------------------------ other precisions


@needs_onednn
def test_bf16_model_the_same_with_the_helper_on_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _mixed_model(10)
    cm = compile_model(model, CompileOptions(precision_mode="allow_fp32_to_bf16", soc_version="Ascend910B2"))
    x = _x(60)
    got = {}
    for enabled in (True, False):
        monkeypatch.setattr(background_pack, "ENABLED", enabled)
        got[enabled] = LoadedModel.from_compiled(cm).run([x])[0]
    np.testing.assert_allclose(got[True], got[False], rtol=1e-6, atol=1e-6)
    _close(got[True], run_ort(model, {"x": x})[0], tol=5e-2)


def _qdq_model(seed: int) -> onnx.ModelProto:
    """QuantizeLinear -> DequantizeLinear around a conv and a MatMul with int8 weights (QDQ)."""
    rng = _rng(seed)
    wq = rng.integers(-127, 128, (32, 32, 3, 3)).astype(np.int8)
    mq = rng.integers(-127, 128, (32, 16)).astype(np.int8)
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.float32(0.004), "ws"),
             numpy_helper.from_array(np.int8(0), "wz"), numpy_helper.from_array(np.float32(0.05), "xs"),
             numpy_helper.from_array(np.int8(0), "xz"), numpy_helper.from_array(mq, "mq"),
             numpy_helper.from_array(np.float32(0.01), "ms"), numpy_helper.from_array(np.float32(0.1), "hs")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("QuantizeLinear", ["f", "hs", "xz"], ["fq"]),
             helper.make_node("DequantizeLinear", ["fq", "hs", "xz"], ["fd"]),
             helper.make_node("DequantizeLinear", ["mq", "ms", "wz"], ["md"]),
             helper.make_node("MatMul", ["fd", "md"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32, 14, 14])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@needs_onednn
@pytest.mark.parametrize("enabled", [True, False])
def test_qdq_model_the_same_with_the_helper_on_and_off(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background_pack, "ENABLED", enabled)
    model = _qdq_model(11)
    x = _x(70, (2, 32, 14, 14))
    (want,) = run_ort(model, {"x": x})
    lm = LoadedModel.from_compiled(compile_model(model))
    got = lm.run([x])[0]
    # within a few steps of the quantized head (scale 0.1, weights 0.01 x int8): rounding ties differ
    np.testing.assert_allclose(got, want, rtol=0, atol=0.5)
    np.testing.assert_array_equal(lm.run([x])[0], got)
    monkeypatch.setattr(background_pack, "ENABLED", not enabled)
    np.testing.assert_allclose(LoadedModel.from_compiled(compile_model(model)).run([x])[0], got, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ lifetime


@needs_onednn
def test_many_loads_leave_no_threads_and_no_packed_bytes() -> None:
    model = _mixed_model(12)
    gc.collect()
    before = onednn_packed.stats().bytes_held
    threads_before = threading.active_count()
    x = _x(80)
    want = run_ort(model, {"x": x})[0]
    for _ in range(4):
        cm = compile_model(model)
        for _ in range(2):
            _close(LoadedModel.from_compiled(cm).run([x])[0], want)
        del cm
    gc.collect()
    assert onednn_packed.stats().bytes_held == before
    assert threading.active_count() <= threads_before + 1  # (a background builder may still be ending)


@needs_onednn
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_loads_and_runs() -> None:
    model = _mixed_model(13)
    cm = compile_model(model)
    lm = LoadedModel.from_compiled(cm)
    x = _x(90)
    want = run_ort(model, {"x": x})[0]
    _close(lm.run([x])[0], want)
    # the child runs the loaded model and loads it again (a new block, a new helper)
    got = _in_child(lambda: bool(np.allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-3)
                                 and np.allclose(LoadedModel.from_compiled(cm).run([x])[0], want, rtol=1e-4, atol=1e-3)))
    assert got == b"\x00", f"child hung or failed: {got!r}"


def _in_child(body: Callable[[], bool]) -> bytes:
    """``body()`` run in a forked child: b"\\x00" when it returned True, b"\\x02" when False,
    b"\\x01" when it raised, b"" when it hung (killed after ``TIMEOUT``)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 2
        finally:
            os.write(w, bytes([code]))
            os._exit(code)
    os.close(w)
    try:
        ready, _, _ = select.select([r], [], [], TIMEOUT)
        got = os.read(r, 1) if ready else b""
    finally:
        os.close(r)
        if not got:
            os.kill(pid, 9)
        os.waitpid(pid, 0)
    return got


@needs_onednn
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_child_forked_while_another_thread_packs_does_not_wait_for_its_helper() -> None:
    """The fork copies the shared cache with a packing whose helper thread the child does not
    have: the child's use of that weight waited for the ticket for ever."""
    w = _rng(3).standard_normal((48, 40)).astype(np.float32)
    src, dst = capi.MemoryDesc.strided(w.shape, [s // 4 for s in w.strides]), _column_major((48, 40))
    gate, queued = threading.Event(), threading.Event()

    def builder() -> None:  # a plan build on another thread, its reorder held in the queue
        with background_pack.packing():
            background_pack.submit(gate.wait)
            onednn_packed.packed(w, src, dst)
            queued.set()
            gate.wait(TIMEOUT)

    t = threading.Thread(target=builder)
    t.start()
    try:
        assert queued.wait(TIMEOUT)

        def child() -> bool:  # (on a fresh thread: the forking thread's libgomp pool is the parent's)
            mem = onednn_packed.packed(w, src, dst)
            return bool(np.array_equal(_plain_copy(mem, w.shape), w))

        got = _in_child(lambda: omp_fork.run_fresh(child))
    finally:
        gate.set()
        t.join(TIMEOUT)
    assert not t.is_alive()
    assert got == b"\x00", f"child hung or failed: {got!r}"


@needs_onednn
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
@pytest.mark.skipif(not onednn_wino.available(), reason="oneDNN v2 Winograd missing")
@pytest.mark.parametrize("lock", ["onednn_wino._lock", "onednn_wino._available_lock", "onednn._available_lock",
                                  "capi._load_lock"])
def test_a_child_forked_while_another_thread_holds_a_provider_lock_goes_on(lock: str) -> None:
    """A fork while another thread held the Winograd lock (a load or a run of GoogLeNet beside it;
    a fresh-user helper's child hung 7 of 20 times) or one of the libraries' load / probe locks:
    the child's next use waited for a thread it does not have."""
    mod, name = lock.split(".")
    held, release = threading.Event(), threading.Event()
    owner = {"onednn_wino": onednn_wino, "onednn": onednn, "capi": capi}[mod]

    def hold() -> None:
        with getattr(owner, name):
            held.set()
            release.wait(TIMEOUT)

    model = _mixed_model(31)
    cm, x = compile_model(model), _x(31)
    want = run_ort(model, {"x": x})[0]
    t = threading.Thread(target=hold, daemon=True)
    t.start()
    assert held.wait(TIMEOUT)
    try:  # (the child loads and runs as a user would: a load packs on a fresh thread, a run on a fresh team)
        got = _in_child(lambda: bool(np.allclose(LoadedModel.from_compiled(cm).run([x])[0], want,
                                                 rtol=1e-4, atol=1e-3)))
    finally:
        release.set()
        t.join(TIMEOUT)
    assert got == b"\x00", f"child hung or failed: {got!r}"
