"""Reduction family against ONNX Runtime (Reduce*, ArgMax/ArgMin, Softmax family, CumSum)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op, run_pycann_op

REDUCE = [
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare",
]
rng = np.random.default_rng(0)
X = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
AX = lambda *a: np.array(a, dtype=np.int64)  # noqa: E731


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((-1, 0), 0), ((), 1), ((), 0), ((0, 1, 2), 0)])
def test_reduce_axes_keepdims(op: str, axes: tuple[int, ...], keepdims: int) -> None:
    inputs = [X, AX(*axes)] if axes else [X]
    check_op(op, inputs, {"keepdims": keepdims}, opset=18, const_inputs=(1,), rtol=1e-5)


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_noop_and_empty_axis(op: str) -> None:
    check_op(op, [X, AX()], {"noop_with_empty_axes": 1}, opset=18, const_inputs=(1,))
    check_op(op, [X, AX()], {"noop_with_empty_axes": 0}, opset=18, const_inputs=(1,))
    # reducing over a zero-sized axis yields the identity of the reduction
    check_op(op, [np.zeros((2, 0, 3), np.float32), AX(1)], {}, opset=18, const_inputs=(1,))
    check_op(op, [np.array(2.5, np.float32)], {"keepdims": 0}, opset=18)  # rank 0


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64])
def test_reduce_dtypes(op: str, dtype: type) -> None:
    x = rng.integers(-3, 6, (3, 4)).astype(dtype)
    if op in ("ReduceLogSum", "ReduceL2", "ReduceLogSumExp") or dtype == np.float64:
        x = np.abs(x) + 1
    check_op(op, [x, AX(1)], {"keepdims": 0}, opset=18, const_inputs=(1,))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_float16(op: str) -> None:
    x = rng.uniform(0.5, 2.0, (4, 64)).astype(np.float16)
    check_op(op, [x, AX(1)], {}, opset=18, const_inputs=(1,), rtol=2e-3, atol=1e-3)


def test_reduce_old_opset_and_nonconst_axes() -> None:
    # ReduceSum has had the axes input since 13; attribute form (opset 11) is rewritten by the importer
    check_op("ReduceSum", [X, AX(2)], {"keepdims": 0}, opset=13)
    check_op("ReduceMean", [X, AX(0)], {"keepdims": 1}, opset=18)
    _, inferred = run_pycann_op("ReduceMean", [X, AX(0)], {"keepdims": 0}, 1, 18)
    assert inferred[0].shape == (None, None)


def test_reduce_int_mean_truncates_and_bool_max() -> None:
    check_op("ReduceMean", [np.array([[-1, -2], [3, 4], [5, 8]], np.int32), AX(1)], {}, opset=18, const_inputs=(1,))
    check_op("ReduceMax", [np.array([[True, False], [False, False]]), AX(1)], {}, opset=20, const_inputs=(1,))
    check_op("ReduceMin", [np.array([[True, False], [True, True]]), AX(1)], {}, opset=20, const_inputs=(1,))


def test_reduce_nan_propagates_and_large_logsumexp() -> None:
    x = np.array([[1, np.nan, 3], [0, 2, 1]], np.float32)
    check_op("ReduceMax", [x, AX(1)], {"keepdims": 0}, opset=18,
             expected=[np.array([np.nan, 2], np.float32)])
    check_op("ReduceMin", [x, AX(1)], {"keepdims": 0}, opset=18,
             expected=[np.array([np.nan, 0], np.float32)])
    check_op("ReduceLogSumExp", [np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], np.float32), AX(1)],
             {}, opset=18, const_inputs=(1,))


def test_reduce_infer_symbolic_and_errors() -> None:
    op = lookup("ReduceSum", "", 18)
    attrs = op.with_defaults({"keepdims": 0})
    d = TensorDesc(DType.FLOAT, ("N", 3, None))
    ctx = InferContext("n", "ReduceSum", attrs, [d, TensorDesc(DType.INT64, (1,))], [None, AX(-1)], 18)
    assert op.infer(ctx)[0].shape == ("N", 3)
    ctx = InferContext("n", "ReduceSum", attrs, [d, TensorDesc(DType.INT64, (2,))], [None, None], 18)
    assert op.infer(ctx)[0].shape == (None,)
    ctx = InferContext("n", "ReduceSum", attrs, [TensorDesc(DType.FLOAT, None), None], [None, None], 18)
    assert op.infer(ctx)[0].shape is None
    ctx = InferContext("n", "ReduceSum", attrs, [d, TensorDesc(DType.INT64, (1,))], [None, AX(3)], 18)
    with pytest.raises(ShapeError, match="axes"):
        op.infer(ctx)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": -1, "keepdims": 0}, {"axis": 1, "select_last_index": 1}])
def test_argmax_argmin(op: str, attrs: dict) -> None:
    x = rng.integers(0, 3, (3, 5, 2)).astype(np.float32)  # many ties
    check_op(op, [x], attrs, opset=13)
    check_op(op, [x.astype(np.int32)], attrs, opset=13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset,axis", [(13, -1), (13, 0), (13, 1), (11, 1), (11, 0), (11, -1), (11, 2)])
def test_softmax_family(op: str, opset: int, axis: int) -> None:
    x = (rng.standard_normal((2, 3, 4)) * 10).astype(np.float32)
    check_op(op, [x], {"axis": axis}, opset=opset, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_defaults_dtypes_empty(op: str) -> None:
    x = (rng.standard_normal((3, 2, 5)) * 10).astype(np.float32)
    (ref,) = check_op(op, [x], {}, opset=13, atol=1e-5)
    check_op(op, [x], {}, opset=11, atol=1e-5)
    # ORT has no float64/float16 Hardmax: its float32 answer is the golden there
    exp64 = [ref.astype(np.float64)] if op == "Hardmax" else None
    exp16 = [ref.astype(np.float16)] if op == "Hardmax" else None
    check_op(op, [x.astype(np.float64)], {}, opset=13, atol=1e-5, expected=exp64)
    check_op(op, [x.astype(np.float16)], {}, opset=13, rtol=2e-3, atol=2e-3, expected=exp16)
    check_op(op, [np.zeros((2, 0), np.float32)], {}, opset=13)
    check_op(op, [np.array([[1e30, 1e30, -np.inf]], np.float32)], {}, opset=13)


def test_hardmax_ties_first_index() -> None:
    check_op("Hardmax", [np.array([[1, 3, 3], [2, 2, 2]], np.float32)], {}, opset=13)


@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(exclusive: int, reverse: int, axis: int) -> None:
    x = rng.standard_normal((3, 4)).astype(np.float32)
    attrs = {"exclusive": exclusive, "reverse": reverse}
    check_op("CumSum", [x, np.array(axis, np.int64)], attrs, opset=14, atol=1e-5)
    check_op("CumSum", [x.astype(np.int32) * 3, np.array([axis], np.int32)], attrs, opset=14)


def test_cumsum_empty() -> None:
    check_op("CumSum", [np.zeros((0, 3), np.float32), np.array(0, np.int64)], {"exclusive": 1}, opset=14)


@pytest.mark.parametrize("op, attr, value", [
    ("ReduceMax", "keepdims", 2), ("ReduceSum", "keepdims", -1), ("ReduceMean", "noop_with_empty_axes", 5),
    ("ArgMax", "keepdims", 2), ("ArgMin", "select_last_index", 2),
])
def test_flag_attributes_other_than_0_or_1_are_refused_naming_the_node(op: str, attr: str, value: int) -> None:
    """keepdims=2 read as 1 (numpy's truth) gave ReduceMax (1, 1, 1, 1) where ONNX Runtime reads it as
    0 and gives (): the spec allows only 0 and 1, so the node is refused (fuzzer case
    tests/fuzz/corpus/onnx/reduce_keepdims2-refused.onnx); 0 and 1 still infer."""
    schema = lookup(op, "", 18)
    x = TensorDesc(DType.FLOAT, (3, 2, 2, 1))
    attrs = dict(schema.attrs) | {attr: value}
    with pytest.raises(ShapeError, match=rf"node n0 \({op}, opset 18\): attribute {attr}={value}: must be 0 or 1"):
        schema.infer(InferContext("n0", op, attrs, [x], [None], 18))
    for ok in (0, 1):
        schema.infer(InferContext("n0", op, dict(schema.attrs) | {attr: ok}, [x], [None], 18))
