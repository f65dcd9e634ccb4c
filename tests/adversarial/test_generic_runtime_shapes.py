"""Sizes an op cannot take, reaching it on the shape-generic plan (symbolic input dims).

A model whose inputs have symbolic dims runs a new shape on the generic plan, whose kernels
resolve sizes per call without shape inference for that call. Each case (generic_shape_cases.py)
is a one-op model with symbolic dims, warmed with a good shape, then called with a size the op
cannot take (a kernel larger than its input, a K that does not match, an index out of range...)
or an edge size it can (empty batches, ceil_mode windows). The golden is ONNX Runtime: where it
refuses, pycann raises one of its errors (ShapeError / KernelError) naming the node and op, never
returns an array or crashes; where it accepts, pycann's values equal its. The same bad shape as a
static compile (``CompileOptions(input_shape=...)``) is refused too: by shape inference at compile
time, or, where the fault is in input values (indices, sizes fed at run time), by the kernel.
Deliberate differences from ORT are listed with reasons (``STRICTER``, ``LENIENT``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.errors import KernelError, PycannError, ShapeError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from tests.adversarial.generic_shape_cases import CASES, LENIENT, STATIC_ONLY, STRICTER, XFAIL, Case, F, f32
from tests.ops.oracle import run_ort


def _ort(case: Case, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | Exception:
    try:
        return run_ort(case.model(), feeds)
    except Exception as e:  # noqa: BLE001 - ORT's refusal is the expected outcome for most cases
        return e


def _marks(name: str) -> Any:
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=XFAIL[name])) if name in XFAIL else name


DYNAMIC = [_marks(n) for n in CASES if n not in STATIC_ONLY]


@pytest.mark.parametrize("policy", [PlanPolicy.GENERIC, PlanPolicy.AUTO])
@pytest.mark.parametrize("name", DYNAMIC)
def test_generic_plan_refuses_or_matches_ort(name: str, policy: PlanPolicy) -> None:
    """Warm on a good shape, then the bad one: ORT refuses -> a pycann error naming node and op;
    ORT accepts -> the same values."""
    case = CASES[name]
    lm = LoadedModel.from_compiled(compile_model(case.model()), plan_cache=PlanCacheConfig(policy=policy))
    good = case.arrays(case.good)
    order = list(case.feeds)
    ref = run_ort(case.model(), good)
    for got, want in zip(lm.run([good[n] for n in order]), ref):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    bad = case.arrays(case.bad)
    ort_out = _ort(case, bad)
    if name in LENIENT:
        assert isinstance(ort_out, Exception)
        assert lm.run([bad[n] for n in order])[0].shape == LENIENT[name]
    elif isinstance(ort_out, Exception) or name in STRICTER:
        assert isinstance(ort_out, Exception) != (name in STRICTER), "ORT refuses a case listed as STRICTER"
        with pytest.raises((ShapeError, KernelError)) as info:
            lm.run([bad[n] for n in order])
        # the node and op; a node a pass made from it (Gemm -> MatMul) also names the model's node
        msg = str(info.value)
        assert "node n0" in msg and (case.op in msg or "compiled from ONNX node n0" in msg), msg
    else:
        outs = lm.run([bad[n] for n in order])
        assert len(outs) == len(ort_out)
        for got, want in zip(outs, ort_out):
            assert got.shape == want.shape, (got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_static_compile_refuses_what_ort_refuses(name: str) -> None:
    """The bad shape as a static compile: shape inference refuses it (naming the node) where ORT does."""
    case = CASES[name]
    bad = case.arrays(case.bad)
    ort_out = _ort(case, bad)
    fed = {n: list(bad[n].shape) for n in case.feeds}
    if name in LENIENT:
        cm = compile_model(case.model(), CompileOptions(input_shape=fed))
        assert LoadedModel.from_compiled(cm).run([bad[n] for n in case.feeds])[0].shape == LENIENT[name]
    elif isinstance(ort_out, Exception) or name in STRICTER:
        with pytest.raises(PycannError) as info:
            cm = compile_model(case.model(), CompileOptions(input_shape=fed))
            LoadedModel.from_compiled(cm).run([bad[n] for n in case.feeds])
        assert "n0" in str(info.value) or case.op in str(info.value), str(info.value)
    else:
        cm = compile_model(case.model(), CompileOptions(input_shape=fed))
        outs = LoadedModel.from_compiled(cm).run([bad[n] for n in case.feeds])
        for got, want in zip(outs, ort_out):
            assert got.shape == want.shape, (got.shape, want.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy", [PlanPolicy.GENERIC, PlanPolicy.AUTO])
def test_a_refused_call_leaves_the_generic_plan_in_use(policy: PlanPolicy) -> None:
    """A call the graph cannot take fails on the generic plan and again in shape inference; the
    generic plan was not at fault and keeps running new shapes (one bad call had every later new
    shape build a specialised plan, under PlanPolicy.GENERIC too)."""
    case = CASES["maxpool_kernel_larger"]
    lm = LoadedModel.from_compiled(compile_model(case.model()), plan_cache=PlanCacheConfig(policy=policy))
    lm.run([f32(1, 2, 7, 9)])
    with pytest.raises(ShapeError, match="kernel_shape"):
        lm.run([f32(1, 2, 3, 9)])
    before = lm.plan_cache_stats()
    for h in (8, 9, 10):
        x = f32(1, 2, h, 9)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(case.model(), {"x": x})[0])
    after = lm.plan_cache_stats()
    assert after.generic_runs - before.generic_runs == 3 and after.built == before.built, (before, after)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize(("k", "s", "p", "h"), [(3, 2, 0, 2), (4, 2, 1, 1), (6, 4, 1, 2)])
def test_ceil_mode_window_wider_than_the_input_matches_ort(op: str, k: int, s: int, p: int, h: int) -> None:
    """ceil_mode: a window wider than the padded input that starts inside it gives one output (ONNX's
    shape inference, ORT, torch); pycann refused it. After a conv, so the specialised plan binds its
    oneDNN/ATen pooling; both plans and a static compile give ORT's values."""
    extra: dict[str, Any] = {"count_include_pad": 1} if op == "AveragePool" else {}
    _one_output_like_ort(_pool_after_conv(op, k, s, p, {**extra, "ceil_mode": 1}), f32(1, 64, h, h))


@pytest.mark.parametrize("name", DYNAMIC)
def test_the_generic_plan_itself_refuses(name: str) -> None:
    """Below the executor's fallback (which re-runs a refused call through shape inference): the
    generic plan's kernels themselves refuse what they cannot take, naming the node and op, so no
    native kernel gets operands it would read past (an OperandError names the node too)."""
    case = CASES[name]
    bad = case.arrays(case.bad)
    if name in LENIENT or not (name in STRICTER or isinstance(_ort(case, bad), Exception)):
        pytest.skip("a size the op takes")
    lm = LoadedModel.from_compiled(compile_model(case.model()), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
    good = case.arrays(case.good)
    lm.run([good[n] for n in case.feeds])
    with pytest.raises(KernelError, match=r"^node n0"):  # (OperandError is a KernelError)
        lm.executor.generic_plan().run([bad[n] for n in case.feeds])


def _one_output_like_ort(m: Any, x: np.ndarray) -> None:
    """ORT gives one output per spatial dim for ``x``; so do both plans (the specialised one binds
    oneDNN's or ATen's pooling) and a static compile."""
    want = run_ort(m, {"x": x})[0]
    assert want.shape == (1, 64, 1, 1)
    for policy in (PlanPolicy.SPECIALIZE, PlanPolicy.GENERIC):
        lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy))
        np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)
    static = compile_model(m, CompileOptions(input_shape={"x": list(x.shape)}))
    np.testing.assert_allclose(LoadedModel.from_compiled(static).run([x])[0], want, rtol=1e-4, atol=1e-4)


def _pool_after_conv(op: str, k: int, s: int, p: int, extra: dict[str, Any]) -> Any:
    w = numpy_helper.from_array(f32(64, 64, 1, 1), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="c0"), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node(op, ["r"], ["y"], name="n0", kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                              **extra)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [1, 64, "H", "W"])],
                          [helper.make_tensor_value_info("y", F, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize(("op", "extra"), [("MaxPool", {}), ("AveragePool", {}),
                                           ("AveragePool", {"count_include_pad": 1}), ("LpPool", {})])
@pytest.mark.parametrize(("k", "s", "p", "h"), [(3, 3, 0, 1), (2, 2, 0, 1), (4, 3, 0, 2), (5, 4, 1, 2)])
def test_floor_mode_window_wider_than_the_input_by_less_than_a_stride_matches_ort(
        op: str, extra: dict[str, Any], k: int, s: int, p: int, h: int) -> None:
    """Without ceil_mode ORT sizes pooling by C++ division, trunc((in + pads - k) / s) + 1: a window
    wider than the padded input by less than a stride gives one output (PP-OCRv4 rec's AveragePool
    [3, 2] / [3, 2] on an input under 5 px wide or 33 px high); pycann refused it with the
    spec's floor. Both plans (the specialised one binds oneDNN's pooling) and a static compile."""
    _one_output_like_ort(_pool_after_conv(op, k, s, p, extra), f32(1, 64, h, h))


def test_floor_mode_window_a_stride_or_more_too_wide_is_still_refused() -> None:
    """trunc((1 - 3) / 2) + 1 = 0: ORT returns an empty array there, pycann refuses (STRICTER's rule)."""
    lm = LoadedModel.from_compiled(compile_model(_pool_after_conv("MaxPool", 3, 2, 0, {})))
    with pytest.raises(ShapeError, match=r"node n0 \(MaxPool.*kernel_shape \[3, 3\] does not fit"):
        lm.run([f32(1, 64, 1, 1)])
