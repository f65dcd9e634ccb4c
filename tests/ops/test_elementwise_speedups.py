"""Values of the faster elementwise kernels (GELU, FusedAttention, LayerNormalization) against
float64 numpy / ``math`` goldens, including edge values. No timing asserts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pycann.ops import erf_gelu, fused
from pycann.ops.registry import lookup

SQRT1_2 = 1.0 / math.sqrt(2.0)


def _gelu_golden(x: np.ndarray) -> np.ndarray:
    """GELU(x) = x * 0.5 * erfc(-x / sqrt(2)) in float64 via math.erfc (NaN for non-finite x)."""
    xd = np.asarray(x, np.float64).reshape(-1)
    out = np.array([v * 0.5 * math.erfc(-v * SQRT1_2) if math.isfinite(v) else math.nan for v in xd])
    return out.reshape(np.shape(x))


def _r(*shape: int, seed: int = 0, scale: float = 1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# ----------------------------------------------------------------------------- GELU


def test_gelu_erf_dense_grid_against_math_erf() -> None:
    x = np.linspace(-14.0, 14.0, 400_001).astype(np.float32)
    y = erf_gelu.gelu_erf_(x.copy())
    want = _gelu_golden(x)
    err = np.abs(y.astype(np.float64) - want)
    # float32 output rounding plus the approximation (Phi within 2e-8): ~1e-6 absolute at most
    assert (err <= 3e-7 + 2e-7 * np.abs(want)).all(), float(err.max())
    # Phi(x) = y / x itself, away from 0 where the division amplifies rounding
    xd = x.astype(np.float64)
    sel = np.abs(xd) > 0.05
    phi = y.astype(np.float64)[sel] / xd[sel]
    phi_want = np.array([0.5 * math.erfc(-v * SQRT1_2) for v in xd[sel]])
    assert np.abs(phi - phi_want).max() < 1e-6


def test_gelu_erf_special_values() -> None:
    x = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-45, 1e30, -1e30, 3e38, -3e38, np.inf, -np.inf, np.nan],
                 np.float32)
    y = erf_gelu.gelu_erf_(x.copy())
    np.testing.assert_array_equal(y[:2], [0.0, 0.0])
    np.testing.assert_allclose(y[2:5], [5e-31, -5e-31, 0.5 * 1e-45], rtol=1e-6, atol=1e-45)
    np.testing.assert_array_equal(y[5:9], np.array([1e30, 0.0, 3e38, 0.0], np.float32))
    assert y[9] == np.inf
    assert np.isnan(y[10]) and np.isnan(y[11])  # -inf * Phi(-inf) = -inf * 0, as the formula gives


@pytest.mark.parametrize("n", [0, 1, 7, (1 << 16) - 1, (1 << 16) + 5, 3 * (1 << 16)])
def test_gelu_erf_block_boundaries(n: int) -> None:
    x = _r(n, seed=n, scale=4.0)
    y = erf_gelu.gelu_erf_(x.copy())
    assert y.shape == x.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, _gelu_golden(x), rtol=2e-6, atol=3e-7)


def test_gelu_erf_fallbacks_float64_and_strided() -> None:
    x64 = np.random.default_rng(1).standard_normal((33, 17)) * 3
    np.testing.assert_allclose(erf_gelu.gelu_erf_(x64.copy()), _gelu_golden(x64), rtol=1e-13, atol=1e-15)
    x = _r(16, 20, seed=2, scale=3.0)
    view = x.copy()[:, ::2]  # not contiguous: computed on the view, in place
    out = erf_gelu.gelu_erf_(view)
    assert out is view
    np.testing.assert_allclose(view, _gelu_golden(x[:, ::2]), rtol=2e-6, atol=3e-7)
    zero_d = np.array(1.5, np.float32)
    np.testing.assert_allclose(erf_gelu.gelu_erf_(zero_d), _gelu_golden(np.float32(1.5)), rtol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_gelu_op(approximate: str, dtype: type) -> None:
    x = np.concatenate([_r(200_000, seed=3, scale=4.0), np.array([0, 20, -20], np.float32)]).astype(dtype)
    (y,) = lookup("Gelu", "", 20).kernel([x], {"approximate": approximate})
    assert y.dtype == x.dtype and y.shape == x.shape
    xd = x.astype(np.float64)
    if approximate == "tanh":
        want = 0.5 * xd * (1 + np.tanh(math.sqrt(2 / math.pi) * (xd + 0.044715 * xd**3)))
    else:
        want = _gelu_golden(xd)
    tol = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}[dtype]
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol * 0.2)
    np.testing.assert_array_equal(x[-3:].astype(np.float64), np.array([0, 20, -20]))  # input untouched


def test_fused_matmul_gelu_epilogue() -> None:
    a, w, b = _r(2, 64, 96, seed=4), _r(96, 300, seed=5, scale=0.3), _r(300, seed=6)
    attrs = {"activation": "Gelu", "act_alpha": 0.0, "act_beta": 0.0}
    want = _gelu_golden(a.astype(np.float64) @ w.astype(np.float64) + b)
    (y,) = fused._k_fused_matmul([a, w, b], attrs)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    out = np.empty((2, 64, 300), np.float32)
    fused._out_fused_matmul([a, w, b], attrs, [out])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- FusedAttention


def _attention_golden(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                      scale: float) -> np.ndarray:
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask.astype(np.float64)
    with np.errstate(invalid="ignore"):
        s = np.exp(s - s.max(-1, keepdims=True))
    return np.matmul(s / s.sum(-1, keepdims=True), v.astype(np.float64))


def _heads(b: int, h: int, s: int, d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, K^T, V as the graph gives them: transposed views of (B, S, H, D) buffers."""
    q = _r(b, s, h, d, seed=seed).transpose(0, 2, 1, 3)
    kt = _r(b, s, h, d, seed=seed + 1).transpose(0, 2, 3, 1)
    v = _r(b, s, h, d, seed=seed + 2).transpose(0, 2, 1, 3)
    return q, kt, v


@pytest.mark.parametrize("mask_kind", ["none", "padding", "finfo_min", "causal_full", "neg_inf_cols"])
@pytest.mark.parametrize("scale", [1.0, 0.125, 0.1767766952966369])
def test_fused_attention_float32(mask_kind: str, scale: float) -> None:
    b, h, s, d = 2, 4, 24, 8
    q, kt, v = _heads(b, h, s, d, seed=10)
    mask: np.ndarray | None = None
    if mask_kind == "padding":
        mask = np.zeros((b, 1, 1, s), np.float32)
        mask[1, ..., -5:] = -10000.0
    elif mask_kind == "finfo_min":
        mask = np.zeros((b, 1, 1, s), np.float32)
        mask[0, ..., 3:] = np.finfo(np.float32).min
    elif mask_kind == "causal_full":
        mask = np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1)[None, None]
    elif mask_kind == "neg_inf_cols":
        mask = np.zeros((1, 1, 1, s), np.float32)
        mask[..., ::3] = -np.inf
    inputs = [q, kt, v] + ([] if mask is None else [mask])
    (y,) = fused._k_attention(inputs, {"scale": scale})
    assert y.dtype == np.float32 and y.shape == (b, h, s, d)
    np.testing.assert_allclose(y, _attention_golden(q, kt, v, mask, scale), rtol=1e-5, atol=1e-6)


def test_fused_attention_shapes_and_nan() -> None:
    # mask that grows the score shape, D > S (normalise the scores), V with broadcast batch dims
    q, kt = _r(1, 2, 5, 16, seed=20), _r(1, 2, 16, 5, seed=21)
    v = _r(3, 2, 5, 40, seed=22)
    mask = _r(3, 1, 5, 5, seed=23)
    (y,) = fused._k_attention([q, kt, v, mask], {"scale": 0.3})
    np.testing.assert_allclose(y, _attention_golden(q, kt, v, mask, 0.3), rtol=1e-5, atol=1e-6)
    # a NaN score makes its row NaN, other rows stay finite
    q2 = q.copy()
    q2[0, 0, 2, 0] = np.nan
    (y2,) = fused._k_attention([q2, kt, v[:1]], {"scale": 1.0})
    assert np.isnan(y2[0, 0, 2]).all()
    assert np.isfinite(np.delete(y2[0, 0], 2, axis=0)).all() and np.isfinite(y2[0, 1]).all()
    # fully -inf-masked row: NaN, as the unfused Softmax gives
    m = np.zeros((1, 1, 5, 5), np.float32)
    m[..., 1, :] = -np.inf
    (y3,) = fused._k_attention([q, kt, v[:1], m], {"scale": 1.0})
    assert np.isnan(y3[0, :, 1]).all() and np.isfinite(np.delete(y3, 1, axis=2)).all()


def test_fused_attention_float16_and_empty() -> None:
    q, kt, v = (a.astype(np.float16) for a in _heads(1, 2, 12, 4, seed=30))
    (y,) = fused._k_attention([q, kt, v], {"scale": 0.5})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), _attention_golden(q, kt, v, None, 0.5), rtol=5e-3, atol=5e-3)
    e = np.zeros((1, 2, 0, 4), np.float32)
    (y0,) = fused._k_attention([e, np.zeros((1, 2, 4, 3), np.float32), np.zeros((1, 2, 3, 4), np.float32)], {})
    assert y0.shape == (1, 2, 0, 4)


# ----------------------------------------------------------------------------- LayerNormalization


def _ln_golden(x: np.ndarray, g: np.ndarray, b: np.ndarray | None, axis: int, eps: float):
    xd = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = xd.mean(axes, keepdims=True)
    inv = 1.0 / np.sqrt(((xd - mean) ** 2).mean(axes, keepdims=True) + eps)
    y = (xd - mean) * inv * g
    return (y if b is None else y + b), mean, inv


@pytest.mark.parametrize("shape,axis", [((1, 128, 768), -1), ((2, 7, 5, 6), 2), ((3, 10), 0), ((4, 1), -1)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_values(shape: tuple, axis: int, bias: bool) -> None:
    x = _r(*shape, seed=40, scale=3.0) + 1.5
    g = _r(*shape[axis % len(shape):], seed=41)
    b = _r(*shape[axis % len(shape):], seed=42) if bias else None
    ins = [x, g] + ([b] if b is not None else [])
    y, mean, inv = lookup("LayerNormalization", "", 17).kernel(ins, {"axis": axis, "epsilon": 1e-5, "stash_type": 1})
    want, wmean, winv = _ln_golden(x, g, b, axis, 1e-5)
    assert y.dtype == np.float32 and mean.dtype == np.float32 and inv.dtype == np.float32
    assert mean.shape == wmean.shape and inv.shape == winv.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(mean, wmean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(inv, winv, rtol=1e-5)


def test_layer_norm_float16_strided_and_empty() -> None:
    x = (_r(4, 6, 10, seed=50) * 2).astype(np.float16)
    g, b = _r(10, seed=51).astype(np.float16), _r(10, seed=52).astype(np.float16)
    y, mean, inv = lookup("LayerNormalization", "", 17).kernel([x, g, b], {"axis": -1, "epsilon": 1e-5, "stash_type": 1})
    want = _ln_golden(x, g.astype(np.float64), b.astype(np.float64), -1, 1e-5)[0]
    assert y.dtype == np.float16 and mean.dtype == np.float32
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=3e-3, atol=3e-3)
    xs = _r(6, 20, seed=53)[:, ::2]  # strided input
    g2 = _r(10, seed=54)
    (ys, _, _) = lookup("LayerNormalization", "", 17).kernel([xs, g2], {"axis": -1, "epsilon": 1e-5, "stash_type": 1})
    np.testing.assert_allclose(ys, _ln_golden(xs, g2, None, -1, 1e-5)[0], rtol=1e-5, atol=1e-5)
    e = np.zeros((0, 5), np.float32)
    (ye, me, ie) = lookup("LayerNormalization", "", 17).kernel([e, np.ones(5, np.float32)], {"axis": -1, "epsilon": 1e-5, "stash_type": 1})
    assert ye.shape == (0, 5) and me.shape == (0, 1) and ie.shape == (0, 1)
