"""The NaN guard's reads (``kernels/providers/nan_guard.py``): a bfloat16 tensor's bound from the bits
(max |a| exactly, inf / NaN for non-finite values; no float32 copy), and a constant bias's part cached
like the weight's while a writable (computed) one is read on every call."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pycann.dtypes import bfloat16
from pycann.kernels.providers import nan_guard

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("n", [1, 2, 17, 4096, 100_003])
@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 1e30])
def test_a_bf16_bound_is_its_largest_magnitude(n: int, scale: float) -> None:
    x = (RNG.standard_normal(n) * scale).astype(np.float32).astype(bfloat16())
    assert nan_guard._norm2(x) == float(np.abs(x.astype(np.float32)).max())
    assert nan_guard._norm2(x.reshape(1, -1)[:, ::-1]) == float(np.abs(x.astype(np.float32)).max())  # (a view)


@pytest.mark.parametrize("values, want", [([1.0, -2.0, 3.0], 3.0), ([-1.0, -2.0, -3.0], 3.0), ([-0.0, 0.0], 0.0),
                                          ([5.0, -np.inf], math.inf), ([np.inf, 2.0], math.inf),
                                          ([1.0, np.nan], math.nan), ([-np.nan, 1.0], math.nan),
                                          ([np.inf, -np.nan], math.nan), ([3.0e38, -3.3e38], 3.3e38)])
def test_a_bf16_bound_says_inf_and_nan(values: list[float], want: float) -> None:
    got = nan_guard._norm2(np.array(values, np.float32).astype(bfloat16()))
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == float(np.array([want], np.float32).astype(bfloat16()).astype(np.float32)[0])


def test_a_constant_bias_is_read_once_and_a_computed_one_every_call() -> None:
    w = np.ones((4, 2, 3, 3), np.float32)
    const_b = np.array([1.0, -7.0, 2.0, 0.5], np.float32)
    const_b.flags.writeable = False
    assert nan_guard.weight_bound(w, const_b) == 18.0 + 7.0
    computed = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    assert nan_guard.weight_bound(w, computed) == 18.0 + 4.0
    computed[0] = -100.0  # rewritten in place, as an arena view is by the next run
    assert nan_guard.weight_bound(w, computed) == 18.0 + 100.0
