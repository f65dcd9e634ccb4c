"""QuantizedConvFusion: a QDQ convolution -> one ``pycann.QuantConv`` (INT8 kernel where exact).

Pattern (what AMCT's deploy model, ONNX Runtime's quantiser and NNCF write):

    x -> QuantizeLinear(s, zp) -> DequantizeLinear(s, zp) -> Conv(., DequantizeLinear(W_int8, ws), B) [-> Relu]

with ``B`` a float constant or ``DequantizeLinear(B_int32, bs)``. Check (a failed check is
reported by ``atc --log=info``): constant per-tensor activation scale and zero point, equal in
the Q and DQ; an int8 constant weight with zero zero points and scales per output channel
(``axis=0``) or one scale; a 2-D conv; the Relu read only by... the conv's output read only by the
Relu. A ``Clip`` with constant bounds read only by the QuantizeLinear is absorbed as a clamp of the
quantised values (``q_min``/``q_max``); ``seven_bit`` is set when that keeps them <= 127 (AMCT's
``reduce_range``), which makes the int8 kernel exact on CPUs without VNNI. The Q/DQ nodes stay for any other reader (dead-code elimination
removes them otherwise). Runs before ConstantFolding, which would turn the weight's DQ into float.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.ir import Graph, Node
from pycann.ge.passes.base import PassContext, PassResult
from pycann.ge.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ops.quant_conv import DOMAIN, quantize_activation

name = "QuantizedConvFusion"


def _same(ix: GraphIndex, a: str, b: str) -> bool:
    ca, cb = ix.const(a), ix.const(b)
    return a == b or (ca is not None and cb is not None and ca.dtype == cb.dtype and np.array_equal(ca, cb))


def _activation_qdq(ix: GraphIndex, value: str) -> tuple[str, float, int, bool, Node] | str:
    """(x, scale, zero point, unsigned, Q node) of a ``DQ(Q(x))`` feeding a conv, or why not."""
    dq = ix.producers.get(value)
    if not is_op(dq, "DequantizeLinear") or dq is None:
        return "input is not a DequantizeLinear"
    q = ix.producers.get(dq.inputs[0])
    if not is_op(q, "QuantizeLinear") or q is None:
        return "the activation's DequantizeLinear does not read a QuantizeLinear"
    if len(q.inputs) < 3 or len(dq.inputs) < 3 or not q.inputs[2]:
        return "activation QuantizeLinear without a zero point (float8 or default int8 handled as float)"
    s, zp = ix.const(q.inputs[1]), ix.const(q.inputs[2])
    if s is None or zp is None or s.size != 1 or zp.size != 1:
        return "activation scale / zero point are not constant per-tensor values"
    if not (_same(ix, q.inputs[1], dq.inputs[1]) and _same(ix, q.inputs[2], dq.inputs[2])):
        return "QuantizeLinear and DequantizeLinear use different scales or zero points"
    if zp.dtype not in (np.uint8, np.int8) or float(s.reshape(-1)[0]) <= 0:
        return f"activation zero point dtype {zp.dtype} / scale {float(s.reshape(-1)[0])} not int8 / positive"
    return q.inputs[0], float(s.reshape(-1)[0]), int(zp.reshape(-1)[0]), zp.dtype == np.uint8, q


def _weight(ix: GraphIndex, value: str, m_hint: int | None) -> tuple[str, np.ndarray] | str:
    """(int8 weight initializer name, per-channel scales) of ``DQ(W_int8, ws, 0)``, or why not."""
    dq = ix.producers.get(value)
    if not is_op(dq, "DequantizeLinear") or dq is None:
        return "weight is not a DequantizeLinear of an int8 constant"
    w, ws = ix.const(dq.inputs[0]), ix.const(dq.inputs[1])
    if w is None or w.dtype != np.int8 or ws is None or ws.dtype != np.float32:
        return "weight DequantizeLinear does not read an int8 constant with float32 scales"
    if len(dq.inputs) > 2 and dq.inputs[2]:
        wzp = ix.const(dq.inputs[2])
        if wzp is None or np.any(wzp != 0):
            return "weight zero point is not a constant 0"
    m = w.shape[0]
    if ws.size != 1 and not (ws.ndim == 1 and ws.size == m and int(dq.attrs.get("axis", 1)) == 0):
        return f"weight scales of shape {list(ws.shape)} are not per-tensor or per output channel (axis 0)"
    if np.any(ws <= 0) or not np.all(np.isfinite(ws)):
        return "weight scales must be positive and finite"
    return dq.inputs[0], np.broadcast_to(ws.reshape(-1), (m,)).astype(np.float32)


def _bias(ix: GraphIndex, conv: Node) -> np.ndarray | None | str:
    if len(conv.inputs) < 3 or not conv.inputs[2]:
        return None
    b = ix.const(conv.inputs[2])
    if b is not None:
        return b.astype(np.float32) if b.dtype == np.float32 else "bias constant is not float32"
    dq = ix.producers.get(conv.inputs[2])
    if not is_op(dq, "DequantizeLinear") or dq is None:
        return "bias is neither a constant nor a DequantizeLinear of one"
    bi, bs = ix.const(dq.inputs[0]), ix.const(dq.inputs[1])
    bz = ix.const(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
    if bi is None or bs is None or bi.dtype != np.int32 or (len(dq.inputs) > 2 and dq.inputs[2] and bz is None):
        return "bias DequantizeLinear does not read int32 constants"
    d = bi.astype(np.int64) - (0 if bz is None else bz.astype(np.int64))
    return (d.astype(np.float32) * bs.astype(np.float32)).astype(np.float32)


def _absorbed_clip(ix: GraphIndex, x: str, q: Node, scale: float, zp: int,
                   unsigned: bool) -> tuple[str, int, int] | None:
    """For ``Clip(v, lo, hi) -> QuantizeLinear`` with constant bounds and the Clip read only by the
    QuantizeLinear: (v, quantize(lo), quantize(hi)), the clamp that replaces the Clip."""
    clip = ix.producers.get(x)
    if not is_op(clip, "Clip") or clip is None or len(clip.inputs) < 3 or not clip.inputs[1] or not clip.inputs[2]:
        return None
    if ix.sole_consumer(x) is not q:
        return None
    lo, hi = ix.scalar(clip.inputs[1]), ix.scalar(clip.inputs[2])
    if lo is None or hi is None or not lo <= hi:
        return None
    qb = quantize_activation(np.array([lo, hi], np.float32), scale, zp, unsigned)
    return clip.inputs[0], int(qb[0]), int(qb[1])


def _match(ix: GraphIndex, g: Graph, conv: Node) -> tuple[list[Node], Node] | str:
    act = _activation_qdq(ix, conv.inputs[0])
    if isinstance(act, str):
        return act
    x, s, zp, unsigned, q = act
    q_min, q_max = -1000, 1000
    absorbed: list[Node] = []
    clip = _absorbed_clip(ix, x, q, s, zp, unsigned)
    if clip is not None:
        absorbed = [ix.producers[x]]
        x, q_min, q_max = clip
    if len(conv.inputs) < 2:
        return "conv without a weight"
    w = _weight(ix, conv.inputs[1], None)
    if isinstance(w, str):
        return w
    w_name, ws = w
    wt = ix.const(w_name)
    if wt is None or wt.ndim != 4:
        return "only 2-D convolutions"
    b = _bias(ix, conv)
    if isinstance(b, str):
        return b
    if b is not None and b.shape != (wt.shape[0],):
        return f"bias of shape {list(b.shape)} for {wt.shape[0]} output channels"
    nodes = [*absorbed, conv]
    out = conv.outputs[0]
    activation = ""
    relu = ix.sole_consumer(out)
    if is_op(relu, "Relu") and relu is not None:
        nodes.append(relu)
        out = relu.outputs[0]
        activation = "Relu"
    ins = [x, w_name]
    if b is not None:
        b_name = g.fresh_name(f"{conv.name}_qbias")
        b.flags.writeable = False
        g.initializers[b_name] = b
        ins.append(b_name)
    attrs = {k: v for k, v in conv.attrs.items() if not k.startswith("_")}
    attrs.update(x_scale=s, x_zero_point=zp, x_unsigned=int(unsigned), w_scale=[float(v) for v in ws],
                 activation=activation, seven_bit=int(unsigned and q_max <= 127), q_min=q_min, q_max=q_max)
    return nodes, Node("QuantConv", ins, [out], attrs, name=f"{conv.name}_int8", domain=DOMAIN, opset=1)


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for conv in list(g.nodes):
        if not is_op(conv, "Conv") or rw.taken(conv):
            continue
        if not is_op(ix.producers.get(conv.inputs[0]), "DequantizeLinear"):
            continue  # not a QDQ conv: nothing to report
        res = _match(ix, g, conv)
        if isinstance(res, str):
            rw.missed.append(f"{conv.name}: {res}")
            continue
        old, new = res
        rw.replace(old, [new])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} QDQ convs -> QuantConv", missed)
