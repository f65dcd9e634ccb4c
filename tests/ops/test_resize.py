"""Resize against ONNX Runtime (ONNX spec Operators.md#Resize)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op, run_pycann_op

E = np.array([], np.float32)
RT, AT = 1e-4, 1e-5
COORDS = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
          "tf_crop_and_resize"]
ROI = np.array([0, 0, 0.1, -0.2, 1, 1, 0.8, 1.3], np.float32)


def _x(shape: tuple[int, ...] = (2, 3, 5, 7), dtype: type = np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.5, 0.6], [1, 1, 1.7, 3.1], [1, 1, 0.34, 1.5]])
def test_scales(coord: str, mode: str, scales: list[float]) -> None:
    roi = ROI if coord == "tf_crop_and_resize" else E
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, "extrapolation_value": -3.0}
    ins = [_x(), roi, np.array(scales, np.float32)]
    check_op("Resize", ins, attrs, opset=19, const_inputs=(1, 2), rtol=RT, atol=AT,
             expected=_reference(ins, attrs, 19) if coord == "align_corners" else None)


def _reference(ins: list, attrs: dict, opset: int) -> list:
    """align_corners with scales: the spec's length_resized is length_original * scale (float);
    ONNX Runtime uses the rounded output length instead, so the ONNX reference is the golden."""
    from onnx.reference import ReferenceEvaluator

    from tests.ops.oracle import single_node_model

    model, feeds = single_node_model("Resize", ins, attrs, 1, opset, (1, 2))
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("coord", COORDS)
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("sizes", [[2, 3, 9, 4], [2, 3, 1, 1], [2, 3, 10, 14], [2, 3, 3, 13]])
def test_nearest_sizes(coord: str, nearest_mode: str, sizes: list[int]) -> None:
    roi = ROI if coord == "tf_crop_and_resize" else E
    attrs = {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest_mode}
    check_op("Resize", [_x(), roi, None, np.array(sizes, np.int64)], attrs, opset=19, const_inputs=(1, 3))


@pytest.mark.parametrize("n,size", [(7, 2), (10, 12), (13, 14), (15, 36), (26, 28)])
@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil"])
def test_nearest_half_ties(n: int, size: int, nearest_mode: str) -> None:
    # float32 coordinates that land within an ulp of .5 round like ORT does.
    x = np.arange(n, dtype=np.float32).reshape(1, n)
    check_op("Resize", [x, E, None, np.array([1, size], np.int64)],
             {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": nearest_mode},
             opset=19, const_inputs=(1, 3))


@pytest.mark.parametrize("ex,a", [(0, -0.75), (1, -0.5)])
def test_cubic_attrs(ex: int, a: float) -> None:
    check_op("Resize", [_x(), E, np.array([1, 1, 1.6, 0.7], np.float32)],
             {"mode": "cubic", "exclude_outside": ex, "cubic_coeff_a": a}, const_inputs=(1, 2), rtol=RT, atol=AT)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int32, np.float16])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.6, 1.7], [1, 2.5, 1.5, 1], [1, 0.5, 0.7, 1]])
def test_dtypes(dtype: type, mode: str, scales: list[float]) -> None:
    x = (np.random.default_rng(1).random((1, 4, 5, 6)) * 120).astype(dtype)
    check_op("Resize", [x, E, np.array(scales, np.float32)], {"mode": mode}, const_inputs=(1, 2),
             rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize(
    "shape,scales",
    [((6,), [1.5]), ((5, 7), [2, 0.6]), ((3, 4, 5), [2, 1.5, 0.5]), ((1, 2, 3, 4, 5), [1, 1, 2, 1.5, 0.7])],
)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_ranks(shape: tuple[int, ...], scales: list[float], mode: str) -> None:
    ins = [_x(shape), E, np.array(scales, np.float32)]
    expected = None
    if len(shape) == 1 and mode == "linear":  # ORT has no 1-D linear kernel: ONNX reference golden
        from onnx.reference import ReferenceEvaluator

        from tests.ops.oracle import single_node_model

        model, feeds = single_node_model("Resize", ins, {"mode": mode}, 1, 19, (1, 2))
        expected = ReferenceEvaluator(model).run(None, feeds)
    check_op("Resize", ins, {"mode": mode}, const_inputs=(1, 2), rtol=RT, atol=AT, expected=expected)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.5, 0.3], [1, 1, 0.25, 0.6], [1, 1, 2, 0.7]])
@pytest.mark.parametrize("ex", [0, 1])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "pytorch_half_pixel"])
def test_antialias(mode: str, scales: list[float], ex: int, coord: str) -> None:
    attrs = {"mode": mode, "antialias": 1, "exclude_outside": ex, "coordinate_transformation_mode": coord}
    ins = [_x((1, 2, 16, 13)), E, np.array(scales, np.float32)]
    check_op("Resize", ins, attrs, opset=18, const_inputs=(1, 2), rtol=RT, atol=AT,
             expected=_reference(ins, attrs, 18) if coord == "align_corners" else None)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("roi_w, scale, width", [((0.0, 1.0), 0.5, 8), ((0.1, 1.0), 0.5, 8), ((-0.05, 0.9), 0.5, 8),
                                                 ((0.0, 1.0), 2.0, 4)])
def test_antialias_tf_crop_extrapolates_outside_the_input_only(
        mode: str, roi_w: tuple[float, float], scale: float, width: int) -> None:
    """ORT's antialias filter extrapolates where the coordinate itself leaves [0, in - 1]; testing
    coordinate + 0.5 wrote extrapolation_value into the last pixel(s) of a full [0, 1] crop (6.75 ->
    -100 at width 8 / 0.5) and kept a first pixel whose coordinate is below 0 (roi start -0.05)."""
    x = np.arange(width, dtype=np.float32).reshape(1, 1, 1, width)
    roi = np.array([0, 0, 0, roi_w[0], 1, 1, 1, roi_w[1]], np.float32)
    attrs = {"mode": mode, "antialias": 1, "coordinate_transformation_mode": "tf_crop_and_resize",
             "extrapolation_value": -100.0}
    check_op("Resize", [x, roi, np.array([1, 1, 1, scale], np.float32)], attrs, opset=19, const_inputs=(1, 2),
             rtol=RT, atol=AT)


@pytest.mark.parametrize("dtype", [np.uint8, np.int32])
@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_antialias_int(dtype: type, mode: str) -> None:
    x = (np.random.default_rng(2).random((1, 2, 12, 9)) * 250).astype(dtype)
    check_op("Resize", [x, E, np.array([1, 1, 0.3, 0.7], np.float32)], {"mode": mode, "antialias": 1},
             opset=18, const_inputs=(1, 2))


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_axes_and_policy(policy: str, mode: str) -> None:
    x = _x((2, 3, 10, 14))
    attrs = {"mode": mode, "axes": [2, 3], "keep_aspect_ratio_policy": policy}
    check_op("Resize", [x, E, None, np.array([7, 9], np.int64)], attrs, opset=18, const_inputs=(1, 3),
             rtol=RT, atol=AT)
    if policy == "stretch":  # ORT ignores negative axes under the aspect policies; stretch is fine
        attrs["axes"] = [-1, -2]
        check_op("Resize", [x, E, None, np.array([9, 7], np.int64)], attrs, opset=18, const_inputs=(1, 3),
                 rtol=RT, atol=AT)


def test_axes_scales_roi() -> None:
    x = _x((2, 3, 10, 14))
    check_op("Resize", [x, E, np.array([0.5, 2.0], np.float32)], {"mode": "nearest", "axes": [3, 1]},
             opset=18, const_inputs=(1, 2))
    roi = np.array([0.2, 0.1, 0.9, 0.7], np.float32)
    check_op("Resize", [x, roi, np.array([0.5, 2.0], np.float32)],
             {"mode": "linear", "axes": [3, 2], "coordinate_transformation_mode": "tf_crop_and_resize"},
             opset=18, const_inputs=(1, 2), rtol=RT, atol=AT)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 0.5, 0.7], [1, 1, 1.5, 2.5]])
def test_resize10(mode: str, scales: list[float]) -> None:
    x = _x((1, 2, 5, 6))
    check_op("Resize", [x, np.array(scales, np.float32)], {"mode": mode}, opset=10, const_inputs=(1,),
             rtol=RT, atol=AT)


@pytest.mark.parametrize("opset", [11, 13])
def test_resize11_13(opset: int) -> None:
    x = _x((1, 2, 5, 6))
    check_op("Resize", [x, E, np.array([1, 1, 2, 2], np.float32)], {"mode": "linear"}, opset=opset,
             const_inputs=(1, 2), rtol=RT, atol=AT)
    check_op("Resize", [x, E, E, np.array([1, 2, 9, 4], np.int64)],
             {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}, opset=opset,
             const_inputs=(1, 2, 3))


def test_identity_and_empty() -> None:
    x = _x((1, 2, 5, 6))
    check_op("Resize", [x, E, np.array([1, 1, 1, 1], np.float32)], {"mode": "linear"}, const_inputs=(1, 2))
    z = np.zeros((1, 0, 5, 6), np.float32)
    outs, descs = run_pycann_op("Resize", [z, E, np.array([1, 1, 2, 2], np.float32)], {}, 1, 19, (1, 2))
    assert outs[0].shape == (1, 0, 10, 12) and descs[0].shape == (1, 0, 10, 12)


def test_nearest_fast_paths_match_gather() -> None:
    # x2 / x4 integer repeats (the FPN upsampling case) on several dtypes, including the last axis.
    for dtype in (np.float32, np.float16, np.uint8, np.float64, np.int64):
        x = (np.random.default_rng(3).random((1, 3, 4, 5)) * 100).astype(dtype)
        for sc in ([1, 1, 2, 2], [1, 1, 4, 4], [1, 3, 1, 2]):
            got = run_pycann_op("Resize", [x, E, np.array(sc, np.float32)],
                                {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
                                1, 19, (1, 2))[0][0]
            want = x
            for a, s in enumerate(sc):
                want = np.repeat(want, int(s), axis=a)
            np.testing.assert_array_equal(got, want)


def _infer(inputs: list, values: list, attrs: dict, opset: int = 19) -> TensorDesc:
    op = lookup("Resize", "", opset)
    ctx = InferContext("n", "Resize", op.with_defaults(attrs), inputs, values, opset, 1)
    return op.infer(ctx)[0]


def test_infer_symbolic() -> None:
    x = TensorDesc(1, ("N", 3, 5, 7))
    sc = np.array([1, 1, 2, 2], np.float32)
    d = _infer([x, None, TensorDesc(1, (4,))], [None, None, sc], {})
    assert d.shape == ("N", 3, 10, 14)
    d = _infer([x, None, None, TensorDesc(7, (4,))], [None, None, None, None], {})
    assert d.shape == (None, None, None, None)
    d = _infer([x, None, None, TensorDesc(7, (2,))], [None, None, None, np.array([8, 9])], {"axes": [2, 3]})
    assert d.shape == ("N", 3, 8, 9)
    d = _infer([TensorDesc(1, None), None, TensorDesc(1, (4,))], [None, None, sc], {})
    assert d.shape is None


@pytest.mark.parametrize(
    "attrs,values,msg",
    [
        ({"mode": "bilinear"}, [None, None, np.array([1, 1, 2, 2], np.float32)], "mode"),
        ({"coordinate_transformation_mode": "x"}, [None, None, np.array([1, 1, 2, 2], np.float32)], "coordinate"),
        ({}, [None, None, np.array([1, 2, 2], np.float32)], "scales"),
        ({}, [None, None, np.array([1, 1, -2, 2], np.float32)], "positive"),
        ({"axes": [5]}, [None, None, np.array([2], np.float32)], "axes"),
    ],
)
def test_infer_errors(attrs: dict, values: list, msg: str) -> None:
    x = TensorDesc(1, (1, 3, 5, 7))
    n = len(values[2])
    with pytest.raises(ShapeError, match=msg):
        _infer([x, None, TensorDesc(1, (n,))], values, attrs)


def test_infer_both_scales_and_sizes() -> None:
    x = TensorDesc(1, (1, 3, 5, 7))
    with pytest.raises(ShapeError, match="both"):
        _infer([x, None, TensorDesc(1, (4,)), TensorDesc(7, (4,))], [None] * 4, {})
    with pytest.raises(ShapeError, match="must be given"):
        _infer([x, None, None, None], [None] * 4, {})
