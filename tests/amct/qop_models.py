"""QOperator test models built with onnx.helper, shared by the AMCT and GE pass tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def qlinear_matmul_model(rng: np.random.Generator, scale_input: bool, k: int = 24, n: int = 8) -> onnx.ModelProto:
    """x (4 x k float) -> QuantizeLinear -> QLinearMatMul (int8 weights |w| <= 64) -> DequantizeLinear.
    ``scale_input``: the output scale ``ys`` is a graph input, which QOperatorToQDQ does not rewrite
    (not a constant); else an initializer (0.4)."""
    w = rng.integers(-64, 65, (k, n)).astype(np.int8)
    inits = [numpy_helper.from_array(np.float32(0.05), "as"), numpy_helper.from_array(np.uint8(120), "az"),
             numpy_helper.from_array(w, "B"), numpy_helper.from_array(rng.uniform(0.01, 0.02, n).astype(np.float32), "bs"),
             numpy_helper.from_array(np.zeros(n, np.int8), "bz"), numpy_helper.from_array(np.uint8(128), "yz"),
             numpy_helper.from_array(np.float32(0.05), "xs"), numpy_helper.from_array(np.uint8(120), "xz")]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, k])]
    if scale_input:
        ins.append(helper.make_tensor_value_info("ys", TensorProto.FLOAT, []))
    else:
        inits.append(numpy_helper.from_array(np.float32(0.4), "ys"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearMatMul", ["xq", "as", "az", "B", "bs", "bz", "ys", "yz"], ["yq"], name="qmm"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
