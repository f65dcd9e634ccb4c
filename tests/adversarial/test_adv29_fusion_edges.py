"""Adversarial near-misses of GE's fusion passes (session adv29): graphs one detail away from a
pattern a pass fuses, compared with ONNX Runtime on the unfused model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(29)


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list[int], int]], inits: list[onnx.TensorProto],
           opset: int = 13, out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
                          [helper.make_tensor_value_info("y", out_type, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compare(m: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> list[str]:
    cm = compile_model(m)
    got = LoadedModel.from_compiled(cm).run_dict(feeds)
    want = run_ort(m, feeds)
    for g_, w_ in zip(got, want):
        g_ = np.asarray(g_)
        assert g_.shape == w_.shape and g_.dtype == w_.dtype, (g_.shape, g_.dtype, w_.shape, w_.dtype)
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(w_))
        np.testing.assert_allclose(g_, w_, rtol=rtol, atol=atol)
    return [n.op_type for n in cm.graph.nodes]


def _attention(qs: tuple[int, ...], scale: tuple[str, np.ndarray] | None, mask: tuple[np.ndarray, np.ndarray] | None,
               dtype: type = np.float32) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """softmax(Q @ K [scale] [Where(cond, ., fill)]) @ V with Q, K^T and V all of shape ``qs``."""
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"])]
    inits: list[onnx.TensorProto] = []
    inputs = [("q", list(qs), t), ("k", list(qs[:-2]) + [qs[-1], qs[-2]], t), ("v", list(qs), t)]
    feeds = {"q": RNG.standard_normal(qs).astype(dtype), "v": RNG.standard_normal(qs).astype(dtype),
             "k": RNG.standard_normal(qs[:-2] + (qs[-1], qs[-2])).astype(dtype)}
    cur = "s"
    if scale is not None:
        inits.append(const("c", scale[1].astype(dtype)))
        nodes.append(helper.make_node(scale[0], [cur, "c"], ["s2"]))
        cur = "s2"
    if mask is not None:
        cond, fill = mask
        inputs.append(("cond", list(cond.shape), TensorProto.BOOL))
        feeds["cond"] = cond
        inits.append(const("fill", fill.astype(dtype)))
        nodes.append(helper.make_node("Where", ["cond", cur, "fill"], ["s3"]))
        cur = "s3"
    nodes += [helper.make_node("Softmax", [cur], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, inputs, inits, out_type=t), feeds


def test_attention_scores_divided_by_zero() -> None:
    """Div(scores, 0) gives +-inf scores (ORT: NaN rows); AttentionFusion raised ZeroDivisionError."""
    m, feeds = _attention((2, 3, 5, 8), ("Div", np.array(0.0)), None)
    ops = _compare(m, feeds)
    assert "FusedAttention" not in ops


def test_attention_scale_of_higher_rank_than_the_scores() -> None:
    """A [1, 1, 1] scale of rank-2 scores makes every later value rank 3; the fused op dropped the
    dim (output (5, 8) against ORT's (1, 5, 8))."""
    m, feeds = _attention((5, 8), ("Mul", np.full((1, 1, 1), 0.3)), None)
    _compare(m, feeds)


def test_attention_where_mask_float16() -> None:
    """A float16 attention masked by Where(cond, s, -inf): the additive mask Where(cond, 0, fill)
    had a float32 zero beside the float16 fill (ShapeError at compile)."""
    cond = RNG.random((2, 1, 5, 5)) > 0.4
    cond[..., 0] = True
    m, feeds = _attention((2, 3, 5, 8), ("Mul", np.array(0.35)), (cond, np.array(-np.inf)), np.float16)
    ops = _compare(m, feeds, rtol=1e-2, atol=2e-3)
    assert "FusedAttention" in ops
