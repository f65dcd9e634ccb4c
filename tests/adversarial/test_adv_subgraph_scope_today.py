"""Constant folding in subgraphs against ONNX Runtime: a Loop body's input may reuse the name of an
outer-scope constant (the ONNX checker allows a subgraph input to shadow an outer name); inside the
body that name is the carried value, which changes every iteration, not the outer constant."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import pycann
from pycann.ge.run.model import LoadedModel

ort = pytest.importorskip("onnxruntime")


def loop_shadowing_outer_constant() -> onnx.ModelProto:
    """``y = Loop(n, w)`` doubling ``w`` each iteration; the body's carried input is named ``w``,
    like the outer initializer that is its initial value."""
    scalar = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["cin"], ["cout"]), helper.make_node("Add", ["w", "w"], ["w2"])], "body",
        [scalar("i", TensorProto.INT64, []), scalar("cin", TensorProto.BOOL, []), scalar("w", TensorProto.FLOAT, [2])],
        [scalar("cout", TensorProto.BOOL, []), scalar("w2", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "w"], ["y"], body=body)], "g",
                          [scalar("n", TensorProto.INT64, [])], [scalar("y", TensorProto.FLOAT, [2])],
                          [numpy_helper.from_array(np.array([1.0, 3.0], np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("trips", [0, 1, 3])
def test_loop_body_input_shadowing_an_outer_constant(trips: int) -> None:
    m = loop_shadowing_outer_constant()
    cm = pycann.compile_model(m)
    feeds = {"n": np.array(trips, np.int64)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(LoadedModel(cm.graph, cm.manifest).run_dict(feeds)[0], want)
