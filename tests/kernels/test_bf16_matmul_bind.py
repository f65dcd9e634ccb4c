"""The static binder of bf16 FusedMatMul nodes (``kernels/bf16_matmul.py``): the same outputs, bit for
bit and NaN for NaN, as the generic kernel (the golden: the same compile with the binder off), with a
bias, a GELU, a residual and inputs holding inf / NaN; and the nodes it binds."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import bf16_matmul
from pycann.kernels.providers import onednn_bf16

pytestmark = pytest.mark.skipif(not onednn_bf16.native(), reason="needs a bf16 CPU (avx512_bf16 / amx_bf16) and libdnnl")

RNG = np.random.default_rng(53)
OPTS = {"precision_mode": "allow_fp32_to_bf16", "soc_version": "Ascend910B2"}


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)


def _block() -> onnx.ModelProto:
    """x -> MatMul + bias -> Gelu -> MatMul + bias -> + x (a transformer's MLP with its residual) -> MatMul."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Gelu", ["a1"], ["g1"], approximate="tanh"),
             helper.make_node("MatMul", ["g1", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["a2"]),
             helper.make_node("Add", ["a2", "x"], ["r"]), helper.make_node("MatMul", ["r", "w3"], ["y"])]
    inits = {"w1": _w(64, 256), "b1": _w(256), "w2": _w(256, 64), "b2": _w(64), "w3": _w(64, 32)}
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    return m


@pytest.mark.parametrize("bad", [None, np.inf, np.nan])
def test_bound_bf16_matmuls_give_the_generic_kernels_outputs(monkeypatch: pytest.MonkeyPatch, bad: float | None) -> None:
    m = _block()
    bound: list[str] = []
    real = bf16_matmul.bind

    def spy(*a: Any) -> Any:
        k = real(*a)
        bound.append("bound" if k is not None else "generic")
        return k

    with monkeypatch.context() as mp:
        mp.setattr(bf16_matmul, "bind", spy)
        fast = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
        fast.run([np.zeros((1, 128, 64), np.float32)])
    with monkeypatch.context() as mp:
        mp.setattr(bf16_matmul, "bind", lambda *a: None)
        generic = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
    assert bound.count("bound") >= 2, bound  # (the GELU one and the residual one at least)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 128, 64)).astype(np.float32)
        if bad is not None:
            x[0, 7 + seed, 3] = bad
        y_fast, y_generic = fast.run([x])[0], generic.run([x])[0]
        np.testing.assert_array_equal(np.isnan(y_fast), np.isnan(y_generic))
        ok = ~np.isnan(y_fast)
        assert np.array_equal(y_fast[ok], y_generic[ok])
