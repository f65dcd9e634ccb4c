"""Small ONNX graphs for the pass tests, and the compile-then-compare-with-ORT check they share."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.passes import canonicalize
from pycann.ge.compile.passes.constant_folding import fold_graph
from pycann.ge.compile.passes.infer_shapes import infer_graph
from pycann.ge.ir import Graph
from pycann.ge.run.model import LoadedModel
from tests.ops.oracle import run_ort


def const(name: str, value) -> onnx.TensorProto:  # noqa: ANN001
    """An initializer ``name`` holding ``value``."""
    return numpy_helper.from_array(np.asarray(value), name)


def float_model(nodes, inputs, output, inits=(), opset=17) -> onnx.ModelProto:  # noqa: ANN001
    """A one-graph model: float inputs ``[(name, shape)]``, one float output of unknown shape."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv_pool_head(spelling: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """``x -> Conv(Wa, pad 1) -> Relu = x1 -> channel means = s`` as an exporter writes the means (dynamo:
    ReduceMean over the last two axes; TorchScript: GlobalAveragePool): the head of a squeeze-and-excitation
    test block (the caller adds the ``Wa`` initializer)."""
    nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["x1"])]
    if spelling == "dynamo":
        return nodes + [helper.make_node("ReduceMean", ["x1", "axes"], ["s"], keepdims=1)], \
            [const("axes", np.array([-2, -1], np.int64))]
    return nodes + [helper.make_node("GlobalAveragePool", ["x1"], ["s"])], []


def append_if(m: onnx.ModelProto, then_node: onnx.NodeProto, else_node: onnx.NodeProto, out: str) -> None:
    """Append ``out = If(flag, then: then_node, else: else_node)`` to ``m`` with ``flag`` a new bool graph
    input; each branch is its one node, whose first output is the branch's output (read from the outer
    scope)."""
    branches = [helper.make_graph([nd], f"{tag}_branch", [],
                                  [helper.make_tensor_value_info(nd.output[0], TensorProto.FLOAT, None)])
                for tag, nd in (("then", then_node), ("else", else_node))]
    m.graph.node.append(helper.make_node("If", ["flag"], [out], then_branch=branches[0], else_branch=branches[1]))
    m.graph.input.append(helper.make_tensor_value_info("flag", TensorProto.BOOL, []))


def to_float16(m: onnx.ModelProto) -> None:
    """``m``'s graph inputs, outputs and initializers made float16 (in place)."""
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for ini in m.graph.initializer:
        ini.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(ini).astype(np.float16), ini.name))


def check_compiled(m: onnx.ModelProto, feeds: dict[str, np.ndarray], present: dict[str, int] | None = None,
                   absent: tuple[str, ...] = (), rtol: float = 1e-5, atol: float = 1e-5) -> list[str]:
    """Compile ``m``; assert op counts (``present``) and absences; compare every output with ONNX
    Runtime on the original model; return the compiled op types."""
    cm = compile_model(m)
    ops = [n.op_type for n in cm.graph.nodes]
    for op, count in (present or {}).items():
        assert ops.count(op) == count, f"{op}: {ops}"
    for op in absent:
        assert op not in ops, ops
    got = LoadedModel.from_compiled(cm).run_dict(feeds)
    want = run_ort(m, feeds)
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=rtol, atol=atol)
    return ops


def canonicalized(m: onnx.ModelProto) -> tuple[Graph, dict[str, int], list[str]]:
    """``m`` imported, shape-inferred and constant-folded, then through the Canonicalize pass alone:
    (graph, rewrites that fired by name, candidates kept with the reason)."""
    from pycann.ge.compile.importers.onnx import import_model

    g = import_model(m)
    infer_graph(g)
    fold_graph(g)
    infer_graph(g)
    counts, missed = canonicalize.canonicalize(g)
    return g, counts, missed
