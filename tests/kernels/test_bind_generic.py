"""Shape-generic packed GEMMs (``kernels/bind_generic.py``): values against numpy and ONNX Runtime
at 1-64 rows (and a prompt's 128), one packed copy per weight shared by every row count and plan
(bytes counted), and the fallback to the generic kernel."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import bind_generic, providers
from pycann.kernels.algorithm import Packing
from pycann.kernels.providers import choice_table, onednn_packed
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not (choice_table.has_avx512() and providers.available("onednn")),
                                 reason="packed generic GEMMs bind on AVX-512 CPUs with libdnnl only")]
RNG = np.random.default_rng(15)
K, N = 512, 1536  # 2*K*N >= onednn_matmul.SMALL_FLOPS at one row
ROWS = (1, 2, 4, 7, 16, 64)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.05).astype(np.float32)


def _fail(inputs: Any, attrs: Any) -> list[np.ndarray]:
    raise AssertionError("fallback called")


@pytest.mark.parametrize("rows", ROWS)
@pytest.mark.parametrize("lead", ["batch", "seq"])
def test_matmul_values_vs_numpy(rows: int, lead: str) -> None:
    b = _w(K, N)
    k = bind_generic.packed_matmul(b, None, None, False, _fail)
    assert k is not None and k.packing is Packing.PACKED and k.impl.startswith("brg")
    x = _w(rows, 1, K) if lead == "batch" else _w(1, rows, K)
    y = k.run([x, b], {})[0]
    assert y.shape == x.shape[:-1] + (N,)
    np.testing.assert_allclose(y, (x.astype(np.float64) @ b).astype(np.float32), rtol=1e-4, atol=1e-5)


def test_bias_and_residual_post_ops() -> None:
    b, bias = _w(K, N), _w(N)
    k = bind_generic.packed_matmul(b, bias, None, True, _fail)
    assert k is not None
    for rows in ROWS:
        x, r = _w(rows, K), _w(rows, N)
        y = k.run([x, b, bias, r], {})[0]
        np.testing.assert_allclose(y, x.astype(np.float64) @ b + bias + r, rtol=1e-4, atol=1e-5)


def test_calls_it_cannot_run_take_the_fallback() -> None:
    b = _w(K, N)
    seen: list[tuple[int, ...]] = []

    def fallback(inputs: Any, attrs: Any) -> list[np.ndarray]:
        seen.append(inputs[0].shape)
        return [np.matmul(inputs[0], inputs[1])]

    k = bind_generic.packed_matmul(b, None, None, False, fallback)
    assert k is not None
    for x in (_w(K), _w(3, K).astype(np.float64)):  # 1-D A, another dtype
        np.testing.assert_allclose(k.run([x, b], {})[0], np.matmul(x, b), rtol=1e-5, atol=1e-6)
    assert seen == [(K,), (3, K)]


def test_one_packing_shared_by_every_row_count() -> None:
    b = _w(K, N)
    gc.collect()  # earlier tests' weights: their packings are dropped now, not during the count
    before = onednn_packed.stats()
    k = bind_generic.packed_matmul(b, None, None, False, _fail)
    k2 = bind_generic.packed_matmul(b, None, None, False, _fail)  # another plan over the same weight
    assert k is not None and k2 is not None
    for rows in (*ROWS, 128, 4, 1):
        k.run([_w(rows, K), b], {})
    k2.run([_w(4, K), b], {})
    after = onednn_packed.stats()
    assert after.packed - before.packed == 1
    assert after.reused - before.reused == len(ROWS) + 1 + 1  # every new row count and k2's two primitives reuse it
    assert 0 < after.bytes_held - before.bytes_held <= K * N * 4 * 1.1  # one copy (oneDNN pads N to its block)


def _model(op: str) -> object:
    """x [B, S, K] -> MatMul(K x N) + bias (-> FusedMatMul) -> Relu -> MatMul(N x K) + x, or one Gemm(transB)."""
    w1, b1, w2 = _w(K, N), _w(N), _w(N, K)
    if op == "Gemm":
        nodes = [helper.make_node("Gemm", ["x", "w1t", "b1"], ["y"], transB=1)]
        inits = [numpy_helper.from_array(np.ascontiguousarray(w1.T), "w1t"), numpy_helper.from_array(b1, "b1")]
        x_shape: list[Any] = ["R", K]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
                 helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["m"]),
                 helper.make_node("Add", ["m", "x"], ["y"])]
        inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"))]
        x_shape = ["B", "S", K]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("op", ["MatMul", "Gemm"])
def test_generic_plan_vs_onnxruntime(op: str) -> None:
    m = _model(op)
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                                 build=PlanBuild.INLINE))
    plan = lm.executor.generic_plan()
    packed = [st for st in plan.steps if st.bound is not None and st.bound.packing is Packing.PACKED]
    assert len(packed) == (1 if op == "Gemm" else 2)
    before = onednn_packed.stats()  # (bytes_held may fall meanwhile: earlier tests' weights freed)
    for rows in ROWS:
        x = _w(rows, K) if op == "Gemm" else _w(rows, 1, K)
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    after = onednn_packed.stats()
    assert after.packed == before.packed  # packed once, at plan build; every row count reuses it
    assert lm.plan_cache_stats().built == 0


def test_relu_keeps_nan_as_onnxruntime() -> None:
    """ReLU is not a oneDNN post-op here (oneDNN maps NaN to 0): numpy applies it after the product."""
    m = _model("MatMul")
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                                 build=PlanBuild.INLINE))
    x = _w(4, 1, K)
    x[1, 0, 3] = np.nan
    got, want = lm.run([x])[0], run_ort(m, {"x": x})[0]
    assert np.isnan(got[1]).all() and np.isnan(want[1]).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
