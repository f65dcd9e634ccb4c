"""LayerNormFusion: the decomposed layer norm that Paddle and older exporters emit ->
LayerNormalization (opset 17).

Pattern: m = ReduceMean(x, [-1]); d = Sub(x, m); v = ReduceMean(Pow(d, 2), [-1]);
n = Div(d, Sqrt(Add(v, eps))); [y = Add(Mul(n, gamma), beta)].
Check: both means over the last axis only with keepdims; exponent 2; eps a scalar constant; no
intermediate (the mean, x - mean, the std, ...) read outside the pattern or a graph output;
gamma/beta constants whose shape is exactly [C] (C = last dim) — a broadcasting scale of
another shape is not a layer norm's affine and does not fuse.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node

name = "LayerNormFusion"


def _last_axis_mean(ix: GraphIndex, n: Node | None, rank: int | None) -> bool:
    if not is_op(n, "ReduceMean") or n is None or rank is None or not n.attrs.get("keepdims", 1):
        return False
    axes = ix.const(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else None
    return axes is not None and axes.size == 1 and int(axes.reshape(-1)[0]) % rank == rank - 1


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for m in list(g.nodes):
        if not is_op(m, "ReduceMean") or rw.taken(m):
            continue
        x = m.inputs[0]
        dx = ix.desc(x)
        rank = dx.rank if dx is not None else None
        if not _last_axis_mean(ix, m, rank):
            if rank is not None:
                rw.missed.append(f"{m.name}: mean is not over the last axis only")
            continue
        sub = ix.sole_consumer(m.outputs[0])  # the mean read elsewhere (or a graph output) must stay
        if not is_op(sub, "Sub") or sub is None or sub.inputs != [x, m.outputs[0]]:
            continue
        d = sub.outputs[0]
        d_users = ix.consumers.get(d, [])
        pw = next((u for u in d_users if is_op(u, "Pow")), None)
        dv = next((u for u in d_users if is_op(u, "Div")), None)
        if len(d_users) != 2 or pw is None or dv is None or ix.scalar(pw.inputs[1], within=d) != 2.0 or dv.inputs[0] != d:
            rw.missed.append(f"{m.name}: no (x - mean)^2 and (x - mean) / std pair")
            continue
        if d in ix.outputs:
            rw.missed.append(f"{m.name}: x - mean is a graph output")
            continue
        m2 = ix.sole_consumer(pw.outputs[0])
        if not _last_axis_mean(ix, m2, rank) or m2 is None:
            rw.missed.append(f"{m.name}: variance is not a last-axis mean")
            continue
        add = ix.sole_consumer(m2.outputs[0])
        eps = ix.scalar(ix.other_input(add, m2.outputs[0]) or "", within=m2.outputs[0]) if is_op(add, "Add") and add else None
        sq = ix.sole_consumer(add.outputs[0]) if add is not None else None
        if eps is None or add is None or not is_op(sq, "Sqrt") or sq is None or dv.inputs[1] != sq.outputs[0] \
                or ix.sole_consumer(sq.outputs[0]) is not dv:
            rw.missed.append(f"{m.name}: no sqrt(var + eps) with a constant eps, read by the Div alone")
            continue
        nodes = [m, sub, pw, m2, add, sq, dv]
        out = dv.outputs[0]
        c = dx.shape[-1] if dx is not None and dx.shape else None
        gamma = beta = None
        mul = ix.sole_consumer(out)
        if is_op(mul, "Mul") and mul is not None:
            gname = ix.other_input(mul, out) or ""
            gv = ix.const(gname)
            if gv is not None and gv.shape == (c,):
                gamma, out = gname, mul.outputs[0]
                nodes.append(mul)
                badd = ix.sole_consumer(out)
                if is_op(badd, "Add") and badd is not None:
                    bname = ix.other_input(badd, out) or ""
                    bv = ix.const(bname)
                    if bv is not None and bv.shape == (c,):
                        beta, out = bname, badd.outputs[0]
                        nodes.append(badd)
            else:
                rw.missed.append(f"{m.name}: scale {None if gv is None else gv.shape} is not a [C] constant")
                continue
        if not isinstance(c, int) or rw.taken(*nodes):
            continue
        dt = g.initializers[gamma].dtype if gamma else np.float32
        if gamma is None:
            gamma = g.fresh_name(f"{m.name}_ln_scale")
            g.initializers[gamma] = np.ones(c, dtype=dt)
        ins = [x, gamma] + ([beta] if beta else [])
        ln = Node("LayerNormalization", ins, [out], {"axis": -1, "epsilon": float(eps)}, name=f"{m.name}_layernorm", opset=17)
        rw.replace(nodes, [ln])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} layer norms fused", missed)
