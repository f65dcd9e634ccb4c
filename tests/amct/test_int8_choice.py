"""Which QDQ layers run int8 and which stay fp32 (issue 22 item 4, GE int8_choice): decisions and
values, never timings. Kept fp32 = the float layer on the dequantised weights, reading the activation
before its QuantizeLinear; ``high_precision`` keeps the QDQ arithmetic everywhere."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes.int8_choice import MIN_MACS_PER_ELEMENT, layer_macs, macs_per_element
from pycann.ge.ir import Node
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import torch_int8

RNG = np.random.default_rng(5)
S, ZP = 0.03, 4


def _conv_model(c: int, m: int, hw: int, group: int = 1, seven_bit: bool = True, k: int = 3,
                wmax: int = 127) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """(QDQ model, its float twin: the dequantised weights, the activation Clip, no QDQ)."""
    w = RNG.integers(-wmax, wmax + 1, (m, c // group, k, k)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, m).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    common = [numpy_helper.from_array(b, "B"), numpy_helper.from_array(np.float32(-ZP * S), "lo"),
              numpy_helper.from_array(np.float32((127 - ZP) * S if seven_bit else 1e4), "hi")]
    conv = dict(pads=[k // 2] * 4, group=group)
    x_in = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])]
    y_out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    q_nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["xc"]),
               helper.make_node("QuantizeLinear", ["xc", "s", "zp"], ["xq"]),
               helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
               helper.make_node("DequantizeLinear", ["W", "ws"], ["wd"], axis=0),
               helper.make_node("Conv", ["xd", "wd", "B"], ["c"], name="conv", **conv),
               helper.make_node("Relu", ["c"], ["y"])]
    q_inits = common + [numpy_helper.from_array(np.float32(S), "s"), numpy_helper.from_array(np.uint8(ZP), "zp"),
                        numpy_helper.from_array(w, "W"), numpy_helper.from_array(ws, "ws")]
    # the float twin keeps the Clip: it may be the model's own activation (ReLU6), so a layer kept
    # fp32 reads the clipped activation
    f_nodes = [q_nodes[0], helper.make_node("Conv", ["xc", "Wf", "B"], ["c"], **conv), q_nodes[-1]]
    f_inits = common + [numpy_helper.from_array(w.astype(np.float32) * ws[:, None, None, None], "Wf")]
    mk = lambda nodes, inits: helper.make_model(helper.make_graph(nodes, "g", x_in, y_out, inits),  # noqa: E731
                                                opset_imports=[helper.make_opsetid("", 13)])
    return mk(q_nodes, q_inits), mk(f_nodes, f_inits)


def _ort(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _compile(m: onnx.ModelProto, mode: str = "high_performance") -> tuple[LoadedModel, list[str], list[str]]:
    lines: list[str] = []
    cm = compile_model(m, CompileOptions(op_select_implmode=mode), log=lines.append)
    return LoadedModel.from_compiled(cm), [n.op_type for n in cm.graph.nodes], lines


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def _close_fast(got: np.ndarray, want: np.ndarray, q: onnx.ModelProto) -> None:
    """The QDQ graph's values under high_performance, where oneDNN quantises the input (x times
    1 / scale where QuantizeLinear divides): an input at a half-way point may land 1 LSB away, which
    moves the outputs reading it (kh * kw * M of them) by at most S * max |dequantised weight| each.
    Such outputs must be few (< 5%: a flipped input in 1,000 touches up to 576 x 64 / 36,864 of them
    here) and within 2 of those steps; all others within float rounding."""
    inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    step = S * float(np.abs(inits["W"].astype(np.float32) * inits["ws"].reshape(-1, 1, 1, 1)).max())
    d = np.abs(got - want)
    off = d > 1e-5 * float(np.abs(want).max()) + 1e-5 * np.abs(want)
    assert off.mean() < 0.05, f"{off.sum()} of {off.size} outputs off"
    assert float(d.max()) <= 2 * step + 1e-5 * float(np.abs(want).max()), (float(d.max()), step)


def test_macs_per_element_by_hand() -> None:
    conv = Node("QuantConv", ["x", "w"], ["y"], {"strides": [2, 2], "group": 1})
    # 3 -> 64, 7x7, stride 2 on 224: 64*3*49*112^2 MACs over 3*224^2 + 64*112^2 elements
    want = 64 * 3 * 49 * 112**2 / (3 * 224**2 + 64 * 112**2)
    assert macs_per_element(conv, (64, 3, 7, 7)) == pytest.approx(want)
    mm = Node("QuantMatMul", ["x", "w"], ["y"], {})
    assert macs_per_element(mm, (3072, 768)) == pytest.approx(768 * 3072 / (768 + 3072))
    assert layer_macs(mm, (1, 128, 768), (3072, 768)) == 128 * 768 * 3072
    assert layer_macs(conv, (1, 3, 224, 224), (64, 3, 7, 7)) == 64 * 3 * 49 * 112**2


def test_dense_conv_runs_int8_with_the_qdq_values() -> None:
    if not torch_int8.usable(seven_bit=True):
        pytest.skip("PyTorch's oneDNN int8 kernels are not available")
    q, _ = _conv_model(64, 64, 24)  # 64 * 576 * 24^2 = 21 M multiply-adds, 288 per element
    lm, ops, lines = _compile(q)
    assert ops == ["QuantConv"], (ops, lines)
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32)
    _close_fast(lm.run([x])[0], _ort(q, x), q)
    exact, _, _ = _compile(q, "high_precision")
    _close(exact.run([x])[0], _ort(q, x))


@pytest.mark.parametrize("c,m,group,hw,why", [(16, 16, 16, 12, "depthwise conv"),
                                              (8, 8, 1, 12, "multiply-adds < 16 M"),
                                              (24, 24, 1, 180, "multiply-adds per activation element < 32")])
def test_memory_bound_conv_is_kept_fp32_and_says_why(c: int, m: int, group: int, hw: int, why: str) -> None:
    q, f = _conv_model(c, m, hw, group=group, k=1 if group == 1 else 3)
    lm, ops, lines = _compile(q)
    assert "QuantConv" not in ops and "QuantizeLinear" not in ops, ops
    assert any("QuantizedConvFusion" in ln and "conv: kept fp32" in ln and why in ln for ln in lines), lines
    x = RNG.standard_normal((1, c, hw, hw)).astype(np.float32)
    _close(lm.run([x])[0], _ort(f, x))  # the float layer on the dequantised weights
    exact, ops_hp, _ = _compile(q, "high_precision")
    assert ops_hp.count("QuantConv") == 1
    _close(exact.run([x])[0], _ort(q, x))


def test_full_range_conv_is_int8_only_where_exact() -> None:
    q, f = _conv_model(64, 64, 24, seven_bit=False)
    lm, ops, lines = _compile(q)
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32) * 2
    if torch_int8.usable(seven_bit=False):  # VNNI
        assert ops == ["QuantConv"]
        _close_fast(lm.run([x])[0], _ort(q, x), q)
    else:
        assert "QuantConv" not in ops
        assert any("kept fp32 (the int8 kernel is not exact on this CPU" in ln for ln in lines), lines
        _close(lm.run([x])[0], _ort(f, x))


def test_narrow_weights_are_exact_without_vnni() -> None:
    if not torch_int8.usable(seven_bit=True):
        pytest.skip("PyTorch's oneDNN int8 kernels are not available")
    q, _ = _conv_model(64, 64, 24, seven_bit=False, wmax=64)
    lm, ops, _ = _compile(q)
    assert ops == ["QuantConv"], ops
    x = RNG.standard_normal((1, 64, 24, 24)).astype(np.float32) * 2  # full-range uint8 activations
    _close_fast(lm.run([x])[0], _ort(q, x), q)


def test_small_matmul_is_kept_fp32() -> None:
    k, n = 16, 12  # 16 * 12 / 28 = 6.9 multiply-adds per element, K < 256
    assert k * n / (k + n) < MIN_MACS_PER_ELEMENT
    w = RNG.integers(-64, 65, (k, n)).astype(np.int8)  # narrow: exact everywhere, so the size decides
    ws = RNG.uniform(0.002, 0.01, n).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    inits = [numpy_helper.from_array(np.float32(S), "s"), numpy_helper.from_array(np.uint8(ZP), "zp"),
             numpy_helper.from_array(w, "W"), numpy_helper.from_array(ws, "ws"), numpy_helper.from_array(b, "B")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]),
             helper.make_node("DequantizeLinear", ["W", "ws"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["mm"], name="mm"), helper.make_node("Add", ["mm", "B"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    lm, ops, lines = _compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert "QuantMatMul" not in ops and any("mm: kept fp32 (K = 16 < 256" in ln for ln in lines), (ops, lines)
    x = RNG.standard_normal((3, k)).astype(np.float32)
    _close(lm.run([x])[0], x @ (w.astype(np.float32) * ws) + b)


def test_qdq_pairs_around_float_ops_are_bypassed_under_high_performance() -> None:
    c = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(np.float32(S), "s"), numpy_helper.from_array(np.uint8(ZP), "zp"),
             numpy_helper.from_array(c, "c")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "zp"], ["xd"]), helper.make_node("Add", ["xd", "c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    fast, ops, lines = _compile(m)
    assert "QuantizeLinear" not in ops and any("1 QuantizeLinear -> DequantizeLinear pairs" in ln for ln in lines)
    _close(fast.run([x])[0], x + c)  # rounding and saturation dropped (zero point 4: no folded ReLU)
    exact, ops_hp, _ = _compile(m, "high_precision")
    assert "QuantizeLinear" in ops_hp
    _close(exact.run([x])[0], _ort(m, x))


def test_dynamic_image_size_keeps_the_conv_fp32() -> None:
    q, f = _conv_model(64, 64, 24)
    for m in (q, f):
        dims = m.graph.input[0].type.tensor_type.shape.dim
        dims[2].dim_param, dims[3].dim_param = "h", "w"
    lm, ops, lines = _compile(q)
    assert "QuantConv" not in ops and any("conv: kept fp32 (input size not static" in ln for ln in lines), lines
    x = RNG.standard_normal((1, 64, 20, 16)).astype(np.float32)
    _close(lm.run([x])[0], _ort(f, x))
