"""Dead-code elimination: drop nodes none of whose outputs reach a graph output, unused
initializers, and Identity nodes and same-type Casts (consumers are rewired to the input; for
a graph output, the input's producer is renamed to write it)."""

from __future__ import annotations

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node, node_reads

name = "DeadCodeElimination"


def is_identity(g: Graph, n: Node) -> bool:
    """Identity, or a Cast to the type its input already has (ONNX Cast: a copy then)."""
    if n.domain or not n.inputs or not n.inputs[0]:
        return False
    if n.op_type == "Identity":
        return True
    if n.op_type != "Cast":
        return False
    d = g.descs.get(n.inputs[0])
    return d is not None and getattr(d, "kind", "tensor") == "tensor" and d.dtype == int(n.attrs.get("to", -1))


def _drop_identities(g: Graph) -> int:
    """Rewire readers of ``y = Identity(x)`` (or a same-type Cast) to read ``x``. When ``y`` is a
    graph output, ``x``'s producer writes ``y`` itself instead, if ``x`` is a plain intermediate
    (made by a node, no graph output, not yet renamed): one step less per run either way."""
    rename: dict[str, str] = {}
    kept = []
    outputs = set(g.outputs)
    producers = {o: n for n in g.nodes for o in n.outputs if o}
    taken: set[str] = set()  # intermediates already renamed to a graph output
    retarget: dict[str, str] = {}  # x -> y: x's producer and readers use the graph output's name
    for n in g.nodes:
        if is_identity(g, n):
            x, y = rename.get(n.inputs[0], n.inputs[0]), n.outputs[0]
            if y not in outputs:
                rename[y] = x
                continue
            if x in producers and x not in outputs and x not in taken and x not in g.inputs \
                    and x not in g.initializers and not producers[x].subgraphs:
                taken.add(x)
                retarget[x] = y
                continue
        kept.append(n)
    if not rename and not retarget:
        return 0
    for n in kept:
        n.inputs = [retarget.get(rename.get(i, i), rename.get(i, i)) for i in n.inputs]
        n.outputs = [retarget.get(o, o) for o in n.outputs]
        for sub in n.subgraphs.values():
            _rename_free(sub, {k: retarget.get(v, v) for k, v in rename.items()} | retarget)
    for x, y in retarget.items():
        if x in g.descs:
            g.descs[y] = g.descs[x]
    g.nodes = kept
    return len(rename) + len(retarget)


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
