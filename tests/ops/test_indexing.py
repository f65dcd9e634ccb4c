"""Indexing ops (pycann.ops.indexing) against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op, run_pycann_op

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4, 5)).astype(np.float32)
I64 = lambda *a: np.array(a, dtype=np.int64)  # noqa: E731
F = lambda *s: TensorDesc(DType.FLOAT, tuple(s))  # noqa: E731
L = lambda *s: TensorDesc(DType.INT64, tuple(s))  # noqa: E731
BIG, SMALL = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def infer(op_type: str, descs: list, values: list, attrs: dict | None = None, opset: int = 18,
          n_outputs: int = 1) -> list[TensorDesc]:
    op = lookup(op_type, "", opset)
    ctx = InferContext("n", op_type, op.with_defaults(attrs or {}), descs, values, opset, n_outputs)
    return list(op.infer(ctx))


# --------------------------------------------------------------------------- Slice
@pytest.mark.parametrize("starts,ends,axes,steps", [
    ((0, 1), (2, 3), None, None),
    ((1,), (BIG,), (1,), None),
    ((-1,), (SMALL,), (2,), (-1,)),
    ((SMALL,), (BIG,), (-1,), (2,)),
    ((4, 3), (0, -10), (2, 1), (-2, -1)),
    ((10,), (20,), (0,), None),
    ((-100,), (2,), (2,), (-1,)),
    ((2,), (2,), (0,), (1,)),
    ((0, 0, 0), (3, 4, 5), (0, 1, 2), (3, 2, 4)),
])
def test_slice(starts: tuple, ends: tuple, axes: tuple | None, steps: tuple | None) -> None:
    inputs = [X, I64(*starts), I64(*ends)]
    if axes is not None or steps is not None:
        inputs.append(I64(*(axes if axes is not None else range(len(starts)))))
    if steps is not None:
        inputs.append(I64(*steps))
    (y,) = check_op("Slice", inputs, opset=13, const_inputs=(1, 2, 3, 4))
    assert np.shares_memory(y, X) or y.size == 0
    check_op("Slice", [a.astype(np.int32) if i else a for i, a in enumerate(inputs)], opset=13)


def test_slice_infer_partial() -> None:
    d = F("N", 8, 5)
    assert infer("Slice", [d, L(1), L(1), L(1)], [None, I64(1), I64(BIG), I64(1)])[0].shape == ("N", 7, 5)
    assert infer("Slice", [d, L(1), L(1), L(1)], [None, None, None, I64(0)])[0].shape == (None, 8, 5)
    assert infer("Slice", [d, L(1), L(1), L(1)], [None, None, None, None])[0].shape == (None,) * 3
    assert infer("Slice", [d, L(1), L(1)], [None, I64(0), I64(BIG)])[0].shape == ("N", 8, 5)
    with pytest.raises(ShapeError, match="steps"):
        infer("Slice", [d, L(1), L(1), L(1), L(1)], [None, I64(0), I64(2), I64(1), I64(0)])


# --------------------------------------------------------------------------- Gather family
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis: int) -> None:
    n = X.shape[axis]
    check_op("Gather", [X, I64(0, n - 1, -1, -n)], {"axis": axis}, opset=13)
    check_op("Gather", [X, np.array([[0, 1], [-1, 2]], np.int32)], {"axis": axis}, opset=13)
    check_op("Gather", [X, np.array(1, np.int64)], {"axis": axis}, opset=13)
    check_op("Gather", [X, np.zeros((0,), np.int64)], {"axis": axis}, opset=13)


def test_gather_1d_scalar_index_and_infer() -> None:
    (y,) = check_op("Gather", [np.arange(5, dtype=np.int64), np.array(-2, np.int64)], opset=13)
    assert isinstance(y, np.ndarray) and y.shape == ()
    assert infer("Gather", [F("N", 4), L(2, 3)], [None, None], {"axis": 1})[0].shape == ("N", 2, 3)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(axis: int) -> None:
    n = X.shape[axis]
    shape = list(X.shape)
    shape[axis] = 2
    idx = rng.integers(-n, n, shape).astype(np.int64)
    check_op("GatherElements", [X, idx], {"axis": axis}, opset=13)
    check_op("GatherElements", [X, idx.astype(np.int32)], {"axis": axis}, opset=13)


def test_gather_scatter_elements_smaller_indices() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([[0, 2], [1, -1]], np.int64)
    check_op("GatherElements", [x, idx], {"axis": 1}, opset=13)
    check_op("ScatterElements", [x, idx, -np.ones((2, 2), np.float32)], {"axis": 1}, opset=13)
    check_op("GatherElements", [x, np.zeros((0, 4), np.int64)], {"axis": 0}, opset=13)


@pytest.mark.parametrize("batch_dims,idx", [
    (0, [[0, 1], [2, 3]]), (0, [[[1]], [[-1]]]), (0, [[0, 1, 2], [2, 3, 4]]),
    (1, [[1], [2], [0]]), (1, [[[0, 1], [3, 4]], [[1, 1], [2, 2]], [[0, 0], [-1, -1]]]),
    (2, np.zeros((3, 4, 1), np.int64)),
])
def test_gather_nd(batch_dims: int, idx: list) -> None:
    check_op("GatherND", [X, np.array(idx, np.int64)], {"batch_dims": batch_dims}, opset=13)


def test_gather_nd_infer_and_empty() -> None:
    check_op("GatherND", [X, np.zeros((0, 2), np.int64)], opset=13)
    check_op("GatherND", [X, np.zeros((3, 2, 0), np.int64)], {"batch_dims": 1}, opset=13)  # whole slices
    assert infer("GatherND", [F("N", 4, 5), L("N", 7, 1)], [None, None], {"batch_dims": 1})[0].shape == ("N", 7, 5)
    with pytest.raises(ShapeError):
        infer("GatherND", [F(2, 3), L(4, 3)], [None, None])


# --------------------------------------------------------------------------- Scatter family
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction: str) -> None:
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    idx = np.array([[0], [2], [-1]], np.int64)
    upd = rng.standard_normal((3, 3, 2)).astype(np.float32)
    check_op("ScatterND", [data, idx, upd], {"reduction": reduction}, opset=18)
    idx2 = np.array([[[0, 1], [3, 2]], [[1, 0], [0, 1]]], np.int64)  # duplicates where reduced
    if reduction == "none":
        idx2[1, 1] = [2, 2]
    upd2 = rng.standard_normal((2, 2, 2)).astype(np.float32)
    check_op("ScatterND", [data, idx2, upd2], {"reduction": reduction}, opset=18)
    check_op("ScatterND", [data.astype(np.int32), idx, (upd * 10).astype(np.int32)], {"reduction": reduction}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(reduction: str, axis: int) -> None:
    data = rng.standard_normal((3, 4)).astype(np.float32)
    if reduction == "none":  # distinct targets, so the result is well defined
        idx = [[0, 1, 2], [2, 0, -3]] if axis == 0 else [[0, 1, 2], [3, 0, -2]]
    else:  # repeated targets exercise the reduction
        idx = [[0, 1, 0], [-1, 0, -1]]
    upd = rng.standard_normal((2, 3)).astype(np.float32)
    attrs = {"axis": axis, "reduction": reduction}
    check_op("ScatterElements", [data, np.array(idx, np.int64), upd], attrs, opset=18)


def test_scatter_deprecated_and_infer() -> None:
    data = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_op("Scatter", [data, idx, upd], {"axis": 0}, opset=10)
    check_op("ScatterElements", [data, idx.astype(np.int32), upd], {"axis": 0}, opset=11)
    assert infer("ScatterND", [F("N", 3), L(2, 1), F(2, 3)], [None, None, None])[0].shape == ("N", 3)


# --------------------------------------------------------------------------- Pad
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(0, 1, 2, 1, 0, 2), (1, 0, 0, 0, 0, 0), (0, -1, 1, 2, 1, -1)])
def test_pad(mode: str, pads: tuple) -> None:
    if mode == "reflect" and pads[3] > 1:
        pytest.skip("ORT rejects reflect pads >= the dim (pycann reflects repeatedly, like numpy)")
    x = rng.standard_normal((2, 4, 3)).astype(np.float32)
    check_op("Pad", [x, I64(*pads)], {"mode": mode}, opset=19, const_inputs=(1,))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [(-1, 0, 2, 0), (2, -1, -1, 2), (0, -2, 0, 2), (1, 1, -2, -2), (-3, 0, 5, 0)])
def test_pad_mixed_negative_and_positive_on_one_axis(mode: str, pads: tuple) -> None:
    """A crop on one side of an axis and a pad on the other (begin -1, end +2), against ORT:
    the other modes crop, then mirror / repeat what is left."""
    x = np.arange(1, 31, dtype=np.float32).reshape(6, 5)
    if mode == "reflect" and pads == (-3, 0, 5, 0):
        pytest.skip("ORT refuses: reflect pads 5 > the 3 rows left - 1 (as pycann does)")
    check_op("Pad", [x, I64(*pads)], {"mode": mode}, opset=19, const_inputs=(1,))


@pytest.mark.parametrize("pads", [(0, -4, 0, 2), (0, 3, 0, -5), (0, -4, 0, 4), (0, -4, 0, 1), (3, 0, -3, 0),
                                  (-2, 1, 2, -3)])
def test_pad_constant_crop_into_the_other_sides_padding(pads: tuple) -> None:
    """Constant mode pads, then crops (ORT): a crop larger than the dim reaches into the padding of
    the other side (begin -4, end +2 on 3 columns: one padding value). pycann refused "crops more
    than the dims"; only a negative output dim is an error, in ORT too."""
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    check_op("Pad", [x, I64(*pads), np.array(9.0, np.float32)], opset=19, const_inputs=(1, 2))
    check_op("Pad", [x, I64(*pads), np.array(9.0, np.float32)], opset=19)  # pads known only when it runs
    from pycann.ops.index_checks import pad_fault

    assert pad_fault((1, 3), [0, 0], [0, -4], "constant") == "crops more than the dims of"


def test_pad_constant_value_axes_dtypes() -> None:
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    check_op("Pad", [x, I64(0, 1, 2, 0, 0, 3), np.array(5.5, np.float32)], opset=18)
    check_op("Pad", [x, I64(1, 2, 0, 3), np.array(-1, np.float32), I64(-1, 0)], opset=18, const_inputs=(1, 3))
    check_op("Pad", [x, I64(1, 1), None, np.array([1], np.int32)], {"mode": "reflect"}, opset=18)
    xi = np.arange(6, dtype=np.int32).reshape(2, 3)
    check_op("Pad", [xi, I64(1, 0, 0, 2), np.array(9, np.int32)], opset=13)
    check_op("Pad", [np.zeros((0, 2), np.float32), I64(1, 0, 1, 0)], opset=13)
    d = infer("Pad", [F("N", 3, 4), L(4), None, L(2)], [None, I64(1, 1, 0, 2), None, I64(1, 2)])
    assert d[0].shape == ("N", 4, 7)
    assert infer("Pad", [F("N", 3), L(4)], [None, None])[0].shape == (None, None)


# --------------------------------------------------------------------------- Compress / OneHot / ReverseSequence
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis: int | None) -> None:
    cond = np.array([True, False, True, True])[: X.shape[axis] if axis is not None else 4]
    attrs = {} if axis is None else {"axis": axis}
    check_op("Compress", [X, cond], attrs, opset=11, const_inputs=(1,))
    check_op("Compress", [X, cond[:2]], attrs, opset=11)  # shorter condition


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_onehot(axis: int) -> None:
    idx = np.array([[1, -1, 5], [0, 3, -7]], np.int64)
    check_op("OneHot", [idx, np.array(4, np.int64), np.array([0, 1], np.float32)], {"axis": axis}, opset=11)
    check_op("OneHot", [idx, np.array([4.0], np.float32), np.array([2, 7], np.int32)],
             {"axis": axis}, opset=11, const_inputs=(1,))
    check_op("OneHot", [idx.astype(np.float32), np.array(3, np.int64), np.array([-1, 5], np.int64)],
             {"axis": axis}, opset=11)


@pytest.mark.parametrize("time_axis,batch_axis", [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis: int, batch_axis: int) -> None:
    x = rng.standard_normal((4, 4, 2)).astype(np.float32)
    check_op("ReverseSequence", [x, I64(4, 3, 1, 2)], {"time_axis": time_axis, "batch_axis": batch_axis}, opset=10)


# --------------------------------------------------------------------------- TopK / Unique / NonZero
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_topk(largest: int, axis: int) -> None:
    x = rng.integers(0, 4, (3, 6, 5)).astype(np.float32)  # many ties: stable order matters
    check_op("TopK", [x, I64(3)], {"axis": axis, "largest": largest}, n_outputs=2, opset=11, const_inputs=(1,))
    check_op("TopK", [x.astype(np.int32), I64(2)], {"axis": axis, "largest": largest}, n_outputs=2, opset=11)
    check_op("TopK", [x.astype(np.uint8), I64(1)], {"axis": axis, "largest": largest}, n_outputs=2, opset=11)


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_partition_path_with_ties(largest: int) -> None:
    x = rng.integers(0, 6, (4, 7, 100)).astype(np.float32)
    for k in (1, 7, 30):
        check_op("TopK", [x, I64(k)], {"largest": largest}, n_outputs=2, opset=11)
        check_op("TopK", [x.astype(np.uint8), I64(k)], {"largest": largest}, n_outputs=2, opset=11)
        check_op("TopK", [x.astype(np.int64), I64(min(k, 3))], {"largest": largest, "axis": 1}, n_outputs=2, opset=11)
    y = rng.standard_normal((3, 200)).astype(np.float64)
    check_op("TopK", [y, I64(10)], {"largest": largest}, n_outputs=2, opset=11)


def test_topk_edge_cases() -> None:
    x = np.array([[1, 3, 3, np.nan, 3, -np.inf]], np.float32)
    check_op("TopK", [x, I64(3)], {}, n_outputs=2, opset=11)
    check_op("TopK", [x, I64(0)], {}, n_outputs=2, opset=11)
    check_op("TopK", [x[:, :3], I64(2)], {}, n_outputs=2, opset=10)
    d = infer("TopK", [F("N", 9), L(1)], [None, I64(4)], n_outputs=2)
    assert d[0].shape == ("N", 4) and d[1].dtype == DType.INT64
    with pytest.raises(ShapeError):
        infer("TopK", [F("N", 3), L(1)], [None, I64(4)], n_outputs=2)


@pytest.mark.parametrize("sorted_", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_unique(sorted_: int, axis: int | None) -> None:
    x = np.array([[2, 1, 1], [2, 1, 1], [0, 3, 4], [2, 1, 1]], np.float32)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    check_op("Unique", [x], attrs, n_outputs=4, opset=11)
    check_op("Unique", [x.astype(np.int64)], attrs, n_outputs=4, opset=11)


def test_nonzero() -> None:
    x = np.array([[0, 1.5, 0], [2, 0, -1]], np.float32)
    check_op("NonZero", [x], opset=13)
    check_op("NonZero", [x > 0], opset=13)
    check_op("NonZero", [np.zeros((2, 0), np.int32)], opset=13)
    outs, descs = run_pycann_op("NonZero", [np.array(3.0, np.float32)], {}, 1, 13)
    assert outs[0].tolist() == [[0]] and descs[0].shape == (1, None)  # ORT treats a scalar as [1]
