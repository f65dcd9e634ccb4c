"""Small models shared by the profiler / dump / compare tests."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def tiny_cnn() -> onnx.ModelProto:
    """Conv+Relu (fuses to FusedConv) -> MaxPool -> Relu (stays alone) -> Flatten ->
    MatMul+Add+Sigmoid (fuses to FusedMatMul) -> Mul."""
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "W"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "B"),
        numpy_helper.from_array(rng.standard_normal((128, 10)).astype(np.float32) * 0.1, "W2"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "b2"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Relu", ["p"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "W2"], ["m"], name="mm"),
        helper.make_node("Add", ["m", "b2"], ["a"], name="add"),
        helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
        helper.make_node("Mul", ["s", "s"], ["y"], name="mul"),
    ]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def matmul_chain(n: int = 256, depth: int = 3) -> onnx.ModelProto:
    """``depth`` compute-heavy MatMul + Tanh layers (durations dominate the per-node overhead)."""
    rng = np.random.default_rng(1)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        inits.append(numpy_helper.from_array((rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32), f"W{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"W{i}"], [f"h{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Tanh", [f"h{i}"], [f"t{i}"], name=f"tanh{i}"))
        prev = f"t{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, n])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [n, n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture()
def tiny_model() -> onnx.ModelProto:
    return tiny_cnn()


@pytest.fixture()
def x_tiny() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


@pytest.fixture(autouse=True)
def fixed_peaks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Known machine peaks: no probe in tests, verdicts reproducible."""
    monkeypatch.setenv("PYCANN_PEAK_GFLOPS", "100")
    monkeypatch.setenv("PYCANN_PEAK_GBPS", "20")
    monkeypatch.setattr("pycann.profiler.peak._CACHED", None)
