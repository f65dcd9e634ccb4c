"""Helpers for pattern / check / rewrite fusion passes.

A fusion pass walks the graph, matches a pattern anchored at a node, checks the conditions
(each failed check returns a reason, which ``atc --log=info`` prints as a missed fusion) and
rewrites: the matched nodes are removed and the fused node is placed where the last of them
was, so topological order holds (every input of the fused node was an input of a matched node).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ge.ir import Graph, Node


class GraphIndex:
    """Producer/consumer maps and constant lookups for one graph (rebuild after rewrites)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.producers = g.producers()
        self.consumers = g.consumers()
        self.outputs = set(g.outputs)

    def sole_consumer(self, value: str) -> Node | None:
        """The only node reading ``value``, if exactly one does and it is not a graph output."""
        users = self.consumers.get(value, [])
        if len(users) != 1 or value in self.outputs:
            return None
        return users[0]

    def const(self, value: str) -> np.ndarray | None:
        return self.g.initializers.get(value) if value else None

    def scalar(self, value: str, within: str = "") -> float | None:
        """The float value of a one-element constant, else None; with ``within`` (the value it is
        combined with), also None when the constant's rank exceeds ``within``'s known rank: a
        [1, 1, 1] "scalar" broadcasts a rank-2 operand up to rank 3, which a fused op would not."""
        c = self.const(value)
        if c is None or c.size != 1 or c.dtype.kind not in "fiu":
            return None
        d = self.desc(within) if within else None
        if d is not None and d.rank is not None and c.ndim > d.rank:
            return None
        return float(c.reshape(-1)[0])

    def desc(self, value: str) -> TensorDesc | None:
        return self.g.descs.get(value)

    def static_shape(self, value: str) -> tuple[int, ...] | None:
        """``value``'s shape when every dim is known, else None."""
        d = self.g.descs.get(value)
        if d is None or d.shape is None or not all(isinstance(s, int) for s in d.shape):
            return None
        return tuple(int(s) for s in d.shape)  # type: ignore[arg-type]

    def other_input(self, node: Node, value: str) -> str | None:
        """For a binary node reading ``value``, the other input (None if both are ``value``)."""
        if len(node.inputs) != 2:
            return None
        a, b = node.inputs
        if a == value and b != value:
            return b
        if b == value and a != value:
            return a
        return None


def clip_defaults(d: TensorDesc | None) -> tuple[float, float]:
    """A Clip's bounds when its min / max are omitted: the lowest and the largest finite value of the
    float dtype it clips (ONNX Clip-11+; ONNX Runtime clips +-inf to them), +-inf for other dtypes."""
    name = {10: "float16", 1: "float32", 11: "float64"}.get(d.dtype if d is not None else 0)
    if name is None:
        return float("-inf"), float("inf")
    fi = np.finfo(np.dtype(name))
    return float(fi.min), float(fi.max)


def is_op(node: Node | None, *op_types: str) -> bool:
    return node is not None and node.domain == "" and node.op_type in op_types


@dataclass
class Rewrites:
    """Collects rewrites during a pass and applies them at the end in one sweep."""

    g: Graph
    removed: set[int] = field(default_factory=set)
    placed: dict[int, list[Node]] = field(default_factory=dict)
    applied: int = 0
    missed: list[str] = field(default_factory=list)
    # node id -> position in ``g.nodes``, made at the first ``replace`` (a pass rewrites the node list
    # only at ``commit``): made anew per call it was O(nodes) per rewrite, DenseNet's 124 rewrites ~10 ms
    _index: dict[int, int] | None = field(default=None, repr=False)

    def taken(self, *nodes: Node) -> bool:
        return any(id(n) in self.removed for n in nodes)

    def replace(self, old: list[Node], new: list[Node]) -> None:
        """Remove ``old`` and put ``new`` where the last of ``old`` was."""
        index = self._index
        if index is None or any(id(n) not in index for n in old):  # (a pass that changed g.nodes itself)
            index = self._index = {id(n): i for i, n in enumerate(self.g.nodes)}
        last = max(old, key=lambda n: index[id(n)])
        for n in old:
            self.removed.add(id(n))
        for n in new:
            n.origin = [o for m in old for o in m.origin] if not n.origin else n.origin
        self.placed[id(last)] = new
        self.applied += 1

    def commit(self) -> None:
        nodes: list[Node] = []
        for n in self.g.nodes:
            if id(n) in self.placed:
                nodes.extend(self.placed[id(n)])
            elif id(n) not in self.removed:
                nodes.append(n)
        self.g.nodes = nodes
        self._index = None


def rename_uses(g: Graph, old: str, new: str) -> None:
    """Make every reader of ``old`` read ``new`` instead (top-level nodes; subgraphs too)."""
    for n in g.nodes:
        if old in n.inputs:
            n.inputs = [new if i == old else i for i in n.inputs]
        for sub in n.subgraphs.values():
            local = set(sub.inputs) | set(sub.initializers) | {o for m in sub.nodes for o in m.outputs}
            if old not in local:
                rename_uses(sub, old, new)
                sub.outputs = [new if o == old else o for o in sub.outputs]


def reduce_axes(ix: GraphIndex, n: Node) -> tuple[int, ...] | None:
    """The constant axes of a Reduce* node, from its ``axes`` input (ReduceSum from opset 13, the
    others from 18) or attribute (before); None when they are computed at run time or absent
    (absent means every axis, or none with ``noop_with_empty_axes``: never a fusion pattern)."""
    if len(n.inputs) > 1 and n.inputs[1]:
        c = ix.const(n.inputs[1])
        return None if c is None else tuple(int(v) for v in c.reshape(-1))
    a = n.attrs.get("axes")
    return tuple(int(v) for v in a) if a else None
