"""QuantizeLinear, DequantizeLinear, ConvInteger, QLinearConv against ONNX Runtime (numpy golden
where ORT lacks the case: sub-byte / float4 types, per-channel ConvInteger zero points)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pycann.dtypes import from_numpy
from pycann.errors import ShapeError
from tests.ops.oracle import check_op, run_ort, run_pycann_op, single_node_model

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("t", [np.uint8, np.int8, np.int16, np.uint16])
def test_quantize_granularities(t: type) -> None:
    x = (RNG.standard_normal((2, 3, 5)) * 100).astype(np.float32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    check_op("QuantizeLinear", [x, np.array(0.7, np.float32), np.array(3, t)], opset=21)
    scale = np.array([0.7, 1.3, 2.0], np.float32)
    check_op("QuantizeLinear", [x, scale, np.array([3, 0, 1], t)], {"axis": 1}, opset=21)
    check_op("QuantizeLinear", [x, scale, np.array([3, 0, 1], t)], {"axis": -2}, opset=21)
    bs = RNG.uniform(0.5, 2, (2, 3, 3)).astype(np.float32)  # 5 = 2 + 2 + 1: short last block
    check_op("QuantizeLinear", [x, bs, np.ones((2, 3, 3), t)], {"axis": 2, "block_size": 2}, opset=21)


def test_quantize_defaults_and_output_dtype() -> None:
    x = np.array([[-3.0, 0.0, 1.2, 700.0]], np.float32)
    check_op("QuantizeLinear", [x, np.array(2.0, np.float32)], opset=13)  # uint8 by default
    check_op("QuantizeLinear", [x, np.array(2.0, np.float32)], {"output_dtype": 3}, opset=21)
    check_op("QuantizeLinear", [x.astype(np.float16), np.array(0.5, np.float16), np.array(1, np.int8)], opset=21)
    check_op("QuantizeLinear", [np.zeros((0, 4), np.float32), np.array(2.0, np.float32)], opset=13)


@pytest.mark.parametrize("t", [np.int8, np.uint8, np.int16, np.uint16])
@pytest.mark.parametrize("zp", [0, 3])
def test_quantize_nan_saturates_low_like_ort(t: type, zp: int) -> None:
    # ORT maps NaN to the low end of the range whatever the zero point (int8 -128, uint8 0); inf
    # saturates. 64 elements reach ORT's vectorised path as well as its scalar tail.
    x = np.tile(np.array([np.nan, np.inf, -np.inf, 1.0, -7.0, np.nan, 2.5, 0.0], np.float32), 8)
    outs = check_op("QuantizeLinear", [x, np.array(0.5, np.float32), np.array(zp, t)], opset=21)
    assert int(outs[0][0]) == np.iinfo(t).min
    check_op("QuantizeLinear", [x.astype(np.float16), np.array(0.5, np.float16), np.array(zp, t)], opset=21)


def test_quantize_nan_sub_byte() -> None:
    # ORT (QuantizeLinear -> DequantizeLinear, since it cannot return int4 to Python): NaN -> -8
    # for int4, 0 for uint4, whatever the zero point; same rule for the 2-bit types.
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    s = np.array(0.5, np.float32)
    for t, want in [(ml_dtypes.int4, [-8, 7, -8, 3]), (ml_dtypes.uint4, [0, 15, 0, 3]),
                    (ml_dtypes.int2, [-2, 1, -2, 1]), (ml_dtypes.uint2, [0, 3, 0, 3])]:
        check_op("QuantizeLinear", [x, s, np.ones((), t)], opset=21, expected=[np.array(want).astype(t)])


@pytest.mark.parametrize("unsigned", [True, False])
def test_fused_quantize_activation_nan_like_ort_clip_then_quantize(unsigned: bool) -> None:
    # An int8 layer's quantisation with an absorbed Clip (q_min / q_max) must give ORT's
    # Clip -> QuantizeLinear: ORT's Clip passes NaN on, so NaN lands on the type's low end, not q_min.
    from onnx import TensorProto, helper

    from pycann.ops.quant_conv import quantize_activation

    t = np.uint8 if unsigned else np.int8
    x = np.tile(np.array([np.nan, 1.0, -1.0, 7.0], np.float32), 16)
    inits = [helper.make_tensor("lo", TensorProto.FLOAT, [], [0.5]), helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0]),
             helper.make_tensor("s", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("z", int(from_numpy(np.dtype(t))), [], [-3])
             if not unsigned else helper.make_tensor("z", TensorProto.UINT8, [], [3])]
    nodes = [helper.make_node("Clip", ["x", "lo", "hi"], ["c"]), helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                          [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    want = run_ort(model, {"x": x})[0]
    zp = 3 if unsigned else -3
    got = quantize_activation(x, 0.1, zp, unsigned, q_min=5 + zp, q_max=60 + zp)
    np.testing.assert_array_equal(got, want)
    assert int(got[0]) == np.iinfo(t).min


_F8_X = np.array([0.0, 1.0, -3.3, 1e5, -1e6, np.inf, np.nan], np.float32)


def _check_float8(t: type, saturate: int, want: np.ndarray) -> None:
    inputs = [_F8_X, np.array(2.0, np.float32), np.zeros((), t)]
    (got,), (desc,) = run_pycann_op("QuantizeLinear", inputs, {"saturate": saturate}, 1, 21)
    assert got.dtype == want.dtype and desc.shape == want.shape
    # NaN compares unequal to itself: compare NaN-ness, then the other values bit for bit.
    nan = np.isnan(want.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), nan)
    np.testing.assert_array_equal(got.view(np.uint8)[~nan], want.view(np.uint8)[~nan])


@pytest.mark.parametrize("saturate", [1, 0])
def test_quantize_float8_e4m3fn(saturate: int) -> None:
    # ORT's Python API takes and returns float8 tensors as raw bytes: zero point as an
    # initializer, the result viewed back as float8.
    inputs = [_F8_X, np.array(2.0, np.float32), np.zeros((), ml_dtypes.float8_e4m3fn)]
    model, feeds = single_node_model("QuantizeLinear", inputs, {"saturate": saturate}, 1, 21, const_inputs=(2,))
    _check_float8(ml_dtypes.float8_e4m3fn, saturate, np.asarray(run_ort(model, feeds)[0]).view(ml_dtypes.float8_e4m3fn))


def test_quantize_float8_e5m2() -> None:
    # ORT cannot return float8e5m2 to Python: spec values (round to nearest even, max 57344).
    sat = np.array([0, 0.5, -1.75, 49152, -57344, 57344, np.nan], np.float32)
    _check_float8(ml_dtypes.float8_e5m2, 1, sat.astype(ml_dtypes.float8_e5m2))
    nosat = np.array([0, 0.5, -1.75, 49152, -np.inf, np.inf, np.nan], np.float32)
    _check_float8(ml_dtypes.float8_e5m2, 0, nosat.astype(ml_dtypes.float8_e5m2))


def test_quantize_sub_byte_numpy_golden() -> None:
    x = np.array([[0.0, 2.5, 4.8, 8.6], [-30.0, -20.0, 6.0, 9.0]], np.float32)
    s = np.array([2.0, 3.0], np.float32)
    want = np.array([[1, 2, 3, 5], [-8, -6, 3, 4]]).astype(ml_dtypes.int4)
    check_op("QuantizeLinear", [x, s, np.ones(2, ml_dtypes.int4)], {"axis": 0}, expected=[want])
    want = np.array([[0, 1, 2, 3], [0, 0, 2, 3]]).astype(ml_dtypes.uint2)
    check_op("QuantizeLinear", [x, s, np.zeros(2, ml_dtypes.uint2)], {"axis": 0}, expected=[want])
    want = np.array([[0, 1.0, 2.0, 4.0], [-6.0, -6.0, 2.0, 3.0]]).astype(ml_dtypes.float4_e2m1fn)
    check_op("QuantizeLinear", [x, s, np.zeros(2, ml_dtypes.float4_e2m1fn)], {"axis": 0}, expected=[want])


def test_quantize_precision_attribute() -> None:
    x = np.array([1.0, 3.0, 1000.0], np.float32)
    s = np.array(3.0, np.float32)
    want = np.rint(x.astype(np.float16) / s.astype(np.float16)).astype(np.int16)
    check_op("QuantizeLinear", [x, s, np.array(0, np.int16)], {"precision": 10}, expected=[want])


@pytest.mark.parametrize("t", [np.uint8, np.int8, np.int16, np.uint16, np.int32])
def test_dequantize(t: type) -> None:
    q = RNG.integers(0, 100, (2, 3, 4)).astype(t)
    if t is np.int32:
        check_op("DequantizeLinear", [q, np.array(0.25, np.float32)], opset=21)
        return
    check_op("DequantizeLinear", [q, np.array(0.25, np.float32), np.array(7, t)], opset=21)
    check_op("DequantizeLinear", [q, np.array([0.7, 1.3, 2.0], np.float32), np.array([3, 0, 1], t)],
             {"axis": 1}, opset=21)
    bs = RNG.uniform(0.5, 2, (2, 3, 2)).astype(np.float32)
    check_op("DequantizeLinear", [q, bs, np.full((2, 3, 2), 5, t)], {"axis": -1, "block_size": 2}, opset=21)


def test_dequantize_narrow_types_numpy_golden() -> None:
    q = np.array([0, 1, 7, -4, -8]).astype(ml_dtypes.int4)
    want = (np.array([0, 1, 7, -4, -8], np.float32) - 1) * 2
    check_op("DequantizeLinear", [q, np.array(2.0, np.float32), np.ones((1,), ml_dtypes.int4)], expected=[want])
    f8 = np.array([0, 0.5, 448, -104]).astype(ml_dtypes.float8_e4m3fn)
    check_op("DequantizeLinear", [f8, np.array(2.0, np.float16)],
             expected=[np.array([0, 1, 896, -208], np.float16)])
    e8 = np.array(4.0).astype(ml_dtypes.float8_e8m0fnu)
    check_op("DequantizeLinear", [np.array([1, 2], np.uint8), e8], {"output_dtype": 1},
             expected=[np.array([4.0, 8.0], np.float32)])


def test_quant_infer_errors() -> None:
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(ShapeError, match="y_scale"):
        run_pycann_op("QuantizeLinear", [x, np.ones(3, np.float32)], {"axis": 1}, 1, 21)
    with pytest.raises(ShapeError, match="block_size"):
        run_pycann_op("QuantizeLinear", [x, np.ones((2, 3), np.float32)], {"axis": 1, "block_size": 2}, 1, 21)
    with pytest.raises(ShapeError, match="output_dtype"):
        run_pycann_op("QuantizeLinear", [x, np.ones((), np.float32), np.zeros((), np.int8)],
                      {"output_dtype": 2}, 1, 21)
    with pytest.raises(ShapeError, match="x_zero_point"):
        run_pycann_op("DequantizeLinear", [np.zeros(3, np.uint8), np.ones((), np.float32), np.zeros((), np.int8)],
                      {}, 1, 21)


# ---------------------------------------------------------------- integer convolutions


def _naive_conv(x: np.ndarray, w: np.ndarray, pads: list[int], strides: list[int]) -> np.ndarray:
    """Direct 2-D conv (group 1) in int64, the golden for per-channel zero points."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    m, _, kh, kw = w.shape
    oh = (xp.shape[2] - kh) // strides[0] + 1
    ow = (xp.shape[3] - kw) // strides[1] + 1
    y = np.zeros((x.shape[0], m, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * strides[0]: i * strides[0] + kh, j * strides[1]: j * strides[1] + kw]
            y[:, :, i, j] = np.einsum("nchw,mchw->nm", patch, w.astype(np.int64))
    return y


def test_conv_integer() -> None:
    x = RNG.integers(0, 255, (2, 3, 7, 6)).astype(np.uint8)
    w = RNG.integers(0, 255, (4, 3, 3, 2)).astype(np.uint8)
    attrs = {"pads": [1, 0, 1, 1], "strides": [2, 1]}
    check_op("ConvInteger", [x, w, np.array(7, np.uint8), np.array(9, np.uint8)], attrs, opset=10)
    check_op("ConvInteger", [x, w], {"auto_pad": "SAME_UPPER"}, opset=10)
    xi = RNG.integers(-128, 127, (1, 4, 6, 6)).astype(np.int8)
    wi = RNG.integers(-128, 127, (4, 2, 3, 3)).astype(np.int8)
    check_op("ConvInteger", [xi, wi, np.array(3, np.int8)], {"group": 2, "dilations": [2, 1]}, opset=10)
    # Per-output-channel weight zero points (ORT only takes per-tensor ones).
    wz = np.array([1, 2, 3, 4], np.uint8)
    want = _naive_conv(x.astype(np.int64) - 7, w.astype(np.int64) - wz.reshape(4, 1, 1, 1), attrs["pads"], [2, 1])
    check_op("ConvInteger", [x, w, np.array(7, np.uint8), wz], attrs, expected=[want.astype(np.int32)])


def test_conv_integer_large_accumulator_is_exact() -> None:
    # K = 64*3*3 taps of 255*255: partial sums exceed 2**24, so the float64 path must be used.
    x = np.full((1, 64, 3, 3), 255, np.uint8)
    w = np.full((1, 64, 3, 3), 255, np.uint8)
    outs, _ = run_pycann_op("ConvInteger", [x, w], {}, 1, 10)
    assert outs[0].reshape(()) == 64 * 9 * 255 * 255


def test_qlinear_conv() -> None:
    # uint8 x int8 runs ORT's u8s8 kernel, whose AVX2 form (no VNNI) adds product pairs in saturating
    # int16 (vpmaddubsw): x < 128 keeps ORT exact on every CPU
    x = RNG.integers(0, 128, (2, 3, 7, 6)).astype(np.uint8)
    w = RNG.integers(-128, 127, (4, 3, 3, 2)).astype(np.int8)
    bias = RNG.integers(-500, 500, 4).astype(np.int32)
    args = [x, np.array(0.02, np.float32), np.array(120, np.uint8), w,
            RNG.uniform(0.001, 0.01, 4).astype(np.float32), np.zeros(4, np.int8),
            np.array(0.5, np.float32), np.array(100, np.uint8), bias]
    check_op("QLinearConv", args, {"pads": [1, 1, 1, 1]}, opset=10)
    args[4] = np.array(0.004, np.float32)  # per-tensor weight scale, no bias
    check_op("QLinearConv", args[:8], {"strides": [2, 2]}, opset=10)
    xi = RNG.integers(-128, 127, (1, 4, 5, 5)).astype(np.int8)
    wi = RNG.integers(-128, 127, (4, 1, 3, 3)).astype(np.int8)
    args = [xi, np.array(0.05, np.float32), np.array(-3, np.int8), wi, np.array(0.01, np.float32),
            np.array(0, np.int8), np.array(0.2, np.float32), np.array(5, np.int8)]
    check_op("QLinearConv", args, {"group": 4, "pads": [1, 1, 1, 1]}, opset=10)  # depthwise
