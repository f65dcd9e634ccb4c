"""DataCopyPadExtParams: Ascend C's template form ``DataCopyPadExtParams<T>{isPad, left, right, value}``
spelt with the type first (as ``GlobalTensor(AscendC.half)``) pads exactly like the plain form, and
parameters the device's api_check refuses are findings, not silently shifted fields."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann import ascendc as A
from pycann.ascendc.diagnostics import Rule
from tests.ascendc.kit import f32, launch

P = A.TPosition
N = 250  # floats: 1000 B, not a multiple of 32 B


def _pad_kernel(pad: Any, n: int = N, ub: int = 256):  # type: ignore[no-untyped-def]
    """GM x (n floats) -> UB with ``pad`` -> GM y (ub floats): y shows the padded UB tile."""
    def kern(x, y):  # type: ignore[no-untyped-def]
        pipe = A.TPipe()
        q = A.TQue(P.VECIN, 1)
        pipe.InitBuffer(q, 1, ub * 4)
        gx, gy = A.GlobalTensor(A.float), A.GlobalTensor(A.float)
        gx.SetGlobalBuffer(x.As(A.float), n)
        gy.SetGlobalBuffer(y.As(A.float), ub)
        t = q.AllocTensor(A.float)
        A.DataCopyPad(t, gx, A.DataCopyExtParams(1, n * 4, 0, 0, 0), pad)
        q.EnQue(t)
        t = q.DeQue(A.float)
        A.DataCopy(gy, t, ub)
        q.FreeTensor(t)
    return kern


@pytest.mark.parametrize("pad", [A.DataCopyPadExtParams(A.float, True, 0, 6, -7.5),
                                 A.DataCopyPadExtParams(True, 0, 6, -7.5),
                                 A.DataCopyPadExtParams(isPad=True, rightPadding=6, paddingValue=-7.5)])
def test_template_and_plain_forms_pad_alike(pad: A.DataCopyPadExtParams) -> None:
    xs = f32(N)
    res, bufs = launch(_pad_kernel(pad), 1, xs, np.zeros(256, np.float32), soc="Ascend910B2")
    assert not res.errors, res.errors
    got = bufs[1].numpy(np.float32)[:256]
    np.testing.assert_array_equal(got[:N], xs)
    np.testing.assert_array_equal(got[N:], np.full(6, -7.5, np.float32))


def test_left_padding_shifts_the_data() -> None:
    xs = f32(N)
    res, bufs = launch(_pad_kernel(A.DataCopyPadExtParams(A.float, True, 2, 4, 1.0)), 1, xs,
                       np.zeros(256, np.float32), soc="Ascend910B2")
    assert not res.errors, res.errors
    got = bufs[1].numpy(np.float32)[:256]
    np.testing.assert_array_equal(got[:2], [1.0, 1.0])
    np.testing.assert_array_equal(got[2:2 + N], xs)
    np.testing.assert_array_equal(got[2 + N:], np.ones(4, np.float32))


def test_padding_past_32_bytes_is_a_finding() -> None:
    # 9 floats = 36 B on the right: CANN's api_check allows 0 ~ 8 for 4-byte elements
    res, _ = launch(_pad_kernel(A.DataCopyPadExtParams(A.float, True, 0, 9, 0.0), n=247), 1, f32(247),
                    np.zeros(256, np.float32), soc="Ascend910B2")
    assert Rule.BAD_PARAM in res.rules()
    assert any("rightPadding 9 is outside its valid range 0 ~ 8" in f.message for f in res.errors)


def test_template_type_of_another_size_is_a_finding() -> None:
    res, _ = launch(_pad_kernel(A.DataCopyPadExtParams(A.half, True, 0, 6, 0)), 1, f32(N),
                    np.zeros(256, np.float32), soc="Ascend910B2")
    assert Rule.BAD_PARAM in res.rules()
    assert any("DataCopyPadExtParams<half>" in f.message for f in res.errors)


def test_bad_fields_are_clear_type_errors() -> None:
    with pytest.raises(TypeError, match="isPad must be a bool"):
        A.DataCopyPadExtParams("yes", 0, 2, 0)
    with pytest.raises(TypeError, match="leftPadding must be an element count"):
        A.DataCopyPadExtParams(A.half, True, -1, 2, 0)
    with pytest.raises(TypeError, match="no field 'pad'"):
        A.DataCopyPadExtParams(pad=True)
    with pytest.raises(TypeError, match="got 5 values after the type"):
        A.DataCopyPadExtParams(A.half, True, 0, 2, 0, 9)
    assert A.DataCopyPadExtParams() == A.DataCopyPadExtParams(False, 0, 0, 0)
    # the type-first form with the value left out: no field shifts (the type once became isPad)
    p = A.DataCopyPadExtParams(A.float, True, 0, 6)
    assert (p.isPad, p.leftPadding, p.rightPadding, p.paddingValue, p.dtype) == (True, 0, 6, 0, A.float)
