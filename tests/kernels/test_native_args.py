"""``native_args.address``: the operand check before a pointer reaches oneDNN. Its fast path (an
ndarray exactly as the primitive was built for) must accept and refuse exactly what the full check
does."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.errors import OperandError
from pycann.kernels.providers.native_args import address

_F32 = np.dtype(np.float32)


def _ptr(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def test_exact_operand_gives_its_address() -> None:
    a = np.zeros((2, 3), np.float32)
    assert address("X", a, (2, 3)) == _ptr(a)
    nhwc = np.zeros((1, 4, 4, 8), np.float32).transpose(0, 3, 1, 2)  # channels-last view
    assert address("X", nhwc, (1, 8, 4, 4), strides=nhwc.strides) == _ptr(nhwc)


def test_unit_dim_strides_and_list_shapes_take_the_full_check() -> None:
    a = np.zeros((1, 6), np.float32)[:, ::2]  # dim 0 has size 1: any stride there is accepted
    built = (12, 8)  # byte strides the primitive was built with for a (1, 3) operand
    assert a.strides != built and address("X", a, (1, 3), strides=built) == _ptr(a)
    b = np.zeros((2, 3), np.float32)
    assert address("X", b, [2, 3]) == _ptr(b)  # a list shape: same answer by the full check


@pytest.mark.parametrize("bad, match", [
    (np.zeros((2, 3), np.float64), "dtype float64"),
    (np.zeros((3, 2), np.float32), r"shape \[3, 2\]"),
    (np.zeros((2, 6), np.float32)[:, ::2], "not C-contiguous"),
    ([[0.0] * 3] * 2, "expected a numpy array"),
])
def test_mismatched_operands_are_refused(bad: object, match: str) -> None:
    with pytest.raises(OperandError, match=match):
        address("X", bad, (2, 3))  # type: ignore[arg-type]


def test_wrong_strides_are_refused() -> None:
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(OperandError, match="strides"):
        address("X", a, (2, 3), strides=(4, 8))


def test_subclass_goes_through_the_full_check() -> None:
    m = np.zeros((2, 3), np.float32).view(np.recarray)  # an ndarray subclass
    assert address("X", m, (2, 3)) == _ptr(m)
