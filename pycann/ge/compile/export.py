"""Export pycann's IR as ONNX (for Netron) and the ``DUMP_GE_GRAPH`` pass-by-pass graph dumps.

``to_onnx(graph)`` writes the optimised graph as an ONNX ``ModelProto``: standard ops stay
standard; fused ops (domain ``pycann``: FusedConv, FusedMatMul, FusedAttention,
ElementwiseChain, Aipp) appear as one node of domain ``pycann`` with the original ONNX node names
in the string attribute ``origin`` (a JSON list). A standard op that absorbed others (Conv with
a folded BatchNormalization) carries the list in its ``doc_string`` instead, since the ONNX
checker rejects unknown attributes on standard ops. Attributes ONNX cannot express (nested
lists such as ElementwiseChain's ``steps``) are written as JSON strings. ``atc --export_onnx``
uses it.

Graph dumps follow CANN's environment switches (cann-interfaces.md §2.1):
``DUMP_GE_GRAPH=1`` full ONNX with weights, ``2`` ONNX without weights (weights become typed
graph inputs), ``3`` topology only (text); ``DUMP_GRAPH_PATH`` the folder (default: cwd);
``DUMP_GRAPH_LEVEL`` 1/2 every pass (default), 3 only the final graph, 4 only the first.
``run_pipeline`` writes ``ge_onnx_<NNNNNNNN>_Before_<Pass>.onnx`` and ``ge_onnx_<NNNNNNNN>_After_<Pass>.onnx`` (8 digits, as CANN, so names sort in order)
around each pass (``.txt`` for mode 3); the number counts up over the process.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from pycann import config
from pycann.dtypes import TensorDesc
from pycann.ge.ir import Graph, Node

PYCANN_DOMAIN = "pycann"
MIN_EXPORT_OPSET = 18
_seq = itertools.count()


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


def _attribute(key: str, v: Any, weights: bool) -> AttributeProto:
    if isinstance(v, Graph):
        return helper.make_attribute(key, _graph_proto(v, weights))
    if isinstance(v, np.ndarray):
        return helper.make_attribute(key, numpy_helper.from_array(v, key))
    if isinstance(v, (bool, np.bool_)):
        return helper.make_attribute(key, int(v))
    if isinstance(v, (np.integer, np.floating)):
        return helper.make_attribute(key, v.item())
    if isinstance(v, (list, tuple)):
        if not v:
            return helper.make_attribute(key, [], attr_type=AttributeProto.INTS)
        kinds = {type(x) for x in v}
        if kinds <= {int, bool} or kinds <= {int, float} or kinds <= {str} or kinds <= {bytes}:
            return helper.make_attribute(key, [int(x) if isinstance(x, bool) else x for x in v])
        if all(isinstance(x, Graph) for x in v):
            return helper.make_attribute(key, [_graph_proto(x, weights) for x in v])
        return helper.make_attribute(key, json.dumps(_jsonable(v)))
    if isinstance(v, (int, float, str, bytes)):
        return helper.make_attribute(key, v)
    return helper.make_attribute(key, json.dumps(_jsonable(v)))


def _node_proto(n: Node, weights: bool) -> onnx.NodeProto:
    p = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name or None, domain=n.domain or None)
    for k, v in n.attrs.items():
        if not k.startswith("_"):
            p.attribute.append(_attribute(k, v, weights))
    if n.domain == PYCANN_DOMAIN:
        p.attribute.append(helper.make_attribute("origin", json.dumps(list(n.origin))))
    if n.origin and n.origin != [n.name]:
        p.doc_string = "pycann: fused from " + ", ".join(n.origin)
    return p


def _type_proto(d: TensorDesc | None) -> onnx.TypeProto:
    if d is None:
        return helper.make_tensor_type_proto(0, None)
    shape = None if d.shape is None else [x if isinstance(x, (int, str)) else None for x in d.shape]
    tensor = helper.make_tensor_type_proto(int(d.dtype), shape)
    if d.kind == "sequence":
        return helper.make_sequence_type_proto(helper.make_tensor_type_proto(int(d.dtype), None))
    if d.kind == "optional":
        return helper.make_optional_type_proto(helper.make_tensor_type_proto(int(d.dtype), None))
    return tensor


def _value_info(name: str, d: TensorDesc | None) -> onnx.ValueInfoProto:
    return helper.make_value_info(name, _type_proto(d))


def _graph_proto(g: Graph, weights: bool) -> onnx.GraphProto:
    inputs = [_value_info(n, g.descs.get(n)) for n in g.inputs]
    inits = []
    for name, arr in g.initializers.items():
        if weights:
            inits.append(numpy_helper.from_array(np.asarray(arr), name))
        else:  # "no weights" dump: typed inputs instead of data
            inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), arr.shape))
    io = set(g.inputs) | set(g.outputs) | set(g.initializers)
    vinfo = [_value_info(o, g.descs[o]) for n in g.nodes for o in n.outputs if o and o not in io and o in g.descs]
    return helper.make_graph(
        [_node_proto(n, weights) for n in g.nodes], g.name or "main", inputs,
        [_value_info(n, g.descs.get(n)) for n in g.outputs], inits, value_info=vinfo,
    )


def to_onnx(graph: Graph, weights: bool = True) -> onnx.ModelProto:
    """The graph as an ONNX model (see the module docstring). ``weights=False`` leaves the
    initializer data out (they become typed graph inputs)."""
    opsets = {k or "": v for k, v in graph.opsets.items() if k not in ("ai.onnx",)}
    # the importer rewrote older forms to the latest meaning (axes/split/pads as inputs, ...), and
    # fusions create newer ops (Gelu-20, LayerNormalization-17): declare a default opset that has them
    newest = max([n.opset for _, n in graph.walk() if not n.domain] + [opsets.get("", 0), MIN_EXPORT_OPSET])
    opsets[""] = newest
    if any(n.domain == PYCANN_DOMAIN for _, n in graph.walk()):
        opsets.setdefault(PYCANN_DOMAIN, 1)
    model = helper.make_model(_graph_proto(graph, weights), producer_name="pycann",
                              opset_imports=[helper.make_opsetid(d, int(v)) for d, v in opsets.items()])
    for k, v in graph.metadata.items():
        model.metadata_props.add(key=str(k), value=str(v))
    return model


def topology_text(graph: Graph) -> str:
    """``DUMP_GE_GRAPH=3``: node names, types and edges only."""
    lines = [f"graph {graph.name}", "inputs: " + ", ".join(graph.inputs), "outputs: " + ", ".join(graph.outputs)]
    for n in graph.nodes:
        op = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
        origin = f"  [origin: {', '.join(n.origin)}]" if n.origin and n.origin != [n.name] else ""
        lines.append(f"{n.name} ({op}): {', '.join(i or '-' for i in n.inputs)} -> {', '.join(n.outputs)}{origin}")
    return "\n".join(lines) + "\n"


class PipelineDump:
    """Writes the graph around each pass as ``DUMP_GE_GRAPH`` / ``DUMP_GRAPH_LEVEL`` ask."""

    def __init__(self, mode: int, path: str, level: int) -> None:
        self.mode, self.path, self.level = mode, path, level
        self.first = True
        self.written: list[str] = []
        os.makedirs(path, exist_ok=True)

    def _write(self, graph: Graph, stage: str) -> None:
        base = os.path.join(self.path, f"ge_onnx_{next(_seq):08d}_{stage}")
        if self.mode == 3:
            with open(base + ".txt", "w", encoding="utf-8") as f:
                f.write(topology_text(graph))
            self.written.append(base + ".txt")
            return
        onnx.save(to_onnx(graph, weights=self.mode == 1), base + ".onnx")
        self.written.append(base + ".onnx")

    def before(self, graph: Graph, name: str) -> None:
        if self.level in (1, 2) or (self.level == 4 and self.first):
            self._write(graph, f"Before_{name}")
        self.first = False

    def after(self, graph: Graph, name: str) -> None:
        if self.level in (1, 2):
            self._write(graph, f"After_{name}")

    def done(self, graph: Graph) -> None:
        if self.level == 3:
            self._write(graph, "Final")


def pipeline_dumper() -> PipelineDump | None:
    """The dumper the environment asks for (``DUMP_GE_GRAPH`` = 1, 2 or 3), else None."""
    env = config.graph_dump()
    if env.mode not in ("1", "2", "3"):
        return None
    return PipelineDump(int(env.mode), env.path, int(env.level) if env.level in ("1", "2", "3", "4") else 2)
