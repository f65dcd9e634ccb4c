"""The onednn provider's matmul (oneDNN's C API through ctypes) against numpy (float64) and ONNX
Runtime: BERT / GPT-2 shapes (scaled down, and a few full size), batched and broadcast batch
dims, transposed / sliced / broadcast views, 1-D operands, ``out=``, empty dims, Gemm's
alpha/beta/C, and the bound constant-B kernel with bias, residual and activation post-ops.
Skipped when libdnnl v3 is not installed."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper

from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

from pycann.kernels.providers import onednn_matmul as om  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4


@pytest.fixture(autouse=True)
def _all_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small products go to numpy by default; here every product is given to oneDNN."""
    monkeypatch.setattr(om, "SMALL_FLOPS", 0)


def _r(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values ~N(0, 1/K) for K = the last dim, so products stay ~1."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) / math.sqrt(shape[-1] if shape else 1)).astype(np.float32)


def _ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _native(fn: Any, *args: Any) -> Any:
    """Call ``fn`` and assert oneDNN (not the numpy fallback) computed it."""
    before = set(om._plans)
    y = fn(*args)
    new = [om._plans[k] for k in set(om._plans) - before]
    assert new == [] or all(p is not None for p in new), "oneDNN rejected this signature"
    return y


# (name, A shape, B shape): BERT-base / MiniLM / GPT-2 GEMMs, scaled down, and full size
SHAPES = [
    ("qkv_proj", (1, 16, 96), (96, 96)),
    ("ffn_up", (1, 16, 96), (96, 384)),
    ("ffn_down", (1, 16, 384), (96 * 4, 96)),
    ("attn_scores", (1, 4, 16, 24), (1, 4, 24, 16)),
    ("attn_context", (1, 4, 16, 16), (1, 4, 16, 24)),
    ("lm_head_wide_n", (1, 8, 64), (64, 5027)),
    ("full_ffn_up", (128, 768), (768, 3072)),
    ("full_batched_scores", (12, 128, 64), (12, 64, 128)),
    ("broadcast_batch", (2, 1, 8, 16), (3, 16, 12)),
    ("broadcast_b_2d", (3, 5, 8, 16), (16, 12)),
    ("gemv_m1", (1, 64), (64, 32)),
]


@pytest.mark.parametrize("name,sa,sb", SHAPES, ids=[s[0] for s in SHAPES])
def test_matmul_values(name: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = _r(sa, 1), _r(sb, 2)
    y = _native(om.matmul, a, b)
    ref = _ref(a, b)
    assert y.shape == ref.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_matmul_against_ort() -> None:
    a, b = _r((2, 16, 64), 3), _r((64, 48), 4)
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "t",
                          [helper.make_tensor_value_info("a", TensorProto.FLOAT, a.shape),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape)],
                          [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    np.testing.assert_allclose(om.matmul(a, b), run_ort(model, {"a": a, "b": b})[0], rtol=RTOL, atol=ATOL)


VIEWS = [
    ("a_transposed", lambda: (_r((64, 32), 1).T, _r((64, 48), 2))),
    ("b_transposed", lambda: (_r((32, 64), 1), _r((48, 64), 2).T)),
    ("both_transposed", lambda: (_r((64, 32), 1).T, _r((48, 64), 2).T)),
    ("batched_kt", lambda: (_r((4, 16, 24), 1), _r((4, 16, 24), 2).transpose(0, 2, 1))),
    ("sliced_rows_cols", lambda: (_r((40, 80), 1)[3:35, 5:69], _r((70, 100), 2)[:64, 10:58])),
    ("head_split_view", lambda: (_r((16, 4, 24), 1).transpose(1, 0, 2), _r((16, 4, 24), 2).transpose(1, 2, 0))),
    ("broadcast_to_b", lambda: (_r((6, 16, 32), 1), np.broadcast_to(_r((32, 20), 2), (6, 32, 20)))),
]


@pytest.mark.parametrize("name,make", VIEWS, ids=[v[0] for v in VIEWS])
def test_matmul_views(name: str, make: Any) -> None:
    a, b = make()
    assert not (a.flags.c_contiguous and b.flags.c_contiguous)
    y = _native(om.matmul, a, b)
    np.testing.assert_allclose(y, _ref(a, b), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("sa,sb", [((64,), (64, 20)), ((30, 64), (64,)), ((64,), (3, 64, 20)),
                                   ((4, 30, 64), (64,)), ((64,), (64,))])
def test_matmul_1d(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = _r(sa, 1), _r(sb, 2)
    y = om.matmul(a, b)
    ref = _ref(a, b)
    assert np.shape(y) == ref.shape
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_matmul_out() -> None:
    a, b = _r((2, 16, 32), 1), _r((32, 24), 2)
    out = np.full((2, 16, 24), np.nan, np.float32)
    y = _native(om.matmul, a, b, out)
    assert np.shares_memory(y, out)
    np.testing.assert_allclose(out, _ref(a, b), rtol=RTOL, atol=ATOL)
    strided = np.full((2, 24, 16), np.nan, np.float32).transpose(0, 2, 1)  # non-contiguous out
    y = om.matmul(a, b, strided)
    np.testing.assert_allclose(strided, _ref(a, b), rtol=RTOL, atol=ATOL)
    o1 = np.empty((20,), np.float32)  # squeezed 1-D result into out
    v, w = _r((64,), 3), _r((64, 20), 4)
    om.matmul(v, w, o1)
    np.testing.assert_allclose(o1, _ref(v, w), rtol=RTOL, atol=ATOL)


def test_matmul_out_overlapping_input() -> None:
    a = _r((32, 32), 1)
    b = _r((32, 32), 2)
    ref = _ref(a, b)
    y = om.matmul(a, b, a)  # out aliases A: computed aside, numpy semantics
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("sa,sb", [((0, 16), (16, 8)), ((4, 0), (0, 8)), ((4, 16), (16, 0)), ((0, 4, 16), (16, 8))])
def test_matmul_empty(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a, b = np.ones(sa, np.float32), np.ones(sb, np.float32)
    y = om.matmul(a, b)
    np.testing.assert_array_equal(y, np.matmul(a, b))


def test_matmul_fallbacks() -> None:
    a64, b64 = _r((8, 16), 1).astype(np.float64), _r((16, 4), 2).astype(np.float64)
    assert om.matmul(a64, b64).dtype == np.float64
    a, b = _r((8, 16), 1), _r((16, 4), 2)
    np.testing.assert_allclose(om.matmul(a[::-1], b), _ref(a[::-1], b), rtol=RTOL, atol=ATOL)  # negative stride
    with pytest.raises(ValueError):
        om.matmul(a, _r((15, 4), 2))  # numpy's error


def test_small_products_stay_on_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(om, "SMALL_FLOPS", 1 << 20)
    before = dict(om._plans)
    a, b = _r((4, 8), 1), _r((8, 4), 2)
    np.testing.assert_allclose(om.matmul(a, b), _ref(a, b), rtol=RTOL, atol=ATOL)
    assert dict(om._plans) == before


GEMMS = [
    (1.0, 1.0, (48,)),
    (1.0, 1.0, (1, 48)),
    (0.5, 2.0, (48,)),
    (1.0, 1.0, (32, 48)),
    (1.5, 0.5, (32, 48)),
    (1.0, 0.3, (32, 1)),
    (2.0, 1.0, None),
    (1.0, 1.0, ()),
    (1.0, 0.0, (32, 48)),
]


@pytest.mark.parametrize("trans", [False, True])
@pytest.mark.parametrize("alpha,beta,cs", GEMMS)
def test_gemm(alpha: float, beta: float, cs: tuple[int, ...] | None, trans: bool) -> None:
    a = _r((32, 64), 1)
    b = _r((48, 64), 2).T if trans else _r((64, 48), 2)
    c = None if cs is None else _r(cs, 3) if cs else np.asarray(0.7, np.float32)
    ref = nb.gemm(a.astype(np.float64), b.astype(np.float64), None if c is None else c.astype(np.float64), alpha, beta)
    y = om.gemm(a, b, c, alpha, beta)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    out = np.empty((32, 48), np.float32)
    y = om.gemm(a, b, c, alpha, beta, out)
    np.testing.assert_allclose(out if np.shares_memory(y, out) else y, ref, rtol=RTOL, atol=ATOL)


def test_gemm_resnet_head() -> None:
    """ResNet-50's classifier, full size: (1, 2048) x W^T (1000, 2048) + b."""
    a, w, c = _r((1, 2048), 1), _r((1000, 2048), 2), _r((1000,), 3)
    y = _native(om.gemm, a, w.T, c, 1.0, 1.0)
    np.testing.assert_allclose(y, _ref(a, w.T) + c, rtol=RTOL, atol=ATOL)


_erf = np.frompyfunc(math.erf, 1, 1)
ACTS = {
    None: lambda v: v,
    "Relu": lambda v: np.maximum(v, 0),
    "Gelu": lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2)).astype(np.float64)),
    "Tanh": np.tanh,
}


@pytest.mark.parametrize("bias_shape", [None, (96,), (1, 1, 96)])
@pytest.mark.parametrize("act", list(ACTS), ids=[str(a) for a in ACTS])
def test_bound_matmul(act: str | None, bias_shape: tuple[int, ...] | None) -> None:
    a, b = _r((1, 16, 64), 1), _r((64, 96), 2)
    bias = None if bias_shape is None else _r(bias_shape, 3)
    k = onednn_bound(b, bias, a.shape, act)
    assert k is not None and k.writes_out
    ref = _ref(a, b) + (0 if bias is None else bias.astype(np.float64))
    ref = ACTS[act](ref).astype(np.float64)
    (y,) = k([a, b] + ([bias] if bias is not None else []), {})
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    out = np.full(ref.shape, np.nan, np.float32)
    k([a], {}, [out])  # into the arena view
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    strided_out = np.full((96, 16), np.nan, np.float32).T[None]  # not C-contiguous: computed aside, copied
    k([a], {}, [strided_out])
    np.testing.assert_allclose(strided_out, ref, rtol=RTOL, atol=ATOL)
    k([np.asfortranarray(a[0])[None]], {}, [out])  # a non-contiguous A is copied first
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)


def onednn_bound(b: np.ndarray, bias: np.ndarray | None, a_shape: tuple[int, ...], act: str | None) -> Any:
    return om.bound_matmul(b, bias, a_shape, onednn.onednn_unary(act, 0.0, 0.0) if act else None)


def test_bound_matmul_full_size_gelu() -> None:
    """BERT-base's FFN up-projection with bias + GELU, full size, weight read transposed."""
    a, w, bias = _r((1, 128, 768), 1), _r((3072, 768), 2), _r((3072,), 3)
    k = onednn_bound(w.T, bias, a.shape, "Gelu")
    ref = ACTS["Gelu"](_ref(a, w.T) + bias).astype(np.float64)
    np.testing.assert_allclose(k([a], {})[0], ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("act", [None, "Relu", "Gelu"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_bound_matmul_residual(act: str | None, with_bias: bool) -> None:
    """``act(a @ b + bias + residual)``: the residual (inputs[3]) is a binary-add post-op re-pointed
    per call, ahead of the activation; other layouts / dtypes and an overlapping residual are copied."""
    a, b, bias = _r((2, 16, 64), 1), _r((64, 96), 2), _r((96,), 3)
    k = om.bound_matmul(b, bias if with_bias else None, a.shape, onednn.onednn_unary(act, 0.0, 0.0) if act else None,
                        residual=True)
    assert k is not None and k.writes_out
    for seed in (4, 5):  # a new residual every call: the post-op memory follows it
        r = _r((2, 16, 96), seed)
        ref = ACTS[act](_ref(a, b) + (bias if with_bias else 0) + r).astype(np.float64)
        np.testing.assert_allclose(k([a, b, bias, r], {})[0], ref, rtol=RTOL, atol=ATOL)
        out = np.full(ref.shape, np.nan, np.float32)
        k([a, b, bias, r], {}, [out])
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
    for other in (np.asfortranarray(r), r.astype(np.float64), np.repeat(r, 2, axis=-1)[..., ::2]):  # not as planned
        np.testing.assert_allclose(k([a, b, bias, other], {})[0], ref, rtol=RTOL, atol=ATOL)
    inplace = r.copy()  # the residual's own buffer as the destination: read before it is overwritten
    k([a, b, bias, inplace], {}, [inplace])
    np.testing.assert_allclose(inplace, ref, rtol=RTOL, atol=ATOL)


def test_bound_matmul_shapes() -> None:
    b = _r((64, 32), 1)
    v = _r((64,), 2)
    k = onednn_bound(b, None, (64,), None)  # 1-D A: one row
    np.testing.assert_allclose(k([v], {})[0], _ref(v, b), rtol=RTOL, atol=ATOL)
    k3 = onednn_bound(b[None], None, (5, 64), "Relu")  # B with a leading unit dim
    a = _r((5, 64), 3)
    np.testing.assert_allclose(k3([a], {})[0], np.maximum(_ref(a, b), 0), rtol=RTOL, atol=ATOL)
    assert onednn_bound(b, None, (5, 63), None) is None  # K mismatch
    assert onednn_bound(b, _r((5, 32), 4), (5, 64), None) is None  # bias varies along rows
    assert onednn_bound(_r((2, 64, 32), 5), None, (5, 64), None) is None  # batched B
    assert onednn_bound(b.astype(np.float64), None, (5, 64), None) is None


def test_algorithms_registered() -> None:
    from pycann.kernels.providers import GemmSpec, algorithm, available, candidates

    if not available("onednn"):
        pytest.skip("the onednn provider is not allowed here (PYCANN_PROVIDERS)")

    mm = algorithm("onednn:matmul")
    gm = algorithm("onednn:gemm")
    assert mm is not None and gm is not None
    assert mm.supports(GemmSpec("MatMul", (128, 768), (768, 768)))
    assert not mm.supports(GemmSpec("MatMul", (128, 768), (768, 768), "float64"))
    assert gm.supports(GemmSpec("Gemm", (1, 2048), (1000, 2048), trans_b=True))
    assert "onednn:matmul" in [c.key for c in candidates(GemmSpec("MatMul", (128, 768), (768, 768)))]
