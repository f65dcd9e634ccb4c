"""Constant folding: evaluate nodes whose inputs are all constants, and shape queries
(``Shape``, ``Size``) whose input shape is statically known. Results become initializers.

Any node whose inputs are all constant folds (ConstantOfShape, Range, Expand, Tile, shape
arithmetic), so weights an exporter computes become initializers and the weight folds
(ConvBatchNormFusionPass, ConvScaleBiasFold) apply. A result larger than ``fold_max_bytes``
(compile option, default ``DEFAULT_FOLD_MAX_BYTES``: above any single weight of the model set)
stays a node, so a huge broadcast constant does not bloat the .om.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pycann.dtypes import TensorDesc, to_numpy
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.infer_shapes import const_desc, infer_graph, infer_node
from pycann.ge.ir import Graph, Node
from pycann.kernels.table import run_kernel
from pycann.ops.registry import lookup

name = "ConstantFolding"

DEFAULT_FOLD_MAX_BYTES = 128 << 20


def _shape_query(node: Node, g: Graph, outer_descs: Mapping[str, TensorDesc] | None = None) -> np.ndarray | None:
    """The value of a Shape / Size node whose input's dims are known (in ``g`` or, for a subgraph
    reading an outer-scope value, in ``outer_descs``); else None."""
    if node.op_type not in ("Shape", "Size") or node.domain:
        return None
    d: TensorDesc | None = g.descs.get(node.inputs[0])
    if d is None and outer_descs is not None:
        d = outer_descs.get(node.inputs[0])
    if d is None or d.shape is None:
        return None
    if node.op_type == "Size":
        return np.array(d.numel(), dtype=np.int64) if d.is_static else None
    rank = len(d.shape)
    start = node.attrs.get("start", 0)
    end = node.attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    dims = d.shape[start:end]
    if not all(isinstance(x, int) for x in dims):
        return None
    return np.array(dims, dtype=np.int64)


def _known_bytes(g: Graph, node: Node) -> int:
    """Bytes of ``node``'s outputs where shape inference already knows them (0 when unknown)."""
    total = 0
    for o in node.outputs:
        d = g.descs.get(o)
        n = d.numel() if d is not None and d.kind == "tensor" else None
        if n is not None and d is not None:
            try:
                total += n * to_numpy(d.dtype).itemsize
            except Exception:  # a type without a numpy dtype (string): size unknown
                pass
    return total


def fold_graph(g: Graph, outer_consts: dict[str, np.ndarray] | None = None, recurse: bool = True,
               max_bytes: int = DEFAULT_FOLD_MAX_BYTES, outer_descs: Mapping[str, TensorDesc] | None = None) -> int:
    """Fold in place; returns the number of nodes removed (subgraphs too unless ``recurse=False``).
    Results of more than ``max_bytes`` bytes are left to run time. ``outer_descs``: the enclosing
    graphs' descs, so that a branch's ``Shape`` of an outer value with static dims folds (and with
    it the branch's Ifs on that shape: Silero's decoder on its state's batch)."""
    consts = dict(outer_consts or {})
    # a subgraph's own inputs (a Loop body's carried values, Scan's slices) may reuse an outer name:
    # there the name is the input, neither the outer constant nor the outer value's dims
    shadowed = [i for i in g.inputs if i in consts or (outer_descs is not None and i in outer_descs)]
    for i in shadowed:
        consts.pop(i, None)
    if shadowed and outer_descs is not None:
        outer_descs = {k: v for k, v in outer_descs.items() if k not in set(shadowed)}
    consts.update(g.initializers)
    kept: list[Node] = []
    folded = 0
    scope: dict[str, TensorDesc] | None = None
    for node in g.nodes:
        if recurse and node.subgraphs:
            scope = scope if scope is not None else {**(outer_descs or {}), **g.descs}
            for sub in node.subgraphs.values():
                folded += fold_graph(sub, consts, max_bytes=max_bytes, outer_descs=scope)
        if _fold_node(g, node, consts, max_bytes, outer_descs):
            folded += 1
        else:
            kept.append(node)
    g.nodes = kept
    return folded


def _fold_node(g: Graph, node: Node, consts: dict[str, np.ndarray], max_bytes: int,
               outer_descs: Mapping[str, TensorDesc] | None = None) -> bool:
    """Fold ``node`` into initializers of ``g`` (and ``consts``) when it can; True when folded."""
    value = _shape_query(node, g, outer_descs)
    if value is not None:
        g.initializers[node.outputs[0]] = value
        consts[node.outputs[0]] = value
        g.descs[node.outputs[0]] = const_desc(value)
        return True
    if node.subgraphs or not node.inputs or any(i and i not in consts for i in node.inputs):
        return False
    op = lookup(node.op_type, node.domain, node.opset)
    if not op.foldable or op.scoped:
        return False
    if _known_bytes(g, node) > max_bytes:  # do not even compute a result that will not be kept
        return False
    ins = [consts[i] if i else None for i in node.inputs]
    attrs = op.with_defaults(node.attrs)
    attrs["_n_outputs"] = len(node.outputs)
    try:
        outs = run_kernel(op)(ins, attrs)
    except Exception:  # noqa: BLE001 - leave it for run time, where the error names the node
        return False
    if sum(np.asarray(o).nbytes for o in outs) > max_bytes:
        return False
    for o, v in zip(node.outputs, outs):
        if o:
            arr = np.array(v, copy=True)  # own the memory: kernels may return views of inputs
            arr.flags.writeable = False
            g.initializers[o] = arr
            consts[o] = arr
            g.descs[o] = const_desc(arr)
    return True


def infer_and_fold(g: Graph, max_bytes: int = DEFAULT_FOLD_MAX_BYTES) -> int:
    """Shape inference and folding of a graph without subgraphs in one sweep: each node's
    outputs are typed from what is known so far (constants folded above it included), then the
    node folds when it can. The same fixed point as alternating ``infer_graph`` and
    ``fold_graph`` until nothing folds (``specialize.specialize`` before), in one pass instead of
    one per link of a Shape -> Gather -> Concat -> Reshape -> Shape chain. Returns the nodes
    folded; raises ``ShapeError`` naming a node whose shapes do not fit."""
    consts: dict[str, np.ndarray] = dict(g.initializers)
    descs: dict[str, TensorDesc] = {k: const_desc(v) for k, v in g.initializers.items()}
    for i in g.inputs:
        if i in g.descs:
            descs[i] = g.descs[i]
    kept: list[Node] = []
    folded = 0
    for node in g.nodes:
        op = lookup(node.op_type, node.domain, node.opset or g.opsets.get(node.domain, None), node.label())
        for o, d in zip(node.outputs, infer_node(node, op, descs, consts, g.descs)):
            if o:
                descs[o] = g.descs[o] = d
        if _fold_node(g, node, consts, max_bytes):
            folded += 1
            descs.update((o, g.descs[o]) for o in node.outputs if o)
        else:
            kept.append(node)
    g.nodes = kept
    return folded


MAX_ROUNDS = 64


def run(graph: Graph, ctx: PassContext) -> PassResult:
    """Fold, re-infer, fold again until nothing changes: a folded shape computation makes the
    next tensors' shapes static, whose ``Shape`` queries then fold too (exported transformers:
    Shape -> Gather -> Concat -> Reshape per layer). With ``--input_shape`` fixed this leaves a
    fully static graph at compile time, as run-time specialisation does (``specialize.specialize``)."""
    total = 0
    max_bytes = int(ctx.options.get("fold_max_bytes", DEFAULT_FOLD_MAX_BYTES))
    for _ in range(MAX_ROUNDS):
        n = fold_graph(graph, max_bytes=max_bytes)
        total += n
        if n == 0:
            break
        infer_graph(graph)
    return PassResult(graph, total > 0, f"{total} nodes folded")
