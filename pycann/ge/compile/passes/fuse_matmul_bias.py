"""MatMulBiasActivationFusion: MatMul [+ Add(bias)] [+ Add(residual)] [+ activation] ->
pycann.FusedMatMul with inputs ``[A, B, bias, residual]``.

Check: single readers along the chain; the bias broadcasts into the MatMul output without
enlarging it (typically a constant [N] vector); the residual (a transformer block's
``LayerNorm(x + Dense(h))``) has exactly the output's shape and dtype (float32 / float64), so
the bound oneDNN kernel takes it as a binary-add post-op without broadcasting; activations as
in ConvActivationFusion, plus Gelu (erf or tanh form: GPT-2's gelu_new). As for FusedConv, the activation comes last:
``act(A @ B + bias + residual)``; an activation between the bias and the residual Add ends the
chain before the residual (that Add stays a separate node).

Exported transformers compute their hidden shapes at run time (Shape -> Reshape), so at
compile time the two Add operands are often ``?x?x384``: not provably one shape. The pass also
anchors at a FusedMatMul without residual and activation, so that run-time specialisation
(``specialize.specialize``: concrete input shapes, SPECIALIZE_PIPELINE) absorbs the residual Add
then.
"""

from __future__ import annotations

from pycann.dtypes import TensorDesc
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.fuse_conv_act import match_activation
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node
from pycann.ops.fused import DOMAIN
from pycann.ops.shape_utils import broadcast_shapes

name = "MatMulBiasActivationFusion"


def _gelu(ix: GraphIndex, value: str) -> tuple[list[Node], str, str] | None:
    """(the Gelu node, its output, the fused activation: "Gelu" for the erf form, "GeluTanh")."""
    n = ix.sole_consumer(value)
    if not is_op(n, "Gelu") or n is None:
        return None
    approx = n.attrs.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    act = {"none": "Gelu", "tanh": "GeluTanh"}.get(approx)
    return None if act is None else ([n], n.outputs[0], act)


def _same_shape(dy: TensorDesc, do: TensorDesc) -> bool:
    """Both shapes fully known (ints, or the same named symbols) and equal: no broadcasting."""
    return dy.shape is not None and dy.shape == do.shape and all(d is not None for d in dy.shape)


def _residual(ix: GraphIndex, value: str, add: Node) -> tuple[str, str]:
    """(other operand, '') when ``Add(value, z)`` can be the residual post-op, else ('', reason)."""
    z = ix.other_input(add, value)
    if not z:
        return "", "Add reads the MatMul result twice"
    dy, dz = ix.desc(value), ix.desc(z)
    if dy is None or dz is None or dy.shape is None or dz.shape is None:
        return "", "residual shape is unknown"
    if dz.dtype != dy.dtype:
        return "", f"residual {dz} has another dtype than the MatMul output {dy}"
    if _same_shape(dy, dz):
        return z, ""
    if dy.is_static and dz.is_static:
        return "", f"residual {dz} is not the MatMul output's shape {dy} (it would broadcast)"
    return "", (f"residual {dz} and the MatMul output {dy} are not known to have one shape "
                "(tried again when the plan is specialised to concrete input shapes)")


def _bias(ix: GraphIndex, g: Graph, y: str, add: Node) -> tuple[str, str, str]:
    """The role of ``Add(y, other)`` right after the MatMul: ("bias" | "residual" | "", other,
    reason). A computed operand of exactly the output's shape is the residual (no bias then)."""
    dy = ix.desc(y)
    other = ix.other_input(add, y)
    do = ix.desc(other) if other else None
    if not other or dy is None or do is None or do.shape is None or do.dtype != dy.dtype:
        return "", "", "bias would enlarge or change the MatMul output"
    if other not in g.initializers and _same_shape(dy, do):
        return "residual", other, ""
    try:
        if broadcast_shapes(dy.shape, do.shape) == dy.shape and len(do.shape) <= len(dy.shape):  # type: ignore[arg-type]
            return "bias", other, ""
    except ValueError:
        pass
    if not (dy.is_static and do.is_static) and len(do.shape) <= len(dy.shape):  # type: ignore[arg-type]
        return "", "", (f"Add operand {do} is not known to fit the MatMul output {dy} (tried again when "
                        "the plan is specialised to concrete input shapes)")
    return "", "", "bias would enlarge or change the MatMul output"


def fuse(g: Graph) -> tuple[int, int, list[str]]:
    """Rewrite every matching chain; returns (chains fused, of which with a residual, missed reasons)."""
    ix = GraphIndex(g)
    rw = Rewrites(g)
    with_residual = 0
    for mm in list(g.nodes):
        extend = mm.domain == DOMAIN and mm.op_type == "FusedMatMul" and not mm.attrs.get("activation") \
            and not (len(mm.inputs) > 3 and mm.inputs[3])  # a fused chain that can still take a residual
        if not (is_op(mm, "MatMul") or extend) or rw.taken(mm):
            continue
        y = mm.outputs[0]
        dy = ix.desc(y)
        if dy is None or dy.shape is None or dy.dtype not in (1, 11):
            continue  # float32/float64 only: in-place bias/activation keeps the dtype
        matched: list[Node] = [mm]
        bias = mm.inputs[2] if extend and len(mm.inputs) > 2 else ""
        residual = ""
        out = y
        add = ix.sole_consumer(y)
        if not extend and is_op(add, "Add") and add is not None:
            role, other, why = _bias(ix, g, y, add)
            if role:
                matched.append(add)
                out = add.outputs[0]
                bias, residual = (other, "") if role == "bias" else ("", other)
            else:
                rw.missed.append(f"{mm.name}+{add.name}: {why}")
        if not residual:
            res_add = ix.sole_consumer(out)
            # the residual Add: after the bias (or right after a fused chain); with neither, the
            # Add above was already taken as the bias or the residual
            if (bias or extend) and is_op(res_add, "Add") and res_add is not None:
                z, why = _residual(ix, out, res_add)
                if z:
                    residual = z
                    matched.append(res_add)
                    out = res_add.outputs[0]
                else:
                    rw.missed.append(f"{mm.name}+{res_add.name}: {why}")
        if extend and not residual:
            continue  # nothing new for a fused chain
        act_name, alpha, beta = "", 0.0, 0.0
        gelu = _gelu(ix, out)
        if gelu is not None:
            matched.extend(gelu[0])
            out, act_name = gelu[1], gelu[2]
        else:
            act = match_activation(ix, out)
            if not isinstance(act, str):
                nodes, act_name, alpha, beta, out = act
                matched.extend(nodes)
        if len(matched) == 1 or rw.taken(*matched):
            continue
        inputs = [mm.inputs[0], mm.inputs[1], bias] + ([residual] if residual else [])
        attrs = dict(mm.attrs) if extend else {}  # keeps a kernel choice (_algo) made before
        attrs.update(activation=act_name, act_alpha=alpha, act_beta=beta)
        fused = Node("FusedMatMul", inputs, [out], attrs, name=mm.name if extend else f"{mm.name}_fused",
                     domain=DOMAIN, opset=1)
        rw.replace(matched, [fused])
        with_residual += bool(residual)
    rw.commit()
    return rw.applied, with_residual, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, res, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} MatMul chains fused ({res} with a residual Add)", missed)
