"""SqueezeExcite's gate multiply (kernels/squeeze_excite.GateMul): channels-last X with short pixels is
multiplied as (N, H*W/k, k*C) rows against the gate repeated k times. Values against numpy's
``x * gate[:, :, None, None]``, into the arena view, in place over X, and for views it cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.kernels import providers
from pycann.kernels import squeeze_excite as se

needs_onednn = pytest.mark.skipif(not providers.available("onednn"), reason="oneDNN not installed")
RNG = np.random.default_rng(7)


def _nhwc(n: int, c: int, h: int, w: int) -> np.ndarray:
    """An (N, C, H, W) float32 array laid out channels-last, as a conv chain hands it over."""
    return RNG.standard_normal((n, h, w, c)).astype(np.float32).transpose(0, 3, 1, 2)


@pytest.mark.parametrize(("c", "hw", "k"), [(32, 12544, 16), (96, 3136, 7), (144, 784, 4), (512, 49, 1),
                                            (600, 4, 1), (100, 7, 7), (1, 1, 1), (33, 17, 17),
                                            (8, 10007, 1), (2, 2 * 4099, 1), (16, 64, 32)])
def test_tiling_rule(c: int, hw: int, k: int) -> None:
    assert se.tiling(c, hw) == k
    assert hw % k == 0


@needs_onednn
@pytest.mark.parametrize("shape", [(1, 32, 112, 112), (2, 24, 64, 64), (1, 96, 56, 56), (3, 40, 45, 45)])
def test_tiled_values_into_the_arena_and_in_place(shape: tuple[int, int, int, int]) -> None:
    n, c, h, w = shape
    mul = se.GateMul(shape, channels_last=True)
    assert mul.k > 1 and "rows of" in mul.impl
    x, g = _nhwc(*shape), RNG.standard_normal((n, c)).astype(np.float32)
    want = x * g[:, :, None, None]
    y = mul(x, g, None)
    np.testing.assert_array_equal(y, want)
    assert y.transpose(0, 2, 3, 1).flags.c_contiguous  # the chain's layout
    o = _nhwc(*shape)
    assert mul(x, g, o) is o
    np.testing.assert_array_equal(o, want)
    same = x.copy(order="K")
    assert mul(same, g, same) is same  # planned over X itself
    np.testing.assert_array_equal(same, want)


@needs_onednn
def test_special_values_and_a_strided_arena_view() -> None:
    shape = (1, 32, 48, 48)
    mul = se.GateMul(shape, channels_last=True)
    x = _nhwc(*shape)
    x[0, 3, 5, 7], x[0, 4, 0, 0] = np.inf, np.nan
    g = RNG.standard_normal((1, 32)).astype(np.float32)
    g[0, 3], g[0, 9] = 0.0, -np.inf
    with np.errstate(invalid="ignore"):
        want = x * g[:, :, None, None]
    o = np.empty(shape, np.float32)  # C-contiguous: not the bound layout, so written another way
    y = mul(x, g, o)
    np.testing.assert_array_equal(y, want)  # (NaN where numpy has NaN: inf * 0, NaN * g)
    partial = _nhwc(*shape)
    z = mul(partial, g, partial[:, :, ::-1, :])  # overlaps X but is not X: never written while read
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(z, partial * g[:, :, None, None])


def test_channels_first_and_small_tensors_keep_their_paths() -> None:
    assert se.GateMul((1, 32, 112, 112), channels_last=False).k == 1
    small = se.GateMul((1, 16, 20, 20), channels_last=True)  # 6400 values: numpy's multiply
    x, g = _nhwc(1, 16, 20, 20), RNG.standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_array_equal(small(x, g, None), x * g[:, :, None, None])
