"""oneDNN softmax (pycann/kernels/providers/onednn_softmax.py) against numpy, incl. -inf/NaN rows,
and FusedAttention through it against a float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.kernels import providers
from pycann.ops.registry import lookup

providers.reset()
if not providers.available("onednn"):  # pragma: no cover - optional provider
    pytest.skip("onednn-cpu-gomp not installed", allow_module_level=True)

from pycann.kernels.providers import onednn_softmax  # noqa: E402

RNG = np.random.default_rng(11)


def _np_softmax(s: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        e = np.exp(s.astype(np.float64) - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("shape", [(12, 128, 128), (1, 12, 7, 300), (2048, 16)])
def test_softmax_matches_numpy_including_masked_and_nan_rows(shape: tuple[int, ...]) -> None:
    s = (RNG.standard_normal(shape) * 8).astype(np.float32)
    flat = s.reshape(-1, shape[-1])
    flat[0] = -np.inf  # a fully masked row: NaN, as numpy's formula gives
    flat[2, :] = 1e30  # huge but equal values: uniform
    want = _np_softmax(s)
    assert onednn_softmax.softmax_last_axis_(s)
    assert np.isnan(s.reshape(-1, shape[-1])[0]).all()
    np.testing.assert_allclose(s, want, rtol=1e-5, atol=1e-7)
    nan = (RNG.standard_normal(shape)).astype(np.float32)
    nan.reshape(-1, shape[-1])[1, 3] = np.nan
    before = nan.copy()
    assert not onednn_softmax.softmax_last_axis_(nan)  # numpy's formula poisons the whole row: its job
    np.testing.assert_array_equal(nan, before)


def test_ineligible_arrays_are_left_to_the_caller() -> None:
    small = np.zeros((4, 8), np.float32)
    assert not onednn_softmax.softmax_last_axis_(small)
    big = np.zeros((256, 256), np.float64)
    assert not onednn_softmax.softmax_last_axis_(big)
    view = np.zeros((256, 512), np.float32)[:, ::2]
    assert not onednn_softmax.softmax_last_axis_(view)
    assert (small == 0).all() and (big == 0).all()


@pytest.mark.parametrize("masked", [False, True])
def test_fused_attention_through_onednn_softmax(masked: bool) -> None:
    q = RNG.standard_normal((1, 12, 128, 64)).astype(np.float32)
    kt = RNG.standard_normal((1, 12, 64, 128)).astype(np.float32)
    v = RNG.standard_normal((1, 12, 128, 64)).astype(np.float32)
    mask = np.where(RNG.random((1, 1, 1, 128)) < 0.2, -10000.0, 0.0).astype(np.float32) if masked else None
    op = lookup("FusedAttention", "pycann", 1)
    scale = 0.125
    got = op.kernel([q, kt, v] + ([mask] if masked else []), op.with_defaults({"scale": scale}))[0]
    s = (q.astype(np.float64) * scale) @ kt.astype(np.float64)
    if masked:
        s = s + mask
    want = _np_softmax(s) @ v.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
