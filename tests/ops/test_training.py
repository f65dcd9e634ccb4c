"""ai.onnx.preview.training optimizers (Momentum, Adagrad, Adam) against numpy goldens written
from the spec's formulas; ONNX Runtime's inference build has no training ops."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.errors import ShapeError
from pycann.ops.opdef import InferContext
from tests.ops.oracle import check_op, run_pycann_op

TR = "ai.onnx.preview.training"
RNG = np.random.default_rng(3)
R = np.array(0.1, np.float32)
XS = [RNG.standard_normal(s).astype(np.float32) for s in [(3,), (2, 2)]]
GS = [RNG.standard_normal(x.shape).astype(np.float32) for x in XS]
SS = [np.abs(RNG.standard_normal(x.shape)).astype(np.float32) for x in XS]


@pytest.mark.parametrize("t", [0, 3])
@pytest.mark.parametrize("n", [1, 2])
def test_adagrad(t, n):
    attrs = {"decay_factor": 0.1, "epsilon": 1e-5, "norm_coefficient": 0.01}
    xs, gs, hs = XS[:n], GS[:n], SS[:n]
    r = 0.1 / (1 + t * 0.1)
    want_x, want_h = [], []
    for x, g, h in zip(xs, gs, hs):
        gr = 0.01 * x + g
        h2 = h + gr * gr
        want_x.append((x - r * gr / (np.sqrt(h2) + 1e-5)).astype(np.float32))
        want_h.append(h2.astype(np.float32))
    check_op("Adagrad", [R, np.array(t, np.int64), *xs, *gs, *hs], attrs, n_outputs=2 * n, opset=1, domain=TR,
             expected=want_x + want_h, rtol=1e-5)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
@pytest.mark.parametrize("t", [0, 2])
def test_momentum(mode, t):
    attrs = {"alpha": 0.9, "beta": 0.5, "mode": mode, "norm_coefficient": 0.02}
    want_x, want_v = [], []
    beta = 0.5 if t > 0 else 1.0
    for x, g, v in zip(XS, GS, SS):
        gr = 0.02 * x + g
        v2 = 0.9 * v + beta * gr
        want_x.append((x - 0.1 * (v2 if mode == "standard" else gr + 0.9 * v2)).astype(np.float32))
        want_v.append(v2.astype(np.float32))
    check_op("Momentum", [R, np.array(t, np.int64), *XS, *GS, *SS], attrs, n_outputs=4, opset=1, domain=TR,
             expected=want_x + want_v)


@pytest.mark.parametrize("t", [0, 5])
def test_adam(t):
    attrs = {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-3, "norm_coefficient": 0.01, "norm_coefficient_post": 0.02}
    hs = [s * 2 for s in SS]
    want = [[], [], []]
    lr = 0.1 * np.sqrt(1 - 0.95**t) / (1 - 0.8**t) if t > 0 else 0.1
    for x, g, v, h in zip(XS, GS, SS, hs):
        gr = 0.01 * x + g
        v2 = 0.8 * v + 0.2 * gr
        h2 = 0.95 * h + 0.05 * gr * gr
        x2 = (1 - 0.02) * (x - lr * v2 / (np.sqrt(h2) + 1e-3))
        for lst, val in zip(want, (x2, v2, h2)):
            lst.append(val.astype(np.float32))
    check_op("Adam", [R, np.array(t, np.int64), *XS, *GS, *SS, *hs], attrs, n_outputs=6, opset=1, domain=TR,
             expected=want[0] + want[1] + want[2])


def test_adam_defaults_and_float64():
    x = XS[0].astype(np.float64)
    outs, descs = run_pycann_op("Adam", [R, np.array(1, np.int64), x, x, x, x * x], {}, 3, 1, domain=TR)
    assert [o.dtype for o in outs] == [np.float64] * 3 and descs[0] == TensorDesc(11, (3,))


def test_infer_rejects_bad_groups():
    from pycann.ops.registry import lookup

    d = lookup("Adagrad", TR, 1)
    ins = [TensorDesc(1, ()), TensorDesc(7, ()), TensorDesc(1, (3,)), TensorDesc(1, (3,))]
    with pytest.raises(ShapeError, match="groups"):
        d.infer(InferContext("n", "Adagrad", d.with_defaults({}), ins, [None] * 4, 1, 1))
    ins = [TensorDesc(1, ()), TensorDesc(7, ()), TensorDesc(1, (3,)), TensorDesc(1, (4,)), TensorDesc(1, (3,))]
    with pytest.raises(ShapeError, match="differ in shape"):
        d.infer(InferContext("n", "Adagrad", d.with_defaults({}), ins, [None] * 5, 1, 2))
