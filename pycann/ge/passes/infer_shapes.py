"""Shape and dtype inference over the whole graph (subgraphs included), via each OpDef.infer.

Also resolves every node's ``OpDef`` so an unsupported op fails here, naming node and opset.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pycann.dtypes import TensorDesc, from_numpy
from pycann.errors import ShapeError
from pycann.ge.ir import Graph
from pycann.ge.passes.base import PassContext, PassResult
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup

name = "InferShapes"


def const_desc(v: np.ndarray) -> TensorDesc:
    return TensorDesc(int(from_numpy(v.dtype)), tuple(int(d) for d in v.shape))


def infer_graph(
    g: Graph,
    outer_descs: Mapping[str, TensorDesc] | None = None,
    outer_consts: Mapping[str, np.ndarray] | None = None,
    recurse: bool = True,
) -> None:
    """Fill ``g.descs`` for every value. Raises ``ShapeError``/``UnsupportedOpError``.

    ``recurse=False`` leaves subgraphs untouched (their descs from an earlier run are used),
    which run-time specialisation needs because subgraph objects are shared between plans.
    """
    descs: dict[str, TensorDesc] = dict(outer_descs or {})
    consts: dict[str, np.ndarray] = dict(outer_consts or {})
    consts.update(g.initializers)
    for k, v in g.initializers.items():
        descs[k] = const_desc(v)
    for i in g.inputs:
        if i in g.descs:
            descs[i] = g.descs[i]
    for node in g.nodes:
        op = lookup(node.op_type, node.domain, node.opset or g.opsets.get(node.domain, None), node.label())
        if recurse:
            for sub in node.subgraphs.values():
                infer_graph(sub, descs, consts)
        attrs = op.with_defaults(node.attrs, f"node {node.label()}")
        attrs["_n_outputs"] = len(node.outputs)
        ctx = InferContext(
            node=node.name,
            op_type=node.op_type,
            attrs=attrs,
            inputs=[descs.get(i) if i else None for i in node.inputs],
            values=[consts.get(i) if i else None for i in node.inputs],
            opset=node.opset,
            n_outputs=len(node.outputs),
        )
        try:
            outs = op.infer(ctx)
        except ShapeError:
            raise
        except Exception as e:  # an infer bug must still name the node
            raise ShapeError(
                f"node {node.name} ({node.op_type}, opset {node.opset}): shape inference failed "
                f"for inputs {[str(d) for d in ctx.inputs]}: {type(e).__name__}: {e}"
            ) from e
        for o, d in zip(node.outputs, outs):
            if not o:
                continue
            declared = g.descs.get(o)
            if d.shape is None and declared is not None and declared.shape is not None:
                d = TensorDesc(d.dtype or declared.dtype, declared.shape)
            descs[o] = d
    for k in list(descs):
        if outer_descs is None or k not in outer_descs or k in g.descs:
            g.descs[k] = descs[k]


def run(graph: Graph, ctx: PassContext) -> PassResult:
    infer_graph(graph)
    return PassResult(graph, False, f"{len(graph.descs)} values typed")
