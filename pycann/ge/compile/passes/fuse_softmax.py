"""SoftmaxFusion: softmax decomposed as PyTorch's dynamo exporter (and TF / Paddle converters)
emit it -> Softmax (opset 13).

Pattern: mx = ReduceMax(x, [a], keepdims=1); e = Exp(Sub(x, mx)); s = ReduceSum(e, [a],
keepdims=1); y = Div(e, s).
Check: one and the same axis in both reductions, keepdims; the max is subtracted (exactly
Softmax-13's formula: without it a large input overflows where Softmax does not, so that form
does not fuse); every intermediate read only inside the pattern.
"""

from __future__ import annotations

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op, reduce_axes
from pycann.ge.ir import Graph, Node

name = "SoftmaxFusion"


def _one_axis(ix: GraphIndex, n: Node, rank: int) -> int | None:
    axes = reduce_axes(ix, n)
    if axes is None or len(axes) != 1 or not int(n.attrs.get("keepdims", 1)) or not -rank <= axes[0] < rank:
        return None
    return axes[0] % rank


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for ex in list(g.nodes):
        if not is_op(ex, "Exp") or rw.taken(ex):
            continue
        e = ex.outputs[0]
        users = ix.consumers.get(e, [])
        rs = next((u for u in users if is_op(u, "ReduceSum") and u.inputs[0] == e), None)
        dv = next((u for u in users if is_op(u, "Div") and u.inputs[0] == e), None)
        if len(users) != 2 or rs is None or dv is None or e in ix.outputs:
            continue  # not an exp normalised by its own sum
        if dv.inputs[1] != rs.outputs[0] or ix.sole_consumer(rs.outputs[0]) is not dv:
            continue
        sub = ix.producers.get(ex.inputs[0])
        mx = ix.producers.get(sub.inputs[1]) if is_op(sub, "Sub") and sub is not None else None
        if sub is None or not is_op(mx, "ReduceMax") or mx is None or mx.inputs[0] != sub.inputs[0]:
            rw.missed.append(f"{ex.name}: exp(x) / sum(exp(x)) without the max subtracted (overflows where "
                             "Softmax does not)")
            continue
        x = sub.inputs[0]
        d = ix.desc(x)
        if d is None or d.rank is None:
            continue
        a_max, a_sum = _one_axis(ix, mx, d.rank), _one_axis(ix, rs, d.rank)
        if a_max is None or a_max != a_sum:
            rw.missed.append(f"{ex.name}: max and sum are not over the same single axis with keepdims")
            continue
        if ix.sole_consumer(mx.outputs[0]) is not sub or ix.sole_consumer(sub.outputs[0]) is not ex:
            rw.missed.append(f"{ex.name}: an intermediate of the softmax is read elsewhere")
            continue
        nodes = [mx, sub, ex, rs, dv]
        if rw.taken(*nodes):
            continue
        rw.replace(nodes, [Node("Softmax", [x], [dv.outputs[0]], {"axis": a_max}, name=f"{ex.name}_softmax", opset=13)])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} softmaxes fused", missed)
