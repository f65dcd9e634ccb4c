"""Pooling ops against ONNX Runtime (numpy goldens where ORT lacks a kernel)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op

RTOL, ATOL = 1e-5, 1e-5
F = int(DType.FLOAT)


def _r(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(sum(shape)).standard_normal(shape).astype(dtype)


WINDOWS = [
    {"kernel_shape": [3, 3]},
    {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1, "pads": [0, 0, 1, 1]},  # last window dropped
    {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [4, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 2]},
    {"kernel_shape": [2, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1], "strides": [2, 1], "ceil_mode": 1},
]


@pytest.mark.parametrize("attrs", WINDOWS)
def test_max_pool_with_indices(attrs: dict) -> None:
    check_op("MaxPool", [_r(2, 3, 7, 8)], attrs, n_outputs=2, opset=12)


@pytest.mark.parametrize("attrs", WINDOWS)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(attrs: dict, include_pad: int) -> None:
    check_op("AveragePool", [_r(2, 3, 7, 8)], attrs | {"count_include_pad": include_pad}, opset=19,
             rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("attrs", WINDOWS[:4] + WINDOWS[8:])
def test_lp_pool(attrs: dict) -> None:
    check_op("LpPool", [_r(2, 3, 7, 8)], attrs | {"p": 3}, opset=18, rtol=RTOL, atol=ATOL)
    check_op("LpPool", [_r(1, 2, 7, 8)], attrs, opset=18, rtol=RTOL, atol=ATOL)


def test_lp_pool_old_opset_and_p1() -> None:
    check_op("LpPool", [_r(2, 3, 9, 5)], {"kernel_shape": [3, 2], "p": 1}, opset=11, rtol=RTOL, atol=ATOL)


def test_max_pool_storage_order_and_3d() -> None:
    x = _r(1, 2, 7, 8)
    check_op("MaxPool", [x], {"kernel_shape": [3, 3], "storage_order": 1, "pads": [1] * 4, "strides": [2, 2]},
             n_outputs=2)
    x3 = _r(2, 3, 5, 6, 4)
    for order in (0, 1):
        check_op("MaxPool", [x3], {"kernel_shape": [3, 3, 2], "storage_order": order, "pads": [1, 1, 1, 1, 0, 0],
                                   "strides": [2, 2, 1]}, n_outputs=2)


def test_max_pool_1d_ints_and_f16() -> None:
    x = _r(2, 3, 9) * 50
    attrs = {"kernel_shape": [3], "pads": [1, 1], "strides": [2]}
    check_op("MaxPool", [x.astype(np.int8)], attrs, n_outputs=2, opset=12)
    check_op("MaxPool", [x.astype(np.uint8)], attrs, opset=12)
    check_op("MaxPool", [x.astype(np.float16)], attrs, n_outputs=2, opset=12)
    check_op("MaxPool", [x.astype(np.float64)], attrs, opset=12)


def test_max_pool_bfloat16() -> None:
    import ml_dtypes

    x = _r(1, 2, 5, 5)
    attrs = {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    want = check_op("MaxPool", [x], attrs, n_outputs=2)
    od = lookup("MaxPool", "", 22)
    got = od.kernel([x.astype(ml_dtypes.bfloat16)], od.with_defaults(attrs))
    np.testing.assert_array_equal(got[0].astype(np.float32), want[0].astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(got[1], want[1])


def test_max_pool_ties_pick_first() -> None:
    x = np.zeros((1, 1, 4, 4), np.float32)
    check_op("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [1, 1]}, n_outputs=2)


def test_pool_old_opsets() -> None:
    x = _r(1, 2, 6, 6)
    check_op("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=7)
    check_op("AveragePool", [x], {"kernel_shape": [3, 3], "pads": [1] * 4}, opset=7)
    check_op("AveragePool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, opset=10)


def test_average_pool_dtypes() -> None:
    attrs = {"kernel_shape": [3], "pads": [1, 1], "strides": [2]}
    check_op("AveragePool", [_r(2, 3, 9).astype(np.float16)], attrs, opset=12, rtol=1e-3, atol=1e-3)
    x = _r(2, 3, 9).astype(np.float64)  # ORT has no double AveragePool: numpy golden
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1)))
    cnt = np.array([2, 3, 3, 3, 2], np.float64)
    want = np.stack([xp[..., 2 * i : 2 * i + 3].sum(-1) for i in range(5)], -1) / cnt
    check_op("AveragePool", [x], attrs, expected=[want], rtol=1e-12, atol=1e-12)


def test_empty_batch() -> None:
    check_op("MaxPool", [np.zeros((0, 2, 4, 4), np.float32)], {"kernel_shape": [2, 2]}, n_outputs=2)
    check_op("AveragePool", [np.zeros((0, 2, 4, 4), np.float32)], {"kernel_shape": [2, 2]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape,dtype", [((2, 3, 5, 4), np.float32), ((2, 3, 5), np.float32),
                                         ((2, 3, 5, 4, 2), np.float16), ((2, 3, 4, 4), np.float64)])
def test_global_pools(op: str, shape: tuple, dtype: type) -> None:
    tol = 1e-3 if dtype == np.float16 else 1e-5
    if dtype == np.float64:  # ORT has no double global pools: numpy golden
        x = _r(*shape, dtype=dtype)
        axes = tuple(range(2, x.ndim))
        want = {"GlobalAveragePool": lambda: x.mean(axis=axes, keepdims=True),
                "GlobalMaxPool": lambda: x.max(axis=axes, keepdims=True),
                "GlobalLpPool": lambda: np.sqrt((x * x).sum(axis=axes, keepdims=True))}[op]()
        check_op(op, [x], {}, expected=[want], rtol=1e-12, atol=1e-12)
        return
    check_op(op, [_r(*shape, dtype=dtype)], {}, rtol=tol, atol=tol)


def test_global_lp_pool_p() -> None:
    for p in (1, 3):
        check_op("GlobalLpPool", [_r(2, 3, 5, 4)], {"p": p}, rtol=RTOL, atol=ATOL)


def test_max_roi_pool() -> None:
    x = _r(2, 3, 12, 10)
    rois = np.array([[0, 1, 1, 6, 8], [1, 0, 0, 9, 11], [0, 2.4, 3.6, 4.5, 5.5], [1, 8, 10, 9, 11],
                     [0, 11, 13, 15, 15]], np.float32)
    check_op("MaxRoiPool", [x, rois], {"pooled_shape": [3, 2], "spatial_scale": 1.0})
    scaled = rois * np.array([1, 2, 2, 2, 2], np.float32)
    check_op("MaxRoiPool", [x, scaled], {"pooled_shape": [2, 3], "spatial_scale": 0.5})


def _infer(op: str, x: TensorDesc, attrs: dict, n_outputs: int = 1, opset: int = 19) -> list[TensorDesc]:
    od = lookup(op, "", opset)
    ctx = InferContext("n", op, od.with_defaults(attrs), [x], [None], opset, n_outputs)
    return list(od.infer(ctx))


def test_pool_infer() -> None:
    x = TensorDesc(F, ("N", 3, "H", 8))
    y, idx = _infer("MaxPool", x, {"kernel_shape": [3, 3], "pads": [1] * 4}, n_outputs=2)
    assert y.shape == ("N", 3, "H", 8) and idx.dtype == int(DType.INT64) and idx.shape == y.shape
    assert _infer("MaxPool", x, {"kernel_shape": [3, 3], "strides": [2, 2]})[0].shape == ("N", 3, None, 3)
    assert _infer("AveragePool", x, {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"})[0].shape == (
        "N", 3, "H", 8)
    assert _infer("AveragePool", TensorDesc(F, (1, 2, 7, 8)), {"kernel_shape": [2, 2], "strides": [2, 2],
                                                              "ceil_mode": 1, "pads": [0, 0, 1, 1]})[0].shape == (
        1, 2, 4, 4)
    assert _infer("GlobalAveragePool", x, {})[0].shape == ("N", 3, 1, 1)
    assert _infer("GlobalMaxPool", TensorDesc(F, None), {})[0].shape is None
    with pytest.raises(ShapeError, match="kernel_shape"):
        _infer("MaxPool", x, {"kernel_shape": [3]})
    with pytest.raises(ShapeError, match="does not fit"):
        _infer("MaxPool", TensorDesc(F, (1, 1, 2, 2)), {"kernel_shape": [3, 3]})
    with pytest.raises(ShapeError, match="kernel_shape"):
        lookup("MaxPool", "", 19).with_defaults({})


@pytest.mark.parametrize("attrs", WINDOWS[:4])
def test_max_pool_out_kernel_and_n_outputs(attrs: dict) -> None:
    od = lookup("MaxPool", "", 12)
    x = _r(2, 3, 7, 8)
    full = od.with_defaults(attrs)
    y, idx = od.kernel([x], full)
    only = od.kernel([x], {**full, "_n_outputs": 1})
    assert len(only) == 1
    np.testing.assert_array_equal(only[0], y)
    for n_out in (1, 2):
        outs = [np.empty_like(y), np.empty_like(idx)][:n_out]
        od.out_kernel([x], full, outs)
        np.testing.assert_array_equal(outs[0], y)
        if n_out == 2:
            np.testing.assert_array_equal(outs[1], idx)
