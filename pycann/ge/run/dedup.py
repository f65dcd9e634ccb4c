"""The shape-generic plan's repeated computations computed once (common subexpression elimination).

A decoder exported layer by layer recomputes, in every layer, values that depend only on the
inputs' shapes and on constants: GPT-2's causal mask is ``Where(Slice(Slice(bias, past, past +
seq), 0, past + seq), 0, -inf)`` six times over. Once ``shape_program.collapse`` reads named dims
from one input (``past_seq`` from ``past_key_0`` in every layer), those nodes have equal inputs, and
``merge_equal(graph)`` keeps the first of each group of equal nodes and points the readers of the
others at its outputs.

Two nodes are equal when they have the same op (type, domain and opset), the same inputs in the
same order, the same number of outputs and the same attributes; constants (initializers) of the
same dtype, shape and bytes count as the same input. Only ops in ``PURE`` are merged:
deterministic ops whose kernels return a new array or a read-only view and write no input
(no random ops, no CacheAppend, nothing with a body). A node whose output is a graph output, or is
read from inside a body, is kept. Only the top-level graph is rewritten; the compiled graph, the .om
and the specialised plans (whose shape arithmetic folds to constants) are not affected.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import numpy as np

from pycann.ge.ir import Graph, Node, free_names

__all__ = ["PURE", "merge_equal"]

MAX_COMPARED_BYTES = 64 << 20  # constants larger than this are never compared (a weight, not a mask)

PURE = frozenset({
    ("", "Slice"), ("", "Where"), ("", "Reshape"), ("", "Transpose"), ("", "Unsqueeze"), ("", "Squeeze"),
    ("", "Gather"), ("", "Cast"), ("", "Range"), ("", "Expand"), ("", "Concat"), ("", "Equal"), ("", "Less"),
    ("", "Greater"), ("", "Not"), ("", "And"), ("", "Or"), ("", "Add"), ("", "Sub"), ("", "Mul"), ("", "Div"),
    ("", "Neg"), ("", "Trilu"), ("", "Shape"), ("", "Flatten"), ("", "Tile"), ("", "ConstantOfShape"),
    ("pycann", "ShapeOf"),
})


def _frozen(v: Any) -> Any:
    """A hashable form of an attribute value, or raises TypeError for one that has none here
    (a tensor, a graph): such nodes are never merged."""
    if v is None or isinstance(v, (bool, int, float, str, bytes)):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    raise TypeError(type(v).__name__)


def _key(n: Node, inputs: list[str]) -> tuple[Any, ...] | None:
    try:
        attrs = tuple(sorted((k, _frozen(v)) for k, v in n.attrs.items()))
    except TypeError:
        return None
    return (n.domain, n.op_type, n.opset, tuple(inputs), len(n.outputs), attrs)


def _equal_constants(graph: Graph) -> dict[str, str]:
    """Initializer name -> the first initializer with the same dtype, shape and bytes, for those a pure
    node reads (an exporter stores a buffer per layer: GPT-2's causal ``bias`` six times)."""
    read = {i for n in graph.nodes if (n.domain, n.op_type) in PURE for i in n.inputs if i in graph.initializers}
    groups: dict[tuple[Any, ...], list[str]] = {}  # (dtype, shape) -> names: only these are compared
    for name in graph.initializers:
        a = graph.initializers[name]
        if name in read and isinstance(a, np.ndarray) and not a.dtype.hasobject and a.nbytes <= MAX_COMPARED_BYTES:
            groups.setdefault((a.dtype.str, a.shape), []).append(name)
    same: dict[str, str] = {}
    for names in groups.values():
        if len(names) < 2:
            continue
        by_content: dict[bytes, str] = {}
        for name in names:
            data = np.ascontiguousarray(graph.initializers[name]).tobytes()
            same[name] = by_content.setdefault(hashlib.blake2b(data, digest_size=32).digest(), name)
    return same


def merge_equal(graph: Graph) -> tuple[Graph, int]:
    """A copy of ``graph`` with each group of equal pure nodes computed once (module doc), and how many
    nodes were dropped (0: ``graph`` itself is returned). ``graph`` is not changed."""
    keep = set(graph.outputs)  # values that must keep their producer: outputs, and what bodies read
    for n in graph.nodes:
        for g in n.subgraphs.values():
            keep.update(free_names(g))
    first: dict[tuple[Any, ...], Node] = {}
    renamed: dict[str, str] = _equal_constants(graph)
    nodes: list[Node] = []
    for n in graph.nodes:
        inputs = [renamed.get(i, i) for i in n.inputs]
        if inputs != list(n.inputs):
            n = replace(n, inputs=inputs)
        if (n.domain, n.op_type) not in PURE or n.subgraphs or any(o in keep for o in n.outputs if o):
            nodes.append(n)
            continue
        key = _key(n, inputs)
        if key is None:
            nodes.append(n)
            continue
        seen = first.get(key)
        if seen is None:
            first[key] = n
            nodes.append(n)
            continue
        if any(o and not s for o, s in zip(n.outputs, seen.outputs)):
            nodes.append(n)  # it has an output the first one omitted: keep both
            continue
        for o, s in zip(n.outputs, seen.outputs):
            if o:
                renamed[o] = s
    if len(nodes) == len(graph.nodes):
        return graph, 0
    return replace(graph, nodes=nodes), len(graph.nodes) - len(nodes)
