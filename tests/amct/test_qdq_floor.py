"""Under high_performance GE drops activation rounding around float ops and for layers kept fp32,
but not a QuantizeLinear's saturation at 0: with the zero point at the type's minimum it is a ReLU
the quantiser folded in (ONNX Runtime's QOperator models drop the Relu before such a requantisation),
so the float readers get ``Relu(x)``. Golden: ONNX Runtime on the QDQ model, within the dropped
rounding (half a quantisation step)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel

S = 0.05


def _model(zp: int) -> onnx.ModelProto:
    """x -> Q(S, zp) -> DQ -> Add(c) and a small QDQ conv (kept fp32 by int8_choice) on the same DQ."""
    w = np.random.default_rng(3).integers(-127, 128, (4, 4, 1, 1)).astype(np.int8)
    inits = [numpy_helper.from_array(np.float32(S), "s"), numpy_helper.from_array(np.uint8(zp), "zp"),
             numpy_helper.from_array(np.float32(0.25), "c"), numpy_helper.from_array(w, "W"),
             numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
             helper.make_node("Add", ["xd", "c"], ["y"]),
             helper.make_node("DequantizeLinear", ["W", "ws"], ["wd"], axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["z"], name="conv")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info(v, TensorProto.FLOAT, None) for v in ("y", "z")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_zero_point_saturation_stays_a_relu() -> None:
    x = np.random.default_rng(1).uniform(-3, 3, (1, 4, 6, 6)).astype(np.float32)
    for zp in (0, 60):
        m = _model(zp)
        cm = compile_model(m)
        ops = [n.op_type for n in cm.graph.nodes]
        assert "QuantizeLinear" not in ops and "QuantConv" not in ops, ops  # bypassed, conv kept fp32
        y, z = LoadedModel.from_compiled(cm).run([x])
        wy, wz = _both(m, x)
        np.testing.assert_allclose(y, wy, atol=S / 2 + 1e-6)  # within the dropped rounding
        assert (zp == 0) == bool(np.all(y >= 0.25 - 1e-6))  # the floor is there exactly for zp = 0
        np.testing.assert_allclose(z, wz, atol=4 * 0.01 * 127 * S / 2 + 1e-5)


def _both(m: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
