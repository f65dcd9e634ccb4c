"""MatMul + bias + GELU's tanh form fused as FusedMatMul activation GeluTanh, against ONNX
Runtime on the unfused graph where the formula is fragile: pre-activations past 1e13 (x^3
overflows float32), inf/-inf/NaN inputs, a residual Add after the GELU, 3-D batches, oneDNN's
post-op and numpy's ``gelu_tanh_`` (providers narrowed to numpy), the bf16 precision mode and a
float16 model (left unfused)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(41)
K, N = 8, 16


def _model(spelled: bool, w_scale: float = 2.0, residual: bool = False, dtype: Any = np.float32) -> Any:
    et = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    inits = [numpy_helper.from_array((RNG.standard_normal((K, N)) * w_scale).astype(dtype), "W"),
             numpy_helper.from_array(RNG.standard_normal(N).astype(dtype), "B")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "B"], ["v"])]
    if spelled:  # GPT-2's gelu_new as the TorchScript exporter writes it
        for name, val in (("half", 0.5), ("three", 3.0), ("k", 0.044715), ("c", math.sqrt(2 / math.pi)), ("one", 1.0)):
            inits.append(numpy_helper.from_array(np.array(val, dtype), name))
        nodes += [helper.make_node("Mul", ["v", "half"], ["hv"]), helper.make_node("Pow", ["v", "three"], ["p"]),
                  helper.make_node("Mul", ["p", "k"], ["pk"]), helper.make_node("Add", ["v", "pk"], ["a"]),
                  helper.make_node("Mul", ["a", "c"], ["ac"]), helper.make_node("Tanh", ["ac"], ["t"]),
                  helper.make_node("Add", ["t", "one"], ["t1"]), helper.make_node("Mul", ["hv", "t1"], ["g"])]
    else:
        nodes.append(helper.make_node("Gelu", ["v"], ["g"], approximate="tanh"))
    ins = [helper.make_tensor_value_info("x", et, ["B", "S", K])]
    if residual:
        nodes.append(helper.make_node("Add", ["g", "r"], ["y"]))
        ins.append(helper.make_tensor_value_info("r", et, ["B", "S", N]))
    else:
        nodes.append(helper.make_node("Identity", ["g"], ["y"]))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", et, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def _check(m: Any, feeds: dict[str, np.ndarray], act: str | None, tol: float = 1e-5, **opts: Any) -> None:
    want = run_ort(m, feeds)[0]
    for policy in (PlanPolicy.SPECIALIZE, PlanPolicy.GENERIC):
        cm = compile_model(m, CompileOptions(**opts) if opts else None)
        assert [n.attrs.get("activation") for n in cm.graph.nodes if n.op_type == "FusedMatMul"] == \
            ([act] if act else [])
        got = LoadedModel.from_compiled(cm, plan_cache=PlanCacheConfig(policy=policy)).run(list(feeds.values()))[0]
        assert got.dtype == want.dtype and np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("numpy_only", [False, True])
@pytest.mark.parametrize("spelled", [False, True])
def test_gelu_tanh_huge_inf_nan_and_residual(spelled: bool, numpy_only: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if numpy_only:
        monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
        providers.reset()
    x = RNG.standard_normal((2, 3, K)).astype(np.float32)
    _check(_model(spelled, w_scale=1e3), {"x": x * 100}, "GeluTanh")
    _check(_model(spelled, w_scale=1e3), {"x": x * 1e16}, "GeluTanh")  # |pre-activation| ~1e20: x^3 is inf
    xi = x.copy()
    xi[0, 0, 0], xi[1, 1, 1], xi[1, 2, 3] = np.inf, -np.inf, np.nan
    _check(_model(spelled), {"x": xi}, "GeluTanh")
    _check(_model(spelled, residual=True), {"x": x, "r": RNG.standard_normal((2, 3, N)).astype(np.float32)},
           "GeluTanh")


def test_gelu_tanh_bf16_mode_and_float16_model() -> None:
    x = RNG.standard_normal((2, 3, K)).astype(np.float32)
    _check(_model(False), {"x": x}, "GeluTanh", tol=5e-2, precision_mode="allow_fp32_to_bf16",
           soc_version="Ascend910B2")
    _check(_model(True, dtype=np.float16), {"x": x.astype(np.float16)}, None, tol=2e-2)
