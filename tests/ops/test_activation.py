"""Unary math and activation ops against ONNX Runtime (numpy/math golden where ORT lacks a case)."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops import erf_gelu, registry
from pycann.ops.opdef import InferContext
from tests.ops.oracle import check_op, run_ort, single_node_model

RNG = np.random.default_rng(1)


def check_or(golden, op: str, inputs: list, attrs: dict | None = None, **kw) -> list[np.ndarray]:
    """check_op against ORT; where ORT has no kernel for the case, against ``golden(*inputs)``."""
    try:
        return check_op(op, inputs, attrs, **kw)
    except Exception as e:
        if "NOT_IMPLEMENTED" not in str(e) and "Type Error" not in str(e):  # ORT lacks the type
            raise
    return check_op(op, inputs, attrs, expected=[golden(*inputs)], **kw)


def infer(op_type: str, descs: list, attrs: dict | None = None, opset: int = 20) -> list:
    op = registry.lookup(op_type, "", opset)
    ctx = InferContext("n", op_type, op.with_defaults(attrs or {}), descs, [None] * len(descs), opset)
    return list(op.infer(ctx))


X32 = RNG.uniform(-4, 4, size=(3, 4, 5)).astype(np.float32)
X32[0, 0, :3] = [0.0, -0.0, 0.5]

MATH = {
    "Abs": np.abs, "Neg": np.negative, "Exp": np.exp, "Floor": np.floor, "Ceil": np.ceil,
    "Sin": np.sin, "Cos": np.cos, "Tan": np.tan, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh,
    "Asinh": np.arcsinh, "Tanh": np.tanh, "Sign": np.sign, "Round": np.rint, "Erf": None,
}


@pytest.mark.parametrize("op", sorted(MATH))
def test_math_float(op: str) -> None:
    check_op(op, [X32], opset=13, rtol=2e-6)
    check_or(MATH[op] or (lambda v: np.vectorize(math.erf)(v)), op, [X32.astype(np.float64)], opset=13, rtol=1e-12)
    f16 = X32.astype(np.float16)
    check_or(lambda v: (MATH[op] or np.vectorize(math.erf))(v.astype(np.float32)).astype(np.float16),
             op, [f16], opset=13, rtol=1e-3, atol=1e-3)
    check_op(op, [np.zeros((0, 3), np.float32)], opset=13)


def test_math_domains() -> None:
    pos = RNG.uniform(0.01, 10, size=(4, 6)).astype(np.float32)
    unit = RNG.uniform(-0.99, 0.99, size=(4, 6)).astype(np.float32)
    for op in ("Log", "Sqrt", "Reciprocal"):
        check_op(op, [pos])
        check_op(op, [pos.astype(np.float64)])
    for op in ("Asin", "Acos", "Atanh"):
        check_op(op, [unit])
    check_op("Acosh", [pos + 1])
    check_op("Log", [np.array([0.0, -1.0, np.inf, np.nan], np.float32)])
    check_op("Sqrt", [np.array([-1.0, np.inf], np.float32)])


def test_round_half_even_and_sign_ints() -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -3.7, np.nan], np.float32)
    out = check_op("Round", [x])
    assert out[0][:6].tolist() == [0, 2, 2, 0, -2, -2]
    for dt in (np.int32, np.int64, np.int8, np.uint8):
        v = RNG.integers(0 if dt == np.uint8 else -5, 6, size=(7,)).astype(dt)
        check_op("Sign", [v])
        check_op("Abs", [v])
        if dt != np.uint8:
            check_op("Neg", [v])


def test_erf_accuracy() -> None:
    """Erf vs math.erf: float32 within 1e-6 relative, float64 within 1e-13 relative."""
    x = np.concatenate([np.linspace(-7, 7, 20001), [1e-30, -1e-30, 1e-8, 0.5, 0.75, 4.0, 6.0, 30.0]])
    ref = np.array([math.erf(v) for v in x])
    got64 = erf_gelu.erf(x)
    np.testing.assert_allclose(got64, ref, rtol=1e-13, atol=0)
    x32 = x.astype(np.float32)
    ref32 = np.array([math.erf(v) for v in x32.astype(np.float64)])
    got32 = erf_gelu.erf(x32)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, ref32, rtol=1e-6, atol=0)
    special = erf_gelu.erf(np.array([np.inf, -np.inf, np.nan, -0.0], np.float32))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2]) and np.signbit(special[3])
    check_op("Erf", [np.linspace(-5, 5, 1001, dtype=np.float32)], rtol=1e-6, atol=1e-7)
    check_op("Erf", [np.array([-2, 0, 1, 3], np.int32)], expected=[np.array([0, 0, 0, 0], np.int32)])


def test_isnan_isinf() -> None:
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0], np.float32)
    for dt in (np.float32, np.float64, np.float16):
        check_op("IsNaN", [x.astype(dt)], opset=20)
        for neg in (0, 1):
            for pos in (0, 1):
                check_op("IsInf", [x.astype(dt)], {"detect_negative": neg, "detect_positive": pos}, opset=20)
    bf = x.astype(ml_dtypes.bfloat16)
    check_op("IsNaN", [bf], opset=20, expected=[np.isnan(x)])
    f8 = x.astype(ml_dtypes.float8_e5m2)
    check_op("IsInf", [f8], opset=20, expected=[np.isinf(x)])


ACT = [
    ("Sigmoid", {}), ("Tanh", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("LeakyRelu", {}), ("LeakyRelu", {"alpha": 0.3}), ("Elu", {}), ("Elu", {"alpha": 0.5}),
    ("Selu", {}), ("Selu", {"alpha": 1.5, "gamma": 2.0}), ("Celu", {}), ("Celu", {"alpha": 2.0}),
    ("ThresholdedRelu", {}), ("ThresholdedRelu", {"alpha": 0.5}), ("Softplus", {}), ("Softsign", {}),
    ("Mish", {}), ("Shrink", {}), ("Shrink", {"bias": 0.3, "lambd": 1.0}), ("Gelu", {}),
    ("Gelu", {"approximate": "tanh"}), ("Relu", {}),
]


@pytest.mark.parametrize("op,attrs", ACT)
def test_activation_float32(op: str, attrs: dict) -> None:
    check_op(op, [X32], attrs, opset=20, rtol=2e-6, atol=1e-6)
    big = np.array([-1e4, -100.0, -88.8, 88.8, 100.0, 1e4, np.inf, -np.inf, 0.0], np.float32)
    with warnings.catch_warnings():  # kernels must not warn on extreme inputs
        warnings.simplefilter("error", RuntimeWarning)
        out = check_op(op, [big], attrs, opset=20, rtol=1e-5, atol=1e-6)
    assert out[0].dtype == np.float32
    check_op(op, [np.zeros((2, 0), np.float32)], attrs, opset=20)


@pytest.mark.parametrize("op,attrs", ACT)
def test_activation_other_floats(op: str, attrs: dict) -> None:
    x64 = X32.astype(np.float64)

    def golden32(v: np.ndarray) -> np.ndarray:
        model, feeds = single_node_model(op, [v.astype(np.float32)], attrs, 1, 20)
        return run_ort(model, feeds)[0].astype(v.dtype)

    check_or(golden32, op, [x64], attrs, opset=20, rtol=2e-6, atol=1e-6)
    check_or(golden32, op, [X32.astype(np.float16)], attrs, opset=20, rtol=2e-3, atol=2e-3)
    bf = X32.astype(ml_dtypes.bfloat16)
    out = check_op(op, [bf], attrs, opset=20, expected=[golden32(bf)])
    assert out[0].dtype == bf.dtype


def test_sigmoid_large_negative_precise() -> None:
    x = np.array([-30.0, -80.0, -100.0], np.float32)
    out = check_op("Sigmoid", [x], expected=[(1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)], atol=0)
    assert out[0][0] > 0


def test_shrink_ints() -> None:
    for dt in (np.int32, np.int8, np.int64, np.uint8):
        v = RNG.integers(0 if dt == np.uint8 else -5, 6, size=(8,)).astype(dt)
        check_op("Shrink", [v], {"bias": 1.0, "lambd": 1.5})


def test_clip() -> None:
    lo, hi = np.array(-1.0, np.float32), np.array(2.0, np.float32)
    check_op("Clip", [X32, lo, hi], opset=13)
    check_op("Clip", [X32, lo], opset=13)
    check_op("Clip", [X32, None, hi], opset=13)
    check_op("Clip", [X32], opset=13)
    check_op("Clip", [X32, hi, lo], opset=13)  # min > max: everything becomes max
    check_op("Clip", [X32, lo, hi], opset=13, const_inputs=[1, 2])
    check_op("Clip", [np.array([np.nan, 5.0], np.float32), lo, hi], opset=13)
    for dt in (np.int32, np.int64, np.int8, np.uint8, np.uint64):
        v = RNG.integers(0, 100, size=(3, 4)).astype(dt)
        check_op("Clip", [v, np.array(10, dt), np.array(50, dt)], opset=13)
        check_op("Clip", [v, None, np.array(50, dt)], opset=13)
    check_or(lambda v, a, b: np.clip(v, a, b), "Clip", [X32.astype(np.float16), lo.astype(np.float16),
                                                         hi.astype(np.float16)], opset=13)
    bf = X32.astype(ml_dtypes.bfloat16)
    check_op("Clip", [bf, lo.astype(bf.dtype), hi.astype(bf.dtype)], opset=13,
             expected=[np.clip(X32, -1, 2).astype(bf.dtype)])
    check_op("Clip", [np.zeros((0,), np.float32), lo, hi], opset=13)
    check_op("Clip", [X32, np.array([-1.0], np.float32), np.array([], np.float32)], opset=13,
             expected=[np.maximum(X32, -1)])


def test_prelu() -> None:
    x = RNG.uniform(-3, 3, size=(2, 3, 4, 5)).astype(np.float32)
    for slope_shape in [(3, 1, 1), (5,), (1,), (2, 3, 4, 5), (4, 1)]:
        check_op("PRelu", [x, RNG.uniform(0, 1, size=slope_shape).astype(np.float32)], opset=16)
    for dt in (np.int32, np.int64, np.float64):
        check_op("PRelu", [x.astype(dt), np.array([2, 3, -1], dt).reshape(3, 1, 1)], opset=16)
    check_op("PRelu", [x.astype(np.float16), np.array([0.25], np.float16)], opset=16, rtol=1e-3)
    check_op("PRelu", [x, np.array([0.1], np.float32)], opset=6, expected=[np.where(x < 0, x * np.float32(0.1), x)])


def test_infer_checks() -> None:
    assert infer("Sigmoid", [TensorDesc(1, ("N", 3))]) == [TensorDesc(1, ("N", 3))]
    assert infer("IsNaN", [TensorDesc(10, (2, None))]) == [TensorDesc(int(DType.BOOL), (2, None))]
    assert infer("Clip", [TensorDesc(6, None), None, TensorDesc(6, ())]) == [TensorDesc(6, None)]
    assert infer("PRelu", [TensorDesc(1, ("N", 3, 8, 8)), TensorDesc(1, (3, 1, 1))])[0].shape == ("N", 3, 8, 8)
    with pytest.raises(ShapeError, match="unidirectionally"):
        infer("PRelu", [TensorDesc(1, (3, 1)), TensorDesc(1, (3, 4))])
    with pytest.raises(ShapeError, match="expected one of"):
        infer("Exp", [TensorDesc(6, (2,))])
    with pytest.raises(ShapeError, match="scalar"):
        infer("Clip", [TensorDesc(1, (4,)), TensorDesc(1, (2,))])
    with pytest.raises(ShapeError, match="share one dtype"):
        infer("Clip", [TensorDesc(1, (4,)), TensorDesc(11, ())])
    with pytest.raises(ShapeError, match="approximate"):
        infer("Gelu", [TensorDesc(1, (4,))], {"approximate": "fast"})


def test_old_opsets() -> None:
    x = X32[0]
    check_op("Sigmoid", [x], opset=6)
    check_op("LeakyRelu", [x], {"alpha": 0.2}, opset=6)
    check_op("Elu", [x], opset=6)
    check_op("HardSigmoid", [x], opset=6)
    check_op("Clip", [x, np.array(-1, np.float32), np.array(1, np.float32)], opset=11)


@pytest.mark.parametrize("op,attrs", [("Gelu", {}), ("Erf", {}), ("Sigmoid", {}), ("Mish", {}), ("Elu", {}),
                                      ("Softplus", {}), ("Celu", {"alpha": 0.5})])
def test_large_tensor_chunks(op: str, attrs: dict) -> None:
    """Tensors past the chunking threshold (and of odd size) give the same answers."""
    x = RNG.uniform(-6, 6, size=(3, 70001)).astype(np.float32)
    check_op(op, [x], attrs, opset=20, rtol=2e-6, atol=1e-6)
    check_op(op, [x[:, ::2]], attrs, opset=20, rtol=2e-6, atol=1e-6)  # non-contiguous input


@pytest.mark.parametrize("op,attrs", ACT + [("Erf", {}), ("Exp", {}), ("Abs", {}), ("IsNaN", {})])
def test_scalar_input(op: str, attrs: dict) -> None:
    """0-d tensors come back as 0-d ndarrays (numpy ufuncs would hand back scalars)."""
    for v in (-0.7, 1.3):
        check_op(op, [np.array(v, np.float32)], attrs, opset=20)
        check_or(lambda t: check_op(op, [t.astype(np.float32)], attrs, opset=20)[0].astype(np.float16),
                 op, [np.array(v, np.float16)], attrs, opset=20, rtol=2e-3, atol=2e-3)


def test_scalar_prelu_clip() -> None:
    x = np.array(-1.5, np.float32)
    check_op("PRelu", [x, np.array(0.5, np.float32)], opset=16)
    check_op("PRelu", [np.array(-3, np.int32), np.array(2, np.int32)], opset=16)
    check_op("Clip", [x, np.array(-1.0, np.float32), None], opset=13)
