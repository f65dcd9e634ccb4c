"""LayerNormalization bound to oneDNN on the shape-generic plan (``bind_generic._layer_norm``)
against ONNX Runtime on the edges: axis 0 / 1 / -3, Scale and B of shape [1, D] or the whole
normalised block, no B, epsilon 0 on constant rows (0/0 as ORT gives it), a huge epsilon, inf
inputs, a transposed (non-contiguous) input; float64/float16 models keep the generic kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanBuild, PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.ops.oracle import run_ort

pytestmark = [pytest.mark.usefixtures("default_providers"),
              pytest.mark.skipif(not providers.available("onednn"), reason="binds with libdnnl only")]
RNG = np.random.default_rng(29)
D = 8


def _model(xshape: list[Any], axis: int, sshape: tuple[int, ...], bshape: tuple[int, ...] | None,
           eps: float = 1e-5, dtype: Any = np.float32, perm: list[int] | None = None) -> Any:
    """x -> (Transpose perm | Identity) -> LayerNormalization(axis, eps) with constant Scale (B)."""
    et = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}[dtype]
    inits = [numpy_helper.from_array((RNG.standard_normal(sshape) + 1).astype(dtype), "s")]
    ins = ["t", "s"]
    if bshape is not None:
        inits.append(numpy_helper.from_array(RNG.standard_normal(bshape).astype(dtype), "b"))
        ins.append("b")
    first = helper.make_node("Transpose", ["x"], ["t"], perm=perm) if perm else helper.make_node("Identity", ["x"], ["t"])
    g = helper.make_graph([first, helper.make_node("LayerNormalization", ins, ["y"], axis=axis, epsilon=eps)], "ln",
                          [helper.make_tensor_value_info("x", et, xshape)],
                          [helper.make_tensor_value_info("y", et, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _x(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 3).astype(np.float32)


def _inf(x: np.ndarray) -> np.ndarray:
    x.reshape(-1)[[3, -1]] = [np.inf, -np.inf]
    return x


CASES: dict[str, tuple[Any, list[np.ndarray], str | None]] = {
    "axis0_static": (_model([2, 3, D], 0, (2, 3, D), (2, 3, D)), [_x(2, 3, D)], "onednn:layer_norm"),
    "axis1": (_model(["B", 3, D], 1, (3, D), (3, D)), [_x(2, 3, D), _x(5, 3, D)], "onednn:layer_norm"),
    "axis-3": (_model(["B", 2, 3, D], -3, (2, 3, D), (2, 3, D)), [_x(2, 2, 3, D)], "onednn:layer_norm"),
    "scale_1xD": (_model(["B", 4, D], -1, (1, D), (1, D)), [_x(2, 4, D)], "onednn:layer_norm"),
    "scale_4xD_axis-2": (_model(["B", 4, D], -2, (4, D), (4, D)), [_x(3, 4, D)], "onednn:layer_norm"),
    "scale_1xD_axis-2": (_model(["B", 4, D], -2, (1, D), (1, D)), [_x(3, 4, D)], None),  # broadcast: generic
    "no_bias": (_model(["B", 4, D], -1, (D,), None), [_x(2, 4, D)], "onednn:layer_norm"),
    "eps0_constant_rows": (_model(["B", 4, D], -1, (D,), (D,), eps=0.0),
                           [np.full((2, 4, D), 5, np.float32)], "onednn:layer_norm"),
    "eps_huge": (_model(["B", 4, D], -1, (D,), (D,), eps=1e6), [_x(2, 4, D)], "onednn:layer_norm"),
    "inf": (_model(["B", 4, D], -1, (D,), (D,)), [_inf(_x(2, 4, D))], "onednn:layer_norm"),
    "transposed": (_model([D, "B", 4], -2, (4, D), (4, D), perm=[1, 2, 0]), [_x(D, 2, 4), _x(D, 3, 4)],
                   "onednn:layer_norm"),
    "float64": (_model(["B", 4, D], -1, (D,), (D,), dtype=np.float64), [_x(2, 4, D).astype(np.float64)], None),
    "float16": (_model(["B", 4, D], -1, (D,), (D,), dtype=np.float16), [_x(2, 4, D).astype(np.float16)], None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_layer_norm_edges_vs_onnxruntime(case: str) -> None:
    m, xs, impl = CASES[case]
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                                 build=PlanBuild.INLINE))
    (step,) = [st for st in lm.executor.generic_plan().steps if st.node.op_type == "LayerNormalization"]
    assert (step.bound.impl if step.bound is not None else None) == impl
    tol = 2e-3 if xs[0].dtype == np.float16 else 1e-4
    for x in xs:
        got, want = lm.run([x])[0], run_ort(m, {"x": x})[0]
        assert got.dtype == want.dtype and np.array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
