"""Adversarial tests of the NaN guard's bounds passed on by plain convs, Concat, AveragePool and
small ElementwiseChains (``nan_guard.record_max``, ``bind.passes_bound``, ``onednn_pool``,
``bind_small._chain``): a bound on record that is too small, or outlives the run or the values it
was proven for, lets a NaN-dropping fused activation turn a NaN into a number. Every model is
compared with ONNX Runtime over runs that alternate finite and non-finite inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from tests.ops.oracle import run_ort

F = TensorProto.FLOAT


def _model(nodes: list[onnx.NodeProto], ins: list[tuple[str, tuple[int, ...]]], outs: list[str],
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, list(s)) for n, s in ins],
                          [helper.make_tensor_value_info(o, F, None) for o in outs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _same(got: list[np.ndarray], want: list[np.ndarray], tag: str) -> None:
    for g, w in zip(got, want):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=tag)
        np.testing.assert_array_equal(np.isinf(g) & (g > 0), np.isinf(w) & (w > 0), err_msg=tag)
        np.testing.assert_array_equal(np.isinf(g) & (g < 0), np.isinf(w) & (w < 0), err_msg=tag)
        fin = np.isfinite(w)
        np.testing.assert_allclose(g[fin], w[fin], rtol=1e-4,
                                   atol=1e-4 * max(1.0, float(np.abs(w[fin]).max(initial=0.0))), err_msg=tag)


def _onednn() -> None:
    if not providers.available("onednn"):
        pytest.skip("the onednn provider is not available")


def test_average_pool_window_sum_overflow_is_not_a_bound() -> None:
    """conv+relu (bound 8e37 from one read of x: 64 ones times 1e37) -> 8x8 AveragePool on oneDNN
    -> conv (0.5, -0.5) + relu. Every value of the pool's input is 1e37 < the bound, but oneDNN
    sums the 64 of a window in float32 (6.4e38: inf) before it divides, so the pool's output is
    inf and the second conv's pre-activation inf - inf = NaN; ORT keeps it. Recording the input's
    bound for the pool's output let the second conv run fused (its Relu gave 0)."""
    _onednn()
    inits = {"w1": np.full((2, 1, 1, 1), 1e37), "w2": np.array([0.5, -0.5]).reshape(1, 2, 1, 1)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("AveragePool", ["r1"], ["p"], kernel_shape=[8, 8], strides=[8, 8]),
             helper.make_node("Conv", ["p", "w2"], ["c2"]), helper.make_node("Relu", ["c2"], ["y"])]
    m = _model(nodes, [("x", (1, 1, 256, 256))], ["y"], inits)
    lm = LoadedModel.from_compiled(compile_model(m))
    for v in (0.0, 1.0, 0.5, 1.0):
        x = np.zeros((1, 1, 256, 256), np.float32)
        x[0, 0, :8, :8] = v
        _same(lm.run([x]), run_ort(m, {"x": x}), f"window of {v}")


def _f(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("part", ["input", "const", "self"])
def test_concat_part_record_lasts_one_run(part: str) -> None:
    """conv+relu -> Concat with a graph input z / a constant / the model input x itself (record_max
    reads that part and records its bound on it: the user's array or a weight) -> BatchNormalization
    + Relu -> 1x1 conv+relu. The same input arrays are refilled in place between runs with NaN,
    inf and huge values: the part's record of an earlier run must not prove the new values."""
    _onednn()
    rng = np.random.default_rng(17)
    c = 16 + 8
    inits = {"w0": _f(rng, 16, 8, 3, 3, scale=0.3), "b0": _f(rng, 16), "w1": _f(rng, 8, c, 1, 1, scale=0.3),
             "g": _f(rng, c) + 2.0, "be": _f(rng, c), "mu": _f(rng, c), "v": np.abs(_f(rng, c)) + 0.5}
    other = {"input": "z", "const": "k", "self": "x"}[part]
    if part == "const":
        inits["k"] = _f(rng, 1, 8, 64, 64)
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]), helper.make_node("Concat", ["r0", other], ["cat"], axis=1),
             helper.make_node("BatchNormalization", ["cat", "g", "be", "mu", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["a"]), helper.make_node("Conv", ["a", "w1"], ["h"]),
             helper.make_node("Relu", ["h"], ["y"])]
    names = ["x", "z"] if part == "input" else ["x"]
    m = _model(nodes, [(n, (1, 8, 64, 64)) for n in names], ["y"], inits)
    lm = LoadedModel.from_compiled(compile_model(m))
    base = {n: _f(rng, 1, 8, 64, 64) for n in names}
    bufs = {n: base[n].copy() for n in names}
    for kind in ("finite", "nan", "finite", "inf", "e30", "finite", "e18", "nan", "nan", "finite"):
        for target in names:
            for n in names:
                bufs[n][...] = base[n]
            t = bufs[target]
            if kind == "nan":
                t[0, 3, 5, 7] = np.nan
            elif kind == "inf":
                t[0, 1, 2, 3] = np.inf
            elif kind.startswith("e"):
                t *= np.float32(10.0 ** int(kind[1:]))
            got = lm.run([bufs[n] for n in names])
            _same(got, run_ort(m, {n: bufs[n].copy() for n in names}), f"{kind} in {target}")
