"""IfInlining: an If whose condition is a constant is replaced by the nodes of the branch it
takes. Run at compile time and again when a model is specialised for concrete inputs (where a
scalar control input such as Silero's sample rate becomes a constant), it turns nested
control flow into one flat graph that folds and plans like any other.

New nodes are created for the inlined branch (the IR's shared Node objects are never
mutated); branch-local names get a unique prefix; the branch's results take the If's output
names, so readers of the If are untouched.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node

name = "IfInlining"


def _copy_renamed(sub: Graph, rename: dict[str, str]) -> Graph:
    """Copy of a nested subgraph whose outer-scope references follow ``rename``."""
    local = set(sub.inputs) | set(sub.initializers) | {o for n in sub.nodes for o in n.outputs if o}
    active = {k: v for k, v in rename.items() if k not in local}
    nodes = []
    for n in sub.nodes:
        attrs = {k: (_copy_renamed(v, active) if isinstance(v, Graph) else v) for k, v in n.attrs.items()}
        nodes.append(Node(n.op_type, [active.get(i, i) for i in n.inputs], list(n.outputs), attrs, n.name,
                          n.domain, n.opset, list(n.origin)))
    return Graph(nodes=nodes, inputs=list(sub.inputs), outputs=[active.get(o, o) for o in sub.outputs],
                 initializers=dict(sub.initializers), descs=dict(sub.descs), name=sub.name,
                 opsets=dict(sub.opsets), metadata=sub.metadata, context=sub.context)


def inline_branch(g: Graph, node: Node, branch: Graph, counter: int) -> list[Node]:
    """Nodes (new objects) computing ``node``'s outputs from ``branch``; adds branch constants to ``g``."""
    prefix = f"{node.name}/inl{counter}/"
    results = dict(zip(branch.outputs, node.outputs))
    produced = {o for n in branch.nodes for o in n.outputs if o}
    rename: dict[str, str] = {}
    for k, v in branch.initializers.items():
        rename[k] = prefix + k
        g.initializers[prefix + k] = v
    taken: set[str] = set()
    for n in branch.nodes:
        for o in n.outputs:
            if o and o in results and o not in taken:
                rename[o] = results[o]
                taken.add(o)
            elif o:
                rename[o] = prefix + o
    out: list[Node] = []
    for n in branch.nodes:
        attrs = {k: (_copy_renamed(v, rename) if isinstance(v, Graph) else v) for k, v in n.attrs.items()}
        out.append(Node(n.op_type, [rename.get(i, i) if i else "" for i in n.inputs],
                        [rename.get(o, o) if o else "" for o in n.outputs], attrs, prefix + n.name,
                        n.domain, n.opset, list(node.origin)))
    for b_out, if_out in results.items():
        if b_out in produced and rename.get(b_out) == if_out:
            continue
        # the result is an outer value, a constant, or repeats another output: pass it through
        out.append(Node("Identity", [rename.get(b_out, b_out)], [if_out], {}, f"{prefix}{if_out}_result",
                        "", 16, list(node.origin)))
    for k, d in branch.descs.items():
        if k in rename and rename[k] not in g.descs:
            g.descs[rename[k]] = d
    return out


def inline_constant_ifs(g: Graph, consts: dict[str, np.ndarray] | None = None) -> int:
    """Inline every top-level If with a constant condition; returns how many were inlined."""
    consts = consts if consts is not None else g.initializers
    nodes: list[Node] = []
    count = 0
    for n in g.nodes:
        if n.op_type == "If" and not n.domain and n.inputs and n.inputs[0] in consts:
            cond = np.asarray(consts[n.inputs[0]])
            if cond.size == 1:
                branch = n.attrs["then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"]
                nodes.extend(inline_branch(g, n, branch, count))
                count += 1
                continue
        nodes.append(n)
    g.nodes = nodes
    return count


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n = inline_constant_ifs(graph)
    return PassResult(graph, n > 0, f"{n} If nodes with constant conditions inlined")
