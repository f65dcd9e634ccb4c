"""Constant folding and shape inference in Loop bodies against ONNX Runtime: a body's input may
reuse the name of an outer-scope constant (the ONNX checker allows a subgraph input to shadow an
outer name), and a carried value may change shape between iterations; inside the body the name is
the carried value of each iteration, not the outer constant or the first iteration's shape."""

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


def loop_growing_carried_value() -> onnx.ModelProto:
    """A Loop whose carried ``xc`` doubles its rows every iteration (Concat) and whose scan output
    is ``Shape(xc)`` of each iteration; the body declares no shapes."""
    body = helper.make_graph(
        [helper.make_node("Concat", ["xc", "xc"], ["x2"], axis=0), helper.make_node("Identity", ["cin"], ["cout"]),
         helper.make_node("Shape", ["xc"], ["sx"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cin", TensorProto.BOOL, []),
         helper.make_tensor_value_info("xc", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cout", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x2", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("sx", TensorProto.INT64, None)])
    g = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["y", "shapes"], body=body)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("n", TensorProto.INT64, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("shapes", TensorProto.INT64, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_loop_carried_value_that_grows() -> None:
    """``Shape(xc)`` is not folded to the initial value's [2, 3]: every iteration's rows differ."""
    m = loop_growing_carried_value()
    cm = pycann.compile_model(m)
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array(3, np.int64)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = LoadedModel(cm.graph, cm.manifest).run_dict(feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
