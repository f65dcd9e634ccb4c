"""Prepared oneDNN kernels (pycann/kernels/bind_onednn.py): LayerNormalization, FusedAttention,
MaxPool / AveragePool bound at plan time, against the generic numpy kernels and float64 formulas,
including the NaN / -inf edge cases where oneDNN's own answer differs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.kernels import bind_onednn as prepared_onednn
from pycann.kernels import providers
from pycann.kernels.algorithm import BY_KEY
from pycann.kernels.bind import PREPARE
from pycann.ops.nn.norm import _k_layer_norm
from pycann.ops.nn.pool import _k_average_pool, _k_max_pool

providers.reset()
if not providers.available("onednn"):  # pragma: no cover - optional provider
    pytest.skip("onednn-cpu-gomp not installed", allow_module_level=True)

RNG = np.random.default_rng(5)
F = 1  # TensorProto.FLOAT


def _d(shape: tuple[int, ...] | None, dtype: int = F) -> TensorDesc | None:
    return None if shape is None else TensorDesc(dtype, shape)


def _prep(op: tuple[str, str], attrs: dict[str, Any], shapes: list[tuple[int, ...] | None], consts: list[Any],
          out: tuple[int, ...] | None, n_out: int = 1) -> Any:
    return PREPARE[op](attrs, [_d(s) for s in shapes], consts, [_d(out)] * n_out)


# ---------------------------------------------------------------- LayerNormalization

@pytest.mark.parametrize("shape,axis", [((1, 128, 384), -1), ((2, 3, 4, 5), 2), ((7, 33), 1), ((4, 6), 0)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_layer_norm_matches_generic_kernel(shape: tuple[int, ...], axis: int, with_bias: bool) -> None:
    x = (RNG.standard_normal(shape) * 3 + 1).astype(np.float32)
    inner = shape[axis % len(shape):]
    scale = RNG.standard_normal(inner).astype(np.float32)
    bias = RNG.standard_normal(inner).astype(np.float32) if with_bias else None
    attrs = {"axis": axis, "epsilon": 1e-5, "stash_type": 1}
    k = _prep(("", "LayerNormalization"), attrs, [shape, scale.shape, bias.shape if with_bias else None],
              [None, scale, bias], shape)
    assert k is not None and k.writes_out
    ins = [x, scale] + ([bias] if with_bias else [])
    want = _k_layer_norm(ins, attrs)[0]
    np.testing.assert_allclose(k(ins, attrs)[0], want, rtol=1e-5, atol=1e-5)
    out = np.full(shape, np.nan, np.float32)  # the executor's arena view
    k(ins, attrs, [out])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    k([x.copy(), scale] + ins[2:], attrs, [x])  # in place: Y over X's own buffer
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)


def test_layer_norm_non_contiguous_input_and_nan_rows() -> None:
    base = RNG.standard_normal((64, 2, 48)).astype(np.float32)
    x = base[:, 0, :]  # strided rows
    x[3, 5] = np.nan
    scale, bias = np.ones(48, np.float32), np.zeros(48, np.float32)
    attrs = {"axis": -1, "epsilon": 1e-6}
    k = _prep(("", "LayerNormalization"), attrs, [x.shape, (48,), (48,)], [None, scale, bias], x.shape)
    y = k([x, scale, bias], attrs)[0]
    want = _k_layer_norm([x, scale, bias], attrs)[0]
    assert np.isnan(y[3]).all() and np.isnan(want[3]).all()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_layer_norm_declines_what_it_does_not_bind() -> None:
    scale = np.ones(8, np.float32)
    lookup = ("", "LayerNormalization")
    assert _prep(lookup, {"axis": -1}, [(4, 8), (8,)], [None, scale], (4, 8), n_out=3) is None  # Mean, InvStdDev
    assert _prep(lookup, {"axis": -1, "stash_type": 11}, [(4, 8), (8,)], [None, scale], (4, 8)) is None
    assert _prep(lookup, {"axis": -1}, [(4, 8), (8,)], [None, None], (4, 8)) is None  # run-time scale
    assert _prep(lookup, {"axis": -1}, [(4, 8), (8,), (8,)], [None, scale, None], (4, 8)) is None  # run-time B
    assert _prep(lookup, {"axis": -1}, [None, (8,)], [None, scale], (4, 8)) is None  # dynamic shape
    assert _prep(lookup, {"axis": 0}, [(4, 8), (8,)], [None, scale], (4, 8)) is None  # scale is not 32 values


# ---------------------------------------------------------------- FusedAttention

def _attention64(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: float) -> np.ndarray:
    s = np.matmul(q.astype(np.float64), kt.astype(np.float64)) * scale
    if mask is not None:
        s = s + mask
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return np.matmul(e / e.sum(axis=-1, keepdims=True), v.astype(np.float64))


def _heads(b: int, h: int, s: int, d: int, t: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q, Kt, V as exported graphs give them: head-split transposed views of one projection."""
    t = s if t is None else t
    x = RNG.standard_normal((b, max(s, t), 3, h, d)).astype(np.float32)
    q = x[:, :s, 0].transpose(0, 2, 1, 3)
    kt = x[:, :t, 1].transpose(0, 2, 3, 1)
    v = x[:, :t, 2].transpose(0, 2, 1, 3)
    return q, kt, v


@pytest.mark.parametrize("mask_kind", ["none", "keys", "causal", "per_batch"])
def test_attention_matches_float64(mask_kind: str) -> None:
    b, h, s, d = 2, 4, 64, 32
    q, kt, v = _heads(b, h, s, d)
    mask = {"none": None,
            "keys": np.where(RNG.random((1, 1, 1, s)) < 0.3, -10000.0, 0.0).astype(np.float32),
            "causal": np.triu(np.full((s, s), -np.inf, np.float32), 1)[None, None],
            "per_batch": RNG.standard_normal((b, 1, 1, s)).astype(np.float32)}[mask_kind]
    scale = 1 / np.sqrt(d)
    shapes = [q.shape, kt.shape, v.shape, None if mask is None else mask.shape]
    k = _prep(("pycann", "FusedAttention"), {"scale": scale}, shapes, [None] * 4, (b, h, s, d))
    assert k is not None and k.writes_out
    ins = [q, kt, v] + ([mask] if mask is not None else [])
    want = _attention64(q, kt, v, mask, scale)
    np.testing.assert_allclose(k(ins, {}), [want], rtol=1e-4, atol=1e-5)
    out = np.empty((b, h, s, d), np.float32)
    k([np.ascontiguousarray(a) for a in ins], {}, [out])  # contiguous operands, arena output
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_attention_output_is_stored_heads_interleaved() -> None:
    """4-D Y is stored (batch, seq, heads, dim): the exporter's Transpose(0, 2, 1, 3) of it is
    C-contiguous, so the Reshape that merges the heads is a view; the values are Y's."""
    b, h, s, d = 1, 6, 48, 16
    q, kt, v = _heads(b, h, s, d)
    k = _prep(("pycann", "FusedAttention"), {"scale": 0.25}, [q.shape, kt.shape, v.shape, None], [None] * 4,
              (b, h, s, d))
    assert k is not None
    y = k([q, kt, v], {})[0]
    assert y.shape == (b, h, s, d) and y.transpose(0, 2, 1, 3).flags.c_contiguous
    np.testing.assert_allclose(y, _attention64(q, kt, v, None, 0.25), rtol=1e-4, atol=1e-5)
    merged = y.transpose(0, 2, 1, 3).reshape(b, s, h * d)
    assert np.shares_memory(merged, y)


def test_attention_broadcasts_batch_dims_and_cross_attention() -> None:
    q = RNG.standard_normal((2, 4, 10, 16)).astype(np.float32)
    kt = RNG.standard_normal((1, 4, 16, 24)).astype(np.float32)  # keys shared by the batch
    v = RNG.standard_normal((1, 4, 24, 8)).astype(np.float32)
    k = _prep(("pycann", "FusedAttention"), {"scale": 0.5}, [q.shape, kt.shape, v.shape, None], [None] * 4,
              (2, 4, 10, 8))
    np.testing.assert_allclose(k([q, kt, v], {})[0], _attention64(q, kt, v, None, 0.5), rtol=1e-4, atol=1e-5)


def test_attention_nan_and_fully_masked_rows_match_numpy() -> None:
    from pycann.ops.fused import _k_attention

    q, kt, v = (np.ascontiguousarray(a) for a in _heads(1, 2, 32, 16))
    q[0, 0, 3, 5] = np.nan  # one poisoned query row
    kt[0, 1, 2, 7] = np.inf  # an inf key entry: inf - inf in the softmax of every row of head 1 ...
    mask = np.zeros((1, 1, 32, 32), np.float32)
    mask[0, 0, 9] = -np.inf  # a fully masked row
    k = _prep(("pycann", "FusedAttention"), {"scale": 0.25}, [q.shape, kt.shape, v.shape, mask.shape],
              [None] * 4, (1, 2, 32, 16))
    y = k([q, kt, v, mask], {})[0]
    with np.errstate(invalid="ignore", over="ignore"):
        want = _attention64(q, kt, v, mask, 0.25)
        generic = _k_attention([q, kt, v, mask], {"scale": 0.25})[0]
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(generic))
    assert np.isnan(y[0, 0, 3]).all() and np.isnan(y[0, 0, 9]).all()
    ok = ~np.isnan(want)
    np.testing.assert_allclose(y[ok], want[ok], rtol=1e-4, atol=1e-5)


def test_attention_declines_dynamic_or_mismatched_shapes() -> None:
    op = ("pycann", "FusedAttention")
    assert _prep(op, {}, [(1, 2, 4, 8), None, (1, 2, 4, 8), None], [None] * 4, None) is None
    assert _prep(op, {}, [(1, 2, 4, 8), (1, 2, 9, 4), (1, 2, 4, 8), None], [None] * 4, None) is None
    assert _prep(op, {}, [(2, 4, 8), (2, 8, 4), (2, 4, 8), (3, 4, 4)], [None] * 4, None) is None  # mask


# ---------------------------------------------------------------- MaxPool / AveragePool

@pytest.fixture(autouse=True)
def _pool_any_size(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bind oneDNN pooling for the small test shapes too (production: only >= POOL_MIN_ELEMENTS)."""
    if "pool" in request.node.name and "threshold" not in request.node.name:
        monkeypatch.setattr(prepared_onednn, "POOL_MIN_ELEMENTS", 0)


def test_pool_threshold_leaves_small_inputs_to_numpy() -> None:
    a = {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "_n_outputs": 1, "_layout": "NCHW"}
    assert _prep(("", "MaxPool"), a, [(1, 8, 16, 16)], [None], (1, 8, 8, 8)) is None
    k = _prep(("", "MaxPool"), a, [(1, 64, 112, 112)], [None], (1, 64, 56, 56))  # ResNet-50's stem pooling
    assert k is not None and k.openmp


def test_pool_threshold_inside_a_channels_last_chain_is_tiny() -> None:
    """In an NHWC conv chain (OpenMP anyway) small pools bind oneDNN: GoogLeNet's 3x3/1 MaxPool of
    1x832x7x7 took 110-170 us in numpy; only the tiniest stay there."""
    a = {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "_n_outputs": 1, "_layout": "NHWC"}
    k = _prep(("", "MaxPool"), a, [(1, 832, 7, 7)], [None], (1, 832, 7, 7))
    assert k is not None and k.openmp
    x = _pool_input((1, 832, 7, 7), True)
    x[0, 5, 3, 3] = np.nan
    x[0, 6, 0, 0] = -np.inf
    np.testing.assert_array_equal(k([x], a)[0], _k_max_pool([x], a)[0])
    assert k.impl  # oneDNN's pooling
    # (no oneDNN pooling: numpy's, or ATen's when torch is loaded, bind.py's _max_pool)
    assert not getattr(_prep(("", "MaxPool"), a, [(1, 4, 4, 4)], [None], (1, 4, 4, 4)), "impl", "")
    assert not getattr(_prep(("", "MaxPool"), {**a, "_layout": "NCHW"}, [(1, 832, 7, 7)], [None], (1, 832, 7, 7)),
                       "impl", "")

def _pool_input(shape: tuple[int, ...], nhwc: bool) -> np.ndarray:
    return _relayout(RNG.standard_normal(shape).astype(np.float32), nhwc)


def _relayout(x: np.ndarray, nhwc: bool) -> np.ndarray:
    """``x``'s values in a new NCHW (C-contiguous) or channels-last array."""
    shape = x.shape
    if not nhwc:
        return np.ascontiguousarray(x)
    y = np.empty((shape[0], *shape[2:], shape[1]), np.float32).transpose(0, len(shape) - 1, *range(1, len(shape) - 1))
    y[...] = x
    return y


POOLS = [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},  # ResNet stem
    {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1},
    {"kernel_shape": [3, 2], "dilations": [2, 1], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [3, 3], "strides": [1, 1], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2, 2], "auto_pad": "VALID"},
]


@pytest.mark.parametrize("attrs", POOLS)
@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "AveragePool_include"])
def test_pool_matches_generic_kernel(attrs: dict[str, Any], nhwc: bool, op: str) -> None:
    a = dict(attrs, _layout="NHWC" if nhwc else "NCHW", _n_outputs=1)
    generic = _k_max_pool if op == "MaxPool" else _k_average_pool
    if op == "AveragePool_include":
        if "dilations" in a:
            return  # AveragePool has dilations only from opset 19; the generic kernel covers them
        a["count_include_pad"] = 1
    x = _pool_input((2, 24, 11, 13), nhwc)
    want = generic([x], a)[0]
    k = _prep(("", "MaxPool" if op == "MaxPool" else "AveragePool"), a, [x.shape], [None], want.shape)
    if op == "AveragePool_include" and a.get("ceil_mode"):
        # ceil_mode past the pads: ONNX does not count those cells, oneDNN would; must decline or agree
        if k is None:
            return
    if k is None:
        assert "dilations" in a  # oneDNN v3.2 pools dilated windows only in its reference loops: declined
        return
    y = k([x], a)[0]
    assert y.shape == want.shape and (y.strides[1] == 4) == nhwc  # the chain's layout is kept
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    y2 = k([_relayout(x, not nhwc)], a)[0]  # other layout: generic
    np.testing.assert_allclose(y2, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("nhwc", [False, True])
def test_max_pool_all_nan_and_all_neg_inf_windows_match_numpy(nhwc: bool) -> None:
    a = {"kernel_shape": [2, 2], "strides": [2, 2], "_layout": "NHWC" if nhwc else "NCHW", "_n_outputs": 1}
    x = _pool_input((1, 16, 4, 4), nhwc)
    x[0, 0, 0, 0] = np.nan  # one NaN in a window: skipped
    k = _prep(("", "MaxPool"), a, [x.shape], [None], (1, 16, 2, 2))
    np.testing.assert_array_equal(k([x], a)[0], _k_max_pool([x], a)[0])
    x[0, :, 2:, 2:] = np.nan  # a whole window NaN: NaN (oneDNN alone gives -3.4e38)
    x[0, :, :2, 2:] = -np.inf  # a whole window -inf: -inf
    y, want = k([x], a)[0], _k_max_pool([x], a)[0]
    assert np.isnan(y[0, :, 1, 1]).all() and (y[0, :, 0, 1] == -np.inf).all()
    np.testing.assert_array_equal(y, want)


def test_pool_1d_and_3d_and_declines() -> None:
    for shape, ks in (((2, 8, 17), [3]), ((1, 4, 6, 7, 8), [2, 3, 2])):
        a = {"kernel_shape": ks, "strides": [2] * len(ks), "_n_outputs": 1}
        x = RNG.standard_normal(shape).astype(np.float32)
        for op, generic in (("MaxPool", _k_max_pool), ("AveragePool", _k_average_pool)):
            want = generic([x], a)[0]
            k = _prep(("", op), a, [shape], [None], want.shape)
            assert k is not None
            np.testing.assert_allclose(k([x], a)[0], want, rtol=1e-6, atol=1e-6)
    a = {"kernel_shape": [2, 2], "_n_outputs": 2}  # MaxPool with Indices: generic
    assert _prep(("", "MaxPool"), a, [(1, 2, 4, 4)], [None], (1, 2, 3, 3), n_out=2) is None
    a = {"kernel_shape": [2, 2], "storage_order": 1, "_n_outputs": 1}
    assert _prep(("", "MaxPool"), a, [(1, 2, 4, 4)], [None], (1, 2, 3, 3)) is None


@pytest.mark.parametrize("nhwc", [False, True])
@pytest.mark.parametrize("shape", [(1, 96, 40, 40), (2, 8, 5, 7, 3), (1, 16, 33)])
def test_global_average_pool_matches_numpy(nhwc: bool, shape: tuple[int, ...]) -> None:
    from pycann.ops.nn.pool import _k_global_average_pool

    a = {"_layout": "NHWC" if nhwc and len(shape) == 4 else "NCHW", "_n_outputs": 1}
    x = _pool_input(shape, nhwc and len(shape) == 4)
    want = _k_global_average_pool([x], a)[0]
    k = _prep(("", "GlobalAveragePool"), a, [shape], [None], want.shape)
    assert k is not None
    np.testing.assert_allclose(k([x], a)[0], want, rtol=1e-5, atol=1e-6)
    x[0, 0] = np.nan  # NaN propagates to its channel's mean, as in numpy
    y = k([x], a)[0]
    assert np.isnan(y[0, 0]).all() and not np.isnan(y[0, 1:]).any()


# ---------------------------------------------------------------- Softmax

@pytest.mark.parametrize("shape,axis", [((1, 40, 18385), -1), ((64, 300), 1), ((2, 3, 50, 128), 3)])
def test_softmax_matches_generic_kernel_including_nan_and_inf_rows(shape: tuple[int, ...], axis: int) -> None:
    from pycann.ops.registry import lookup

    generic = lookup("Softmax", "", 13).kernel
    a = {"axis": axis}
    k = _prep(("", "Softmax"), a, [shape], [None], shape)
    assert k is not None and k.writes_out and k.openmp
    x = (RNG.standard_normal(shape) * 10).astype(np.float32)
    np.testing.assert_allclose(k([x], a)[0], generic([x], a)[0], rtol=1e-5, atol=1e-7)
    flat = x.reshape(-1, shape[-1])
    flat[0, 3] = np.nan     # numpy: the whole row NaN
    flat[1, 5] = np.inf     # inf - inf: the whole row NaN
    flat[2, :] = -np.inf    # fully masked: NaN
    flat[3, :7] = -np.inf   # partly masked: zeros there
    out = np.empty(shape, np.float32)
    k([x], a, [out])
    np.testing.assert_array_equal(out, generic([x], a)[0])


def test_softmax_declines_small_or_inner_axis() -> None:
    assert _prep(("", "Softmax"), {"axis": -1}, [(4, 10)], [None], (4, 10)) is None  # numpy is faster
    assert _prep(("", "Softmax"), {"axis": 1}, [(40, 600, 3)], [None], (40, 600, 3)) is None


def test_pool_runs_in_onednn_for_either_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """GlobalAveragePool after a channels-last chain is not in the chain (``_layout`` unset) but
    receives channels-last arrays: both layouts are bound, the numpy kernel is not needed."""
    from pycann.ops.nn.pool import _k_global_average_pool

    def no_numpy(*args: Any) -> Any:
        raise AssertionError("fell back to the numpy kernel")

    monkeypatch.setattr(prepared_onednn, "_k_global_average_pool", no_numpy)
    shape = (1, 64, 28, 28)
    k = _prep(("", "GlobalAveragePool"), {"_n_outputs": 1}, [shape], [None], (1, 64, 1, 1))
    assert k is not None
    for nhwc in (False, True):
        x = _pool_input(shape, nhwc)
        np.testing.assert_allclose(k([x], {})[0], _k_global_average_pool([x], {})[0], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- Gemm

@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("beta,c_shape", [(1.0, (1000,)), (0.5, (1, 1000)), (1.0, None), (0.0, (1000,))])
def test_gemm_with_constant_b_matches_generic(trans_b: int, beta: float, c_shape: tuple[int, ...] | None) -> None:
    from pycann.ops.matmul import _k_gemm

    a = RNG.standard_normal((4, 512)).astype(np.float32)
    b = RNG.standard_normal((1000, 512) if trans_b else (512, 1000)).astype(np.float32)
    c = None if c_shape is None else RNG.standard_normal(c_shape).astype(np.float32)
    attrs = {"transA": 0, "transB": trans_b, "alpha": 1.0, "beta": beta, "_algo": BY_KEY["onednn:gemm"]}
    k = _prep(("", "Gemm"), attrs, [a.shape, b.shape, None if c is None else c.shape], [None, b, c], (4, 1000))
    assert k is not None and k.openmp
    ins = [a, b] + ([c] if c is not None else [])
    np.testing.assert_allclose(k(ins, attrs)[0], _k_gemm(ins, attrs)[0], rtol=1e-4, atol=1e-4)


def test_gemm_declines_what_it_does_not_bind() -> None:
    b = RNG.standard_normal((64, 32)).astype(np.float32)
    base = {"transA": 0, "transB": 0, "alpha": 1.0, "beta": 1.0, "_algo": BY_KEY["onednn:gemm"]}
    full_c = RNG.standard_normal((128, 32)).astype(np.float32)
    for attrs, c, c_shape in (({**base, "transA": 1}, None, None), ({**base, "alpha": 2.0}, None, None),
                              (base, full_c, (128, 32)), (base, None, (32,)), ({**base, "_algo": BY_KEY["numpy:gemm"]}, None, None)):
        assert _prep(("", "Gemm"), attrs, [(128, 64) if not attrs["transA"] else (64, 128), b.shape, c_shape],
                     [None, b, c], (128, 32)) is None
