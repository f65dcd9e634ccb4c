"""Prepared (plan-time bound) kernels equal the generic kernels they specialise (ops/prepared.py)."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.ops.prepared import PREPARE
from pycann.ops.registry import lookup

RNG = np.random.default_rng(3)


def _desc(a: np.ndarray) -> TensorDesc:
    return TensorDesc(1 if a.dtype == np.float32 else 7, a.shape)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [
    ([0, 2, 0, 3], None),                      # 2-D: pad the last axis (Silero VAD's STFT reflect pad)
    ([1, 2, 2, 1], None),
    ([1, 1], [0]),                             # axes input
    ([0, 0, 0, 0], None),                      # nothing to pad
])
def test_prepared_pad_equals_generic(mode: str, pads: list[int], axes: list[int] | None) -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    op = lookup("Pad", "", 19)
    a = op.with_defaults({"mode": mode})
    p = np.array(pads, np.int64)
    cv = np.array(1.5, np.float32)
    ins = [x, p, cv] + ([np.array(axes, np.int64)] if axes is not None else [])
    want = op.kernel(ins, a)[0]
    descs = [_desc(v) for v in ins]
    kernel = PREPARE[("", "Pad")](a, descs, [None, *ins[1:]], [TensorDesc(1, want.shape)])
    assert kernel is not None
    got = kernel([x, *ins[1:]], a)[0]
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, x)


def test_prepared_pad_declines_what_it_cannot_bind() -> None:
    op = lookup("Pad", "", 19)
    a = op.with_defaults({"mode": "constant"})
    x = np.zeros((2, 3), np.float32)
    neg = np.array([0, -1, 0, 1], np.int64)  # cropping pads: the generic kernel handles them
    assert PREPARE[("", "Pad")](a, [_desc(x), _desc(neg)], [None, neg], [TensorDesc(1, (2, 3))]) is None
    pads = np.array([0, 1, 0, 1], np.int64)
    assert PREPARE[("", "Pad")](a, [_desc(x), _desc(pads)], [None, None], [TensorDesc(1, (2, 5))]) is None  # runtime pads
    cv = np.array(2.0, np.float32)  # a value computed at run time
    assert PREPARE[("", "Pad")](a, [_desc(x), _desc(pads), _desc(cv)], [None, pads, None],
                                [TensorDesc(1, (2, 5))]) is None
