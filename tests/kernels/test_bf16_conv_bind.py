"""The static binder of bf16 FusedConv nodes (``kernels/bf16_conv.py``): the same outputs, bit for bit
and NaN for NaN, as the generic kernel (the golden: the same compile with the binder off), on finite
inputs and on inputs with inf / NaN (the NaN guard's unfused paths), and it is the kernel bound."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import bf16_conv
from pycann.kernels.providers import onednn_bf16

pytestmark = pytest.mark.skipif(not onednn_bf16.native(), reason="needs a bf16 CPU (avx512_bf16 / amx_bf16) and libdnnl")

RNG = np.random.default_rng(47)
OPTS = {"precision_mode": "allow_fp32_to_bf16", "soc_version": "Ascend910B2"}


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def _net() -> onnx.ModelProto:
    """A 3-channel stem + ReLU, a residual block (conv + add + ReLU), a HardSwish conv, a plain conv."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "r0"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"]),
             helper.make_node("HardSwish", ["c2"], ["h2"]),
             helper.make_node("Conv", ["h2", "w3", "b3"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w0": _w(16, 3, 7, 7), "b0": _w(16), "w1": _w(16, 16, 3, 3), "b1": _w(16), "w2": _w(32, 16, 1, 1),
             "w3": _w(8, 32, 3, 3), "b3": _w(8)}
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _models(monkeypatch: pytest.MonkeyPatch) -> tuple[LoadedModel, LoadedModel, list[str]]:
    m = _net()
    bound: list[str] = []
    real = bf16_conv.bind

    def spy(*a: Any) -> Any:
        k = real(*a)
        if k is not None:
            bound.append(k.impl)
        return k

    with monkeypatch.context() as mp:
        mp.setattr(bf16_conv, "bind", spy)
        fast = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
        fast.run([np.zeros((1, 3, 64, 64), np.float32)])
    with monkeypatch.context() as mp:
        mp.setattr(bf16_conv, "bind", lambda *a: None)
        generic = LoadedModel.from_compiled(compile_model(m, CompileOptions(**OPTS)))
        generic.run([np.zeros((1, 3, 64, 64), np.float32)])
    return fast, generic, bound


@pytest.mark.parametrize("bad", [None, np.inf, -np.inf, np.nan])
def test_bound_bf16_convs_give_the_generic_kernels_outputs(monkeypatch: pytest.MonkeyPatch, bad: float | None) -> None:
    fast, generic, bound = _models(monkeypatch)
    assert bound and set(bound) == {"onednn:bf16_conv"}, bound
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((1, 3, 64, 64)).astype(np.float32)
        if bad is not None:
            x[0, 1, 20 + seed, 30] = bad
        y_fast, y_generic = fast.run([x])[0], generic.run([x])[0]
        np.testing.assert_array_equal(np.isnan(y_fast), np.isnan(y_generic))
        ok = ~np.isnan(y_fast)
        assert np.array_equal(y_fast[ok], y_generic[ok])
