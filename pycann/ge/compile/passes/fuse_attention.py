"""AttentionFusion: scaled dot-product attention as exported -> pycann.FusedAttention.

Pattern: s = MatMul(Q, Kt); [s = Div(s, c) | Mul(s, c)]; [s = Add(s, mask) |
Where(cond, s, fill) | Where(cond, fill, s)]; p = Softmax(s, axis=-1);
[p = Where(IsNaN(p), 0, p)]; y = MatMul(p, V).
Check: every intermediate has one reader (p: the IsNaN and the Where of the guard); Softmax over
the last axis (opset >= 13, or axis = rank-1 at older opsets); the scale is a scalar constant. A
Where mask (``torch.where(keep, s, fill)``, or ``s.masked_fill(drop, fill)``, which exports as
Where(drop, fill, s)) becomes an additive mask Where(cond, 0, fill) / Where(cond, fill, 0)
(constant-folded when cond is constant) only when its fill is a constant <= -1e30 (float32's
lowest, -inf): with a finite fill such as -1e4, a fully masked row is uniform under Where but
softmax(s) under an additive mask.

ONNX Attention-23's function body zeroes the rows its mask hides entirely:
Where(Equal(ReduceMax(mask, [-1]), -inf), 0, p) before the product (``masked_rows_zero``).

The NaN guard is what both torch exporters write for ``scaled_dot_product_attention`` with a
boolean mask (a fully masked row's probabilities, NaN, become zeros); FusedAttention's
``nan_to_zero`` does the same (a probability row holding a NaN is all NaN, so it zeroes whole rows).
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op, reduce_axes
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
        elif is_op(nxt, "Where") and nxt is not None and cur in nxt.inputs[1:] and nxt.inputs[1] != nxt.inputs[2]:
            kept = nxt.inputs[1] == cur  # Where(keep, s, fill); else masked_fill's Where(drop, fill, s)
            fill = ix.const(nxt.inputs[2 if kept else 1])
            if fill is None or fill.dtype.kind != "f" or not bool(np.all(fill.astype(np.float64) <= MASK_FILL_MAX)):
                # s + fill equals fill under the softmax only where fill swamps every score: a
                # finite fill (-1e4, 0) would leave a fully masked row softmax(s) instead of uniform
                rw.missed.append(f"{qk.name}: Where mask fill is not a constant <= {MASK_FILL_MAX:g} (or -inf)")
                continue
            zero = g.fresh_name(f"{nxt.name}_zero")
            g.initializers[zero] = np.zeros((), dtype=fill.dtype)  # Where's two branches share one dtype
            mask = g.fresh_name(f"{nxt.name}_additive_mask")
            branches = [zero, nxt.inputs[2]] if kept else [nxt.inputs[1], zero]
            extra.append(Node("Where", [nxt.inputs[0], *branches], [mask], name=f"{nxt.name}_mask", opset=16))
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
        p = nxt.outputs[0]
        guard = _nan_guard(ix, p)
        rows_guard = [] if guard or not mask or extra else _masked_rows_guard(ix, p, mask)
        if guard or rows_guard:
            nodes += guard or rows_guard
            p = nodes[-1].outputs[0]
        pv = ix.sole_consumer(p)
        if not is_op(pv, "MatMul") or pv is None or pv.inputs[0] != p:
            rw.missed.append(f"{qk.name}: probabilities are not multiplied by V")
            continue
        nodes.append(pv)
        if rw.taken(*nodes):
            continue
        attrs = {"scale": float(scale), **({"nan_to_zero": 1} if guard else {}),
                 **({"masked_rows_zero": 1} if rows_guard else {})}
        fused = Node("FusedAttention", [qk.inputs[0], qk.inputs[1], pv.inputs[1], mask], [pv.outputs[0]],
                     attrs, name=f"{qk.name}_attention", domain=DOMAIN, opset=1)
        rw.replace(nodes, [*extra, fused])
    rw.commit()
    return rw.applied, rw.missed


def _nan_guard(ix: GraphIndex, p: str) -> list[Node]:
    """``[IsNaN(p), Where(IsNaN(p), 0, p)]`` when those two are ``p``'s only readers (the guard
    torch writes after a boolean-masked SDPA's softmax), else []. The 0 must be a one-element
    constant of rank at most ``p``'s: a larger rank would broadcast the result up."""
    users = ix.consumers.get(p, [])
    if len(users) != 2 or p in ix.outputs:
        return []
    isnan = next((u for u in users if is_op(u, "IsNaN")), None)
    where = next((u for u in users if is_op(u, "Where")), None)
    if isnan is None or where is None or ix.sole_consumer(isnan.outputs[0]) is not where:
        return []
    if where.inputs[0] != isnan.outputs[0] or where.inputs[2] != p or ix.scalar(where.inputs[1], within=p) != 0.0:
        return []
    return [isnan, where]


def _const_of(ix: GraphIndex, value: str) -> float | None:
    """The value of a one-element constant, or of ``CastLike(constant, x)`` (the ONNX functions'
    spelling of a typed constant), else None."""
    c = ix.scalar(value)
    if c is not None:
        return c
    n = ix.producers.get(value)
    return ix.scalar(n.inputs[0]) if is_op(n, "CastLike") and n is not None else None


def _masked_rows_guard(ix: GraphIndex, p: str, mask: str) -> list[Node]:
    """``[(CastLike(0, p),) Where(Equal(ReduceMax(mask, [-1], keepdims=1), -inf), 0, p)]`` when those
    are ``p``'s only readers (ONNX Attention-23's function body: a row the mask hides entirely gives
    zeros; its typed 0 is a CastLike reading only ``p``'s dtype), else []."""
    users = ix.consumers.get(p, [])
    where = next((u for u in users if is_op(u, "Where")), None)
    if where is None or p in ix.outputs or where.inputs[2] != p or _const_of(ix, where.inputs[1]) != 0.0:
        return []
    typed = [u for u in users if u is not where]
    if len(typed) > 1 or any(not is_op(u, "CastLike") or u.inputs[0] == p or u.outputs[0] != where.inputs[1]
                             or ix.sole_consumer(u.outputs[0]) is not where for u in typed):
        return []
    eq = ix.producers.get(where.inputs[0])
    if not is_op(eq, "Equal") or eq is None:
        return []
    rmax = next((ix.producers.get(i) for i in eq.inputs if is_op(ix.producers.get(i), "ReduceMax")), None)
    other = [i for i in eq.inputs if ix.producers.get(i) is not rmax]
    if rmax is None or len(other) != 1 or _const_of(ix, other[0]) != float("-inf") or rmax.inputs[0] != mask:
        return []
    md = ix.desc(mask)
    axes = reduce_axes(ix, rmax)
    if axes is None or len(axes) != 1 or md is None or md.rank is None or axes[0] % md.rank != md.rank - 1 \
            or not int(rmax.attrs.get("keepdims", 1)):
        return []
    return [*typed, where]


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} attention blocks fused", missed)
