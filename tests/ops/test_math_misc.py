"""BitCast, CumProd, Det, MaxUnpool, TensorScatter, DeformConv against ONNX Runtime (numpy goldens
where ORT lacks the case)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from pycann.errors import ShapeError
from tests.ops.oracle import check_op, run_pycann_op

RNG = np.random.default_rng(3)


@pytest.mark.parametrize(
    ("x", "to"),
    [
        (np.array([1.0, -2.5, np.inf], np.float32), 6),
        (np.array([[1, -1], [7, 0]], np.int64), 11),
        (np.array([1, 32768, 65535], np.uint16), 10),
        (np.array(3.5, np.float32), 12),
        (np.zeros((0, 3), np.int8), 2),
    ],
)
def test_bitcast(x: np.ndarray, to: int) -> None:
    check_op("BitCast", [x], {"to": to}, opset=26)


def test_bitcast_narrow_and_bool_numpy_golden() -> None:
    check_op("BitCast", [np.array([True, False])], {"to": 2}, opset=26, expected=[np.array([1, 0], np.uint8)])
    check_op("BitCast", [np.array([1, 0, 5], np.uint8)], {"to": 9}, opset=26,
             expected=[np.array([True, False, True])])
    i4 = np.array([-1, 7, -8]).astype(ml_dtypes.int4)
    check_op("BitCast", [i4], {"to": 21}, opset=26, expected=[np.array([15, 7, 8]).astype(ml_dtypes.uint4)])
    with pytest.raises(ShapeError, match="bit widths"):
        run_pycann_op("BitCast", [np.zeros(2, np.float32)], {"to": 7}, 1, 26)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
def test_cumprod(exclusive: int, reverse: int) -> None:
    attrs = {"exclusive": exclusive, "reverse": reverse}
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    check_op("CumProd", [x, np.array(1, np.int64)], attrs, opset=26)
    check_op("CumProd", [x.astype(np.float64), np.array(-1, np.int32)], attrs, opset=26)
    xi = RNG.integers(-3, 4, (4, 3)).astype(np.int32)
    check_op("CumProd", [xi, np.array(0, np.int32)], attrs, opset=26)
    check_op("CumProd", [np.zeros((0, 2), np.int64), np.array(0, np.int64)], attrs, opset=26)


def test_det() -> None:
    check_op("Det", [RNG.standard_normal((4, 4)).astype(np.float32)], opset=11, rtol=1e-4)
    check_op("Det", [RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)], opset=11, rtol=1e-4)
    x64 = RNG.standard_normal((2, 3, 3))
    check_op("Det", [x64], opset=22, expected=[np.linalg.det(x64)])
    check_op("Det", [x64.astype(np.float16)], opset=22,
             expected=[np.linalg.det(x64.astype(np.float16).astype(np.float32)).astype(np.float16)])
    check_op("Det", [np.zeros((0, 2, 2), np.float32)], opset=11)
    with pytest.raises(ShapeError, match="last two dims"):
        run_pycann_op("Det", [np.zeros((2, 3), np.float32)], {}, 1, 22)


def test_max_unpool_inverts_max_pool() -> None:
    x = RNG.standard_normal((2, 3, 6, 8)).astype(np.float32)
    pooled, _ = run_pycann_op("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, 2, 12)
    y, i = pooled
    check_op("MaxUnpool", [y, i], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11)
    # Same output shape given explicitly (a constant, so infer sees the value).
    check_op("MaxUnpool", [y, i, np.array([2, 3, 6, 8], np.int64)], {"kernel_shape": [2, 2], "strides": [2, 2]},
             opset=11, const_inputs=(2,))
    y1, i1 = run_pycann_op("MaxPool", [np.ascontiguousarray(x[:, :, 0, :7])], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, 2, 12)[0]
    check_op("MaxUnpool", [y1, i1], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, opset=11)


def test_max_unpool_larger_output_shape_follows_onnx_reference() -> None:
    # Conformance-suite semantics (test_maxunpool_export_with_output_shape): indices address the
    # default-size result, which lands at the start of the larger output.
    y = np.array([[[[5, 6], [7, 8]]]], np.float32)
    i = np.array([[[[5, 7], [13, 15]]]], np.int64)
    want = np.zeros((1, 1, 5, 5), np.float32)
    want[0, 0, 1, 1], want[0, 0, 1, 3], want[0, 0, 3, 1], want[0, 0, 3, 3] = 5, 6, 7, 8
    check_op("MaxUnpool", [y, i, np.array([1, 1, 5, 5], np.int64)], {"kernel_shape": [2, 2], "strides": [2, 2]},
             opset=22, expected=[want], const_inputs=(2,))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode: str) -> None:
    past = RNG.standard_normal((3, 2, 6, 4)).astype(np.float32)
    upd = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)
    wi = np.array([0, 3, 5 if mode == "circular" else 2], np.int64)
    check_op("TensorScatter", [past, upd, wi], {"mode": mode}, opset=24)
    check_op("TensorScatter", [past, upd], {"mode": mode}, opset=24)
    p3 = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    check_op("TensorScatter", [p3, p3[:, :2], np.array([1, 3], np.int64)], {"mode": mode, "axis": 1}, opset=24)


def test_tensor_scatter_infer_errors() -> None:
    with pytest.raises(ShapeError, match="does not fit"):
        run_pycann_op("TensorScatter", [np.zeros((2, 3, 4), np.float32), np.zeros((2, 3, 5), np.float32)],
                      {}, 1, 24)


@pytest.mark.parametrize(
    "attrs",
    [
        {},
        {"pads": [1, 1, 1, 1]},
        {"strides": [2, 1], "dilations": [1, 2], "pads": [1, 0, 2, 1]},
        {"group": 2, "offset_group": 2},
    ],
)
def test_deform_conv(attrs: dict) -> None:
    n, c, h, w, m, kh, kw = 2, 4, 7, 6, 6, 3, 2
    g, og = attrs.get("group", 1), attrs.get("offset_group", 1)
    x = RNG.standard_normal((n, c, h, w)).astype(np.float32)
    wt = RNG.standard_normal((m, c // g, kh, kw)).astype(np.float32)
    st, dil = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    oh = (h + p[0] + p[2] - (kh - 1) * dil[0] - 1) // st[0] + 1
    ow = (w + p[1] + p[3] - (kw - 1) * dil[1] - 1) // st[1] + 1
    off = (RNG.standard_normal((n, og * kh * kw * 2, oh, ow)) * 1.5).astype(np.float32)
    bias = RNG.standard_normal(m).astype(np.float32)
    mask = RNG.uniform(0, 1, (n, og * kh * kw, oh, ow)).astype(np.float32)
    check_op("DeformConv", [x, wt, off], attrs, opset=19, rtol=1e-4, atol=1e-5)
    check_op("DeformConv", [x, wt, off, bias, mask], attrs, opset=19, rtol=1e-4, atol=1e-5)


def test_deform_conv_zero_offset_is_conv() -> None:
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    w = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
    (want,), _ = run_pycann_op("Conv", [x, w], {"pads": [1, 1, 1, 1]}, 1, 11)
    check_op("DeformConv", [x, w, np.zeros((1, 18, 5, 5), np.float32)], {"pads": [1, 1, 1, 1]},
             opset=22, expected=[want], rtol=1e-5, atol=1e-5)
