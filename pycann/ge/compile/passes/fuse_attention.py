"""AttentionFusion: scaled dot-product attention as exported -> pycann.FusedAttention.

Pattern: s = MatMul(Q, Kt); [s = Div(s, c) | Mul(s, c)]; [s = Add(s, mask) |
Where(cond, s, fill)]; p = Softmax(s, axis=-1); y = MatMul(p, V).
Check: every intermediate has one reader; Softmax over the last axis (opset >= 13, or
axis = rank-1 at older opsets); the scale is a scalar constant. A Where mask becomes an
additive mask Where(cond, 0, fill) (constant-folded when cond is constant) only when its fill
is a constant <= -1e30 (float32's lowest, -inf): with a finite fill such as -1e4, a fully
masked row is uniform under Where but softmax(s) under an additive mask.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node
from pycann.ops.fused import DOMAIN

name = "AttentionFusion"
# A Where mask's fill becomes an additive mask only when adding any float32 score leaves it as
# small: float32's lowest (-3.4e38, what PyTorch exports as finfo.min) or -inf qualify.
MASK_FILL_MAX = -1e30


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for qk in list(g.nodes):
        if not is_op(qk, "MatMul") or rw.taken(qk) or ix.const(qk.inputs[1]) is not None:
            continue  # (a constant B is a dense layer, not Q @ K^T: not even a candidate to report)
        nodes = [qk]
        cur = qk.outputs[0]
        scale = 1.0
        nxt = ix.sole_consumer(cur)
        if is_op(nxt, "Div", "Mul") and nxt is not None and nxt.inputs[0] == cur:
            c = ix.scalar(nxt.inputs[1])
            if c is None:
                continue
            ds = ix.desc(cur)
            if ds is None or ds.rank is None or ix.const(nxt.inputs[1]).ndim > ds.rank:  # type: ignore[union-attr]
                rw.missed.append(f"{qk.name}: the scale's rank is unknown or exceeds the scores'")
                continue  # (a [1, 1, 1] scale of rank-2 scores adds a dim the fused op would drop)
            if nxt.op_type == "Div" and c == 0.0:
                rw.missed.append(f"{qk.name}: scores divided by 0")
                continue  # s / 0 is +-inf (NaN at 0): no finite scale says it
            scale = 1.0 / c if nxt.op_type == "Div" else c
            nodes.append(nxt)
            cur = nxt.outputs[0]
            nxt = ix.sole_consumer(cur)
        mask = ""
        extra: list[Node] = []
        if is_op(nxt, "Add") and nxt is not None:
            mask = ix.other_input(nxt, cur) or ""
            if not mask:
                continue
            nodes.append(nxt)
            cur = nxt.outputs[0]
            nxt = ix.sole_consumer(cur)
        elif is_op(nxt, "Where") and nxt is not None and nxt.inputs[1] == cur and nxt.inputs[2] != cur:
            fill = ix.const(nxt.inputs[2])
            if fill is None or fill.dtype.kind != "f" or not bool(np.all(fill.astype(np.float64) <= MASK_FILL_MAX)):
                # s + fill equals fill under the softmax only where fill swamps every score: a
                # finite fill (-1e4, 0) would leave a fully masked row softmax(s) instead of uniform
                rw.missed.append(f"{qk.name}: Where mask fill is not a constant <= {MASK_FILL_MAX:g} (or -inf)")
                continue
            zero = g.fresh_name(f"{nxt.name}_zero")
            g.initializers[zero] = np.zeros((), dtype=fill.dtype)  # Where's two branches share one dtype
            mask = g.fresh_name(f"{nxt.name}_additive_mask")
            extra.append(Node("Where", [nxt.inputs[0], zero, nxt.inputs[2]], [mask], name=f"{nxt.name}_mask", opset=16))
            nodes.append(nxt)
            cur = nxt.outputs[0]
            nxt = ix.sole_consumer(cur)
        if not is_op(nxt, "Softmax") or nxt is None:
            if len(nodes) > 1:
                rw.missed.append(f"{qk.name}: scores are not followed by Softmax")
            continue
        d = ix.desc(cur)
        rank = d.rank if d is not None else None
        axis = int(nxt.attrs.get("axis", -1 if nxt.opset >= 13 else 1))
        if rank is None or axis % rank != rank - 1:
            rw.missed.append(f"{qk.name}: Softmax is not over the last axis")
            continue
        nodes.append(nxt)
        pv = ix.sole_consumer(nxt.outputs[0])
        if not is_op(pv, "MatMul") or pv is None or pv.inputs[0] != nxt.outputs[0]:
            rw.missed.append(f"{qk.name}: probabilities are not multiplied by V")
            continue
        nodes.append(pv)
        if rw.taken(*nodes):
            continue
        fused = Node("FusedAttention", [qk.inputs[0], qk.inputs[1], pv.inputs[1], mask], [pv.outputs[0]],
                     {"scale": float(scale)}, name=f"{qk.name}_attention", domain=DOMAIN, opset=1)
        rw.replace(nodes, [*extra, fused])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} attention blocks fused", missed)
