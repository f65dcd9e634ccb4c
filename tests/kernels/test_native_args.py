"""``native_args.address``: the operand check before a pointer reaches oneDNN. Its fast path (an
ndarray exactly as the primitive was built for) must accept and refuse exactly what the full check
does."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.errors import OperandError
from pycann.kernels.providers.native_args import address, check

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


def _full(what: str, a: object, shape: object, dtype: object = _F32, strides: object = None) -> object:
    """What ``address`` answered before its fast path: ``check``, then the address (or the error)."""
    try:
        check(what, a, shape, dtype, strides)  # type: ignore[arg-type]
    except OperandError as e:
        return ("refused", str(e))
    return _ptr(a)  # type: ignore[arg-type]


def _fast(what: str, a: object, shape: object, dtype: object = _F32, strides: object = None) -> object:
    try:
        return address(what, a, shape, dtype, strides)  # type: ignore[arg-type]
    except OperandError as e:
        return ("refused", str(e))


_A = np.zeros((2, 3), np.float32)
_RO = np.zeros((2, 3), np.float32)
_RO.flags.writeable = False


@pytest.mark.parametrize("a, shape, dtype, strides", [
    (_A, np.array([2, 3]), _F32, None),  # an ndarray shape (a Sequence for the old check)
    (_A, np.array([3, 2]), _F32, None),
    (_A, (2, 3), _F32, np.array([12, 4])),  # ndarray strides
    (_A, (2, 3), _F32, np.array([4, 8])),
    (np.zeros((), np.float32), np.array([], dtype=np.int64), _F32, None),  # 0-d, empty ndarray shape
    (_A, (np.int64(2), np.int32(3)), _F32, None),  # numpy ints
    (_A, (2, 3), _F32, (np.int64(12), np.int64(4))),
    (_A, (2, 3), np.float32, None),  # a scalar type for the dtype
    (_A, (2, 3), "float32", None),
    (_A.astype(">f4"), (2, 3), _F32, None),  # byte-swapped
    (_RO, (2, 3), _F32, None),  # read-only
    (np.zeros((0, 3), np.float32), (0, 3), _F32, None),  # zero-size
    (np.zeros((0, 3), np.float32), (0, 3), _F32, (4, 4)),
    (np.zeros((3, 2), np.float32).T, (2, 3), _F32, None),  # F-order
    (np.zeros((3, 2), np.float32).T, (2, 3), _F32, (4, 8)),
    (np.zeros((2, 3), np.float32)[:, ::-1], (2, 3), _F32, (12, -4)),  # negative stride
    (np.zeros((2, 3), np.float32).view(np.recarray), (2, 3), _F32, (12, 4)),
    (np.zeros((2, 3), np.float32).view(np.matrix), (2, 3), _F32, None),
    (np.zeros((2, 3), np.float32), [2, 3], _F32, [12, 4]),
])
def test_fast_path_answers_as_the_full_check(a: np.ndarray, shape: object, dtype: object, strides: object) -> None:
    """Every operand form gets the answer (address, or refusal and message) the full check gives."""
    assert _fast("X", a, shape, dtype, strides) == _full("X", a, shape, dtype, strides)
