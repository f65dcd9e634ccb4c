"""Shape/view, generator and layout ops (pycann.ops.tensor, pycann.ops.tensor_gen) against ORT."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op, run_ort, run_pycann_op, single_node_model

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 4)).astype(np.float32)
I64 = lambda *a: np.array(a, dtype=np.int64)  # noqa: E731


def infer(op_type: str, descs: list, values: list, attrs: dict | None = None, opset: int = 18,
          n_outputs: int = 1) -> list[TensorDesc]:
    op = lookup(op_type, "", opset)
    ctx = InferContext("n", op_type, op.with_defaults(attrs or {}), descs, values, opset, n_outputs)
    return list(op.infer(ctx))


F = lambda *s: TensorDesc(DType.FLOAT, tuple(s))  # noqa: E731
L = lambda *s: TensorDesc(DType.INT64, tuple(s))  # noqa: E731


# --------------------------------------------------------------------------- Constant / Identity / Shape / Size
@pytest.mark.parametrize("attrs", [
    {"value": numpy_helper.from_array(np.arange(6, dtype=np.int32).reshape(2, 3))},
    {"value_float": 2.5}, {"value_floats": [1.0, 2.0]}, {"value_int": 7}, {"value_ints": [1, -2, 3]},
])
def test_constant(attrs: dict) -> None:
    check_op("Constant", [], attrs, opset=13)


def test_constant_ndarray_and_strings() -> None:
    arr = np.arange(4, dtype=np.float16)
    outs, d = run_pycann_op("Constant", [], {"value": arr}, 1, 13)
    assert outs[0] is arr and d[0] == TensorDesc(DType.FLOAT16, (4,))
    outs, d = run_pycann_op("Constant", [], {"value_strings": [b"a", "b"]}, 1, 13)
    assert outs[0].tolist() == ["a", "b"] and d[0].dtype == DType.STRING
    with pytest.raises(ShapeError):
        infer("Constant", [], [], {"value_int": 1, "value_float": 2.0})


def test_identity_shape_size() -> None:
    (y,) = check_op("Identity", [X])
    assert y is X  # no copy
    check_op("Shape", [X], opset=13)
    for start, end in [(1, None), (-1, None), (0, -1), (-10, 10), (2, 1)]:
        attrs = {"start": start} if end is None else {"start": start, "end": end}
        check_op("Shape", [X], attrs, opset=15)
    check_op("Size", [X], opset=13)
    check_op("Size", [np.zeros((3, 0), np.int8)], opset=13)
    assert infer("Shape", [F("N", 3)], [None], {"start": -1}, 15)[0].shape == (1,)


# --------------------------------------------------------------------------- Reshape / Flatten / Transpose
@pytest.mark.parametrize("shape,allowzero", [
    ((4, 6), 0), ((-1,), 0), ((0, -1), 0), ((2, 0, 2, 2), 0), ((-1, 2, 1), 0), ((3, 0), 1), ((0, 3), 1),
])
def test_reshape(shape: tuple, allowzero: int) -> None:
    x = X if not allowzero else np.zeros((0, 3), np.float32)
    if allowzero and shape == (3, 0):
        x = np.zeros((3, 0, 1), np.float32)
    check_op("Reshape", [x, I64(*shape)], {"allowzero": allowzero}, opset=14, const_inputs=(1,))


def test_reshape_allowzero_with_0_and_minus_1_is_refused_clearly() -> None:
    """ONNX Reshape: with allowzero=1 a shape holding both 0 and -1 is invalid; the error says so (it
    was numpy's "cannot reshape array of size 0 into shape (0,-1)"), at shape inference and in the kernel."""
    x = np.zeros((0, 3), np.float32)
    with pytest.raises(ShapeError, match="both a 0 and a -1 with allowzero=1"):
        infer("Reshape", [F(0, 3), L(2)], [None, I64(0, -1)], {"allowzero": 1})
    with pytest.raises(ValueError, match="both a 0 and a -1 with allowzero=1"):
        lookup("Reshape", "", 14).kernel([x, I64(0, -1)], {"allowzero": 1})


def test_reshape_view_and_infer() -> None:
    (y,) = check_op("Reshape", [X, I64(6, 4)], opset=13)
    assert np.shares_memory(y, X)
    assert infer("Reshape", [F("N", 3, 4), L(2)], [None, I64(0, -1)])[0].shape == ("N", 12)
    assert infer("Reshape", [F("N", "C", 4), L(3)], [None, I64(-1, 4, 1)])[0].shape == (None, 4, 1)
    assert infer("Reshape", [F("N", 3, 4), L(3)], [None, I64(0, 3, -1)])[0].shape == ("N", 3, 4)
    assert infer("Reshape", [F(2, "S", 8), L(3)], [None, I64(2, -1, 4)])[0].shape == (2, None, 4)
    assert infer("Reshape", [F(2, 3), L(3)], [None, None])[0].shape == (None, None, None)
    with pytest.raises(ShapeError, match="more than one -1"):
        infer("Reshape", [F(2, 3), L(2)], [None, I64(-1, -1)])
    with pytest.raises(ShapeError, match="element counts"):
        infer("Reshape", [F(2, 3), L(2)], [None, I64(4, 2)])


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(axis: int) -> None:
    check_op("Flatten", [X], {"axis": axis}, opset=13)


def test_flatten_infer_symbolic() -> None:
    assert infer("Flatten", [F("N", 3, 4)], [None])[0].shape == ("N", 12)
    assert infer("Flatten", [F("N", "C", 4)], [None], {"axis": 0})[0].shape == (1, None)
    with pytest.raises(ShapeError):
        infer("Flatten", [F(1, 2)], [None], {"axis": 3})


@pytest.mark.parametrize("perm", [None, [0, 2, 1], [2, 0, 1], [1, 0, 2]])
def test_transpose(perm: list | None) -> None:
    attrs = {} if perm is None else {"perm": perm}
    check_op("Transpose", [X], attrs, opset=13)
    check_op("Transpose", [X.astype(np.int64)], attrs, opset=13)
    with pytest.raises(ShapeError):
        infer("Transpose", [F(1, 2)], [None], {"perm": [0, 0]})


# --------------------------------------------------------------------------- Squeeze / Unsqueeze
def test_squeeze() -> None:
    x = np.zeros((1, 3, 1, 2), np.float32)
    check_op("Squeeze", [x], opset=13)
    check_op("Squeeze", [x, I64(0)], opset=13, const_inputs=(1,))
    check_op("Squeeze", [x, I64(-2, 0)], opset=13, const_inputs=(1,))
    check_op("Squeeze", [x, I64(2)], opset=13)
    check_op("Squeeze", [x, I64()], opset=13)  # ORT: an empty axes tensor squeezes every 1-dim
    assert infer("Squeeze", [F(1, "N", 1), L(1)], [None, I64(0)])[0].shape == ("N", 1)
    assert infer("Squeeze", [F(1, "N", 1)], [None])[0].shape is None
    with pytest.raises(ShapeError, match="not 1"):
        infer("Squeeze", [F(2, 3), L(1)], [None, I64(0)])


@pytest.mark.parametrize("axes", [(0,), (-1,), (1, 3), (0, -1), (4, 0)])
def test_unsqueeze(axes: tuple) -> None:
    check_op("Unsqueeze", [X, I64(*axes)], opset=13, const_inputs=(1,))


def test_unsqueeze_scalar_and_infer() -> None:
    check_op("Unsqueeze", [np.array(3.0, np.float32), I64(0)], opset=13, const_inputs=(1,))
    assert infer("Unsqueeze", [F("N", 3), L(2)], [None, I64(0, -1)])[0].shape == (1, "N", 3, 1)
    assert infer("Unsqueeze", [F("N", 3), L(2)], [None, None])[0].shape == (None,) * 4


# --------------------------------------------------------------------------- Concat / Split
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis: int) -> None:
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    shape = list(a.shape)
    shape[axis] = 0
    empty = np.zeros(shape, np.float32)
    check_op("Concat", [a, a * 2, empty], {"axis": axis}, opset=13)
    check_op("Concat", [a.astype(np.int32)], {"axis": axis}, opset=13)


def test_concat_opset1_default_and_infer() -> None:
    a = rng.standard_normal((2, 3)).astype(np.float32)
    outs, _ = run_pycann_op("Concat", [a, a], {}, 1, 1)
    np.testing.assert_array_equal(outs[0], np.concatenate([a, a], axis=1))
    assert infer("Concat", [F("N", 3), F("N", 4)], [None, None], {"axis": -1})[0].shape == ("N", 7)
    assert infer("Concat", [F("N", 3), F(2, "K")], [None, None], {"axis": 1})[0].shape == (2, None)
    with pytest.raises(ShapeError):
        infer("Concat", [F(2, 3), F(3, 3)], [None, None], {"axis": 1})
    with pytest.raises(ShapeError, match="required attribute 'axis'"):
        lookup("Concat", "", 13).with_defaults({})


def test_split_with_sizes_and_num_outputs() -> None:
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    check_op("Split", [x, I64(2, 5)], n_outputs=2, opset=13, const_inputs=(1,))
    check_op("Split", [x, I64(3, 0, 4)], n_outputs=3, opset=18, const_inputs=(1,))
    check_op("Split", [x], {"num_outputs": 3}, n_outputs=3, opset=18)
    check_op("Split", [x], {"num_outputs": 2, "axis": -1}, n_outputs=2, opset=18)
    check_op("Split", [x, I64(1, 1)], {"axis": 1}, n_outputs=2, opset=13)


@pytest.mark.parametrize("opset", [11, 13])
def test_split_equal_by_output_count(opset: int) -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    model, feeds = single_node_model("Split", [x], {"axis": 1}, 3, opset)
    want = run_ort(model, feeds)
    op = lookup("Split", "", opset)
    got = op.kernel([x], {**op.with_defaults({"axis": 1}), "_n_outputs": 3})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        assert np.shares_memory(g, x)
    descs = infer("Split", [F(2, 12)], [None], {"axis": 1}, opset, n_outputs=3)
    assert [d.shape for d in descs] == [(2, 4)] * 3
    with pytest.raises(ShapeError, match="evenly"):
        infer("Split", [F(2, 11)], [None], {"axis": 1}, opset, n_outputs=3)


# --------------------------------------------------------------------------- Expand / Tile
@pytest.mark.parametrize("xs,shape", [((3, 1), (2, 3, 4)), ((1, 4), (3, 1)), ((2, 1, 3), (1,)), ((1,), (0, 2)),
                                      ((), ()), ((), (2,))])  # a 0-d input and shape []: a 0-d output
def test_expand(xs: tuple, shape: tuple) -> None:
    x = rng.standard_normal(xs).astype(np.float32)
    check_op("Expand", [x, I64(*shape)], opset=13, const_inputs=(1,))
    check_op("Expand", [x.astype(np.bool_), I64(*shape)], opset=13)
    assert infer("Expand", [F("N", 1), L(2)], [None, I64(1, 5)])[0].shape == ("N", 5)
    assert infer("Expand", [F("N", 1), L(3)], [None, None])[0].shape == (None,) * 3


@pytest.mark.parametrize("reps", [(1, 1, 1), (2, 1, 3), (1, 0, 2)])
def test_tile(reps: tuple) -> None:
    check_op("Tile", [X, I64(*reps)], opset=13, const_inputs=(1,))
    assert infer("Tile", [F("N", 2, 1)], [None, None])[0].shape == (None,) * 3
    assert infer("Tile", [F("N", 2, 1), L(3)], [None, I64(1, 2, 3)])[0].shape == ("N", 4, 3)


# --------------------------------------------------------------------------- Range / ConstantOfShape / EyeLike / Trilu
@pytest.mark.parametrize("dtype,args", [
    (np.int32, (0, 10, 3)), (np.int64, (10, 4, -2)), (np.int64, (5, 5, 1)), (np.int16, (-3, 4, 2)),
    (np.float32, (0.0, 1.0, 0.25)), (np.float32, (1.0, -2.0, -0.5)), (np.float64, (0.5, 3.1, 0.3)),
    (np.float32, (0.0, 1.0, 0.1)),
])
def test_range(dtype: type, args: tuple) -> None:
    inputs = [np.array(a, dtype=dtype) for a in args]
    check_op("Range", inputs, opset=11, const_inputs=(0, 1, 2), rtol=1e-6, atol=1e-6)
    assert infer("Range", [L(), L(), L()], [None, None, None], opset=11)[0].shape == (None,)


@pytest.mark.parametrize("value", [None, np.array([7], np.int32), np.array([1.5], np.float64), np.array([True])])
@pytest.mark.parametrize("shape", [(2, 3), (0, 4), ()])
def test_constant_of_shape(value: np.ndarray | None, shape: tuple) -> None:
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check_op("ConstantOfShape", [np.array(shape, np.int64)], attrs, opset=9, const_inputs=(0,))


@pytest.mark.parametrize("k", [0, 1, -2, 5])
@pytest.mark.parametrize("dtype", [None, int(DType.INT32), int(DType.DOUBLE)])
def test_eye_like(k: int, dtype: int | None) -> None:
    attrs = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check_op("EyeLike", [np.zeros((3, 4), np.float32)], attrs, opset=9)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, 0, 1, -1, 10])
def test_trilu(upper: int, k: int | None) -> None:
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    inputs = [x] if k is None else [x, np.array(k, np.int64)]
    check_op("Trilu", inputs, {"upper": upper}, opset=14)
    check_op("Trilu", [x.astype(np.int64)] + inputs[1:], {"upper": upper}, opset=14)


# --------------------------------------------------------------------------- DepthToSpace / SpaceToDepth / Dropout
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space(mode: str) -> None:
    x = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
    check_op("DepthToSpace", [x], {"blocksize": 2, "mode": mode}, opset=13)
    assert infer("DepthToSpace", [F("N", 8, 3, "W")], [None], {"blocksize": 2})[0].shape == ("N", 2, 6, None)


def test_space_to_depth() -> None:
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    check_op("SpaceToDepth", [x], {"blocksize": 2}, opset=13)
    with pytest.raises(ShapeError):
        infer("SpaceToDepth", [F(1, 3, 5, 4)], [None], {"blocksize": 2})


def test_dropout_inference() -> None:
    check_op("Dropout", [X], n_outputs=2, opset=13)
    check_op("Dropout", [X, np.array(0.3, np.float32)], n_outputs=2, opset=13)
    check_op("Dropout", [X, np.array(0.3, np.float32), np.array(False)], n_outputs=2, opset=13)
    check_op("Dropout", [X], n_outputs=1, opset=10)
    for opset in (7, 10, 11, 12):  # the mask: ORT's zeros (7) / false (10, 11), then true (12+)
        check_op("Dropout", [X], n_outputs=2, opset=opset)
    outs, descs = run_pycann_op("Dropout", [X], {}, 2, 7)
    assert outs[1].dtype == np.float32 and descs[1].dtype == DType.FLOAT and (outs[1] == 0).all()
    assert not run_pycann_op("Dropout", [X], {}, 2, 10)[0][1].any()
    assert run_pycann_op("Dropout", [X], {}, 2, 12)[0][1].all()


def test_dropout_training_mode_scales_kept_values() -> None:
    outs, _ = run_pycann_op("Dropout", [np.ones((64, 64), np.float32), np.array(0.5, np.float32),
                                        np.array(True)], {"seed": 1}, 2, 13)
    y, mask = outs
    assert y.dtype == np.float32 and mask.dtype == np.bool_
    assert set(np.unique(y).tolist()) <= {0.0, 2.0} and 0.3 < mask.mean() < 0.7
    np.testing.assert_array_equal(y != 0, mask)


def test_helpers_never_raise_on_symbolic() -> None:
    sym = TensorDesc(DType.FLOAT, ("A", None, "B"))
    for op_type, values, attrs in [
        ("Reshape", [None, I64(0, 0, -1)], {}), ("Flatten", [None], {"axis": 2}),
        ("Transpose", [None], {}), ("Squeeze", [None], {}), ("Unsqueeze", [None, I64(1)], {}),
        ("Expand", [None, I64(2, 1, 1)], {}), ("Tile", [None, I64(2, 2, 2)], {}), ("Shape", [None], {}),
        ("Split", [None], {"axis": 1}), ("Size", [None], {}), ("Identity", [None], {}),
    ]:
        descs: list = [sym] + [None if v is None else L(len(v)) for v in values[1:]]
        infer(op_type, descs, values, attrs, n_outputs=2 if op_type == "Split" else 1)
    unknown = TensorDesc(DType.FLOAT, None)
    for op_type in ("Reshape", "Flatten", "Transpose", "Squeeze", "Tile", "Expand", "Shape"):
        infer(op_type, [unknown, L(2)], [None, I64(1, 2)])


def test_ort_reference_helper_is_consistent() -> None:
    # single_node_model must accept the TensorProto attribute that ConstantOfShape needs
    m, _ = single_node_model("ConstantOfShape", [I64(2)], {"value": helper.make_tensor("v", 7, [1], [3])}, 1, 9)
    assert m.graph.node[0].op_type == "ConstantOfShape"
