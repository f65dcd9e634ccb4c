"""INT8 convolutions (issue 22 item 2), compiled with ``high_precision``: QuantizedConvFusion turns QDQ convs into pycann.QuantConv;
its reference kernel equals the unfused QDQ graph (ONNX Runtime, unoptimised), and its int8
kernel equals the reference where it is taken (VNNI, or 7-bit activations)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import torch_int8
from pycann.kernels.quant import int8_eligible
from pycann.kernels.quant import k_quant_conv as _k_quant_conv
from pycann.ops.quant_conv import _reference, quantize_activation

RNG = np.random.default_rng(11)
# every fused layer on the QDQ arithmetic (the default keeps small layers fp32: test_int8_choice.py)
EXACT = CompileOptions(op_select_implmode="high_precision")


def _qdq_conv(m=8, c=4, zp=10, relu=True, seven_bit=False, bias="int32", w_axis=0, per_tensor_w=False,
              dq_scale_differs=False, wzp=0) -> tuple[onnx.ModelProto, float]:
    s = 0.02
    w = RNG.integers(-127, 128, (m, c, 3, 3)).astype(np.int8)
    ws = np.float32([0.01]) if per_tensor_w else RNG.uniform(0.002, 0.01, m).astype(np.float32)
    inits = [numpy_helper.from_array(np.float32(s), "s"), numpy_helper.from_array(np.uint8(zp), "zp"),
             numpy_helper.from_array(np.float32(s * 2), "s2"),
             numpy_helper.from_array(w, "W"), numpy_helper.from_array(ws.reshape(-1) if not per_tensor_w else np.float32(0.01), "ws"),
             numpy_helper.from_array(np.full(m, wzp, np.int8) if not per_tensor_w else np.int8(wzp), "wzp")]
    nodes = []
    x = "x"
    if seven_bit:
        inits += [numpy_helper.from_array(np.float32(-zp * s), "lo"), numpy_helper.from_array(np.float32((127 - zp) * s), "hi")]
        nodes.append(helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]))
        x = "xc"
    nodes += [helper.make_node("QuantizeLinear", [x, "s", "zp"], ["xq"]),
              helper.make_node("DequantizeLinear", ["xq", "s2" if dq_scale_differs else "s", "zp"], ["xd"]),
              helper.make_node("DequantizeLinear", ["W", "ws", "wzp"], ["wd"], axis=w_axis)]
    conv_in = ["xd", "wd"]
    if bias == "int32":
        inits += [numpy_helper.from_array(RNG.integers(-5000, 5000, m).astype(np.int32), "bi"),
                  numpy_helper.from_array((ws * s).astype(np.float32).reshape(-1) if not per_tensor_w
                                          else np.full(m, 0.01 * s, np.float32), "bs")]
        nodes.append(helper.make_node("DequantizeLinear", ["bi", "bs"], ["bd"], axis=0))
        conv_in.append("bd")
    elif bias == "float":
        inits.append(numpy_helper.from_array(RNG.standard_normal(m).astype(np.float32), "bf"))
        conv_in.append("bf")
    nodes.append(helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]))
    out = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        out = "y"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 9, 9])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), s


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("kw", [{}, {"relu": False}, {"bias": "float"}, {"bias": "none"}, {"per_tensor_w": True},
                                {"seven_bit": True}, {"zp": 0}])
def test_qdq_conv_becomes_quantconv_with_the_qdq_graphs_values(kw: dict) -> None:
    m, _ = _qdq_conv(**kw)
    cm = compile_model(m, EXACT)
    ops = [n.op_type for n in cm.graph.nodes]
    assert ops.count("QuantConv") == 1 and "Conv" not in ops and ("Relu" not in ops), ops
    q = next(n for n in cm.graph.nodes if n.op_type == "QuantConv")
    assert q.attrs["seven_bit"] == int(bool(kw.get("seven_bit"))) and q.attrs["activation"] == ("" if kw.get("relu") is False else "Relu")
    x = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32) * 2
    got = LoadedModel.from_compiled(cm).run([x])[0]
    np.testing.assert_allclose(got, _ort(m, x), rtol=1e-5, atol=1e-5 * float(np.abs(got).max()))


@pytest.mark.parametrize("kw,why", [({"dq_scale_differs": True}, "different scales"),
                                    ({"wzp": 3}, "zero point is not a constant 0")])
def test_non_matching_qdq_stays_float_and_says_why(kw: dict, why: str) -> None:
    m, _ = _qdq_conv(**kw)
    lines: list[str] = []
    cm = compile_model(m, EXACT, log=lines.append)
    assert "QuantConv" not in [n.op_type for n in cm.graph.nodes]
    assert any("QuantizedConvFusion" in ln and why in ln for ln in lines), lines
    x = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(LoadedModel.from_compiled(cm).run([x])[0], _ort(m, x), rtol=1e-5, atol=1e-5)


def _attrs(s: float, zp: int, ws: list[float], g: int = 1, stride: int = 1, seven: int = 1) -> dict:
    return dict(x_scale=s, x_zero_point=zp, x_unsigned=1, w_scale=ws, activation="Relu", seven_bit=seven,
                strides=[stride, stride], pads=[1, 1, 1, 1], dilations=[1, 1], group=g, auto_pad="NOTSET", kernel_shape=[])


@pytest.mark.parametrize("c,h,m,g,zp,stride", [(16, 12, 32, 1, 7, 1), (32, 9, 32, 2, 0, 2), (8, 5, 8, 8, 3, 1)])
def test_int8_kernel_equals_the_reference(c: int, h: int, m: int, g: int, zp: int, stride: int) -> None:
    if not torch_int8.usable(seven_bit=True):
        pytest.skip("PyTorch's oneDNN int8 kernels are not available")
    x = RNG.standard_normal((1, c, h, h)).astype(np.float32)
    w = RNG.integers(-127, 128, (m, c // g, 3, 3)).astype(np.int8)
    b = RNG.standard_normal(m).astype(np.float32)
    s = float((x.max() - x.min()) / 127)
    attrs = _attrs(s, zp, RNG.uniform(0.001, 0.01, m).astype(np.float32).tolist(), g, stride)
    xc = np.clip(x, -zp * s, (127 - zp) * s)
    assert int8_eligible(xc.shape, attrs)
    ref = _reference(quantize_activation(xc, s, zp, True), [xc, w, b], attrs)
    got = _k_quant_conv([xc, w, b], attrs)[0]
    assert got.shape == ref.shape and np.moveaxis(got, 1, -1).flags.c_contiguous  # NHWC memory, NCHW view
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-6 * float(np.abs(ref).max()))


def test_full_range_activations_use_int8_only_with_vnni() -> None:
    attrs = _attrs(0.1, 0, [0.01] * 4, seven=0)
    assert int8_eligible((1, 4, 8, 8), attrs) == (torch_int8.usable(False) and torch_int8.cpu_has_vnni())
    assert not int8_eligible((1, 4, 8), attrs)  # 1-D convs stay on the reference
    assert not int8_eligible((1, 4, 8, 8), {**attrs, "x_unsigned": 0})


def test_int8_kernel_checks_operands() -> None:
    if not torch_int8.usable(seven_bit=True):
        pytest.skip("PyTorch's oneDNN int8 kernels are not available")
    xq = np.zeros((1, 4, 5, 5), np.uint8)
    w = np.zeros((8, 4, 3, 3), np.int8)
    with pytest.raises(ValueError, match="w_scale"):
        torch_int8.qconv2d(xq, 0.1, 0, w, np.ones(4, np.float32), None, [1, 1], [1, 1], [1, 1], 1, False)
    with pytest.raises(ValueError, match="bias"):
        torch_int8.qconv2d(xq, 0.1, 0, w, np.ones(8, np.float32), np.ones(3, np.float32), [1, 1], [1, 1], [1, 1], 1, False)
    with pytest.raises(ValueError, match="channels"):
        torch_int8.qconv2d(xq, 0.1, 0, np.zeros((8, 3, 3, 3), np.int8), np.ones(8, np.float32), None,
                           [1, 1], [1, 1], [1, 1], 1, False)


def test_quantconv_shape_inference_refuses_bad_operands() -> None:
    from pycann.errors import ShapeError

    m, _ = _qdq_conv()
    cm = compile_model(m, EXACT)
    q = next(n for n in cm.graph.nodes if n.op_type == "QuantConv")
    from pycann.dtypes import TensorDesc
    from pycann.ops.opdef import InferContext
    from pycann.ops.registry import lookup

    op = lookup("QuantConv", "pycann")
    attrs = op.with_defaults({**q.attrs, "w_scale": [0.1, 0.2]})
    ctx = InferContext("n", "QuantConv", attrs, [TensorDesc(1, (1, 4, 9, 9)), TensorDesc(3, (8, 4, 3, 3)), None], [None] * 3)
    with pytest.raises(ShapeError, match="w_scale has 2 values for 8"):
        op.infer(ctx)


def _qdq_mm(kind: str, seven_bit: bool, relu: bool = True) -> onnx.ModelProto:
    k, n, s, zp = 16, 12, 0.03, 5
    w = RNG.integers(-127, 128, (n, k) if kind == "gemm_t" else (k, n)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, n).astype(np.float32)
    inits = [numpy_helper.from_array(np.float32(s), "s"), numpy_helper.from_array(np.uint8(zp), "zp"),
             numpy_helper.from_array(w, "W"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "B")]
    nodes, x = [], "x"
    if seven_bit:
        inits += [numpy_helper.from_array(np.float32(-zp * s), "lo"), numpy_helper.from_array(np.float32((127 - zp) * s), "hi")]
        nodes.append(helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]))
        x = "xc"
    nodes += [helper.make_node("QuantizeLinear", [x, "s", "zp"], ["xq"]),
              helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
              helper.make_node("DequantizeLinear", ["W", "ws"], ["wd"], axis=0 if kind == "gemm_t" else 1)]
    if kind == "matmul":
        nodes += [helper.make_node("MatMul", ["xd", "wd"], ["mm"]), helper.make_node("Add", ["mm", "B"], ["c"])]
    else:
        nodes.append(helper.make_node("Gemm", ["xd", "wd", "B"], ["c"], transB=int(kind == "gemm_t")))
    out = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        out = "y"
    shape = [2, 3, k] if kind == "matmul" else [6, k]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("kind", ["matmul", "gemm", "gemm_t"])
@pytest.mark.parametrize("seven_bit", [False, True])
def test_qdq_matmul_and_gemm_become_quantmatmul(kind: str, seven_bit: bool) -> None:
    m = _qdq_mm(kind, seven_bit)
    cm = compile_model(m, EXACT)
    ops = [n.op_type for n in cm.graph.nodes]
    assert ops == ["QuantMatMul"], ops
    q = cm.graph.nodes[0]
    assert q.attrs["seven_bit"] == int(seven_bit) and q.attrs["activation"] == "Relu"
    x = RNG.standard_normal((2, 3, 16) if kind == "matmul" else (6, 16)).astype(np.float32)
    got = LoadedModel.from_compiled(cm).run([x])[0]
    np.testing.assert_allclose(got, _ort(m, x), rtol=1e-5, atol=1e-5 * float(np.abs(got).max()))


def test_activation_times_activation_matmul_stays_float() -> None:
    inits = [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(3), "zp")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]), helper.make_node("MatMul", ["xd", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                                       helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    cm = compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert "QuantMatMul" not in [n.op_type for n in cm.graph.nodes]
