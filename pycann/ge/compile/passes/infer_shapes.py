"""Shape and dtype inference over the whole graph (subgraphs included), via each OpDef.infer.

Also resolves every node's ``OpDef`` so an unsupported op fails here, naming node and opset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, from_numpy
from pycann.errors import ShapeError
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node
from pycann.ops.opdef import InferContext
from pycann.ops.registry import lookup

name = "InferShapes"


def const_desc(v: np.ndarray) -> TensorDesc:
    return TensorDesc(int(from_numpy(v.dtype)), tuple(int(d) for d in v.shape))


def _seed_body_inputs(node: Node, attr: str, body: Graph, ins: list[TensorDesc | None]) -> None:
    """Loop/Scan bodies may leave their input types out (ONNX allows it): derive them from the
    node's inputs (Loop: iteration count, condition, carried values; Scan: states, then one
    slice of each scanned input)."""
    seeds: list[TensorDesc | None] = []
    if node.op_type == "Loop" and attr == "body":
        seeds = [TensorDesc(int(DType.INT64), ()), TensorDesc(int(DType.BOOL), ()), *ins[2:]]
    elif node.op_type == "Scan" and attr == "body" and node.opset >= 9:
        n_scan = int(node.attrs.get("num_scan_inputs", 0))
        n_state = len(ins) - n_scan
        axes = list(node.attrs.get("scan_input_axes") or [0] * n_scan)
        seeds = list(ins[:n_state])
        for d, ax in zip(ins[n_state:], axes):
            if d is None or d.shape is None:
                seeds.append(None if d is None else TensorDesc(d.dtype, None))
            else:
                k = ax % len(d.shape) if d.shape else 0
                seeds.append(TensorDesc(d.dtype, d.shape[:k] + d.shape[k + 1:]))
    for name, d in zip(body.inputs, seeds):
        old = body.descs.get(name)
        if d is not None and (old is None or not old.dtype or old.shape is None):
            body.descs[name] = d if old is None or not old.dtype else TensorDesc(old.dtype, d.shape)


def _widen_carried(body: Graph) -> bool:
    """A Loop body's carried inputs are seeded with the initial values' descs; where an iteration
    gives a carried value another shape (a sequence grown by Concat), the input's desc becomes what
    both agree on (other dims unknown; another rank: unknown rank), so that nothing in the body
    (a Shape folded to the first iteration's dims) holds only for the first iteration. True when a
    desc changed: the body is inferred again."""
    changed = False
    for name, out in zip(body.inputs[2:], body.outputs[1:]):
        d_in, d_out = body.descs.get(name), body.descs.get(out)
        if d_in is None or d_in.shape is None or d_out is None or d_out.kind != d_in.kind or d_out.shape == d_in.shape:
            continue
        out_shape = d_out.shape
        shape = (tuple(a if a == b else None for a, b in zip(d_in.shape, out_shape))
                 if out_shape is not None and len(out_shape) == len(d_in.shape) else None)
        body.descs[name] = TensorDesc(d_in.dtype, shape, d_in.format, d_in.kind)
        changed = True
    return changed


def infer_graph(
    g: Graph,
    outer_descs: Mapping[str, TensorDesc] | None = None,
    outer_consts: Mapping[str, np.ndarray] | None = None,
    recurse: bool = True,
    strict: bool = True,
) -> None:
    """Fill ``g.descs`` for every value. Raises ``ShapeError``/``UnsupportedOpError``.

    ``recurse=False`` leaves subgraphs untouched (their descs from an earlier run are used),
    which run-time specialisation needs because subgraph objects are shared between plans.
    Subgraphs are inferred with ``strict=False``: a branch that cannot work for the compiled
    input shapes (Silero's 8 kHz branch with a 16 kHz window) may simply never be taken, so a
    shape error there leaves the values unknown instead of failing the compile; if the branch
    runs, its kernel reports the error naming the node.
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
            for attr_name, sub in node.subgraphs.items():
                _seed_body_inputs(node, attr_name, sub, [descs.get(i) if i else None for i in node.inputs])
                infer_graph(sub, descs, consts, strict=False)
                for _ in range(2):  # (a rank that changes too: the second widening makes it unknown)
                    if not (node.op_type == "Loop" and attr_name == "body" and _widen_carried(sub)):
                        break
                    infer_graph(sub, descs, consts, strict=False)
        try:
            outs = infer_node(node, op, descs, consts, g.descs, strict)
        except ShapeError as e:
            fed = [i for i in dict.fromkeys(node.inputs) if i in g.inputs and outer_descs is None]
            if not fed or type(e) is not ShapeError:
                raise
            # the node reads a model input directly: its shape (atc --input_shape, or a call's
            # array) is as likely wrong as the model
            raise ShapeError(f"{e}; the node reads model input {', '.join(f'{i} {descs.get(i)}' for i in fed)}: "
                             "check that input's shape (atc --input_shape)", e.code) from None
        for o, d in zip(node.outputs, outs):
            if o:
                descs[o] = d
    for k in list(descs):
        if outer_descs is None or k not in outer_descs or k in g.descs:
            g.descs[k] = descs[k]


def infer_node(node: Node, op: Any, descs: Mapping[str, TensorDesc], consts: Mapping[str, np.ndarray],
               declared: Mapping[str, TensorDesc], strict: bool = True) -> list[TensorDesc]:
    """The descs of ``node``'s outputs (``op``: its ``OpDef``) from the descs and constant values
    known so far; an output the op cannot shape keeps its ``declared`` shape. Raises
    ``ShapeError`` naming the node (with ``strict=False``: unknown descs instead)."""
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
    except ShapeError as e:
        if not strict:
            outs = [TensorDesc(0, None) for _ in node.outputs]
        else:
            src = sorted(set(node.origin) - {node.name})
            if src and type(e) is ShapeError:
                # a node a pass made (Gemm -> MatMul, BatchNormalization -> a Mul/Add chain) fails on a
                # size only a call gave: the user knows the model's node, not the pass's name for it
                raise ShapeError(f"{e} (compiled from ONNX node {', '.join(src)})", e.code) from None
            raise
    except Exception as e:  # an infer bug must still name the node
        raise ShapeError(
            f"node {node.name} ({node.op_type}, opset {node.opset}): shape inference failed "
            f"for inputs {[str(d) for d in ctx.inputs]}: {type(e).__name__}: {e}"
        ) from e
    result = []
    for o, d in zip(node.outputs, outs):
        old = declared.get(o) if o else None
        if d.shape is None and old is not None and old.shape is not None:
            d = TensorDesc(d.dtype or old.dtype, old.shape)
        result.append(d)
    return result


def run(graph: Graph, ctx: PassContext) -> PassResult:
    infer_graph(graph)
    return PassResult(graph, False, f"{len(graph.descs)} values typed")
