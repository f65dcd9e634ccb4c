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


def _concat_kernel(shapes: list[tuple[int, ...]], axis: int, layout: str | None = "NHWC",
                   dtype: int = 1) -> tuple[Any, Any]:
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN

    attrs = {"axis": axis, "_layout": layout}
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    k = PREPARE_ONEDNN[("", "Concat")](attrs, [TensorDesc(dtype, s) for s in shapes], [None] * len(shapes),
                                       [TensorDesc(dtype, tuple(out))])
    return k, attrs


@pytest.mark.parametrize("dtype", [16, 10])  # bfloat16, float16 (TensorProto)
def test_two_byte_float_concat_copies_the_bits(dtype: int) -> None:
    """A reduced-precision mode's channel concat (PP-OCR det's FPN in bf16): one oneDNN primitive
    copying the 2-byte values as they are, NaN payloads and infinities included (float16: where
    this CPU's oneDNN has no float16 concat, numpy's copy, the same bits)."""
    from pycann.dtypes import to_numpy

    np_dt = to_numpy(dtype)
    shapes = [(1, 24, 160, 160)] * 4
    k, attrs = _concat_kernel(shapes, 1, dtype=dtype)
    assert k is not None and _typed(k).writes_out
    assert _typed(k).openmp or dtype == 10  # bfloat16: always the primitive on a oneDNN CPU
    bits = [RNG.integers(0, 1 << 16, s, dtype=np.uint16) for s in shapes]  # every pattern: NaN, inf, subnormal
    xs = [_cl(b).view(np_dt) for b in bits]
    want = np.concatenate([x.view(np.uint16) for x in xs], axis=1)
    got = k(xs, attrs)[0]
    assert got.dtype == np_dt and got.strides[1] == 2
    np.testing.assert_array_equal(got.view(np.uint16), want)
    arena = _cl(np.zeros(want.shape, np.uint16)).view(np_dt)
    assert k(xs, attrs, [arena])[0] is arena
    np.testing.assert_array_equal(arena.view(np.uint16), want)


@pytest.mark.parametrize("axis", [1, 2, 3])
@pytest.mark.parametrize("hw", [40, 136])
def test_channels_last_concat_equals_numpy_into_the_arena(axis: int, hw: int) -> None:
    """Where ``onednn_concat.takes`` says the oneDNN primitive, else numpy's strided copy; both
    write the executor's channels-last arena view and give numpy's values."""
    from pycann.kernels.providers import onednn_concat

    shapes = [(1, 24, hw, hw), (1, 24, hw, hw), (1, 24, hw, hw)]
    if axis == 1:
        shapes[1] = (1, 40, hw, hw)
    k, attrs = _concat_kernel(shapes, axis)
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    assert k is not None and _typed(k).openmp == onednn_concat.takes(out, axis, len(shapes))
    assert _typed(k).writes_out
    xs = [_cl(RNG.standard_normal(s).astype(np.float32)) for s in shapes]
    want = np.concatenate(xs, axis=axis)
    got = k(xs, attrs)[0]
    assert got.strides[1] == 4  # channels-last result
    np.testing.assert_array_equal(got, want)
    arena = _cl(np.full(want.shape, np.nan, np.float32))
    assert k(xs, attrs, [arena])[0] is arena
    np.testing.assert_array_equal(arena, want)
    nchw = [np.ascontiguousarray(x) for x in xs]  # other strides than bound: same values, same view
    arena[...] = np.nan
    assert k(nchw, attrs, [arena])[0] is arena
    np.testing.assert_array_equal(arena, want)


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


# ------------------------------------- a Relu/Clip tail behind the NaN guard (kernels/guarded_chain.py)


def _bn_relu(tail: list[Any], constants: bool = True) -> tuple[Any, dict[str, Any], list[np.ndarray]]:
    """A pre-activation BatchNormalization + ``tail`` (scale, shift as constant operands)."""
    from pycann.kernels.bind_onednn import PREPARE_ONEDNN

    x = _cl(RNG.standard_normal(SHAPE).astype(np.float32))
    s = (RNG.random((1, SHAPE[1], 1, 1)) + 0.5).astype(np.float32)
    t = RNG.standard_normal((1, SHAPE[1], 1, 1)).astype(np.float32)
    attrs = {"steps": [["Mul", 1, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0], tail], "_layout": "NHWC"}
    arrays = [x, s, t]
    k = PREPARE_ONEDNN[("pycann", "ElementwiseChain")](attrs, [TensorDesc(1, a.shape) for a in arrays],
                                                        [None, s, t] if constants else [None] * 3,
                                                        [TensorDesc(1, SHAPE)])
    return k, attrs, arrays


@pytest.mark.parametrize("tail", [["Relu", -1, 0, 0.0, 0.0], ["Clip", -1, 0, -0.5, 1.5]])
@pytest.mark.parametrize("kind", ["finite", "nan", "inf", "ninf", "huge"])
def test_relu_or_clip_tail_runs_whole_on_onednn_behind_the_guard(tail: list[Any], kind: str) -> None:
    """Finite operands: one oneDNN pass (its Relu/Clip post-op); a NaN/inf input or values whose
    scaling overflows float32: the unfused path. Every result is numpy's to the bit, written into
    the arena view, and a fused run records its output's bound for the next guarded kernel."""
    from pycann.kernels.providers import nan_guard

    k, attrs, arrays = _bn_relu(tail)
    typed = _typed(k)
    assert typed.guarded is not None and typed.openmp and typed.writes_out
    x = arrays[0]
    if kind == "nan":
        x[0, 3, 5, 7] = np.nan
    elif kind in ("inf", "ninf"):
        x[0, 2, 1, 1] = np.inf if kind == "inf" else -np.inf
    elif kind == "huge":
        x *= np.float32(3e38)  # x * s overflows to inf for some elements
    want = GENERIC.kernel(arrays, attrs)[0]
    o = _cl(np.full(SHAPE, 7.0, np.float32))
    assert k(arrays, attrs, [o])[0] is o
    np.testing.assert_array_equal(o, want)
    bound = nan_guard.proven(o)
    if kind == "finite":
        assert bound is not None and bound >= float(np.abs(o).max())
    else:
        assert bound is None
    nchw = [np.ascontiguousarray(a) for a in arrays]  # a call the primitive declines: same values, same view
    o[...] = 7.0
    assert k(nchw, attrs, [o])[0] is o
    np.testing.assert_array_equal(o, want)


def test_guard_off_runs_the_fused_tail_even_on_nan(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PYCANN_NAN_GUARD=0``: oneDNN's result as it is (its Relu maps NaN to 0)."""
    k, attrs, arrays = _bn_relu(["Relu", -1, 0, 0.0, 0.0])
    arrays[0][0, 3, 5, 7] = np.nan
    monkeypatch.setenv("PYCANN_NAN_GUARD", "0")
    o = _cl(np.zeros(SHAPE, np.float32))
    k(arrays, attrs, [o])
    assert o[0, 3, 5, 7] == 0.0 and not np.isnan(o).any()


def test_run_time_operands_keep_the_numpy_tail() -> None:
    """Without constant operands the chain has no bound at plan time: head on oneDNN, tail numpy."""
    k, attrs, arrays = _bn_relu(["Relu", -1, 0, 0.0, 0.0], constants=False)
    assert _typed(k).guarded is None
    arrays[0][0, 3, 5, 7] = np.nan
    o = _cl(np.zeros(SHAPE, np.float32))
    k(arrays, attrs, [o])
    np.testing.assert_array_equal(o, GENERIC.kernel(arrays, attrs)[0])


def test_a_declined_call_applies_the_tail_to_the_arena_view() -> None:
    """Regression: inputs in another layout than bound made the head fall back to the generic
    kernel, which copied its result into the arena view; the numpy tail then ran on the generic
    kernel's own array and the view kept the values before the Relu."""
    k, attrs, arrays = _bn_relu(["Relu", -1, 0, 0.0, 0.0], constants=False)
    nchw = [np.ascontiguousarray(a) for a in arrays]
    o = _cl(np.zeros(SHAPE, np.float32))
    k(nchw, attrs, [o])
    np.testing.assert_array_equal(o, GENERIC.kernel(nchw, attrs)[0])
    assert (o >= 0).all()


@pytest.mark.parametrize("steps,operands,x_bound,want", [
    ([["Mul", 1, 0, 0, 0], ["Add", 2, 0, 0, 0]], [None, [2.0, -3.0], [0.5, -1.0]], 10.0, 31.0),
    ([["Sub", 1, 1, 0, 0], ["Div", 2, 0, 0, 0]], [None, [4.0], [-2.0, 0.5]], 1.0, 10.0),
    ([["Mul", 1, 0, 0, 0], ["Sigmoid", -1, 0, 0, 0], ["Clip", -1, 0, -0.25, 0.5]], [None, [3.0]], 2.0, 0.5),
    ([["Mul", 1, 0, 0, 0], ["Tanh", -1, 0, 0, 0]], [None, [1e30]], 1e20, np.inf),  # float32 overflow first
    ([["Mul", 1, 0, 0, 0]], [None, [0.0, 1.0]], np.inf, np.inf),  # inf * 0 could be NaN
    ([["Add", 1, 0, 0, 0]], [None, [1.0]], np.nan, np.inf),
])
def test_bound_map_follows_each_step(steps: list[Any], operands: list[Any], x_bound: float, want: float) -> None:
    from pycann.kernels import guarded_chain

    consts = [None if c is None else np.array(c, np.float32) for c in operands]
    m = guarded_chain.bound_map(steps, consts)
    assert m is not None and m(x_bound) == pytest.approx(want)


@pytest.mark.parametrize("steps,operands,why", [
    ([["Div", 1, 0, 0, 0]], [None, [2.0, 0.0]], "a divisor that can be 0"),
    ([["Div", 1, 1, 0, 0]], [None, [2.0]], "c / x: unbounded near x = 0"),
    ([["Mul", 1, 0, 0, 0]], [None, None], "a run-time operand"),
    ([["Add", 1, 0, 0, 0]], [None, [np.inf]], "an infinite constant"),
    ([["Pow", 1, 0, 0, 0]], [None, [2.0]], "a step without a bound rule"),
])
def test_bound_map_refuses_what_it_cannot_bound(steps: list[Any], operands: list[Any], why: str) -> None:
    from pycann.kernels import guarded_chain

    consts = [None if c is None else np.array(c, np.float32) for c in operands]
    assert guarded_chain.bound_map(steps, consts) is None, why


@pytest.mark.parametrize("out,axis,parts,want", [
    ((1, 1024, 7, 7), 1, 2, False),  # under THICK_ELEMENTS
    ((1, 256, 28, 28), 1, 4, True),  # GoogLeNet: parts of 64 channels on average
    ((1, 256, 56, 56), 1, 7, False),  # DenseNet: thin 32-channel parts
    ((1, 96, 160, 160), 1, 4, True),  # PP-OCR det's FPN: at least MIN_ELEMENTS
])
def test_which_concats_the_primitive_takes(out: tuple[int, ...], axis: int, parts: int, want: bool) -> None:
    from pycann.kernels.providers import onednn_concat

    assert onednn_concat.takes(out, axis, parts) is want


def test_a_chain_of_several_steps_binds_from_fewer_elements_than_one_op() -> None:
    """``onednn_binary.min_elements``: numpy passes over the tensor once a step, so a chain of two or
    more steps takes the primitive from ``CHAIN_MIN_ELEMENTS`` (DenseNet's 7x7 and 14x14 pre-activation
    Mul + Add + Relu), one op only from ``MIN_ELEMENTS``; the small chain equals numpy's."""
    from pycann.kernels.providers import onednn_binary

    assert onednn_binary.CHAIN_MIN_ELEMENTS < onednn_binary.MIN_ELEMENTS
    shape = (1, 512, 7, 7)  # 25,088 elements: between the two thresholds
    x = _cl(RNG.standard_normal(shape).astype(np.float32))
    s, b = (RNG.standard_normal((1, 512, 1, 1)).astype(np.float32) for _ in range(2))
    two = [["Mul", 1, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0]]
    k, attrs, want = _prepare(two, [x, s, b], "NHWC")
    assert k is not None and _typed(k).openmp, "a two-step chain of 25K elements binds oneDNN"
    np.testing.assert_allclose(k([x, s, b], attrs)[0], want, rtol=2e-6, atol=1e-6)
    assert onednn_binary.bound_chain(two[:1], [shape, (1, 512, 1, 1)], True) is None  # one op: numpy's
    assert onednn_binary.bound_chain(two, [(1, 512, 4, 7), (1, 512, 1, 1), (1, 512, 1, 1)], True) is None  # 14K
