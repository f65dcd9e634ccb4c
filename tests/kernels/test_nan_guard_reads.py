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


@pytest.mark.parametrize("dtype, big", [(np.float32, 1e30), (np.float64, 1e200), (np.float32, 1.5e19)])
def test_a_huge_finite_input_has_a_finite_bound_and_no_warning(dtype: type, big: float) -> None:
    """Finite values whose squares overflow the dot (float32 above ~1.8e19; at 1.5e19 only their sum
    does) made numpy print "overflow encountered in dot" and gave the bound inf, as for an inf input.
    Expected: max |a| (a finite upper bound), no warning even under np.seterr(all="raise"); inf and
    NaN inputs still say inf and NaN."""
    x = (np.sign(RNG.standard_normal(1000)) * RNG.uniform(0.5, 1.0, 1000) * big).astype(dtype)
    x[7] = dtype(-big)  # (one value at the magnitude, whatever the draw)
    with np.errstate(all="raise"), _no_warnings():
        assert nan_guard._norm2(x) == float(np.abs(x).max()) == float(dtype(big))
        for bad, expect in ((np.inf, math.inf), (-np.inf, math.inf), (np.nan, math.nan)):
            y = x.copy()
            y[500] = bad
            b = nan_guard._norm2(y)
            assert (math.isnan(b) if math.isnan(expect) else b == expect), (bad, b)
        y = x.copy()
        y[3], y[9] = np.inf, np.nan
        assert math.isnan(nan_guard._norm2(y))


def test_safe_proves_a_huge_finite_input_with_small_weights_and_refuses_inf_and_nan() -> None:
    """|x| <= 1e25 and sum |w| <= 1e-20 bound the pre-activation by 1e5: the fused path is safe (it
    was refused: the dot overflowed to inf); an inf or a NaN anywhere in x is never safe."""
    x = np.full((1, 3, 8, 8), 1e25, np.float32)
    with _no_warnings():
        assert nan_guard.safe(x, 1e-20)
        assert not nan_guard.safe(x, 1e20)  # 1e45: past float32
        for bad in (np.inf, -np.inf, np.nan):
            y = x.copy()
            y[0, 1, 2, 3] = bad
            assert not nan_guard.safe(y, 1e-20)


def test_conv_relu_on_huge_finite_inputs_matches_onnxruntime_without_warnings() -> None:
    """End to end: a fused Conv+Relu on inputs of 1e30 (weights ~1e-31) gives ONNX Runtime's values and
    prints no numpy warning; a NaN in the input stays NaN through the Relu, as in ONNX Runtime."""
    from onnx import TensorProto, helper, numpy_helper

    from pycann import compile_model
    from pycann.ge.run.model import LoadedModel
    from tests.ops.oracle import run_ort

    w = (RNG.standard_normal((4, 3, 3, 3)) * 1e-31).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"])], "huge",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    lm = LoadedModel.from_compiled(compile_model(m))
    x = (RNG.standard_normal((1, 3, 8, 8)) * 1e30).astype(np.float32)
    with _no_warnings():
        got = lm.run([x])[0]
    want = run_ort(m, {"x": x})[0]
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    x[0, 1, 4, 4] = np.nan
    got = lm.run([x])[0]
    want = run_ort(m, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any()


class _no_warnings:
    """Turns every warning into an error inside the block (numpy's RuntimeWarning included)."""

    def __enter__(self) -> None:
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)
