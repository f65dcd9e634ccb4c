"""oneDNN int8 primitives through the C API (providers/onednn_int8.py) and the int8 chains GE builds
with them (fuse_qdq_chain: fused requantisation, residual Add in the epilogue). Goldens: numpy's
float conv / matmul on the dequantised values, and ONNX Runtime running the QDQ model unoptimised.

Tolerances: the int32 accumulation is exact (7-bit activations here, so also without VNNI); the float
epilogue rounds in its own order (float32 ulps). Requantised (uint8) outputs may differ from
QuantizeLinear by 1 LSB, and only where the float value lies within rounding of a half-way point:
oneDNN multiplies by 1 / scale where QuantizeLinear divides (the QDQ reference semantics otherwise)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import onednn_int8 as oi
from pycann.ops.quant_conv import quantize_activation

pytestmark = pytest.mark.skipif(not oi.available(), reason="oneDNN v3 int8 primitives not available")
RNG = np.random.default_rng(23)


def _conv_ref(xq: np.ndarray, s: float, zp: int, w: np.ndarray, ws: np.ndarray, b: np.ndarray | None,
              stride: int, pads: tuple[int, int, int, int], group: int) -> np.ndarray:
    """Float conv of the dequantised values in float64 (numpy), NCHW."""
    x = (xq.astype(np.float64) - zp) * s
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    wf = w.astype(np.float64) * ws.reshape(-1, 1, 1, 1)
    m, cg, kh, kw = w.shape
    n, _, hp, wp = x.shape
    ho, wo = (hp - kh) // stride + 1, (wp - kw) // stride + 1
    y = np.zeros((n, m, ho, wo))
    mg = m // group
    for g in range(group):
        xs = x[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
                y[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, wf[g * mg:(g + 1) * mg, :, i, j])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def _lsb_close(got: np.ndarray, want_float: np.ndarray, scale: float, zp: int, lo: int = 0, hi: int = 255) -> None:
    """uint8 ``got`` equals QuantizeLinear(want_float) except by 1 LSB at (near) half-way points."""
    want = quantize_activation(want_float.astype(np.float32), scale, zp, True, lo, hi)
    d = np.abs(got.astype(np.int16) - want.astype(np.int16))
    assert int(d.max()) <= 1
    frac = np.abs(want_float / scale - np.floor(want_float / scale) - 0.5)
    assert np.all(frac[d > 0] < 1e-3), "a 1-LSB difference away from a half-way point"


@pytest.mark.parametrize("stride,pads,group,k", [(1, (1, 1, 1, 1), 1, 3), (2, (0, 1, 1, 0), 1, 3),
                                                 (1, (0, 0, 0, 0), 1, 1), (1, (1, 1, 1, 1), 2, 3)])
def test_qconv_float_and_requantised_outputs(stride: int, pads: tuple[int, int, int, int], group: int, k: int) -> None:
    c, m, hw = 16, 24, 11
    xq = RNG.integers(0, 128, (2, c, hw, hw)).astype(np.uint8)
    w = RNG.integers(-127, 128, (m, c // group, k, k)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, m).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    s, zp = 0.02, 9
    geom = oi.ConvGeom(xq.shape, (stride, stride), pads, (1, 1), group)
    ref = _conv_ref(xq, s, zp, w, ws, b, stride, pads, group)
    y = oi.qconv(xq, s, zp, w, ws, b, geom, oi.Epilogue())
    assert y.dtype == np.float32 and y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    relu = np.maximum(ref, 0)
    ys, yzp = float(np.abs(ref).max() / 200), 3
    yq = oi.qconv(xq, s, zp, w, ws, b, geom, oi.Epilogue(lo=0.0, y_scale=ys, y_zp=yzp))
    assert yq.dtype == np.uint8
    _lsb_close(yq, relu, ys, yzp)


def test_qconv_residual_and_seven_bit_clamp() -> None:
    """act(conv + Z) then requantised with the reader's Clip (<= 127): the clamp is the reader's."""
    xq = RNG.integers(0, 128, (1, 8, 7, 7)).astype(np.uint8)
    w = RNG.integers(-127, 128, (8, 8, 3, 3)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, 8).astype(np.float32)
    z = RNG.standard_normal((1, 8, 7, 7)).astype(np.float32)
    geom = oi.ConvGeom(xq.shape, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    ref = np.maximum(_conv_ref(xq, 0.03, 5, w, ws, None, 1, (1, 1, 1, 1), 1) + z, 0)
    y = oi.qconv(xq, 0.03, 5, w, ws, None, geom, oi.Epilogue(residual=True, lo=0.0), z)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    ys, yzp = float(ref.max() / 180), 2
    yq = oi.qconv(xq, 0.03, 5, w, ws, None, geom,
                  oi.Epilogue(residual=True, lo=0.0, hi=(127 - yzp) * ys, y_scale=ys, y_zp=yzp), z)
    assert int(yq.max()) == 127
    _lsb_close(yq, ref, ys, yzp, 0, 127)


def test_qmatmul_against_numpy() -> None:
    xq = RNG.integers(0, 128, (3, 5, 64)).astype(np.uint8)
    w = RNG.integers(-127, 128, (40, 64)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, 40).astype(np.float32)
    b = RNG.standard_normal(40).astype(np.float32)
    ref = ((xq.astype(np.float64) - 7) * 0.05) @ (w.astype(np.float64) * ws[:, None]).T + b
    y = oi.qmatmul(xq, 0.05, 7, w, ws, b, oi.Epilogue())
    assert y.shape == (3, 5, 40)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    ys = float(np.abs(ref).max() / 120)
    _lsb_close(oi.qmatmul(xq, 0.05, 7, w, ws, b, oi.Epilogue(y_scale=ys, y_zp=128)), ref, ys, 128)


def test_quantize_reorder_within_one_lsb() -> None:
    x = RNG.standard_normal((2, 16, 9, 9)).astype(np.float32) * 3
    x[0, 0, 0, :4] = [0.5 * 0.04, 1.5 * 0.04, -0.5 * 0.04, 1e9]  # half-way points and saturation
    q = oi.quantize(x, 0.04, 100, channels_last=True)
    assert q.dtype == np.uint8 and q.strides == (16 * 81, 1, 9 * 16, 16)
    _lsb_close(q, x, 0.04, 100)


def test_bad_inputs_are_refused() -> None:
    geom = oi.ConvGeom((1, 8, 5, 5), (1, 1), (0, 0, 0, 0), (1, 1), 1)
    w = np.zeros((4, 8, 1, 1), np.int8)
    with pytest.raises(ValueError, match="uint8 NCHW x"):
        oi.qconv(np.zeros((1, 8, 5, 5), np.float32), 1.0, 0, w, np.ones(4, np.float32), None, geom, oi.Epilogue())
    with pytest.raises(ValueError, match="do not match"):
        oi.qconv(np.zeros((1, 8, 5, 5), np.uint8), 1.0, 0, w, np.ones(3, np.float32), None, geom, oi.Epilogue())
    with pytest.raises(ValueError, match="residual"):
        oi.qconv(np.zeros((1, 8, 5, 5), np.uint8), 1.0, 0, w, np.ones(4, np.float32), None, geom,
                 oi.Epilogue(residual=True))


# ------------------------------------------------------------------ a ResNet bottleneck through atc


C = 64


def _block(downsample: bool = False) -> onnx.ModelProto:
    """x -> conv1(3x3) -> Relu -> conv2(3x3) -> Add(x) -> Relu, each conv's input QDQ (AMCT's 7-bit
    activations: a Clip before each QuantizeLinear); with ``downsample`` the Add's other input is a
    third QDQ conv of x (both Add inputs are int8 layers: only one may absorb it)."""
    c, s1, s2 = C, 0.02, 0.015  # 64 x 64 x 9 x 40^2 = 59 M multiply-adds a conv: int8 by int8_choice
    inits, nodes = [], []

    def qdq(src: str, tag: str, s: float, zp: int) -> str:
        inits.extend([numpy_helper.from_array(np.float32(s), f"s{tag}"), numpy_helper.from_array(np.uint8(zp), f"z{tag}"),
                      numpy_helper.from_array(np.float32(-zp * s), f"lo{tag}"),
                      numpy_helper.from_array(np.float32((127 - zp) * s), f"hi{tag}")])
        nodes.extend([helper.make_node("Clip", [src, f"lo{tag}", f"hi{tag}"], [f"c{tag}"]),
                      helper.make_node("QuantizeLinear", [f"c{tag}", f"s{tag}", f"z{tag}"], [f"q{tag}"]),
                      helper.make_node("DequantizeLinear", [f"q{tag}", f"s{tag}", f"z{tag}"], [f"d{tag}"])])
        return f"d{tag}"

    def conv(src: str, tag: str) -> str:
        w = RNG.integers(-127, 128, (c, c, 3, 3)).astype(np.int8)
        ws = RNG.uniform(0.0005, 0.001, c).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"W{tag}"), numpy_helper.from_array(ws, f"ws{tag}"),
                      numpy_helper.from_array(RNG.standard_normal(c).astype(np.float32) * 0.1, f"B{tag}")])
        nodes.extend([helper.make_node("DequantizeLinear", [f"W{tag}", f"ws{tag}"], [f"wd{tag}"], axis=0),
                      helper.make_node("Conv", [src, f"wd{tag}", f"B{tag}"], [f"y{tag}"], pads=[1, 1, 1, 1])])
        return f"y{tag}"

    h = conv(qdq("x", "1", s1, 8), "1")
    nodes.append(helper.make_node("Relu", [h], ["r1"]))
    h = conv(qdq("r1", "2", s2, 0), "2")
    ident = conv(qdq("x", "3", s1, 8), "3") if downsample else "x"
    nodes += [helper.make_node("Add", [h, ident], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 40, 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("downsample", [False, True])
def test_resnet_block_chains_in_uint8_with_the_qdq_values(downsample: bool) -> None:
    import onnxruntime as ort

    m = _block(downsample)
    lines: list[str] = []
    cm = compile_model(m, CompileOptions(op_select_implmode="high_performance",
                                         optypelist_for_implmode="QuantConv"), log=lines.append)
    q = [n for n in cm.graph.nodes if n.op_type == "QuantConv"]
    assert [n.op_type for n in cm.graph.nodes] == ["QuantConv"] * (3 if downsample else 2), lines
    assert q[0].attrs["y_scale"] == pytest.approx(0.015) and q[0].attrs["y_q_max"] == 127  # requantised for conv2
    fused = [n for n in q if len(n.inputs) == 4]
    assert len(fused) == 1 and fused[0].attrs["activation"] == "Relu"  # the residual Add and its Relu, once
    x = RNG.standard_normal((1, C, 40, 40)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = LoadedModel.from_compiled(cm).run([x])[0]
    # a 1-LSB step of an activation moves an output by at most s * sum of one weight column's |w|
    step = (0.02 + 0.015 + 0.02 * downsample) * 127 * 0.001 * 9 * C
    d = np.abs(got - want)
    assert float(d.max()) <= step and (d > 1e-4 * np.abs(want).max()).mean() < 0.05
    exact = compile_model(m, CompileOptions(op_select_implmode="high_precision"))
    np.testing.assert_allclose(LoadedModel.from_compiled(exact).run([x])[0], want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())


def test_relu6_clip_after_an_int8_conv_runs_in_its_epilogue() -> None:
    """Conv -> Clip(0, 6) (MobileNet's last conv before pooling): the Clip is the int8 conv's
    activation, not a standalone op; and a layer kept fp32 writes it back as a Clip."""
    import onnxruntime as ort

    c, s, zp = C, 0.02, 8
    w = RNG.integers(-127, 128, (c, c, 3, 3)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.004, c).astype(np.float32)
    inits = [numpy_helper.from_array(np.float32(s), "s"), numpy_helper.from_array(np.uint8(zp), "z"),
             numpy_helper.from_array(w, "W"), numpy_helper.from_array(ws, "ws"),
             numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("DequantizeLinear", ["W", "ws"], ["wd"], axis=0),
             helper.make_node("Conv", ["d", "wd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    for hw, want_ops in ((40, ["QuantConv"]), (6, ["FusedConv"])):  # 6x6: kept fp32 (too small), Clip fused
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        cm = compile_model(m)
        assert [n.op_type for n in cm.graph.nodes] == want_ops
        # inside the quantisation's range [-0.16, 4.94]: a layer kept fp32 drops only the rounding
        x = RNG.uniform(-0.15, 4.9, (1, c, hw, hw)).astype(np.float32)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        want = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        got = LoadedModel.from_compiled(cm).run([x])[0]
        assert float(got.max()) <= 6.0 and float(got.min()) >= 0.0 and float(want.max()) == 6.0
        # a 1-LSB input step (or the dropped rounding, half a step per input) moves an output by at most
        # s * sum |w| over its receptive field
        d = np.abs(got - want)
        assert float(d.max()) <= s * 127 * 0.004 * 9 * c and (d > 1e-4).mean() < (0.05 if hw == 40 else 1.0)


def test_two_threads_share_a_cached_primitive() -> None:
    """One primitive per weight and shape, re-pointed per call: concurrent callers (a background
    plan build beside the caller's run) get their own results."""
    from concurrent.futures import ThreadPoolExecutor

    w = RNG.integers(-127, 128, (32, 32, 3, 3)).astype(np.int8)
    ws = RNG.uniform(0.002, 0.01, 32).astype(np.float32)
    geom = oi.ConvGeom((1, 32, 20, 20), (1, 1), (1, 1, 1, 1), (1, 1), 1)
    xs = [RNG.integers(0, 128, (1, 32, 20, 20)).astype(np.uint8) for _ in range(8)]
    want = [oi.qconv(x, 0.02, 3, w, ws, None, geom, oi.Epilogue()) for x in xs]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda x: oi.qconv(x, 0.02, 3, w, ws, None, geom, oi.Epilogue()), xs * 25))
    for i, g in enumerate(got):
        np.testing.assert_array_equal(g, want[i % len(xs)])
