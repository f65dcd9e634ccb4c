"""TransposeReshapeCancellation: Transpose(p1) -> Transpose(p2) becomes one Transpose with the
composed permutation, or nothing when it is the identity; Reshape -> Reshape keeps only the
second when its target shape is a constant without 0 entries (0 copies an input dim).
Check: the first node's output has exactly one reader and is not a graph output.
"""

from __future__ import annotations

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op, rename_uses
from pycann.ge.ir import Graph, Node

name = "TransposeReshapeCancellation"


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    renames: list[tuple[str, str]] = []
    for a in list(g.nodes):
        if rw.taken(a) or not is_op(a, "Transpose", "Reshape"):
            continue
        b = ix.sole_consumer(a.outputs[0])
        if b is None or rw.taken(b) or not is_op(b, a.op_type) or b.inputs[0] != a.outputs[0]:
            continue
        if a.op_type == "Transpose":
            d = ix.desc(a.inputs[0])
            rank = d.rank if d is not None else None
            if rank is None:
                continue
            p1 = list(a.attrs.get("perm") or range(rank - 1, -1, -1))
            p2 = list(b.attrs.get("perm") or range(rank - 1, -1, -1))
            perm = [p1[i] for i in p2]
            if perm == list(range(rank)):
                if b.outputs[0] in ix.outputs:
                    rw.missed.append(f"{a.name}+{b.name}: identity pair ends at a graph output")
                    continue
                renames.append((b.outputs[0], a.inputs[0]))
                rw.replace([a, b], [])
            else:
                rw.replace([a, b], [Node("Transpose", [a.inputs[0]], list(b.outputs), {"perm": perm},
                                         name=f"{b.name}_composed", opset=b.opset)])
        else:
            shape = ix.const(b.inputs[1])
            if shape is None or (shape == 0).any():
                rw.missed.append(f"{a.name}+{b.name}: second Reshape's shape is not a constant without 0s")
                continue
            rw.replace([a, b], [Node("Reshape", [a.inputs[0], b.inputs[1]], list(b.outputs), dict(b.attrs),
                                     name=f"{b.name}_merged", opset=b.opset)])
    rw.commit()
    to = dict(renames)
    for old, new in renames:
        while new in to:  # back-to-back identity pairs: the second's input was the first's output, renamed too
            new = to[new]
        rename_uses(g, old, new)
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} Transpose/Reshape pairs simplified", missed)
