"""ElementwiseChain as one oneDNN binary primitive with post-ops (providers/onednn_binary.py,
prepared_onednn._chain): values equal the numpy chain kernel (NaN included), chains it must not
take stay on numpy, and calls with other strides fall back to the generic kernel."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.kernels import providers
from pycann.kernels.bound import bound as _bound_kernel
from pycann.ops.registry import lookup

pytestmark = pytest.mark.skipif(not providers.available("onednn"), reason="libdnnl missing")

RNG = np.random.default_rng(3)
GENERIC = lookup("ElementwiseChain", "pycann", 1)
SHAPE = (1, 96, 40, 40)  # 153,600 elements: above onednn_binary.MIN_ELEMENTS


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _prepare(steps: list[list[Any]], arrays: list[np.ndarray], layout: str | None) -> Any:
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN

    attrs = {"steps": steps, "_layout": layout}
    descs = [TensorDesc(1, a.shape) for a in arrays]
    want = GENERIC.kernel(arrays, attrs)[0]
    k = PREPARE_ONEDNN[("pycann", "ElementwiseChain")](attrs, descs, [None] * len(arrays), [TensorDesc(1, want.shape)])
    return k, attrs, want


def _inputs(nhwc: bool) -> list[np.ndarray]:
    x, up = RNG.standard_normal(SHAPE).astype(np.float32), RNG.standard_normal(SHAPE).astype(np.float32)
    se = RNG.standard_normal((1, SHAPE[1], 1, 1)).astype(np.float32)
    return [_cl(x) if nhwc else x, se, _cl(up) if nhwc else up]


@pytest.mark.parametrize("nhwc", [True, False])
@pytest.mark.parametrize("steps", [
    [["Mul", 1, 0, 0.0, 0.0], ["Add", 0, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0]],  # RSE-FPN: x*se + x + up
    [["Mul", 1, 1, 0.0, 0.0], ["Add", 2, 1, 0.0, 0.0]],  # the running value as the right operand (commutes)
    [["Sub", 2, 0, 0.0, 0.0], ["Div", 1, 0, 0.0, 0.0], ["Sigmoid", -1, 0, 0.0, 0.0]],
    [["Add", 2, 0, 0.0, 0.0], ["Tanh", -1, 0, 0.0, 0.0], ["Mul", 1, 0, 0.0, 0.0], ["Sigmoid", -1, 0, 0.0, 0.0]],
])
def test_chain_runs_in_onednn_and_equals_numpy(steps: list[list[Any]], nhwc: bool) -> None:
    arrays = _inputs(nhwc)
    k, attrs, want = _prepare(steps, arrays, "NHWC" if nhwc else None)
    assert k is not None and _typed(k).openmp, "expected the oneDNN kernel"
    got = k(arrays, attrs)[0]
    assert got.shape == want.shape and got.dtype == np.float32
    if nhwc:
        assert got.strides[1] == 4  # keeps the chain's channels-last layout
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_nan_and_inf_propagate_as_in_numpy() -> None:
    arrays = _inputs(True)
    arrays[0][0, 3, 5, 7] = np.nan
    arrays[2][0, 4, 1, 2] = np.inf
    arrays[1][0, 5, 0, 0] = -np.inf
    steps = [["Mul", 1, 0, 0.0, 0.0], ["Add", 0, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0]]
    k, attrs, want = _prepare(steps, arrays, "NHWC")
    got = k(arrays, attrs)[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("steps,why", [
    ([["Max", 2, 0, 0.0, 0.0]], "Max: NaN rule"),
    ([["Relu", -1, 0, 0.0, 0.0], ["Mul", 1, 0, 0.0, 0.0]], "Relu first: no binary head"),
    ([["Mul", 1, 0, 0.0, 0.0], ["Sub", 2, 1, 0.0, 0.0]], "running value as Sub's right operand"),
])
def test_chains_oneDNN_must_not_take_stay_on_numpy(steps: list[list[Any]], why: str) -> None:
    arrays = _inputs(True)
    k, attrs, want = _prepare(steps, arrays, "NHWC")
    assert k is None or not _typed(k).openmp, why
    got = (k or GENERIC.kernel)(arrays, attrs)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("steps", [
    [["Mul", 1, 0, 0.0, 0.0], ["Relu", -1, 0, 0.0, 0.0]],  # oneDNN's relu would turn NaN into 0
    [["Mul", 1, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0], ["Relu", -1, 0, 0.0, 0.0]],  # BatchNorm + Relu
    [["Add", 2, 0, 0.0, 0.0], ["Exp", -1, 0, 0.0, 0.0], ["Clip", -1, 0, -1.0, 2.0]],  # its exp: NaN -> +inf
])
def test_a_tail_oneDNN_must_not_take_runs_in_numpy_after_its_binary_head(steps: list[list[Any]]) -> None:
    """The binary head is one oneDNN primitive (exact IEEE per element), the unary tail numpy's in
    place: the values, NaN and infinities included, are numpy's to the bit."""
    arrays = _inputs(True)
    arrays[0][0, 3, 5, 7] = np.nan
    arrays[0][0, 2, 1, 1] = -np.inf
    arrays[2][0, 4, 1, 2] = np.inf
    k, attrs, want = _prepare(steps, arrays, "NHWC")
    assert k is not None and _typed(k).openmp
    got = k(arrays, attrs)[0]
    np.testing.assert_array_equal(got, want)
    assert got.strides[1] == 4  # keeps the chain's channels-last layout
    nchw = [np.ascontiguousarray(a) for a in arrays]  # a call the primitive declines: the generic head
    np.testing.assert_array_equal(k(nchw, attrs)[0], GENERIC.kernel(nchw, attrs)[0])


def test_small_chains_keep_the_numpy_kernel() -> None:
    x = RNG.standard_normal((1, 8, 4, 4)).astype(np.float32)
    k, attrs, want = _prepare([["Add", 0, 0, 0.0, 0.0]], [x], None)
    assert k is None or not _typed(k).openmp


def test_other_strides_at_run_time_fall_back_to_the_generic_kernel() -> None:
    arrays = _inputs(True)
    steps = [["Mul", 1, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0]]
    k, attrs, _ = _prepare(steps, arrays, "NHWC")
    assert k is not None and _typed(k).openmp
    nchw = [np.ascontiguousarray(a) for a in arrays]  # bound channels-last, given NCHW
    want = GENERIC.kernel(nchw, attrs)[0]
    np.testing.assert_allclose(k(nchw, attrs)[0], want, rtol=2e-6, atol=1e-6)
    # a float64 operand: the generic kernel's dtype rules
    mixed = [arrays[0], arrays[1].astype(np.float64), arrays[2]]
    np.testing.assert_array_equal(k(mixed, attrs)[0], GENERIC.kernel(mixed, attrs)[0])


# ------------------------------------------------------------ Concat (providers/onednn_concat.py)


def _concat_kernel(shapes: list[tuple[int, ...]], axis: int, layout: str | None = "NHWC") -> tuple[Any, Any]:
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN

    attrs = {"axis": axis, "_layout": layout}
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    k = PREPARE_ONEDNN[("", "Concat")](attrs, [TensorDesc(1, s) for s in shapes], [None] * len(shapes),
                                       [TensorDesc(1, tuple(out))])
    return k, attrs


@pytest.mark.parametrize("axis", [1, 2, 3])
def test_channels_last_concat_runs_in_onednn_and_equals_numpy(axis: int) -> None:
    shapes = [(1, 24, 40, 40), (1, 24, 40, 40), (1, 24, 40, 40)]
    if axis == 1:
        shapes[1] = (1, 40, 40, 40)
    k, attrs = _concat_kernel(shapes, axis)
    assert k is not None and _typed(k).openmp
    xs = [_cl(RNG.standard_normal(s).astype(np.float32)) for s in shapes]
    got = k(xs, attrs)[0]
    assert got.strides[1] == 4  # channels-last result
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=axis))


def test_concat_with_other_strides_or_outside_a_chain_uses_numpy() -> None:
    shapes = [(1, 24, 40, 40)] * 4
    k, attrs = _concat_kernel(shapes, 1)
    xs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]  # NCHW arrays, NHWC bound
    np.testing.assert_array_equal(k(xs, attrs)[0], np.concatenate(xs, axis=1))
    k2, _ = _concat_kernel(shapes, 1, layout=None)
    assert k2 is not None and not _typed(k2).openmp
    small, _ = _concat_kernel([(1, 4, 4, 4)] * 2, 1)
    assert small is not None and not _typed(small).openmp


# ------------------------------------------------ standalone Add / Sub / Mul / Div (prepared_onednn._binary)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("order", ["full_first", "small_first"])
def test_binary_op_runs_in_onednn_and_equals_numpy(op: str, order: str) -> None:
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN

    x = _cl(RNG.standard_normal(SHAPE).astype(np.float32))
    se = RNG.standard_normal((1, SHAPE[1], 1, 1)).astype(np.float32) + 3.0
    x[0, 2, 3, 4] = np.nan
    ins = [x, se] if order == "full_first" else [se, x]
    generic = lookup(op, "", 14)
    attrs = generic.with_defaults({"_layout": "NHWC"}, op)
    want = generic.kernel(ins, attrs)[0]
    k = PREPARE_ONEDNN[("", op)](attrs, [TensorDesc(1, a.shape) for a in ins], [None, None],
                                 [TensorDesc(1, want.shape)])
    if order == "small_first" and op in ("Sub", "Div"):
        assert k is None  # oneDNN broadcasts only its second source: the generic kernel keeps these
        return
    assert k is not None and _typed(k).openmp
    got = k(ins, attrs)[0]
    assert got.strides[1] == 4
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    # into the executor's arena view (channels-last), and through the generic kernel when the
    # inputs come in another layout
    o = _cl(np.zeros(want.shape, np.float32))
    assert k(ins, attrs, [o])[0] is o
    np.testing.assert_allclose(o, want, rtol=1e-6, atol=0)
    nchw = [np.ascontiguousarray(a) for a in ins]
    o[...] = 0
    np.testing.assert_array_equal(k(nchw, attrs, [o])[0], generic.kernel(nchw, attrs)[0])
    np.testing.assert_array_equal(o, generic.kernel(nchw, attrs)[0])
    np.testing.assert_array_equal(k(nchw, attrs)[0], generic.kernel(nchw, attrs)[0])


def _typed(k: object) -> Any:
    """A binder's result as a ``BoundKernel`` (plain functions: one without arena or OpenMP)."""
    return _bound_kernel(k)  # type: ignore[arg-type]
