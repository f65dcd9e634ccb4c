"""LayerNormalization on the shape-generic plan (``kernels/bind_generic._layer_norm``): oneDNN's
layer normalization with a primitive per row count, against ONNX Runtime over many shapes of one
model, NaN rows as ORT gives them, the nodes it must leave to the generic kernel, and its bounded
per-row table."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.dtypes import TensorDesc
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import bind_generic, providers
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not providers.available("onednn"), reason="binds with libdnnl only")]
RNG = np.random.default_rng(23)
D = 96


def _model(axis: int = -1, stats: bool = False) -> Any:
    """x [B, S, 4, D] -> LayerNormalization(axis) -> y (and Mean / InvStdDev when ``stats``)."""
    tail = [4, D][axis:]  # axis -1 or -2
    n = int(np.prod(tail))
    scale, bias = (RNG.standard_normal(n) + 1).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    outs = ["y", "mean", "inv"] if stats else ["y"]
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], outs, axis=axis, epsilon=1e-5)
    g = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 4, D])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
                          [numpy_helper.from_array(scale.reshape(tail), "scale"),
                           numpy_helper.from_array(bias.reshape(tail), "bias")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _generic(m: Any) -> LoadedModel:
    return LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                                 build=PlanBuild.INLINE))


def _ln_steps(lm: LoadedModel) -> list[Any]:
    return [st for st in lm.executor.generic_plan().steps if st.node.op_type == "LayerNormalization"]


@pytest.mark.parametrize("axis", [-1, -2])
def test_values_vs_onnxruntime_over_shapes(axis: int) -> None:
    m = _model(axis)
    lm = _generic(m)
    (step,) = _ln_steps(lm)
    assert step.bound is not None and step.bound.impl == "onednn:layer_norm"
    for b, s in ((1, 1), (4, 1), (1, 32), (2, 17), (3, 64), (1, 1)):
        x = (RNG.standard_normal((b, s, 4, D)) * 3 + 1).astype(np.float32)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    assert lm.plan_cache_stats().built == 0  # every shape ran on the one generic plan


def test_a_nan_row_stays_nan_and_the_others_finite_as_onnxruntime() -> None:
    m = _model()
    lm = _generic(m)
    x = RNG.standard_normal((2, 3, 4, D)).astype(np.float32)
    x[1, 2, 0, 5] = np.nan
    got, want = lm.run([x])[0], run_ort(m, {"x": x})[0]
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got[1, 2, 0]).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_mean_and_invstddev_outputs_keep_the_generic_kernel() -> None:
    m = _model(stats=True)
    lm = _generic(m)
    (step,) = _ln_steps(lm)
    assert step.bound is None
    x = RNG.standard_normal((2, 5, 4, D)).astype(np.float32)
    for got, want in zip(lm.run([x]), run_ort(m, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_binder_declines_symbolic_tail_and_runs_fallback_for_other_calls() -> None:
    scale, bias = np.ones(D, np.float32), np.zeros(D, np.float32)
    ins = [TensorDesc(1, ("B", D)), TensorDesc(1, (D,)), TensorDesc(1, (D,))]
    assert bind_generic._layer_norm({"axis": -1}, [TensorDesc(1, ("B", "N")), *ins[1:]],
                                    [None, scale, bias], [TensorDesc(1, None)], lambda i, a: []) is None
    seen: list[Any] = []

    def fallback(inputs: Any, attrs: Any) -> list[np.ndarray]:
        seen.append(inputs[0].dtype)
        return [np.zeros_like(inputs[0])]

    k = bind_generic._layer_norm({"axis": -1}, ins, [None, scale, bias], [TensorDesc(1, ("B", D))], fallback)
    assert k is not None
    k.run([np.ones((3, D), np.float64), scale, bias], {"axis": -1})  # another dtype
    assert seen == [np.dtype(np.float64)]
    x = RNG.standard_normal((bind_generic.MAX_ROW_KERNELS + 5, D)).astype(np.float32)
    for rows in range(1, bind_generic.MAX_ROW_KERNELS + 6):  # more row counts than the table keeps
        y = k.run([x[:rows], scale, bias], {"axis": -1})[0]
        xr = x[:rows].astype(np.float64)
        want = (xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    assert len(k.keep[2]) <= bind_generic.MAX_ROW_KERNELS


def test_small_normalisations_get_a_one_thread_primitive_with_the_same_values() -> None:
    """``onednn_norm.ONE_THREAD_ELEMENTS``: a decode row's LayerNorm runs without a parallel region;
    its values are those of the team's primitive and of the ONNX formula, on any calling thread."""
    import threading

    from pycann.kernels.providers import onednn_norm

    n = 768
    scale, bias = (RNG.standard_normal(n) + 1).astype(np.float32), RNG.standard_normal(n).astype(np.float32)
    small = onednn_norm.bound_layer_norm((2, n), n, scale, bias, 1e-5)
    rows = onednn_norm.ONE_THREAD_ELEMENTS // n + 1
    large = onednn_norm.bound_layer_norm((rows, n), n, scale, bias, 1e-5)
    assert small.impl.endswith("(one thread)") and not large.impl.endswith("(one thread)")
    x = (RNG.standard_normal((rows, n)) * 3 + 1).astype(np.float32)
    mean = x.mean(-1, keepdims=True, dtype=np.float64)
    want = ((x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * scale + bias).astype(np.float32)
    got_large = large([x], {})[0]
    got: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: got.append(small([x[:2]], {})[0]))
    worker.start()
    worker.join()
    np.testing.assert_allclose(got_large, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(small([x[:2]], {})[0], got[0])
    np.testing.assert_allclose(got[0], got_large[:2], rtol=1e-6, atol=1e-6)
