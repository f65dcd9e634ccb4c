"""``ge.ir.arrays.owned_copy``: a new C-contiguous array equal to its argument, whatever its layout."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.ge.ir.arrays import owned_copy


@pytest.mark.parametrize("shape", [(1000, 1024), (257, 513), (300, 2), (1, 70000), (70000, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8])
def test_transposed_views_copy_tiled_and_equal(shape: tuple[int, int], dtype: type) -> None:
    a = (np.random.default_rng(0).standard_normal(shape) * 50).astype(dtype)
    got = owned_copy(a.T)
    assert got.flags.c_contiguous and got.flags.owndata and got.dtype == a.dtype
    np.testing.assert_array_equal(got, a.T)


def test_other_layouts_and_a_scalar() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for v in (a, a.transpose(2, 0, 1), a[:, ::2], np.float32(3.0) * np.ones(()), a[0].T):
        got = owned_copy(v)
        assert got.flags.c_contiguous and got.shape == v.shape and not np.shares_memory(got, v)
        np.testing.assert_array_equal(got, v)
    assert owned_copy(np.array(5.0)).ndim == 0  # (ascontiguousarray would make it 1-d)
