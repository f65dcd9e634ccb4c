"""InferShapes is skipped where no pass changed the graph since the last inference
(``pipelines.EXACT_CHANGED``): the descs and the compiled model are those of the full pipeline, and
each pass listed there reports ``changed=False`` only when the graph is exactly as it was."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile import pipelines
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.importers.onnx import import_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import canonicalize_qop, infer_shapes
from pycann.ge.compile.passes.base import PassContext
from pycann.ge.ir import Graph
from pycann.ge.run.model import LoadedModel
from tests.amct.qop_models import qlinear_matmul_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(5)


def _conv_model() -> onnx.ModelProto:
    w = numpy_helper.from_array((RNG.standard_normal((8, 3, 3, 3)) * 0.2).astype(np.float32), "W")
    b = numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "B")
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _qlinear_matmul(scale_input: bool) -> onnx.ModelProto:
    """A QLinearMatMul that QOperatorToQDQ rewrites, or (``scale_input``: its output scale a graph
    input) gives up on after looking at it."""
    return qlinear_matmul_model(RNG, scale_input, k=12, n=4)


def _snapshot(g: Graph) -> tuple[object, ...]:
    return ([(n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs)) for n in g.nodes],
            sorted(g.initializers), dict(g.descs), list(g.inputs), list(g.outputs))


def test_a_float_model_skips_the_inference_after_qoperator_rewriting_with_the_same_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m = _conv_model()
    lines: list[str] = []
    cm = compile_model(m, CompileOptions(), log=lines.append)
    assert "[InferShapes] skipped: no pass changed the graph since the last inference" in lines, lines
    monkeypatch.setattr(pipelines, "EXACT_CHANGED", set())  # every InferShapes runs
    full: list[str] = []
    cm_full = compile_model(m, CompileOptions(), log=full.append)
    assert not any("skipped" in ln for ln in full), full
    assert cm.graph.descs == cm_full.graph.descs
    assert [n.op_type for n in cm.graph.nodes] == [n.op_type for n in cm_full.graph.nodes]
    x = RNG.standard_normal((1, 3, 10, 10)).astype(np.float32)
    got = LoadedModel.from_compiled(cm).run([x])[0]
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scale_input", [False, True])
def test_qoperator_to_qdq_reports_no_change_only_for_an_unchanged_graph(scale_input: bool) -> None:
    g = import_model(_qlinear_matmul(scale_input))
    infer_shapes.infer_graph(g)
    before = copy.deepcopy(_snapshot(g))
    res = canonicalize_qop.run(g, PassContext())
    assert res.changed == (not scale_input)  # (the input scale: the rule gives up, "not a constant")
    if not res.changed:
        assert _snapshot(res.graph) == before
    else:
        assert "QLinearMatMul" not in [n.op_type for n in res.graph.nodes]


def test_with_qoperator_nodes_the_inference_after_the_rewrite_runs() -> None:
    m = _qlinear_matmul(scale_input=False)
    lines: list[str] = []
    cm = compile_model(m, CompileOptions(), log=lines.append)
    assert not any("[InferShapes] skipped" in ln for ln in lines), lines
    x = RNG.standard_normal((4, 12)).astype(np.float32)
    got = LoadedModel.from_compiled(cm).run([x])[0]
    want = run_ort(m, {"x": x})[0]
    assert np.max(np.abs(got - want)) <= 0.4 + 1e-6  # (one output LSB: requantisation rounding)
