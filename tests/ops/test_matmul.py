"""MatMul / Gemm / MatMulInteger / QLinearMatMul / Einsum against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import DType, TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup
from tests.ops.oracle import check_op

RTOL, ATOL = 1e-4, 1e-5
F = int(DType.FLOAT)
RNG = np.random.default_rng(0)


def _r(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return np.asarray(np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape), dtype=dtype)


def _u8(*shape: int) -> np.ndarray:
    return RNG.integers(0, 256, shape).astype(np.uint8)


def _i8(*shape: int) -> np.ndarray:
    return RNG.integers(-128, 128, shape).astype(np.int8)


@pytest.mark.parametrize(
    "a,b",
    [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
     ((2, 3, 4), (4, 2)), ((4,), (2, 4, 3)), ((0, 4), (4, 3)), ((3, 0), (0, 2))],
)
def test_matmul_shapes(a: tuple, b: tuple) -> None:
    check_op("MatMul", [_r(*a), _r(*b)], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 1e-2), (np.float64, 1e-12), (np.int32, 0), (np.int64, 0),
                                       (np.uint32, 0), (np.uint64, 0)])
def test_matmul_dtypes(dtype: type, tol: float) -> None:
    a, b = (_r(2, 3, 4) * 5).astype(dtype), (_r(4, 5) * 5).astype(dtype)
    if dtype in (np.uint32, np.uint64):
        a, b = np.abs(_r(3, 4) * 5).astype(dtype), np.abs(_r(4, 5) * 5).astype(dtype)
    check_op("MatMul", [a, b], rtol=tol, atol=tol)


def test_matmul_old_opset() -> None:
    check_op("MatMul", [_r(3, 4), _r(4, 2)], opset=1, rtol=RTOL, atol=ATOL)
    check_op("MatMul", [_r(3, 4), _r(4, 2)], opset=9, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(
    "attrs,c_shape",
    [({}, (5,)), ({"transA": 1}, (3, 5)), ({"transB": 1, "alpha": 0.5, "beta": 2.0}, (1, 5)),
     ({"alpha": 2.0}, (3, 1)), ({}, ()), ({}, None), ({"beta": 0.0}, (5,)), ({"transA": 1, "transB": 1}, (1, 1))],
)
def test_gemm(attrs: dict, c_shape: tuple | None) -> None:
    a = _r(4, 3) if attrs.get("transA") else _r(3, 4)
    b = _r(5, 4) if attrs.get("transB") else _r(4, 5)
    ins = [a, b] + ([np.asarray(_r(*c_shape) + 1)] if c_shape is not None else [])
    check_op("Gemm", ins, attrs, rtol=RTOL, atol=ATOL)


def test_gemm_dtypes_and_opsets() -> None:
    f16 = [_r(3, 4, dtype=np.float16), _r(4, 5, dtype=np.float16), _r(5, dtype=np.float16)]
    check_op("Gemm", f16, {"alpha": 0.5}, rtol=1e-2, atol=1e-2)
    f64 = [_r(3, 4, dtype=np.float64), _r(4, 5, dtype=np.float64), _r(5, dtype=np.float64)]
    check_op("Gemm", f64, {"alpha": 0.5, "beta": 3.0}, rtol=1e-12, atol=1e-12)
    check_op("Gemm", [_r(3, 4), _r(4, 5), _r(3, 5)], {}, opset=7, rtol=RTOL, atol=ATOL)
    check_op("Gemm", [_r(3, 4), _r(4, 5), _r(5)], {}, opset=9, rtol=RTOL, atol=ATOL)
    a, b, c = (_r(3, 4) * 5).astype(np.int32), (_r(4, 5) * 5).astype(np.int32), (_r(5) * 5).astype(np.int32)
    # ORT has no integer Gemm: numpy golden.
    check_op("Gemm", [a, b, c], {}, expected=[a @ b + c])
    check_op("Gemm", [a.astype(np.int64), b.astype(np.int64)], {"alpha": 2.0}, expected=[(a @ b * 2).astype(np.int64)])


def test_matmul_integer() -> None:
    check_op("MatMulInteger", [_u8(3, 4), _u8(4, 5)])
    check_op("MatMulInteger", [_u8(3, 4), _u8(4, 5), np.array(12, np.uint8), np.array(200, np.uint8)])
    check_op("MatMulInteger", [_i8(2, 3, 400), _i8(400, 5), _i8(1), None])
    # per-column B zero point. uint8 x int8 runs ORT's u8s8 kernel, whose AVX2 form (no VNNI) adds
    # product pairs in saturating int16 (vpmaddubsw): A < 128 keeps ORT exact there; the full range
    # is checked against numpy's int32 product below.
    check_op("MatMulInteger", [_u8(2, 3, 4) // 2, _i8(4, 5), None, _i8(5)])
    a, b, bzp = _u8(2, 3, 4), _i8(4, 5), _i8(5)
    want = a.astype(np.int32) @ (b.astype(np.int32) - bzp.astype(np.int32))
    check_op("MatMulInteger", [a, b, None, bzp], expected=[want])
    check_op("MatMulInteger", [_u8(3, 2000), _u8(2000, 2), np.array(255, np.uint8), np.array(0, np.uint8)])


def test_matmul_integer_per_row_zero_point() -> None:
    """Spec allows per-row A zero points ([M] or [.., M, 1]); ORT's CPU kernel does not."""
    a, b, azp, bzp = _u8(3, 4), _u8(4, 5), _u8(3), _u8(5)
    want = (a.astype(np.int32) - azp.astype(np.int32)[:, None]) @ (b.astype(np.int32) - bzp.astype(np.int32))
    check_op("MatMulInteger", [a, b, azp, bzp], expected=[want])
    a3, azp3 = _u8(2, 3, 4), _u8(2, 3, 1)
    want3 = (a3.astype(np.int32) - azp3) @ (b.astype(np.int32) - bzp.astype(np.int32))
    check_op("MatMulInteger", [a3, b, azp3, bzp], expected=[want3])


@pytest.mark.parametrize("kind", [_u8, _i8])
@pytest.mark.parametrize("per_col", [False, True])
def test_qlinear_matmul(kind, per_col: bool) -> None:  # noqa: ANN001
    a, b = kind(2, 3, 40), kind(40, 5)
    zp = lambda: kind(1).reshape(())  # noqa: E731
    b_s = (np.abs(_r(5)) * 0.02 + 0.01).astype(np.float32) if per_col else np.array(0.03, np.float32)
    b_zp = kind(5) if per_col else zp()
    ins = [a, np.array(0.02, np.float32), zp(), b, b_s, b_zp, np.array(0.5, np.float32), zp()]
    check_op("QLinearMatMul", ins, opset=21 if per_col else 10)


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(3, 3)]),
    ("i,i", [(3,), (3,)]),
    ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bhqd, bhkd -> bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
    ("ijk->", [(2, 3, 4)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)]),
    ("i...->...", [(2, 3, 4)]),
    ("ba", [(2, 3)]),
]


@pytest.mark.parametrize("eq,shapes", EINSUM_CASES)
def test_einsum(eq: str, shapes: list) -> None:
    check_op("Einsum", [_r(*s) for s in shapes], {"equation": eq}, rtol=RTOL, atol=ATOL)


def test_einsum_dtypes() -> None:
    a, b = (_r(3, 4) * 5).astype(np.int64), (_r(4, 5) * 5).astype(np.int64)
    check_op("Einsum", [a, b], {"equation": "ij,jk->ik"})
    check_op("Einsum", [_r(3, 4, dtype=np.float64), _r(4, 5, dtype=np.float64)], {"equation": "ij,jk->ik"},
             rtol=1e-12, atol=1e-12)


def _infer(op: str, descs: list, attrs: dict | None = None, opset: int = 21) -> TensorDesc:
    od = lookup(op, "", opset)
    ctx = InferContext("n", op, od.with_defaults(attrs or {}), descs, [None] * len(descs), opset)
    return od.infer(ctx)[0]


def test_matmul_infer() -> None:
    t = lambda *s: TensorDesc(F, s)  # noqa: E731
    assert _infer("MatMul", [t("B", "M", 4), t(4, "N")]).shape == ("B", "M", "N")
    assert _infer("MatMul", [t(4), t("B", 4, 6)]).shape == ("B", 6)
    assert _infer("MatMul", [t(2, 1, 3, 4), t(5, 4, 2)]).shape == (2, 5, 3, 2)
    assert _infer("MatMul", [t(3, "K"), t("K")]).shape == (3,)
    assert _infer("MatMul", [TensorDesc(F, None), t(3, 4)]).shape is None
    with pytest.raises(ShapeError, match="inner dims"):
        _infer("MatMul", [t(3, 4), t(5, 2)])
    with pytest.raises(ShapeError, match="broadcast"):
        _infer("MatMul", [t(2, 3, 4), t(3, 4, 2)])
    assert _infer("Gemm", [t("M", 4), t(5, 4)], {"transB": 1}).shape == ("M", 5)
    with pytest.raises(ShapeError, match="inner dims"):
        _infer("Gemm", [t(3, 4), t(5, 4)])
    with pytest.raises(ShapeError, match="C"):
        _infer("Gemm", [t(3, 4), t(4, 5), t(2, 5)])
    assert _infer("MatMulInteger", [TensorDesc(int(DType.UINT8), (3, 4)), TensorDesc(int(DType.UINT8), (4, 5))]
                  ) == TensorDesc(int(DType.INT32), (3, 5))
    assert _infer("Einsum", [t("B", 3, 4), t("B", 4, 5)], {"equation": "bij,bjk->bik"}).shape == ("B", 3, 5)
    assert _infer("Einsum", [t(2, 3, 4)], {"equation": "...ij->...ji"}).shape == (2, 4, 3)
    assert _infer("Einsum", [t(3, 4), t(4, 5)], {"equation": "ij,jk"}).shape == (3, 5)
    assert _infer("Einsum", [t(3, 4)], {"equation": "ba"}).shape == (4, 3)
    with pytest.raises(ShapeError, match="label"):
        _infer("Einsum", [t(3, 4), t(5, 6)], {"equation": "ij,jk->ik"})
    with pytest.raises(ShapeError, match="rank"):
        _infer("Einsum", [t(3, 4, 5)], {"equation": "ij->ji"})


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("attrs", [{}, {"transA": 1, "alpha": 0.5, "beta": 2.0}, {"beta": 0.0}])
def test_gemm_out_kernel(dtype: type, attrs: dict) -> None:
    od = lookup("Gemm", "", 13)
    full = od.with_defaults(attrs)
    a = (_r(4, 3) if attrs.get("transA") else _r(3, 4)) * 4
    ins = [a.astype(dtype), (_r(4, 5) * 4).astype(dtype), (_r(5) * 4).astype(dtype)]
    want = od.kernel(ins, full)[0]
    out = np.zeros_like(want)
    od.out_kernel(ins, full, [out])
    np.testing.assert_array_equal(out, want)
