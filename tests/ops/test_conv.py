"""Conv / ConvTranspose against ONNX Runtime (tolerance rtol 1e-4, atol 1e-5 for float32)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.nn.conv import conv_algorithm
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op

RTOL, ATOL = 1e-4, 1e-5


def _r(*shape: int, dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(dtype)


CONV_CASES = [
    # (x shape, w shape, attrs, with bias)
    ((2, 3, 9, 8), (4, 3, 3, 3), {}, True),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [1, 2, 0, 1], "strides": [2, 1]}, False),
    ((1, 3, 11, 10), (5, 3, 3, 2), {"dilations": [2, 3], "pads": [2, 1, 2, 1]}, True),
    ((2, 4, 7, 7), (6, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    ((2, 6, 9, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1]}, True),  # depthwise
    ((1, 6, 10, 9), (6, 1, 3, 3), {"group": 6, "pads": [1, 0, 1, 2], "strides": [2, 2]}, False),
    ((3, 8, 5, 7), (4, 8, 1, 1), {}, True),  # 1x1 GEMM
    ((1, 8, 9, 7), (4, 8, 1, 1), {"strides": [2, 3]}, True),  # strided 1x1
    ((2, 8, 5, 5), (6, 4, 1, 1), {"group": 2}, False),  # grouped 1x1
    ((1, 6, 5, 5), (12, 1, 3, 3), {"group": 6}, True),  # channel multiplier 2 (not depthwise path)
    ((2, 3, 12), (4, 3, 3), {"strides": [2], "pads": [1, 1]}, True),  # 1-D
    ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 1]}, True),  # 3-D
    ((1, 3, 9, 8), (4, 3, 3, 3), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
    ((1, 3, 9, 8), (4, 3, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, True),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"auto_pad": "VALID", "strides": [2, 3]}, True),
    ((0, 3, 6, 6), (4, 3, 3, 3), {}, True),  # empty batch
]


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES)
def test_conv_float32(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    inputs = [_r(*xs), _r(*ws, seed=1)]
    if bias:
        inputs.append(_r(ws[0], seed=2))
    check_op("Conv", inputs, attrs, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "xs,ws,attrs,pads",
    [
        ((1, 5, 8, 8), (5, 1, 5, 5), {"group": 5, "dilations": [2, 1], "auto_pad": "SAME_UPPER"}, [4, 2, 4, 2]),
        ((1, 3, 9, 8), (4, 3, 4, 2), {"auto_pad": "SAME_UPPER", "dilations": [2, 2]}, [3, 1, 3, 1]),
        ((1, 3, 9, 8), (4, 3, 2, 2), {"auto_pad": "SAME_LOWER", "dilations": [2, 3], "strides": [2, 1]},
         [1, 2, 1, 1]),
    ],
)
def test_conv_same_with_dilations(xs: tuple, ws: tuple, attrs: dict, pads: list) -> None:
    """ORT rejects SAME auto_pad with dilations; the golden is ORT with the spec's explicit pads."""
    from tests.ops.oracle import run_ort, single_node_model

    x, w = _r(*xs), _r(*ws, seed=1)
    explicit = {k: v for k, v in attrs.items() if k != "auto_pad"} | {"pads": pads}
    want = run_ort(*single_node_model("Conv", [x, w], explicit, 1, 17))
    check_op("Conv", [x, w], attrs, expected=want, rtol=RTOL, atol=ATOL)


def _f64_golden(op: str, inputs: list, attrs: dict) -> list[np.ndarray]:
    """ORT's CPU provider has no double Conv: golden = ORT on float32 copies, widened."""
    from tests.ops.oracle import run_ort, single_node_model

    f32 = [x.astype(np.float32) for x in inputs]
    return [y.astype(np.float64) for y in run_ort(*single_node_model(op, f32, attrs, 1, 17))]


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-4), (np.float16, 2e-2)])
@pytest.mark.parametrize("group", [1, 4])
def test_conv_dtypes(dtype: type, tol: float, group: int) -> None:
    x, w, b = _r(2, 4, 7, 6, dtype=dtype), _r(4, 4 // group, 3, 3, dtype=dtype, seed=3), _r(4, dtype=dtype)
    attrs = {"group": group, "pads": [1, 1, 1, 1]}
    want = _f64_golden("Conv", [x, w, b], attrs) if dtype == np.float64 else None
    check_op("Conv", [x, w, b], attrs, expected=want, rtol=tol, atol=tol)


def test_conv_weights_constant_and_opset_22() -> None:
    x, w = _r(1, 3, 6, 6), _r(2, 3, 3, 3, seed=4)
    check_op("Conv", [x, w], {"strides": [2, 2]}, const_inputs=[1], opset=22, rtol=RTOL, atol=ATOL)
    check_op("Conv", [x, w], {}, opset=7, rtol=RTOL, atol=ATOL)


def test_conv_resnet_like_shapes() -> None:
    """ResNet-50 stem (7x7/2) and a bottleneck 3x3 at 28x28 with realistic channel counts."""
    check_op("Conv", [_r(1, 3, 64, 64), _r(16, 3, 7, 7, seed=5), _r(16)],
             {"strides": [2, 2], "pads": [3, 3, 3, 3]}, rtol=RTOL, atol=ATOL)
    check_op("Conv", [_r(1, 32, 28, 28), _r(32, 32, 3, 3, seed=6) * 0.1, _r(32)],
             {"pads": [1, 1, 1, 1]}, rtol=RTOL, atol=ATOL)


def test_conv_large_map_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """Depthwise on a large map (blocked tap accumulation, several channel blocks, batch 2) and
    im2col processed in batch chunks, both forced with small budgets."""
    from pycann.ops.nn import im2col

    monkeypatch.setattr(im2col, "_DW_BLOCK_BYTES", 3 * 4 * 40 * 40 * 3)
    x, w, b = _r(2, 8, 40, 40), _r(8, 1, 3, 3, seed=1), _r(8, seed=2)
    assert conv_algorithm(x.shape, w.shape, {"group": 8}) == "depthwise"
    check_op("Conv", [x, w, b], {"group": 8, "pads": [1, 1, 1, 1]}, rtol=RTOL, atol=ATOL)
    check_op("Conv", [_r(2, 5, 60, 30), _r(5, 1, 5, 3, seed=3)], {"group": 5, "strides": [1, 2], "pads": [2, 1, 2, 1]},
             rtol=RTOL, atol=ATOL)
    monkeypatch.setattr(im2col, "_COLS_BUDGET", 4 * 3 * 9 * 36 * 2)
    check_op("Conv", [_r(5, 3, 6, 6), _r(4, 3, 3, 3, seed=4), _r(4)], {"pads": [1, 1, 1, 1]}, rtol=RTOL, atol=ATOL)


def test_conv_zero_channels() -> None:
    """C = 0: nothing to multiply, the output is the bias (numpy golden; ORT rejects it)."""
    b = _r(4, seed=2)
    want = np.broadcast_to(b.reshape(1, 4, 1, 1), (2, 4, 3, 3)).copy()
    check_op("Conv", [np.zeros((2, 0, 5, 5), np.float32), np.zeros((4, 0, 3, 3), np.float32), b], {},
             expected=[want])


def test_conv_bfloat16() -> None:
    """bfloat16 (Conv-22) is computed in float32 and rounded once (golden: float32 conv, cast)."""
    import ml_dtypes

    from tests.ops.oracle import run_ort, single_node_model

    bf = ml_dtypes.bfloat16
    x, w = _r(1, 4, 6, 6).astype(bf), _r(4, 2, 3, 3, seed=1).astype(bf)
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    want = run_ort(*single_node_model("Conv", [x.astype(np.float32), w.astype(np.float32)], attrs, 1, 17))
    got = lookup("Conv", "", 22).kernel([x, w], lookup("Conv", "", 22).with_defaults(attrs))[0]
    assert got.dtype == bf
    np.testing.assert_allclose(got.astype(np.float32), want[0], rtol=1e-2, atol=1e-2)


def test_conv_algorithm_choice() -> None:
    assert conv_algorithm((1, 64, 56, 56), (256, 64, 1, 1), {}) == "gemm_1x1"
    assert conv_algorithm((1, 64, 56, 56), (128, 64, 1, 1), {"strides": [2, 2]}) == "gemm_1x1"
    assert conv_algorithm((1, 32, 56, 56), (32, 1, 3, 3), {"group": 32, "pads": [1] * 4}) == "depthwise"
    assert conv_algorithm((1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1] * 4}) == "im2col_gemm"
    assert conv_algorithm((1, 8, 5, 5), (8, 8, 1, 1), {"pads": [1] * 4}) == "im2col_gemm"
    assert conv_algorithm((0, 8, 5, 5), (8, 8, 3, 3), {}) == "empty"


def _infer(op: str, descs: list, attrs: dict, opset: int = 17) -> TensorDesc:
    od = lookup(op, "", opset)
    ctx = InferContext("n", op, od.with_defaults(attrs), descs, [None] * len(descs), opset)
    return od.infer(ctx)[0]


F = int(DType.FLOAT)


def test_conv_infer_symbolic() -> None:
    x = TensorDesc(F, ("N", 3, "H", "W"))
    w = TensorDesc(F, (8, 3, 3, 3))
    assert _infer("Conv", [x, w], {"pads": [1, 1, 1, 1]}).shape == ("N", 8, "H", "W")
    assert _infer("Conv", [x, w], {"auto_pad": "SAME_UPPER"}).shape == ("N", 8, "H", "W")
    assert _infer("Conv", [x, w], {"strides": [2, 2], "pads": [1] * 4}).shape == ("N", 8, None, None)
    assert _infer("Conv", [x, w], {}).shape == ("N", 8, None, None)
    assert _infer("Conv", [TensorDesc(F, (1, 3, 10, 9)), w], {"auto_pad": "SAME_LOWER", "strides": [3, 2]}).shape == (
        1, 8, 4, 5)
    assert _infer("Conv", [TensorDesc(F, None), w], {}).shape == (None, 8, None, None)
    assert _infer("Conv", [TensorDesc(F, None), TensorDesc(F, None)], {}).shape is None
    assert _infer("Conv", [x, TensorDesc(F, (8, 3, "kh", "kw"))], {}).shape == ("N", 8, None, None)


@pytest.mark.parametrize(
    "xs,ws,attrs",
    [
        ((1, 4, 8, 8), (8, 3, 3, 3), {}),  # channel mismatch
        ((1, 4, 8, 8), (6, 1, 3, 3), {"group": 4}),  # M not divisible by group
        ((1, 4, 8, 8), (8, 4, 3, 3), {"pads": [1, 1]}),  # pads length
        ((1, 4, 8, 8), (8, 4, 3, 3), {"strides": [1, 0]}),
        ((1, 4, 2, 2), (8, 4, 3, 3), {}),  # window larger than input
        ((1, 4, 8), (8, 4, 3, 3), {}),  # rank mismatch
        ((1, 4, 8, 8), (8, 4, 3, 3), {"auto_pad": "SAME"}),
    ],
)
def test_conv_infer_errors(xs: tuple, ws: tuple, attrs: dict) -> None:
    with pytest.raises(ShapeError, match="Conv"):
        _infer("Conv", [TensorDesc(F, xs), TensorDesc(F, ws)], attrs)


CT_CASES = [
    ((1, 3, 5, 4), (3, 2, 3, 3), {}, True),
    ((2, 3, 5, 4), (3, 2, 3, 3), {"strides": [2, 3], "pads": [1, 0, 1, 2]}, True),
    ((1, 3, 5, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_padding": [1, 1]}, False),
    ((1, 3, 5, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 9]}, True),
    ((1, 3, 5, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 8], "auto_pad": "SAME_UPPER"}, True),
    ((1, 4, 5, 5), (4, 3, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
    ((1, 4, 5, 5), (4, 1, 3, 3), {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
    ((1, 3, 5, 5), (3, 2, 3, 2), {"dilations": [2, 3], "strides": [1, 2]}, True),
    ((1, 3, 5, 5), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),
    ((1, 3, 5, 5), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, False),
    ((1, 3, 5, 5), (3, 2, 2, 1), {"auto_pad": "SAME_UPPER", "strides": [3, 2]}, False),  # ORT clamps padding
    ((1, 3, 5, 5), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}, True),
    ((2, 8, 6, 6), (8, 4, 2, 2), {"strides": [2, 2]}, True),  # PP-OCR style 2x upsample
    ((1, 8, 6, 6), (8, 4, 1, 1), {}, True),
    ((2, 3, 7), (3, 2, 3), {"strides": [2], "pads": [1, 0], "output_padding": [1]}, True),  # 1-D
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), {"strides": [2, 1, 2]}, True),  # 3-D
    ((0, 3, 5, 5), (3, 2, 3, 3), {}, True),
]


@pytest.mark.parametrize("xs,ws,attrs,bias", CT_CASES)
def test_conv_transpose(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    inputs = [_r(*xs), _r(*ws, seed=1)]
    if bias:
        inputs.append(_r(ws[1] * attrs.get("group", 1), seed=2))
    check_op("ConvTranspose", inputs, attrs, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-4), (np.float16, 2e-2)])
def test_conv_transpose_dtypes(dtype: type, tol: float) -> None:
    x, w, b = _r(1, 4, 4, 5, dtype=dtype), _r(4, 3, 3, 3, dtype=dtype), _r(3, dtype=dtype)
    attrs = {"strides": [2, 2], "pads": [1, 1, 0, 0]}
    want = _f64_golden("ConvTranspose", [x, w, b], attrs) if dtype == np.float64 else None
    check_op("ConvTranspose", [x, w, b], attrs, expected=want, rtol=tol, atol=tol)


def test_conv_transpose_infer() -> None:
    w = TensorDesc(F, (3, 2, 3, 3))
    assert _infer("ConvTranspose", [TensorDesc(F, ("N", 3, 5, "W")), w], {"strides": [2, 2], "group": 1}).shape == (
        "N", 2, 11, None)
    assert _infer("ConvTranspose", [TensorDesc(F, ("N", 3, "H", "W")), w], {"pads": [1, 1, 1, 1]}).shape == (
        "N", 2, "H", "W")
    assert _infer("ConvTranspose", [TensorDesc(F, ("N", 3, "H", "W")), w], {"auto_pad": "SAME_LOWER"}).shape == (
        "N", 2, "H", "W")
    assert _infer("ConvTranspose", [TensorDesc(F, ("N", 3, "H", "W")), w], {"pads": [1, 0, 1, 0]}).shape == (
        "N", 2, "H", None)
    assert _infer("ConvTranspose", [TensorDesc(F, ("N", 3, 5, 6)), w], {"output_shape": [6, 7]}).shape == (
        "N", 2, 6, 7)
    with pytest.raises(ShapeError, match="output_shape"):  # ORT: 9 rows need an input of 7 ("inconsistent")
        _infer("ConvTranspose", [TensorDesc(F, ("N", 3, 5, 6)), w], {"output_shape": [9, 9]})
    assert _infer("ConvTranspose", [TensorDesc(F, (1, 3, 5, 6)), w], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}
                  ).shape == (1, 2, 10, 12)
    with pytest.raises(ShapeError, match="channels"):
        _infer("ConvTranspose", [TensorDesc(F, (1, 4, 5, 6)), w], {})
    with pytest.raises(ShapeError, match="output_shape"):
        _infer("ConvTranspose", [TensorDesc(F, (1, 3, 5, 6)), w], {"output_shape": [1, 2, 3]})


@pytest.mark.parametrize("attrs", [{"strides": [2, 2], "output_padding": [2, 2]}, {"strides": [2, 2], "output_padding": [3, 0]},
                                   {"output_padding": [1, 1]}, {"output_padding": [1, 1], "output_shape": [7, 7]},
                                   {"strides": [2, 2], "auto_pad": "SAME_UPPER", "output_padding": [0, 2]},
                                   {"strides": [2, 2], "dilations": [1, 3], "output_padding": [0, 3]}])
def test_conv_transpose_output_padding_not_below_stride_and_dilation_is_refused(attrs: dict) -> None:
    """output_padding >= max(stride, dilation): the spec says it must be less, ONNX Runtime refuses
    it ("must be less than max(stride, dilation)"), and pycann computed an output with invented
    rows of bias. Now refused where atc infers shapes, naming the node, the attribute and a fix,
    and by the kernel (a model whose attributes skip inference, the single-op API)."""
    from tests.ops.oracle import run_ort, single_node_model

    x, w = _r(1, 2, 4, 4), _r(2, 3, 3, 3, seed=1)
    model, feeds = single_node_model("ConvTranspose", [x, w], attrs, 1, 17, const_inputs=(1,))
    with pytest.raises(Exception, match="output_padding"):  # the golden refuses it
        run_ort(model, feeds)
    with pytest.raises(ShapeError, match=r"node n \(ConvTranspose.*attribute output_padding .* must be >= 0 and less "
                                         r"than max\(stride, dilation\).*Fix: set output_padding\[\d\] to at most"):
        _infer("ConvTranspose", [TensorDesc(F, (1, 2, 4, 4)), TensorDesc(F, (2, 3, 3, 3))], attrs)
    with pytest.raises(ValueError, match="output_padding"):
        od = lookup("ConvTranspose", "", 17)
        od.kernel([x, w], od.with_defaults(attrs))
    from onnx import TensorProto, helper

    from pycann.backend import prepare

    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("out0", TensorProto.FLOAT, None))
    with pytest.raises(ShapeError, match="output_padding"):  # the whole compile (atc's path)
        prepare(model)


@pytest.mark.parametrize("stride,dilation,opad", [(1, 2, 1), (2, 3, 2), (1, 3, 2)])
def test_conv_transpose_output_padding_between_stride_and_dilation_matches_torch(stride: int, dilation: int,
                                                                                   opad: int) -> None:
    """stride <= output_padding < dilation: valid for the spec's "less than the stride/dilation" and
    for PyTorch ("smaller than either stride or dilation"), which computes it; ONNX Runtime passes
    its own max(stride, dilation) check, then refuses it as "inconsistent with input spatial
    dimensions". pycann computes PyTorch's values (golden: torch CPU)."""
    torch = pytest.importorskip("torch")
    x, w, b = _r(1, 2, 4, 5), _r(2, 3, 3, 3, seed=1), _r(3, seed=2)
    attrs = {"strides": [stride, stride], "dilations": [dilation, dilation], "output_padding": [opad, 0],
             "pads": [1, 0, 1, 0]}
    want = torch.nn.functional.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                                stride=stride, padding=(1, 0), output_padding=(opad, 0),
                                                dilation=dilation).numpy()
    check_op("ConvTranspose", [x, w, b], attrs, expected=[want], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES + [((1, 4, 6, 6), (4, 4, 3, 3), {"pads": [1] * 4}, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_conv_out_kernel(xs: tuple, ws: tuple, attrs: dict, bias: bool, dtype: type) -> None:
    """The arena variant writes the same values into a preallocated output."""
    od = lookup("Conv", "", 17)
    full = od.with_defaults(attrs)
    inputs = [_r(*xs, dtype=dtype), _r(*ws, dtype=dtype, seed=1)] + ([_r(ws[0], dtype=dtype, seed=2)] if bias else [])
    want = od.kernel(inputs, full)[0]
    out = np.full(want.shape, np.nan, dtype=want.dtype)
    od.out_kernel(inputs, full, [out])
    np.testing.assert_array_equal(out, want)
