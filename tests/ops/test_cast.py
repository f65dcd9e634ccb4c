"""Cast / CastLike against ONNX Runtime (float8/bfloat16 through a cast back to float; numpy golden otherwise)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper

from pycann.dtypes import DType, TensorDesc, from_numpy
from pycann.errors import ShapeError
from pycann.ops.cast import cast_array
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op, run_ort

NUMERIC = [np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
           np.uint8, np.uint16, np.uint32, np.uint64, np.bool_]

VALUES = np.array([0.0, -0.0, 1.0, -1.0, 1.7, -1.7, 2.5, 100.25, -100.5, 255.0, 300.0, -300.0, 65504.0,
                   70000.0, -70000.0, 3e9, -3e9, 5e18, 1e30, np.nan, np.inf, -np.inf], np.float64)


def infer(op_type: str, descs: list, attrs: dict, opset: int = 21) -> list:
    op = lookup(op_type, "", opset)
    ctx = InferContext("n", op_type, op.with_defaults(attrs), descs, [None] * len(descs), opset)
    return list(op.infer(ctx))


def _src(dtype: type) -> np.ndarray:
    with np.errstate(all="ignore"):
        return VALUES.astype(dtype).reshape(2, 11)


@pytest.mark.parametrize("src", NUMERIC)
def test_numeric_to_numeric(src: type) -> None:
    x = _src(src)
    for dst in NUMERIC:
        check_op("Cast", [x], {"to": int(from_numpy(np.dtype(dst)))}, opset=13)


def test_empty_and_scalar() -> None:
    check_op("Cast", [np.zeros((0, 3), np.float32)], {"to": TP.INT64})
    check_op("Cast", [np.array(3.7, np.float64)], {"to": TP.INT32})
    check_op("Cast", [np.array([], np.float32)], {"to": TP.STRING})


def test_to_string() -> None:
    f = np.array([0.1, 1e20, np.nan, np.inf, -np.inf, -0.0, 1.5, 123456789.0, 1e-7, 3.14159265, 1e15, 100.0],
                 np.float32)
    check_op("Cast", [f], {"to": TP.STRING})
    check_op("Cast", [f.astype(np.float64)], {"to": TP.STRING})
    check_op("Cast", [np.array([1 / 3, 2.5e-300, 12345678.9], np.float64)], {"to": TP.STRING})
    check_op("Cast", [np.array([1.5, -2.0, 0.1], np.float16)], {"to": TP.STRING})
    check_op("Cast", [np.array([[1, -3], [0, 7]], np.int32)], {"to": TP.STRING})
    check_op("Cast", [np.array([2**63 - 1, -(2**63)], np.int64)], {"to": TP.STRING})
    check_op("Cast", [np.array([2**64 - 1], np.uint64)], {"to": TP.STRING})
    out = check_op("Cast", [np.array([True, False])], {"to": TP.STRING})
    assert out[0].dtype == object and out[0].tolist() == ["1", "0"]


def test_from_string() -> None:
    floats = np.array([["1.5", " 2", "-3e2", "inf"], ["NaN", "0x10", "-INF", "12abc"], ["1e-50", "+7", ".5", "nan"]],
                      dtype=object)
    for to in (TP.FLOAT, TP.DOUBLE, TP.FLOAT16):
        check_op("Cast", [floats], {"to": to})
    ints = np.array(["12", "-3", " 7", "300", "1.5", "99999999999", "+4"], dtype=object)
    for to in (TP.INT32, TP.INT64, TP.UINT8, TP.INT8, TP.UINT64, TP.INT16, TP.UINT32):
        check_op("Cast", [ints], {"to": to})
    check_op("Cast", [np.array(["0.5", "0", "1", "-1", "2.5", "0x1"], dtype=object)], {"to": TP.BOOL})
    check_op("Cast", [np.array(["a", "bc"], dtype=object)], {"to": TP.STRING})
    out = cast_array(np.array(["1.25", "x"], dtype=np.str_)[:1], TP.FLOAT)
    assert out.dtype == np.float32 and out.tolist() == [1.25]
    assert cast_array(np.array([b"3.5"], dtype=object), TP.DOUBLE).tolist() == [3.5]
    with pytest.raises(ValueError, match="number"):
        cast_array(np.array(["hello"], dtype=object), TP.FLOAT)


def _roundtrip_ort(x: np.ndarray, to: int, back: int, attrs: dict, opset: int = 21) -> np.ndarray:
    n1 = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    n2 = helper.make_node("Cast", ["y"], ["z"], to=back)
    g = helper.make_graph([n1, n2], "g", [helper.make_tensor_value_info("x", int(from_numpy(x.dtype)), x.shape)],
                          [helper.make_empty_tensor_value_info("z")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return run_ort(m, {"x": x})[0]


def _roundtrip(x: np.ndarray, to: int, back: int, attrs: dict, opset: int = 21) -> np.ndarray:
    """pycann Cast(to) then Cast(back); asserts the middle dtype and compares with ORT."""
    cast = lookup("Cast", "", opset)
    (mid,) = cast.kernel([x], cast.with_defaults({"to": to, **attrs}))
    assert mid.dtype == np.dtype({TP.BFLOAT16: ml_dtypes.bfloat16, TP.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn,
                                  TP.FLOAT8E4M3FNUZ: ml_dtypes.float8_e4m3fnuz, TP.FLOAT8E5M2: ml_dtypes.float8_e5m2,
                                  TP.FLOAT8E5M2FNUZ: ml_dtypes.float8_e5m2fnuz}[to])
    (got,) = cast.kernel([mid], cast.with_defaults({"to": back}))
    want = _roundtrip_ort(x, to, back, attrs, opset)
    np.testing.assert_array_equal(got, want)
    return got


F8 = [TP.FLOAT8E4M3FN, TP.FLOAT8E4M3FNUZ, TP.FLOAT8E5M2, TP.FLOAT8E5M2FNUZ]
F8_VALUES = np.array([0, -0.0, 1, 1000, 448, 464, 500, 1e9, -1e9, np.inf, -np.inf, np.nan, 0.0013, -3.3, 57344,
                      70000, 1e-9, 0.1, 240, 250, -0.3], np.float32)


@pytest.mark.parametrize("to", F8)
@pytest.mark.parametrize("saturate", [1, 0])
def test_float8(to: int, saturate: int) -> None:
    x = np.concatenate([F8_VALUES, np.random.default_rng(2).normal(0, 50, 200).astype(np.float32)])
    _roundtrip(x, to, TP.FLOAT, {"saturate": saturate})
    _roundtrip(x.astype(np.float64), to, TP.DOUBLE, {"saturate": saturate})
    with np.errstate(over="ignore"):
        x16 = x.astype(np.float16)
    _roundtrip(x16, to, TP.FLOAT, {"saturate": saturate})
    _roundtrip(np.array([3, -7, 100000, 0], np.int32), to, TP.FLOAT, {"saturate": saturate})


def test_bfloat16() -> None:
    x = np.concatenate([F8_VALUES, np.random.default_rng(3).normal(0, 1e3, 100).astype(np.float32)])
    _roundtrip(x, TP.BFLOAT16, TP.FLOAT, {}, opset=13)
    _roundtrip(x.astype(np.float64) + 1e-9, TP.BFLOAT16, TP.DOUBLE, {}, opset=13)
    _roundtrip(np.array([1, -5, 2**20 + 1], np.int64), TP.BFLOAT16, TP.FLOAT, {}, opset=13)
    bf = x.astype(ml_dtypes.bfloat16)
    fin = np.isfinite(x)
    for to, dt in ((TP.INT32, np.int32), (TP.FLOAT16, np.float16), (TP.BOOL, np.bool_)):
        with np.errstate(over="ignore"):
            want = bf[fin].astype(np.float32).astype(dt)
        check_op("Cast", [bf[fin]], {"to": to}, opset=13, expected=[want])


def test_float64_to_float16_rounds_through_float32() -> None:
    x = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40], np.float64)
    out = check_op("Cast", [x], {"to": TP.FLOAT16})
    assert out[0][0] == 1.0


def test_e8m0() -> None:
    x = np.array([1.0, 3.0, 1.5, 0.7, 2.0**127, 2.0**127 * 1.5, np.inf, np.nan, 0.0, 1.2], np.float32)
    e = [127, 128, 127, 126, 254, 254]  # biased exponents for round_mode=down (ties: 3.0 -> 4 for nearest)
    up = [127, 129, 128, 127, 254, 254, 254, 255, 0, 128]
    near = [127, 129, 128, 126, 254, 254, 254, 255, 0, 127]

    def codes(v: np.ndarray) -> list[int]:
        return v.view(np.uint8).tolist()

    def run(mode: str, sat: int) -> np.ndarray:
        (out,) = lookup("Cast", "", 25).kernel([x], {"to": TP.FLOAT8E8M0, "saturate": sat, "round_mode": mode})
        assert out.dtype == ml_dtypes.float8_e8m0fnu
        return out

    assert codes(run("down", 1))[:6] == e
    assert codes(run("up", 1)) == up
    assert codes(run("nearest", 1)) == near
    nonsat = codes(run("up", 0))
    assert nonsat[5] == 255 and nonsat[6] == 255 and nonsat[8] == 255 and nonsat[1] == 129


def test_int4_and_float4() -> None:
    x = np.array([1, 7, 8, -9, 20, -1], np.int32)
    check_op("Cast", [x], {"to": TP.INT4}, opset=21, expected=[x.astype(ml_dtypes.int4)])
    check_op("Cast", [x], {"to": TP.UINT4}, opset=21, expected=[x.astype(ml_dtypes.uint4)])
    f = np.array([1.6, -1.6, 2.5, 0.25, 0.75, 1e10], np.float32)
    check_op("Cast", [f], {"to": TP.FLOAT4E2M1}, opset=23, expected=[f.astype(ml_dtypes.float4_e2m1fn)])
    i4 = x.astype(ml_dtypes.int4)
    check_op("Cast", [i4], {"to": TP.FLOAT}, opset=21, expected=[i4.astype(np.float32)])
    check_op("Cast", [i4], {"to": TP.STRING}, opset=21, expected=[np.array(["1", "7", "-8", "7", "4", "-1"], object)])


def test_cast_like() -> None:
    x = _src(np.float32)
    for dt in (np.int32, np.float16, np.uint8, np.float64, np.bool_):
        check_op("CastLike", [x, np.zeros((1,), dt)], opset=15)
    check_op("CastLike", [np.array(["1.5"], object), np.zeros((), np.float32)], opset=15)
    x8 = F8_VALUES
    (out,) = lookup("CastLike", "", 19).kernel([x8, np.zeros(1, ml_dtypes.float8_e4m3fn)], {"saturate": 0,
                                                                                            "round_mode": "up"})
    np.testing.assert_array_equal(out.astype(np.float32), _roundtrip_ort(x8, TP.FLOAT8E4M3FN, TP.FLOAT,
                                                                        {"saturate": 0}))


def test_cast_old_string_to() -> None:
    x = np.array([1.7, -2.2], np.float32)
    check_op("Cast", [x], {"to": "INT32"}, opset=1, expected=[np.array([1, -2], np.int32)])
    (d,) = infer("Cast", [TensorDesc(1, (2,))], {"to": "float16"}, opset=1)
    assert d.dtype == DType.FLOAT16


def test_infer() -> None:
    assert infer("Cast", [TensorDesc(1, ("N", 3))], {"to": TP.INT64}) == [TensorDesc(7, ("N", 3))]
    assert infer("Cast", [TensorDesc(1, None)], {"to": TP.STRING}) == [TensorDesc(8, None)]
    assert infer("CastLike", [TensorDesc(1, (2,)), TensorDesc(10, ())], {}) == [TensorDesc(10, (2,))]
    with pytest.raises(ShapeError, match="attribute to"):
        infer("Cast", [TensorDesc(1, (2,))], {"to": 99})
    with pytest.raises(ShapeError, match="attribute to"):
        infer("Cast", [TensorDesc(1, (2,))], {"to": "NOPE"})
    with pytest.raises(ShapeError, match="required attribute 'to'"):
        lookup("Cast", "", 13).with_defaults({})
    with pytest.raises(ShapeError, match="round_mode"):
        infer("Cast", [TensorDesc(1, (2,))], {"to": TP.FLOAT8E8M0, "round_mode": "sideways"}, opset=25)
    assert onnx.helper.tensor_dtype_to_np_dtype(TP.FLOAT) == np.float32
