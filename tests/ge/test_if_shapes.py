"""Shape inference through If: a branch's If whose condition folds from static shapes (a ``Shape``
of an outer-scope value) takes that branch's shapes, and an If's outputs are static where both
branches agree — ONNX Runtime's output shapes and values are the golden (Silero VAD's pattern)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pycann
from pycann.ge.run.model import LoadedModel

ort = pytest.importorskip("onnxruntime")


def _branch(name: str, nodes: list[onnx.NodeProto], out: str, inits: list[onnx.TensorProto] | None = None) -> onnx.GraphProto:
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits or [])


def nested_if_model() -> onnx.ModelProto:
    """Outer If on a fed bool; its then branch holds an If on ``Shape(x)[0] == 2`` (x is outer, static
    under --input_shape) whose branches differ in rank (x, or x unsqueezed), so only the folded
    condition gives the rank; the else branch is -x."""
    inner_then = _branch("it", [helper.make_node("Identity", ["x"], ["it_y"])], "it_y")
    inner_else = _branch("ie", [helper.make_node("Unsqueeze", ["x", "ax"], ["ie_y"])], "ie_y",
                         [numpy_helper.from_array(np.array([0], np.int64), "ax")])
    then = _branch("t", [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "zero"], ["n"], axis=0),
        helper.make_node("Equal", ["n", "two"], ["is2"]),
        helper.make_node("If", ["is2"], ["t_in"], then_branch=inner_then, else_branch=inner_else),
        helper.make_node("Relu", ["t_in"], ["t_y"]),
    ], "t_y", [numpy_helper.from_array(np.array(0, np.int64), "zero"),
               numpy_helper.from_array(np.array(2, np.int64), "two")])
    other = _branch("e", [helper.make_node("Neg", ["x"], ["e_y"])], "e_y")
    g = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_if_outputs_static_where_branches_agree() -> None:
    m = nested_if_model()
    cm = pycann.compile_model(m, pycann.CompileOptions(input_shape={"x": [2, 3], "c": []}))
    assert [n.op_type for n in cm.graph.nodes] == ["If"]  # c is fed: the outer If stays
    assert cm.graph.descs["y"].shape == (2, 3)  # was unknown: the inner If's condition did not fold
    lm, sess = LoadedModel(cm.graph, cm.manifest), ort.InferenceSession(m.SerializeToString())
    x = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        got, want = lm.run_dict(feeds)[0], sess.run(None, feeds)[0]
        assert got.shape == want.shape == cm.graph.descs["y"].shape
        np.testing.assert_array_equal(got, want)


def test_if_outputs_stay_unknown_where_branches_differ() -> None:
    """x of 3 rows: the inner If takes the unsqueezing branch (1, 3, 3), the outer else gives
    (3, 3): the ranks differ, so the output's shape stays unknown (and runs match ORT)."""
    m = nested_if_model()
    cm = pycann.compile_model(m, pycann.CompileOptions(input_shape={"x": [3, 3], "c": []}))
    assert cm.graph.descs["y"].shape is None
    lm, sess = LoadedModel(cm.graph, cm.manifest), ort.InferenceSession(m.SerializeToString())
    x = np.arange(9, dtype=np.float32).reshape(3, 3) - 4
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        np.testing.assert_array_equal(lm.run_dict(feeds)[0], sess.run(None, feeds)[0])
