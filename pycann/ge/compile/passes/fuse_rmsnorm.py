"""RMSNormFusion: RMS normalisation as PyTorch exports it (LLaMA-style ``x * rsqrt(mean(x^2) + eps)
* w``, ``torch.nn.RMSNorm``) -> RMSNormalization (opset 23).

Pattern: p = Pow(x, 2) | Mul(x, x); m = ReduceMean(p, [-1], keepdims=1); s = Sqrt(Add(m, eps));
n = Div(x, s) | Mul(x, Reciprocal(s)) | Mul(x, Div(1, s)); [y = Mul(n, w) | Mul(w, n)].
Check: the mean over the last axis only; exponent 2; eps a scalar constant; every intermediate
read once; w a constant of shape exactly [C] (C = last dim) - a weight broadcasting over other
dims is not the norm's scale and does not fuse.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op, reduce_axes
from pycann.ge.ir import Graph, Node

name = "RMSNormFusion"


def _squared(ix: GraphIndex, p: Node | None) -> str | None:
    """x for p = Pow(x, 2) or Mul(x, x), else None."""
    if is_op(p, "Pow") and p is not None and ix.scalar(p.inputs[1], within=p.inputs[0]) == 2.0:
        return p.inputs[0]
    if is_op(p, "Mul") and p is not None and len(p.inputs) == 2 and p.inputs[0] == p.inputs[1]:
        return p.inputs[0]
    return None


def _normalised(ix: GraphIndex, x: str, s: str) -> tuple[list[Node], str] | None:
    """The nodes computing x / s (Div, or Mul by Reciprocal(s) / Div(1, s)) and their output."""
    user = ix.sole_consumer(s)
    if is_op(user, "Div") and user is not None and user.inputs == [x, s]:
        return [user], user.outputs[0]
    inv = None
    if is_op(user, "Reciprocal") and user is not None:
        inv = user
    elif is_op(user, "Div") and user is not None and user.inputs[1] == s and ix.scalar(user.inputs[0], within=s) == 1.0:
        inv = user
    if inv is None:
        return None
    mul = ix.sole_consumer(inv.outputs[0])
    if is_op(mul, "Mul") and mul is not None and ix.other_input(mul, inv.outputs[0]) == x:
        return [inv, mul], mul.outputs[0]
    return None


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for m in list(g.nodes):
        if not is_op(m, "ReduceMean") or rw.taken(m):
            continue
        p = ix.producers.get(m.inputs[0])
        x = _squared(ix, p)
        if x is None or p is None or ix.sole_consumer(p.outputs[0]) is not m:
            continue  # not a mean of squares: LayerNormFusion's or nobody's
        dx = ix.desc(x)
        rank = dx.rank if dx is not None else None
        axes = reduce_axes(ix, m)
        if rank is None or axes is None or len(axes) != 1 or axes[0] % rank != rank - 1 \
                or not int(m.attrs.get("keepdims", 1)):
            rw.missed.append(f"{m.name}: mean of squares is not over the last axis only (keepdims)")
            continue
        add = ix.sole_consumer(m.outputs[0])
        eps = ix.scalar(ix.other_input(add, m.outputs[0]) or "", within=m.outputs[0]) if is_op(add, "Add") and add else None
        sq = ix.sole_consumer(add.outputs[0]) if add is not None else None
        if eps is None or add is None or not is_op(sq, "Sqrt") or sq is None:
            rw.missed.append(f"{m.name}: no sqrt(mean + eps) with a constant eps")
            continue
        norm = _normalised(ix, x, sq.outputs[0])
        if norm is None:
            rw.missed.append(f"{m.name}: x is not divided by sqrt(mean(x^2) + eps)")
            continue
        nodes = [p, m, add, sq, *norm[0]]
        out = norm[1]
        c = dx.shape[-1] if dx is not None and dx.shape else None
        scale = None
        mul = ix.sole_consumer(out)
        if is_op(mul, "Mul") and mul is not None:
            wname = ix.other_input(mul, out) or ""
            wv = ix.const(wname)
            if wv is not None and wv.shape == (c,):
                scale, out = wname, mul.outputs[0]
                nodes.append(mul)
            elif wv is not None:
                rw.missed.append(f"{m.name}: weight {wv.shape} is not a [C] = [{c}] constant")
                continue
        if not isinstance(c, int) or rw.taken(*nodes):
            continue
        if scale is None:
            d = dx.dtype if dx is not None else 1
            scale = g.fresh_name(f"{m.name}_rms_scale")
            g.initializers[scale] = np.ones(c, dtype=np.float64 if d == 11 else np.float16 if d == 10 else np.float32)
        rms = Node("RMSNormalization", [x, scale], [out], {"axis": -1, "epsilon": float(eps)},
                   name=f"{m.name}_rmsnorm", opset=23)
        rw.replace(nodes, [rms])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} RMS norms fused", missed)
