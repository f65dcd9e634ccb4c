"""GlobalAveragePool's bound kernel (kernels/global_pool.py): the channel sums as one matrix-vector
product over a channels-last or C-contiguous X, then / (H*W); equal to the reference kernel (numpy's
mean) within float32 rounding, into arena views; an overflowing sum is inf as in ONNX Runtime; other
layouts run the reference."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.kernels.global_pool import bound_global_average_pool
from pycann.ops.nn.pool import _k_global_average_pool

RNG = np.random.default_rng(29)


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("shape", [(1, 1024, 7, 7), (2, 32, 112, 112), (1, 1, 5, 5), (3, 7, 1, 1), (1, 64, 1, 9)])
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_equals_the_reference(shape: tuple[int, ...], layout: str) -> None:
    x = RNG.standard_normal(shape).astype(np.float32) + 0.5
    x = _cl(x) if layout == "nhwc" else x
    k = bound_global_average_pool(shape, _k_global_average_pool)
    want = _k_global_average_pool([x], {})[0]
    got = k.run([x], {})[0]
    assert got.shape == (shape[0], shape[1], 1, 1)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-7)  # (float32 sums in another order)
    out = np.full(want.shape, np.nan, np.float32)  # an arena view
    assert k.run([x], {}, [out])[0] is out
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-7)


def test_overflow_nan_and_other_layouts() -> None:
    shape = (1, 8, 20, 20)
    x = _cl(np.full(shape, 3e37, np.float32))  # the float32 sum overflows: inf, as ORT's sum-then-divide
    x[0, 1] = -3e37
    x[0, 2, 3, 3] = np.nan
    k = bound_global_average_pool(shape, _k_global_average_pool)
    got = k.run([x], {})[0].reshape(-1)
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])
    odd = np.asarray(RNG.standard_normal((1, 8, 20, 40)), np.float32)[:, :, :, ::2]  # strided: the reference
    np.testing.assert_allclose(k.run([odd], {})[0], _k_global_average_pool([odd], {})[0], rtol=1e-6)
