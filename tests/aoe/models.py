"""A small conv model for the AOE tests (two convs, a ReLU between: fusions and kernel choices)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_model(c: int = 8, hw: int = 16) -> onnx.ModelProto:
    """x[1, c, hw, hw] -> Conv 3x3 (pad 1) -> Relu -> Conv 1x1 -> y[1, c, hw, hw]."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((c, c, 3, 3)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((c, c, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["h"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, hw, hw])], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def save_conv_model(folder: Path, **kw: int) -> Path:
    path = folder / "conv.onnx"
    onnx.save(conv_model(**kw), path)
    return path
