"""Dead-code elimination: drop nodes none of whose outputs reach a graph output, unused
initializers, and Identity nodes (consumers are rewired to the Identity's input)."""

from __future__ import annotations

from pycann.ge.ir import Graph, node_reads
from pycann.ge.passes.base import PassContext, PassResult

name = "DeadCodeElimination"


def _drop_identities(g: Graph) -> int:
    """Rewire readers of ``y = Identity(x)`` to read ``x`` (unless y is a graph output)."""
    rename: dict[str, str] = {}
    kept = []
    outputs = set(g.outputs)
    for n in g.nodes:
        if n.op_type == "Identity" and not n.domain and n.outputs[0] not in outputs and n.inputs[0]:
            rename[n.outputs[0]] = rename.get(n.inputs[0], n.inputs[0])
            continue
        kept.append(n)
    if not rename:
        return 0
    for n in kept:
        n.inputs = [rename.get(i, i) for i in n.inputs]
        for sub in n.subgraphs.values():
            _rename_free(sub, rename)
    g.nodes = kept
    return len(rename)


def _rename_free(g: Graph, rename: dict[str, str]) -> None:
    local = set(g.inputs) | set(g.initializers) | {o for n in g.nodes for o in n.outputs}
    active = {k: v for k, v in rename.items() if k not in local}
    if not active:
        return
    for n in g.nodes:
        n.inputs = [active.get(i, i) for i in n.inputs]
        for sub in n.subgraphs.values():
            _rename_free(sub, active)
    g.outputs = [active.get(o, o) for o in g.outputs]


def eliminate(g: Graph, top: bool = True, recurse: bool = True) -> int:
    """Remove dead nodes in place; returns the count removed.

    ``top`` also bypasses Identity nodes (this rewrites node inputs, so run-time
    specialisation, which shares Node objects between plans, passes False).
    """
    removed = _drop_identities(g) if top else 0
    live = set(g.outputs)
    kept = []
    for n in reversed(g.nodes):
        if any(o in live for o in n.outputs if o):
            kept.append(n)
            live.update(node_reads(n))
        else:
            removed += 1
    g.nodes = kept[::-1]
    for n in g.nodes if recurse else ():
        for sub in n.subgraphs.values():
            removed += eliminate(sub, top=False)
    for k in [k for k in g.initializers if k not in live]:
        del g.initializers[k]
    return removed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n = eliminate(graph)
    return PassResult(graph, n > 0, f"{n} nodes removed")
