"""ConvActivationFusion: Conv [+ Add(residual or bias)] [+ activation] -> pycann.FusedConv, and
ConvTranspose + activation -> pycann.FusedConvTranspose.

Pattern: a Conv whose output has one reader; optionally an Add with another operand that
broadcasts into the conv output without enlarging it (a residual branch or a per-channel
bias); optionally an activation (Relu, Clip with constant bounds, Sigmoid, HardSigmoid,
HardSwish, LeakyRelu, Tanh, or Swish written as Mul(y, Sigmoid(y))); after an activation,
optionally a Mul and/or Add of scalar constants (``post_scale``, ``post_shift``: one more
oneDNN post-op, ``linear``).
Check: single readers along the chain, known shapes for the residual, constant Clip bounds.
Rewrite: one FusedConv whose kernel adds the residual and applies the activation in place.
"""

from __future__ import annotations

import math

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, clip_defaults, is_op
from pycann.ge.ir import Graph, Node
from pycann.ops.fused import DOMAIN
from pycann.ops.shape_utils import broadcast_shapes

name = "ConvActivationFusion"

SIMPLE_ACTS = ("Relu", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Tanh", "Clip")


def _clip_bounds(ix: GraphIndex, clip: Node) -> tuple[float | None, float | None]:
    if clip.opset < 11:  # bounds were attributes before opset 11
        return float(clip.attrs.get("min", -3.4e38)), float(clip.attrs.get("max", 3.4e38))
    lo = ix.scalar(clip.inputs[1]) if len(clip.inputs) > 1 and clip.inputs[1] else None
    hi = ix.scalar(clip.inputs[2]) if len(clip.inputs) > 2 and clip.inputs[2] else None
    return lo, hi


def _decomposed_hardswish(ix: GraphIndex, value: str, users: list[Node]) -> tuple[list[Node], str] | None:
    """HardSwish as PaddlePaddle's exporter writes it: Add(y, 3) -> Clip(0, 6) -> Mul(y, .) ->
    Div(., 6) or Mul(., 1/6). Returns (nodes, output) or None."""
    add = next((u for u in users if is_op(u, "Add")), None)
    mul = next((u for u in users if is_op(u, "Mul")), None)
    if add is None or mul is None:
        return None
    three = ix.other_input(add, value)
    if three is None or ix.scalar(three, within=value) != 3.0:
        return None
    clip = ix.sole_consumer(add.outputs[0])
    if not is_op(clip, "Clip") or clip is None or _clip_bounds(ix, clip) != (0.0, 6.0):
        return None
    if ix.sole_consumer(clip.outputs[0]) is not mul or ix.other_input(mul, value) != clip.outputs[0]:
        return None
    last = ix.sole_consumer(mul.outputs[0])
    if last is None or len(last.inputs) != 2 or last.inputs[0] != mul.outputs[0]:
        return None
    k = ix.scalar(last.inputs[1], within=mul.outputs[0])
    if not ((is_op(last, "Div") and k == 6.0) or (is_op(last, "Mul") and k is not None and abs(k - 1 / 6) < 1e-7)):
        return None
    return [add, clip, mul, last], last.outputs[0]


def _shared(users: list[Node]) -> str:
    """Why a conv read by several nodes keeps its activation apart; "" when none of them is an
    activation (nothing was missed: DenseNet's convs read only by Concats)."""
    if not any(is_op(u, *SIMPLE_ACTS, "Sigmoid", "Mul", "Add") for u in users):
        return ""
    readers = ", ".join(u.op_type for u in users)
    return f"output read by {len(users)} nodes ({readers}): an activation or a residual Add fuses only into its sole reader"


def match_activation(ix: GraphIndex, value: str) -> tuple[list[Node], str, float, float, str] | str:
    """Activation reading ``value``: (nodes, name, alpha, beta, output) or a reason string."""
    users = ix.consumers.get(value, [])
    if value in ix.outputs:
        return "value is a graph output"
    # Swish: y * sigmoid(y) -> two readers of y; HardSwish written out: y * Clip(y + 3, 0, 6) / 6
    if len(users) == 2:
        hs = _decomposed_hardswish(ix, value, users)
        if hs is not None:
            return hs[0], "HardSwish", 0.0, 0.0, hs[1]
        sig = next((u for u in users if is_op(u, "Sigmoid")), None)
        mul = next((u for u in users if is_op(u, "Mul")), None)
        if sig is not None and mul is not None and sig.outputs[0] in mul.inputs and value in mul.inputs:
            if ix.sole_consumer(sig.outputs[0]) is mul:
                return [sig, mul], "Swish", 1.0, 0.0, mul.outputs[0]
        return _shared(users)
    if len(users) != 1:
        return _shared(users)
    a = users[0]
    if not is_op(a, *SIMPLE_ACTS):
        return f"next op {a.op_type} is not a fusable activation"
    if a.op_type == "Clip":
        d_lo, d_hi = clip_defaults(ix.desc(a.outputs[0]))  # an omitted bound clips +-inf to the dtype's range
        lo = ix.scalar(a.inputs[1]) if len(a.inputs) > 1 and a.inputs[1] else d_lo
        hi = ix.scalar(a.inputs[2]) if len(a.inputs) > 2 and a.inputs[2] else d_hi
        if lo is None or hi is None:
            return "Clip bounds are not constants"
        if math.isnan(lo) or math.isnan(hi):
            return "a Clip bound is NaN (no bound, as ORT: left to the Clip op)"
        return [a], "Clip", lo, hi, a.outputs[0]
    if a.op_type == "HardSigmoid":
        return [a], "HardSigmoid", float(a.attrs.get("alpha", 0.2)), float(a.attrs.get("beta", 0.5)), a.outputs[0]
    if a.op_type == "LeakyRelu":
        return [a], "LeakyRelu", float(a.attrs.get("alpha", 0.01)), 0.0, a.outputs[0]
    return [a], a.op_type, 0.0, 0.0, a.outputs[0]


def _post_affine(ix: GraphIndex, value: str) -> tuple[list[Node], float, float, str] | None:
    """Mul by a scalar constant and/or Add of one after the activation (PP-LCNetV3's learnable
    affine block behind its HardSwish): (nodes, scale, shift, output) or None."""
    nodes: list[Node] = []
    scale, shift, out = 1.0, 0.0, value
    for op in ("Mul", "Add"):
        nxt = ix.sole_consumer(out)
        if not is_op(nxt, op) or nxt is None:
            continue
        other = ix.other_input(nxt, out)
        c = ix.const(other) if other else None
        d = ix.desc(out)
        if c is None or c.size != 1 or c.dtype.kind != "f" or d is None or c.dtype != _np_dtype(d):
            break
        if c.ndim > len(d.shape or ()):
            break  # would enlarge the rank
        v = float(c.reshape(-1)[0])
        if op == "Mul":
            scale = v
        else:
            shift = v
        nodes.append(nxt)
        out = nxt.outputs[0]
    return (nodes, scale, shift, out) if nodes else None


def _np_dtype(d: object) -> object:
    from pycann.dtypes import to_numpy

    try:
        return to_numpy(d.dtype)  # type: ignore[attr-defined]
    except (KeyError, ValueError, TypeError):
        return None


def _residual(ix: GraphIndex, conv: Node, add: Node) -> str | tuple[str, str]:
    """(other operand, reason '') if Add(conv_out, z) can be done in place on conv_out."""
    y = conv.outputs[0]
    z = ix.other_input(add, y)
    if z is None:
        return "Add reads the conv output twice"
    dy, dz = ix.desc(y), ix.desc(z)
    if dy is None or dz is None or dy.shape is None or dz.shape is None:
        return "shape of the Add operand is unknown"
    try:
        if broadcast_shapes(dy.shape, dz.shape) != dy.shape or len(dz.shape) > len(dy.shape):
            return f"Add operand {dz} would enlarge the conv output {dy}"
    except ValueError:
        return "Add operand does not broadcast"
    off = len(dy.shape) - len(dz.shape)
    if any(isinstance(d, str) and dy.shape[off + i] is None for i, d in enumerate(dz.shape)):
        # (broadcast_shapes reads an unknown conv dim beside a named one as that unknown dim: an input
        # of H = 4 added to a conv output of H = 1 would enlarge it, which the fused op refuses)
        return f"Add operand {dz} is not known to fit the conv output {dy}"
    if dz.dtype != dy.dtype:
        return "Add operand has another dtype"
    return z, ""


def _fuse_transpose(ix: GraphIndex, rw: Rewrites, deconv: Node) -> None:
    """ConvTranspose -> activation -> one FusedConvTranspose (its bias stays its input 2; an
    Add of a per-channel constant after it was already folded into that bias by
    ConvScaleBiasFold, and a residual Add is left alone)."""
    act = match_activation(ix, deconv.outputs[0])
    if isinstance(act, str):
        if act and "not a fusable" not in act and "graph output" not in act:
            rw.missed.append(f"{deconv.name}: {act}")
        return
    nodes, act_name, alpha, beta, out = act
    if rw.taken(deconv, *nodes):
        return
    bias = deconv.inputs[2] if len(deconv.inputs) > 2 else ""
    attrs = dict(deconv.attrs)
    attrs.update(activation=act_name, act_alpha=alpha, act_beta=beta)
    fused = Node("FusedConvTranspose", [deconv.inputs[0], deconv.inputs[1], bias], [out], attrs,
                 name=f"{deconv.name}_fused", domain=DOMAIN, opset=1)
    rw.replace([deconv, *nodes], [fused])


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for conv in list(g.nodes):
        if is_op(conv, "ConvTranspose") and not rw.taken(conv):
            _fuse_transpose(ix, rw, conv)
            continue
        if not is_op(conv, "Conv") or rw.taken(conv):
            continue
        y = conv.outputs[0]
        matched: list[Node] = [conv]
        z = ""
        out = y
        nxt = ix.sole_consumer(y)
        if is_op(nxt, "Add") and nxt is not None:
            r = _residual(ix, conv, nxt)
            if isinstance(r, str):
                rw.missed.append(f"{conv.name}+{nxt.name}: {r}")
            else:
                z = r[0]
                matched.append(nxt)
                out = nxt.outputs[0]
        act = match_activation(ix, out)
        act_name, alpha, beta = "", 0.0, 0.0
        if isinstance(act, str):
            if len(matched) == 1:
                if act and "not a fusable" not in act and "graph output" not in act:
                    rw.missed.append(f"{conv.name}: {act}")
                continue
        else:
            nodes, act_name, alpha, beta, out = act
            matched.extend(nodes)
        scale, shift = 1.0, 0.0
        if act_name:
            aff = _post_affine(ix, out)
            if aff is not None:
                matched.extend(aff[0])
                scale, shift, out = aff[1], aff[2], aff[3]
        if rw.taken(*matched):
            continue
        bias = conv.inputs[2] if len(conv.inputs) > 2 else ""
        attrs = dict(conv.attrs)
        attrs.update(activation=act_name, act_alpha=alpha, act_beta=beta)
        if (scale, shift) != (1.0, 0.0):
            attrs.update(post_scale=scale, post_shift=shift)
        fused = Node("FusedConv", [conv.inputs[0], conv.inputs[1], bias, z], [out], attrs,
                     name=f"{conv.name}_fused", domain=DOMAIN, opset=1)
        rw.replace(matched, [fused])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} Conv / ConvTranspose chains fused", missed)
