"""Adversarial checks of the NaN-guarded ElementwiseChain (kernels/guarded_chain.py): a chain ending
in Relu/Clip runs whole on oneDNN (whose relu/clip turn NaN into a number) when the bound of the
value entering the tail is finite, and records its output's bound for the next guarded kernel.
A bound map that under-estimates |value| lets that next kernel run fused on values that overflow,
so a NaN that ONNX Runtime keeps comes out 0.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels import guarded_chain
from tests.ops.oracle import run_ort

F = TensorProto.FLOAT
RNG = np.random.default_rng(1717)


def _model(nodes: list[onnx.NodeProto], xs: tuple[int, ...], inits: dict[str, np.ndarray],
           outs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, list(xs))],
                          [helper.make_tensor_value_info(o, F, None) for o in outs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _same_as_ort(m: onnx.ModelProto, x: np.ndarray, runs: int = 2) -> None:
    lm = LoadedModel.from_compiled(compile_model(m))
    want = run_ort(m, {"x": x})
    for _ in range(runs):
        for g, w in zip(lm.run([x]), want):
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg="NaN positions differ from ORT")
            fin = np.isfinite(w)
            np.testing.assert_allclose(g[fin], w[fin], rtol=1e-4, atol=1e-4)


def _zero_in_channel_0(c: int) -> np.ndarray:
    k = np.ones((1, c, 1, 1), np.float32)
    k[0, 0] = 0.0
    return k


def test_sigmoid_bound_is_not_its_input_bound() -> None:
    """x * 1e-30 -> Sigmoid -> * 1e38 -> * 10 -> * k -> Relu: sigmoid(~0) = 0.5, so the value
    overflows to inf and inf * 0 is NaN in channel 0 (ORT keeps it through Relu). The bound map
    took min(B, 1) = 1e-30 for the Sigmoid, proved the tail finite and ran oneDNN's relu (NaN -> 0)."""
    inits = {"a": np.array(1e-30, np.float32), "b": np.array(1e38, np.float32), "t": np.array(10, np.float32),
             "k": _zero_in_channel_0(16)}
    nodes = [helper.make_node("Mul", ["x", "a"], ["t1"]), helper.make_node("Sigmoid", ["t1"], ["t2"]),
             helper.make_node("Mul", ["t2", "b"], ["t3"]), helper.make_node("Mul", ["t3", "t"], ["t4"]),
             helper.make_node("Mul", ["t4", "k"], ["t5"]), helper.make_node("Relu", ["t5"], ["y"])]
    x = RNG.standard_normal((1, 16, 64, 64)).astype(np.float32)
    _same_as_ort(_model(nodes, x.shape, inits), x)


@pytest.mark.parametrize("lo,hi", [(5.0, 10.0), (-10.0, -5.0)])
def test_clip_range_away_from_zero_bound(lo: float, hi: float) -> None:
    """Chain 1 (x * 0.5 + 0.001 -> Clip(lo, hi)) on inputs near 0 gives |lo| or |hi| (5)
    everywhere, but recorded min(B, max(|lo|, |hi|)) = B ~ 0.01 as its output's bound. Chain 2
    (* 1e38 -> * k -> Relu) then trusted 0.01 * 1e38, ran fused, and 5e38 = inf, inf * 0 = NaN
    became 0 (ORT: NaN). (Chain 1's output has a second consumer, so the chains stay apart.)"""
    inits = {"a": np.array(0.5, np.float32), "b": np.array(0.001, np.float32), "lo": np.array(lo, np.float32),
             "hi": np.array(hi, np.float32), "big": np.array(1e38, np.float32), "k": _zero_in_channel_0(16)}
    nodes = [helper.make_node("Mul", ["x", "a"], ["t1"]), helper.make_node("Add", ["t1", "b"], ["t2"]),
             helper.make_node("Clip", ["t2", "lo", "hi"], ["t3"]),
             helper.make_node("ReduceMax", ["t3"], ["y2"], keepdims=0),
             helper.make_node("Mul", ["t3", "big"], ["t4"]), helper.make_node("Mul", ["t4", "k"], ["t5"]),
             helper.make_node("Relu", ["t5"], ["y"])]
    x = (RNG.standard_normal((1, 16, 64, 64)) * 1e-4).astype(np.float32)
    _same_as_ort(_model(nodes, x.shape, inits, outs=("y", "y2")), x)


@pytest.mark.parametrize("op,p0,p1", [("Sigmoid", 0.0, 0.0), ("Tanh", 0.0, 0.0), ("Relu", 0.0, 0.0),
                                      ("Clip", 5.0, 10.0), ("Clip", -10.0, -5.0), ("Clip", 5.0, 3.0),
                                      ("Clip", -np.inf, np.inf), ("Clip", 0.0, 6.0), ("Clip", -1.0, 1.0)])
def test_step_bound_covers_the_step(op: str, p0: float, p1: float) -> None:
    """Each unary step's bound map is >= max |step(v)| over |v| <= B (sampled)."""
    m = guarded_chain.bound_map([[op, -1, 0, p0, p1]], [])
    assert m is not None
    from pycann.ops.fused_chain import UNARY_IN_PLACE
    for b in (0.0, 1e-30, 1e-3, 0.4, 1.0, 3.0, 7.0, 50.0, 1e6):
        v = np.linspace(-b, b, 1001).astype(np.float32)
        with np.errstate(all="ignore"):
            UNARY_IN_PLACE[op](v, (p0, p1))
        assert float(np.abs(v.astype(np.float64)).max()) <= m(b) * (1 + 1e-6), (op, p0, p1, b, m(b))


def test_clip_with_a_nan_bound_has_no_bound() -> None:
    assert guarded_chain.bound_map([["Clip", -1, 0, float("nan"), 6.0]], []) is None

