"""MatMulBiasActivationFusion: MatMul [+ Add(bias)] [+ activation] -> pycann.FusedMatMul.

Check: single readers; the bias broadcasts into the MatMul output without enlarging it
(typically a constant [N] vector); activations as in ConvActivationFusion, plus Gelu.
"""

from __future__ import annotations

from pycann.ge.ir import Graph, Node
from pycann.ge.passes.base import PassContext, PassResult
from pycann.ge.passes.fuse_conv_act import match_activation
from pycann.ge.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ops.fused import DOMAIN
from pycann.ops.shape_utils import broadcast_shapes

name = "MatMulBiasActivationFusion"


def _gelu(ix: GraphIndex, value: str) -> tuple[list[Node], str] | None:
    n = ix.sole_consumer(value)
    if is_op(n, "Gelu") and n is not None and n.attrs.get("approximate", "none") == "none":
        return [n], n.outputs[0]
    return None


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for mm in list(g.nodes):
        if not is_op(mm, "MatMul") or rw.taken(mm):
            continue
        y = mm.outputs[0]
        dy = ix.desc(y)
        if dy is None or dy.shape is None or dy.dtype not in (1, 11):
            continue  # float32/float64 only: in-place bias/activation keeps the dtype
        matched: list[Node] = [mm]
        bias = ""
        out = y
        add = ix.sole_consumer(y)
        if is_op(add, "Add") and add is not None:
            other = ix.other_input(add, y)
            do = ix.desc(other) if other else None
            ok = False
            if do is not None and do.shape is not None and do.dtype == dy.dtype:
                try:
                    ok = broadcast_shapes(dy.shape, do.shape) == dy.shape and len(do.shape) <= len(dy.shape)
                except ValueError:
                    ok = False
            if ok and other:
                bias = other
                matched.append(add)
                out = add.outputs[0]
            else:
                rw.missed.append(f"{mm.name}+{add.name}: bias would enlarge or change the MatMul output")
        act_name, alpha, beta = "", 0.0, 0.0
        gelu = _gelu(ix, out)
        if gelu is not None:
            matched.extend(gelu[0])
            out, act_name = gelu[1], "Gelu"
        else:
            act = match_activation(ix, out)
            if not isinstance(act, str):
                nodes, act_name, alpha, beta, out = act
                matched.extend(nodes)
        if len(matched) == 1 or rw.taken(*matched):
            continue
        fused = Node("FusedMatMul", [mm.inputs[0], mm.inputs[1], bias], [out],
                     {"activation": act_name, "act_alpha": alpha, "act_beta": beta},
                     name=f"{mm.name}_fused", domain=DOMAIN, opset=1)
        rw.replace(matched, [fused])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} MatMul chains fused", missed)
