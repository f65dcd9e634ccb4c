"""``atc --mode=3``: pre-check a model without compiling it; the report is CANN's ``check_result.json``.

Import, then for every node (subgraph bodies included): look its op up in the op table, fill its
attribute defaults and run its shape inference, collecting every failure instead of stopping at
the first. The report has the layout of GE's ``PreChecker::Save`` (parser/common/pre_checker.cc):

    {"name": model, "result": "success"|"failed", "total": N, "pass": P, "fail": F,
     "op": [{"name", "type", "result", "cause": [{"code", "message", "kind"}]}]}

``code`` is GE's ``PreChecker::ErrorCode``: 1 type unsupported (op, or op at this opset), 2 param
invalid (attribute or shape), 0 for a note on a node that passed. ``kind`` (a pycann addition)
names the check: ``unsupported_op``, ``unsupported_opset``, ``attribute``, ``shape``,
``not_checked`` (an input comes from a node that failed, so its shapes are unknown).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.errors import ShapeError, UnsupportedOpError
from pycann.ge.compile.passes.infer_shapes import _seed_body_inputs, const_desc
from pycann.ge.ir import Graph, Node
from pycann.ops.opdef import InferContext
from pycann.ops.registry import known, lookup

TYPE_UNSUPPORTED, PARAM_INVALID, OK = 1, 2, 0
_UNKNOWN = TensorDesc(0, None)


def _cause(code: int, kind: str, message: str) -> dict[str, Any]:
    return {"code": code, "kind": kind, "message": message}


def _kind_of_shape_error(message: str) -> str:
    """``attribute`` when the op's check blames an attribute (pycann's messages say "attribute 'x'"),
    else ``shape``."""
    return "attribute" if re.search(r"\battribute\b", message) else "shape"


class _Checker:
    def __init__(self, opsets: Mapping[str, int]) -> None:
        self.opsets = opsets
        self.ops: list[dict[str, Any]] = []

    def graph(self, g: Graph, descs: dict[str, TensorDesc], consts: dict[str, np.ndarray], scope: str,
              failed: set[str]) -> None:
        """Check every node of ``g`` (``descs``/``consts`` hold the enclosing scope's values)."""
        for k, v in g.initializers.items():
            descs[k], consts[k] = const_desc(v), v
        for i in g.inputs:
            if i in g.descs:
                descs[i] = g.descs[i]
        for node in g.nodes:
            self.node(node, descs, consts, scope, failed)

    def node(self, node: Node, descs: dict[str, TensorDesc], consts: dict[str, np.ndarray], scope: str,
             failed: set[str]) -> None:
        causes: list[dict[str, Any]] = []
        opset = node.opset or self.opsets.get(node.domain)
        op = None
        try:
            op = lookup(node.op_type, node.domain, opset, node.label())
        except UnsupportedOpError as e:
            is_known = known(node.domain, node.op_type)
            causes.append(_cause(TYPE_UNSUPPORTED, "unsupported_opset" if is_known else "unsupported_op", str(e)))
        ins = [descs.get(i, _UNKNOWN) if i else None for i in node.inputs]
        for attr, sub in node.subgraphs.items():
            _seed_body_inputs(node, attr, sub, ins)
            self.graph(sub, dict(descs), dict(consts), f"{scope}{node.name}/{attr}/", failed)
        upstream = [i for i in node.inputs if i in failed]
        outs: list[TensorDesc] = []
        if op is not None and upstream:
            causes.append(_cause(OK, "not_checked", f"shapes not checked: input '{upstream[0]}' comes from a node "
                                 "that failed the check"))
        elif op is not None:
            try:
                attrs = op.with_defaults(node.attrs, f"node {node.label()}")
                attrs["_n_outputs"] = len(node.outputs)
                ctx = InferContext(node.name, node.op_type, attrs, ins, [consts.get(i) if i else None for i in node.inputs],
                                   node.opset, len(node.outputs))
                outs = list(op.infer(ctx))
            except ShapeError as e:
                causes.append(_cause(PARAM_INVALID, _kind_of_shape_error(str(e)), str(e)))
            except Exception as e:  # an infer function's own bug still names the node
                causes.append(_cause(PARAM_INVALID, "shape", f"node {node.label()}: shape inference failed: "
                                     f"{type(e).__name__}: {e}"))
        bad = any(c["code"] != OK for c in causes)
        for j, o in enumerate(node.outputs):
            if not o:
                continue
            if bad or upstream or j >= len(outs):
                failed.add(o)
                descs[o] = _UNKNOWN
            else:
                descs[o] = outs[j]
        entry: dict[str, Any] = {"name": f"{scope}{node.name}", "type": node.op_type,
                                 "result": "failed" if bad else "success"}
        if node.domain not in ("", "ai.onnx"):
            entry["domain"] = node.domain
        if causes:
            entry["cause"] = causes
        self.ops.append(entry)


def precheck(model: str | os.PathLike[str] | bytes, input_shape: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """The ``check_result.json`` document for ``model`` (never raises for problems of single nodes;
    a file that is not an ONNX model still raises ``ModelError``)."""
    from pycann.ge.compile.compiler import _apply_input_shape
    from pycann.ge.compile.importers.onnx import load_onnx

    graph = load_onnx(model, check=False)
    if input_shape:
        _apply_input_shape(graph, input_shape)
    checker = _Checker(graph.opsets)
    checker.graph(graph, {}, {}, "", set())
    fail = sum(op["result"] == "failed" for op in checker.ops)
    name = os.path.splitext(os.path.basename(os.fspath(model)))[0] if not isinstance(model, bytes) else graph.name
    return {"name": name, "result": "failed" if fail else "success", "total": len(checker.ops),
            "pass": len(checker.ops) - fail, "fail": fail, "op": checker.ops}


def failure_lines(report: dict[str, Any], limit: int = 10) -> list[str]:
    """``E19010: ...`` / ``E19999: ...`` lines for the failed nodes (atc prints them)."""
    lines = []
    for op in report["op"]:
        for c in op.get("cause", []):
            if c["code"] != OK:
                code = "E19010" if c["code"] == TYPE_UNSUPPORTED else "E19999"
                lines.append(f"{code}: [{c['kind']}] {c['message']}")
    if len(lines) > limit:
        lines = lines[:limit] + [f"... and {len(lines) - limit} more (see the report)"]
    return lines
