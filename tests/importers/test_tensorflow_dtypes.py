"""TF ops whose constants must take the input's dtype: Relu6 on integers, Log1p/Erfc on half,
FusedBatchNormV3 on half activations with float statistics (Keras mixed precision). Each made
a graph that failed to compile (a float or double constant beside an int32/half input); the
expected values are numpy restatements of the TF ops (the GraphDef helpers of
test_tensorflow_graphdef)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.importers.test_tensorflow_graphdef import F32, G, _run, types_pb2

F16 = types_pb2.DT_HALF


@pytest.mark.parametrize("dtype,tf_type", [(np.int32, types_pb2.DT_INT32), (np.int64, types_pb2.DT_INT64),
                                           (np.float16, F16)])
def test_relu6_keeps_the_input_dtype(dtype: type, tf_type: int) -> None:
    x = np.array([-9, -1, 0, 3, 6, 7, 20, 5], dtype)
    g = G()
    g.placeholder("x", x.shape, tf_type)
    g.node("Relu6", "r", ["x"], T=("type", tf_type))
    (got,) = _run(g.gd, [x], [("r", 0)])
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.clip(x, 0, 6))


@pytest.mark.parametrize("op", ["Log1p", "Erfc"])
def test_log1p_and_erfc_on_half(op: str) -> None:
    x = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 3.5], np.float16)
    g = G()
    g.placeholder("x", x.shape, F16)
    g.node(op, "y", ["x"], T=("type", F16))
    (got,) = _run(g.gd, [x], [("y", 0)])
    ref = np.log1p(x.astype(np.float64)) if op == "Log1p" else np.array([math.erfc(v) for v in x.astype(np.float64)])
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3, atol=1e-3)


def test_fused_batch_norm_half_input_float_statistics() -> None:
    """FusedBatchNormV3 with T=half, U=float, as Keras' mixed-precision BatchNormalization writes it."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float16)
    scale, offset, mean = (rng.normal(size=5).astype(np.float32) for _ in range(3))
    var = rng.uniform(0.5, 2.0, 5).astype(np.float32)
    g = G()
    g.placeholder("x", x.shape, F16)
    for name, v in (("s", scale), ("o", offset), ("m", mean), ("v", var)):
        g.const(name, v)
    g.node("FusedBatchNormV3", "bn", ["x", "s", "o", "m", "v"], T=("type", F16), U=("type", F32), epsilon=0.01,
           is_training=False, data_format="NHWC")
    (got,) = _run(g.gd, [x], [("bn", 0)])
    ref = (x.astype(np.float64) - mean) * scale / np.sqrt(var.astype(np.float64) + 0.01) + offset
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=0, atol=4e-3 * np.abs(ref).max())
