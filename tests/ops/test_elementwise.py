"""Binary, variadic, logical and comparison ops against ONNX Runtime (numpy golden where ORT lacks a case)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op

RNG = np.random.default_rng(0)


def _data(shape: tuple[int, ...], dtype: type, lo: int = -9, hi: int = 10, nonzero: bool = False) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "u":
        lo = max(lo, 0)
    if dt.kind == "f":
        x = RNG.uniform(lo, hi, size=shape).astype(dt)
    else:
        x = RNG.integers(lo, hi, size=shape).astype(dt)
    if nonzero:
        x[x == 0] = 3
    return x


def infer(op_type: str, descs: list[TensorDesc | None], attrs: dict | None = None, opset: int = 17) -> list:
    op = lookup(op_type, "", opset)
    ctx = InferContext("n", op_type, op.with_defaults(attrs or {}), descs, [None] * len(descs), opset)
    return list(op.infer(ctx))


def check_or(golden, op: str, inputs: list, attrs: dict | None = None, **kw) -> list[np.ndarray]:
    """check_op against ORT; where ORT has no kernel for the case, against ``golden(*inputs)``."""
    try:
        return check_op(op, inputs, attrs, **kw)
    except Exception as e:  # ORT raises its own NotImplemented type at session creation
        if "NOT_IMPLEMENTED" not in str(e):
            raise
    return check_op(op, inputs, attrs, expected=[golden(*inputs)], **kw)


SHAPES = [((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3,), ()), ((0, 3), (3,)), ((), ())]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8])
def test_arith_dtypes(op: str, dtype: type) -> None:
    a, b = _data((2, 3, 4), dtype), _data((3, 4), dtype, lo=1 if np.dtype(dtype).kind == "u" else -9, nonzero=True)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    check_op(op, [a, b], rtol=tol, atol=tol, opset=14)


@pytest.mark.parametrize("sa,sb", SHAPES)
def test_arith_broadcast(sa: tuple, sb: tuple) -> None:
    for op in ("Add", "Mul", "Sub"):
        check_op(op, [_data(sa, np.float32), _data(sb, np.float32)])


def test_int_div_truncates() -> None:
    a = np.array([7, -7, 7, -7, 0, 6, -6, 1, -1], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 3, 4, 4, -3, 3], dtype=np.int32)
    out = check_op("Div", [a, b])
    assert out[0].tolist() == [3, -3, -3, 3, 0, 1, -1, 0, 0]
    check_op("Div", [a.astype(np.int64), b.astype(np.int64)])
    check_op("Div", [np.array([200, 7], np.uint8), np.array([3, 2], np.uint8)])


def test_float_div_special() -> None:
    a = np.array([1.0, -1.0, 0.0, np.inf], np.float32)
    check_op("Div", [a, np.array([0.0, 0.0, 0.0, 2.0], np.float32)])


def test_pow_variants() -> None:
    base_f = _data((3, 4), np.float32, 1, 4)
    check_op("Pow", [base_f, _data((4,), np.float32, -2, 3)])
    check_op("Pow", [base_f, np.array([2, -1, 0, 3], np.int64)])
    check_op("Pow", [base_f, np.array([2, -1, 0, 3], np.int32)])
    check_op("Pow", [base_f.astype(np.float64), np.array(0.5, np.float32)])
    check_op("Pow", [np.array([2, 3, -2, 10], np.int32), np.array([-1, 2, 3, 0], np.int32)])
    check_op("Pow", [np.array([2, 3, -2, 10], np.int32), np.array([0.5, 2.5, 3, 0.0], np.float32)])
    check_op("Pow", [np.array([2**40 + 1, 3], np.int64), np.array([1, 39], np.int64)])
    check_op("Pow", [np.array([2, 3, 1.5], np.float16), np.array([2, -1, 3], np.float32)], rtol=1e-3)
    check_op("Pow", [np.zeros((0, 2), np.float32), np.ones((2,), np.float32)])


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint16])
def test_mod_int(fmod: int, dtype: type) -> None:
    a = _data((4, 5), dtype, -20, 20)
    b = _data((5,), dtype, -6, 7, nonzero=True)
    check_op("Mod", [a, b], {"fmod": fmod}, opset=13)


def test_mod_float() -> None:
    a = np.array([-5.5, 5.5, 7.25, -7.25, 0.0, 3.0], np.float32)
    b = np.array([2.0, -2.0, 2.5, 2.5, 3.0, np.inf], np.float32)
    check_op("Mod", [a, b], {"fmod": 1}, opset=13)
    check_op("Mod", [a.astype(np.float64), b.astype(np.float64)], {"fmod": 1}, opset=13)
    check_op("Mod", [a.astype(np.float16), b.astype(np.float16)], {"fmod": 1}, opset=13)
    # fmod=0 on floats is only defined from opset 28 (floor modulo, sign of the divisor).
    check_op("Mod", [a, b], {"fmod": 0}, opset=28)
    out = check_op("Mod", [a, b], expected=[np.mod(a, b)], opset=28)
    assert out[0][0] == 0.5 and out[0][1] == -0.5
    # before opset 28 the spec requires fmod=1 for floats (ONNX Runtime refuses the model too)
    with pytest.raises(ShapeError, match="floating-point Mod needs fmod=1"):
        check_op("Mod", [a, b], expected=[np.mod(a, b)], opset=17)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bitshift_unsigned(dtype: type) -> None:
    x = _data((3, 4), dtype, 0, 200)
    s = _data((4,), dtype, 0, 7)
    check_op("BitShift", [x, s], {"direction": "LEFT"}, opset=11)
    check_op("BitShift", [x, s], {"direction": "RIGHT"}, opset=11)


def test_bitshift_signed_and_out_of_range() -> None:
    x = np.array([-5, 5, -8, 1, -1, 7], np.int32)
    s = np.array([1, 40, -1, 31, 32, 0], np.int32)
    check_op("BitShift", [x, s], {"direction": "RIGHT"}, opset=28)
    check_op("BitShift", [x, s], {"direction": "LEFT"}, opset=28)
    u = np.array([1, 255, 3], np.uint8)
    out = check_op("BitShift", [u, np.array([8, 9, 1], np.uint8)], {"direction": "LEFT"},
                   expected=[np.array([0, 0, 6], np.uint8)])
    assert out[0].dtype == np.uint8


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint64, np.int64])
def test_bitwise(op: str, dtype: type) -> None:
    check_op(op, [_data((2, 3), dtype, -100, 100), _data((3,), dtype, -100, 100)], opset=18)


def test_bitwise_not() -> None:
    for dt in (np.int8, np.uint8, np.int32, np.uint16, np.int64):
        check_op("BitwiseNot", [_data((2, 3), dt, -100, 100)], opset=18)


def test_logic() -> None:
    a = RNG.random((2, 3, 4)) > 0.5
    b = RNG.random((3, 1)) > 0.5
    for op in ("And", "Or", "Xor"):
        check_op(op, [a, b])
    check_op("Not", [a])
    check_op("And", [np.zeros((0, 2), bool), np.ones((2,), bool)])


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.float16])
def test_compare(op: str, dtype: type) -> None:
    a = _data((3, 4), dtype, -3, 4)
    b = _data((4,), dtype, -3, 4)
    if np.dtype(dtype).kind == "f":
        a[0, 0] = np.nan
    check_op(op, [a, b], opset=16)


def test_equal_strings_and_bool() -> None:
    a = np.array([["a", "b"], ["c", ""]], dtype=object)
    check_op("Equal", [a, np.array(["a", ""], dtype=object)], opset=19)
    check_op("Equal", [np.array([True, False]), np.array([True, True])], opset=13)


def test_where() -> None:
    c = RNG.random((2, 1, 4)) > 0.5
    check_op("Where", [c, _data((3, 1), np.float32), _data((4,), np.float32)])
    check_op("Where", [c, _data((3, 4), np.int64), _data((1,), np.int64)])
    check_op("Where", [np.array([True, False]), np.array(["x", "y"], object), np.array(["p", "q"], object)])
    check_op("Where", [np.array(True), np.array([], np.float32), np.array(1.0, np.float32)])


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_variadic(op: str) -> None:
    x = [_data((2, 3, 4), np.float32), _data((3, 1), np.float32), _data((4,), np.float32)]
    check_op(op, x[:1], opset=13)
    check_op(op, x[:2], opset=13)
    check_op(op, x, opset=13)
    golden = {"Max": np.maximum, "Min": np.minimum, "Sum": np.add, "Mean": lambda p, q: (p + q) / 2}[op]
    check_or(golden, op, [x[0].astype(np.float64), x[2].astype(np.float64)], opset=13)
    check_or(golden, op, [x[0].astype(np.float16), x[1].astype(np.float16)], opset=13, rtol=2e-3, atol=2e-3)
    check_op(op, [np.zeros((0, 4), np.float32), x[2]], opset=13)
    check_op(op, x, opset=6, expected=check_op(op, x, opset=13))


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_minmax_nan_and_ints(op: str) -> None:
    a = np.array([np.nan, 1.0, 2.0, np.nan], np.float32)
    b = np.array([0.0, np.nan, 3.0, np.nan], np.float32)
    fn = np.maximum if op == "Max" else np.minimum
    out = check_op(op, [a, b], opset=13, expected=[fn(a, b)])
    assert np.isnan(out[0][[0, 1, 3]]).all()
    for dt in (np.int32, np.int64, np.uint8, np.uint64, np.int8):
        check_op(op, [_data((2, 3), dt), _data((3,), dt), _data((1,), dt)], opset=13)


def test_sum_mean_more_dtypes() -> None:
    # ORT's CPU Sum has no integer kernels; numpy is the golden there.
    a, b = _data((2, 3), np.int32), _data((3,), np.int32)
    check_op("Sum", [a, b], opset=13, expected=[a + b])
    a, b = _data((2, 3), np.int64), _data((3,), np.int64)
    check_op("Sum", [a, b, b], opset=13, expected=[a + b + b])
    m = check_op("Mean", [np.array([1.0, 2.0], np.float32), np.array([2.0, 4.0], np.float32)], opset=13)
    assert m[0].tolist() == [1.5, 3.0]


def test_legacy_broadcast_axis() -> None:
    a = _data((2, 3, 4, 5), np.float32)
    b = _data((3, 4), np.float32)
    for op, fn in (("Add", np.add), ("Mul", np.multiply), ("Sub", np.subtract), ("Div", np.divide)):
        want = fn(a, b.reshape(3, 4, 1))
        check_op(op, [a, b], {"broadcast": 1, "axis": 1}, opset=6, expected=[want])
    c = _data((5,), np.float32)
    check_op("Add", [a, c], {"broadcast": 1}, opset=6, expected=[a + c])
    check_op("Add", [a, a], opset=6, expected=[a + a])
    check_op("Pow", [np.abs(a) + 1, b], {"broadcast": 1, "axis": 1}, opset=6,
             expected=[np.power(np.abs(a) + 1, b.reshape(3, 4, 1))], rtol=1e-5)
    eq = np.equal(a, b.reshape(3, 4, 1))
    check_op("Equal", [a, b], {"broadcast": 1, "axis": 1}, opset=6, expected=[eq])
    (d,) = infer("Add", [TensorDesc(1, (2, 3, 4, 5)), TensorDesc(1, (3, 4))], {"broadcast": 1, "axis": 1}, 6)
    assert d.shape == (2, 3, 4, 5)
    with pytest.raises(ShapeError, match="axis"):
        infer("Add", [TensorDesc(1, (2, 3, 4, 5)), TensorDesc(1, (4, 5))], {"broadcast": 1, "axis": 3}, 6)


def test_infer_symbolic_and_errors() -> None:
    (d,) = infer("Add", [TensorDesc(1, ("N", 3, 1)), TensorDesc(1, (1, 4))])
    assert d == TensorDesc(1, ("N", 3, 4))
    (d,) = infer("Less", [TensorDesc(6, ("N", None)), TensorDesc(6, None)])
    assert d.dtype == DType.BOOL and d.shape is None
    (d,) = infer("Where", [TensorDesc(9, (2, 1)), TensorDesc(7, (1, "K")), TensorDesc(7, ())])
    assert d == TensorDesc(7, (2, "K"))
    (d,) = infer("Max", [TensorDesc(1, (2, 1)), TensorDesc(1, (3,)), TensorDesc(1, (1, 1, 1))])
    assert d.shape == (1, 2, 3)
    with pytest.raises(ShapeError, match="broadcast"):
        infer("Mul", [TensorDesc(1, (2, 3)), TensorDesc(1, (4,))])
    with pytest.raises(ShapeError, match="share one dtype"):
        infer("Add", [TensorDesc(1, (2,)), TensorDesc(6, (2,))])
    with pytest.raises(ShapeError, match="expected one of"):
        infer("And", [TensorDesc(1, (2,)), TensorDesc(1, (2,))])
    with pytest.raises(ShapeError, match="fmod"):
        infer("Mod", [TensorDesc(6, (2,)), TensorDesc(6, (2,))], {"fmod": 2})
    with pytest.raises(ShapeError, match="direction"):
        infer("BitShift", [TensorDesc(2, (2,)), TensorDesc(2, (2,))], {"direction": "UP"}, 11)
    with pytest.raises(ShapeError, match="input 0"):
        infer("Where", [TensorDesc(1, (2,)), TensorDesc(1, (2,)), TensorDesc(1, (2,))])


def test_relu_dtypes() -> None:
    for dt in (np.float32, np.float64, np.int8, np.int32, np.int64, np.float16):
        check_or(lambda v: np.maximum(v, 0).astype(v.dtype), "Relu", [_data((3, 4), dt)], opset=14)
    check_op("Relu", [np.zeros((0,), np.float32)])
