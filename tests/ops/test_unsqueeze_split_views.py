"""Unsqueeze by reshape and Split by basic slicing (``ops/tensor.py``) against ONNX Runtime on the
inputs a reshape or a slice could get wrong: unsorted and negative axes, 0-d and zero-size inputs,
zero-size chunks, num_outputs with a remainder, non-contiguous inputs; outputs stay views."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ops.oracle import check_op, run_pycann_op

RNG = np.random.default_rng(17)


def _i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _noncontig() -> np.ndarray:
    x = RNG.standard_normal((5, 4, 3)).astype(np.float32).transpose(2, 0, 1)[:, ::2]  # (3, 3, 4), strided
    assert not x.flags.c_contiguous
    return x


@pytest.mark.parametrize("axes", [(4, -6, 2), (-1, 0), (2, 0, -2), (-3,)])
def test_unsqueeze_unsorted_negative_axes_and_strided_input(axes: tuple[int, ...]) -> None:
    x = _noncontig()
    (got,) = check_op("Unsqueeze", [x, _i64(*axes)], opset=13, const_inputs=(1,))
    assert np.shares_memory(got, x)  # a view, as np.expand_dims gave


def test_unsqueeze_0d_and_zero_size_and_repeated_axes() -> None:
    check_op("Unsqueeze", [np.array(2.5, np.float32), _i64(1, -1, 0)], opset=13, const_inputs=(1,))
    check_op("Unsqueeze", [np.zeros((0, 3), np.float32), _i64(-1, 1)], opset=13, const_inputs=(1,))
    with pytest.raises(ValueError, match="repeated"):
        run_pycann_op("Unsqueeze", [np.zeros((2, 3), np.float32), _i64(1, -3)], {}, 1, 13)  # both mean axis 1


def test_split_zero_size_chunks_remainders_and_strided_input() -> None:
    x = _noncontig()
    for outs in check_op("Split", [x, _i64(0, 3, 0)], {"axis": 1}, n_outputs=3, opset=13, const_inputs=(1,)), \
            check_op("Split", [x, _i64(1, 0, 3)], {"axis": -1}, n_outputs=3, opset=18, const_inputs=(1,)):
        assert all(np.shares_memory(o, x) for o in outs if o.size)
    y = RNG.standard_normal((2, 5)).astype(np.float32)
    check_op("Split", [y], {"num_outputs": 3, "axis": 1}, n_outputs=3, opset=18)  # 2, 2, 1
    check_op("Split", [y.T], {"num_outputs": 2, "axis": 0}, n_outputs=2, opset=18)  # 3, 2 of a transposed view
    check_op("Split", [np.zeros((0, 4), np.float32), _i64(2, 2)], {"axis": 1}, n_outputs=2, opset=13,
             const_inputs=(1,))
    check_op("Split", [np.zeros((4, 0), np.float32), _i64(1, 3)], {"axis": 0}, n_outputs=2, opset=13,
             const_inputs=(1,))
    with pytest.raises(ValueError, match="does not sum"):
        run_pycann_op("Split", [y, _i64(3, 3)], {"axis": 1}, 2, 13)


def test_split_num_outputs_that_would_leave_a_negative_last_chunk_is_rejected() -> None:
    """5 into 4 (opset 18): chunks of ceil(5/4) = 2 leave -1 for the last; ORT rejects it
    ("would produce a negative final split") and so does pycann, naming the fix."""
    from pycann.ops.tensor import _k_split

    x = np.arange(5, dtype=np.float32)
    with pytest.raises(ValueError, match=r"num_outputs 4 cannot split axis length 5.*'split' input"):
        _k_split([x], {"axis": 0, "num_outputs": 4})
    assert [o.shape for o in _k_split([x], {"axis": 0, "num_outputs": 3})] == [(2,), (2,), (1,)]


def test_split_num_outputs_with_an_exactly_empty_last_chunk_equals_ort() -> None:
    """6 into 4 (opset 18): chunks of 2 give 2, 2, 2 and an empty last output, as ORT gives (it
    refuses only a negative final split)."""
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    check_op("Split", [x], {"num_outputs": 4, "axis": 0}, n_outputs=4, opset=18)
