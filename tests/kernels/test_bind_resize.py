"""Nearest Resize by integer factors bound at plan time (``kernels/bind_resize.py``) against the generic
kernel and ONNX Runtime: the coordinate modes and rounding modes that map to a repeat (bound) and
those that do not (left to the generic kernel), scales and sizes inputs, channels-last and C-order
inputs and output views, calls of another shape."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.dtypes import TensorDesc
from pycann.kernels.bind_resize import PREPARE_RESIZE
from pycann.ops.nn.resize import _k_resize
from tests.ops.oracle import run_ort

XS = (2, 5, 6, 7)
RNG = np.random.default_rng(4)


def _attrs(coord: str, nearest: str) -> dict[str, Any]:
    return {"mode": "nearest", "coordinate_transformation_mode": coord, "nearest_mode": nearest,
            "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0, "antialias": 0, "axes": None,
            "keep_aspect_ratio_policy": "stretch"}


def _bind(attrs: dict[str, Any], scales: np.ndarray | None, sizes: np.ndarray | None, ys: tuple[int, ...]) -> Any:
    ins = [TensorDesc(1, XS), None, TensorDesc(1, (4,)) if scales is not None else None]
    consts: list[Any] = [None, None, scales]
    if sizes is not None:
        ins.append(TensorDesc(7, (4,)))
        consts.append(sizes)
    return PREPARE_RESIZE[("", "Resize")](attrs, ins, consts, [TensorDesc(1, ys)])


def _cl(a: np.ndarray) -> np.ndarray:
    y = np.empty((a.shape[0], *a.shape[2:], a.shape[1]), a.dtype).transpose(0, 3, 1, 2)
    y[...] = a
    return y


def _ort(x: np.ndarray, attrs: dict[str, Any], scales: np.ndarray | None, sizes: np.ndarray | None) -> np.ndarray:
    names = ["x", "", "scales" if scales is not None else ""] + (["sizes"] if sizes is not None else [])
    node = helper.make_node("Resize", names, ["y"], mode="nearest",
                            coordinate_transformation_mode=attrs["coordinate_transformation_mode"],
                            nearest_mode=attrs["nearest_mode"])
    inits = ([numpy_helper.from_array(scales, "scales")] if scales is not None else []) + \
        ([numpy_helper.from_array(sizes, "sizes")] if sizes is not None else [])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return run_ort(m, {"x": np.ascontiguousarray(x)})[0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("coord,nearest", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                                           ("asymmetric", "round_prefer_floor"), ("align_corners", "round_prefer_floor"),
                                           ("half_pixel", "round_prefer_ceil"), ("pytorch_half_pixel", "floor")])
@pytest.mark.parametrize("k", [(2, 2), (3, 2), (1, 4)])
@pytest.mark.parametrize("by", ["scales", "sizes"])
def test_bound_or_not_the_values_are_onnxruntimes(coord: str, nearest: str, k: tuple[int, int], by: str) -> None:
    ys = (*XS[:2], XS[2] * k[0], XS[3] * k[1])
    scales = np.array([1, 1, *k], np.float32) if by == "scales" else None
    sizes = np.array(ys, np.int64) if by == "sizes" else None
    attrs = _attrs(coord, nearest)
    kern = _bind(attrs, scales, sizes if sizes is not None else None, ys)
    x = RNG.standard_normal(XS).astype(np.float32)
    want = _ort(x, attrs, scales, sizes)
    inputs = [x, None, scales] + ([sizes] if sizes is not None else [])
    generic = _k_resize(inputs, attrs)[0]
    np.testing.assert_array_equal(generic, want)
    if kern is None:  # the node's mapping is no repeat: nothing bound
        assert not np.array_equal(generic, x.repeat(k[0], axis=2).repeat(k[1], axis=3))
        return
    for xin in (x, _cl(x)):
        got = kern.run([xin, *inputs[1:]], attrs)[0]
        np.testing.assert_array_equal(got, want)
        for out in (np.zeros(ys, np.float32), _cl(np.zeros(ys, np.float32))):
            ret = kern.run([xin, *inputs[1:]], attrs, [out])[0]
            assert ret is out
            np.testing.assert_array_equal(out, want)


def test_asymmetric_floor_x2_is_bound_and_other_calls_take_the_generic_kernel() -> None:
    attrs = _attrs("asymmetric", "floor")
    scales = np.array([1, 1, 2, 2], np.float32)
    ys = (*XS[:2], XS[2] * 2, XS[3] * 2)
    kern = _bind(attrs, scales, None, ys)
    assert kern is not None and kern.writes_out
    other = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)  # another shape: generic
    np.testing.assert_array_equal(kern.run([other, None, scales], attrs)[0], other.repeat(2, 2).repeat(2, 3))
    ints = RNG.integers(0, 9, XS).astype(np.int64)  # another dtype, same shape: the repeat holds for any
    np.testing.assert_array_equal(kern.run([ints, None, scales], attrs)[0], ints.repeat(2, 2).repeat(2, 3))
    odd = np.zeros(ys, np.float32)[..., ::-1]  # an output view in neither layout: written through the generic kernel
    x = RNG.standard_normal(XS).astype(np.float32)
    assert kern.run([x, None, scales], attrs, [odd])[0] is odd
    np.testing.assert_array_equal(odd, x.repeat(2, 2).repeat(2, 3))


def test_not_bound() -> None:
    attrs = _attrs("asymmetric", "floor")
    ys = (*XS[:2], XS[2] * 2, XS[3] * 2)
    assert _bind(attrs, np.array([1, 1, 1.5, 2], np.float32), None, (*XS[:2], 9, 14)) is None  # not integer
    assert _bind(attrs, np.array([1, 2, 2, 2], np.float32), None, (XS[0], 10, *ys[2:])) is None  # channels too
    assert _bind({**attrs, "mode": "linear"}, np.array([1, 1, 2, 2], np.float32), None, ys) is None
    assert PREPARE_RESIZE[("", "Resize")](attrs, [TensorDesc(1, XS), None, TensorDesc(1, (4,))], [None, None, None],
                                          [TensorDesc(1, ys)]) is None  # run-time scales


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(("xs", "k", "layout"), [((1, 24, 40, 44), (2, 2), "cl"), ((1, 24, 40, 44), (2, 3), "nchw"),
                                                  ((3, 8, 10, 11), (4, 4), "cl"), ((2, 8, 6, 6), (4, 2), "nchw"),
                                                  ((1, 3, 5, 7), (8, 1), "cl"), ((1, 1, 1, 1), (2, 2), "nchw")])
def test_onednn_nearest_resampling_is_the_repeat(xs: tuple[int, ...], k: tuple[int, int], layout: str,
                                                 dtype: str) -> None:
    """oneDNN's nearest resampling (``providers/onednn_resample.py``) gives the integer repeat exactly,
    bit for bit: float32 in both layouts, bfloat16 channels-last as bytes (random bit patterns:
    subnormals and NaN payloads kept; a bf16 resampling would flush and rewrite them); a bfloat16 map
    in NCHW is declined (numpy's copy serves it), nothing written."""
    from pycann.dtypes import bfloat16
    from pycann.kernels.providers import available
    from pycann.kernels.providers.onednn_resample import NearestUpsample

    if not available("onednn"):
        pytest.skip("no libdnnl")
    dt = np.dtype(np.float32) if dtype == "float32" else bfloat16()
    if dtype == "float32":
        x = RNG.standard_normal(xs).astype(np.float32)
        x.reshape(-1)[::7] = np.nan
        x.reshape(-1)[1::11] = -np.inf
        x.reshape(-1)[2::13] = 1e-40  # a subnormal
    else:
        x = RNG.integers(0, 1 << 16, xs, dtype=np.uint16).view(dt)  # every bit pattern: subnormals, NaN payloads
    ys = (xs[0], xs[1], xs[2] * k[0], xs[3] * k[1])
    y = np.zeros(ys, dt)
    if layout == "cl":
        x, y = _cl(x), _cl(y)
    done = NearestUpsample(xs, ys, dt).run(x, y)
    if dtype == "bfloat16" and layout == "nchw" and xs[1] > 1:
        assert not done and not np.ascontiguousarray(y).view(np.uint8).any()
        return
    assert done
    want = np.asarray(x).repeat(k[0], axis=2).repeat(k[1], axis=3)
    np.testing.assert_array_equal(np.ascontiguousarray(y).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


def test_the_bound_kernel_runs_onednn_and_writes_the_out_view() -> None:
    from pycann.kernels.providers import available

    if not available("onednn"):
        pytest.skip("no libdnnl")
    attrs = _attrs("asymmetric", "floor")
    ys = (XS[0], XS[1], XS[2] * 2, XS[3] * 2)
    k = _bind(attrs, np.array([1, 1, 2, 2], np.float32), None, ys)
    assert k.impl == "onednn:resampling_nearest"
    x = _cl(RNG.standard_normal(XS).astype(np.float32))
    out = _cl(np.zeros(ys, np.float32))
    (y,) = k.run([x, None, np.array([1, 1, 2, 2], np.float32)], attrs, [out])
    assert y is out
    np.testing.assert_array_equal(out, _k_resize([np.ascontiguousarray(x), None, np.array([1, 1, 2, 2], np.float32)],
                                                 attrs)[0])


@pytest.mark.parametrize("scales", [[1, 1, 0.5, 1], [1, 1, 1, 0.5], [1, 1, 0.5, 0.5]])
def test_an_empty_output_is_not_bound_as_a_repeat(scales: list[float]) -> None:
    """A 1-pixel axis scaled by 0.5 gives an empty output (ORT: (1, 8, 0, 16)); the output's H is a
    multiple (0) of the input's, and binding that "repeat by 0" raised IndexError in the specialised
    plan of a symbolic-dims model while its shape-generic plan returned the empty array."""
    from pycann.config import PlanCacheConfig
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel

    sc = np.array(scales, np.float32)
    node = helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, "H", "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(sc, "sc")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    for policy in ("specialize", "generic"):
        lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=policy))
        for shape in [(1, 8, 1, 16), (1, 8, 1, 1), (2, 8, 4, 6), (1, 8, 16, 1)]:
            x = RNG.standard_normal(shape).astype(np.float32)
            want = run_ort(m, {"x": x})[0]
            got = lm.run([x])[0]
            assert got.shape == want.shape, (policy, shape, got.shape, want.shape)
            np.testing.assert_array_equal(got, want)
