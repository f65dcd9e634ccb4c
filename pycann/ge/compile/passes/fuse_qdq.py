"""QuantizedConvFusion: a QDQ convolution -> one ``pycann.QuantConv``, a QDQ MatMul / Gemm with a
constant weight -> one ``pycann.QuantMatMul`` (INT8 kernels where exact).

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

A ``DequantizeLinear`` of an already quantised tensor (no QuantizeLinear before it: a QOperator
model's MaxPool / Flatten on uint8, after QOperatorToQDQ) is read as it is: the fused layer takes
the uint8 tensor. ``narrow_w`` is set when every weight lies in [-64, 64] (ONNX Runtime's
``reduce_range``), which also makes the int8 kernel exact without VNNI.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.ge.compile.passes import fuse_qdq_chain, int8_choice
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.fuse_qdq_float import range_clip
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op, rename_uses
from pycann.ge.compile.passes.select_kernels import approx_allowed
from pycann.ge.ir import Graph, Node
from pycann.ops.quant_conv import DOMAIN, narrow_weights, quantize_activation

name = "QuantizedConvFusion"


def _same(ix: GraphIndex, a: str, b: str) -> bool:
    ca, cb = ix.const(a), ix.const(b)
    return a == b or (ca is not None and cb is not None and ca.dtype == cb.dtype and np.array_equal(ca, cb))


def _activation_qdq(ix: GraphIndex, value: str) -> tuple[str, float, int, bool, Node | None] | str:
    """(x, scale, zero point, unsigned, Q node) of a ``DQ(Q(x))`` feeding a conv, or (q, ..., None)
    of a ``DQ(q)`` of an already quantised value, or why not."""
    dq = ix.producers.get(value)
    if not is_op(dq, "DequantizeLinear") or dq is None:
        return "input is not a DequantizeLinear"
    q = ix.producers.get(dq.inputs[0])
    if not is_op(q, "QuantizeLinear") or q is None:
        return _quantised_input(ix, dq)
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


def _quantised_input(ix: GraphIndex, dq: Node) -> tuple[str, float, int, bool, None] | str:
    """(q, scale, zero point, unsigned, None) for ``DequantizeLinear(q)`` of an already quantised
    activation (a QOperator model's MaxPool / Flatten on uint8): the layer reads ``q`` itself."""
    if len(dq.inputs) < 3 or not dq.inputs[2]:
        return "activation DequantizeLinear without a zero point"
    s, zp = ix.const(dq.inputs[1]), ix.const(dq.inputs[2])
    if s is None or zp is None or s.size != 1 or zp.size != 1:
        return "activation scale / zero point are not constant per-tensor values"
    if zp.dtype not in (np.uint8, np.int8) or float(s.reshape(-1)[0]) <= 0:
        return f"activation zero point dtype {zp.dtype} / scale {float(s.reshape(-1)[0])} not int8 / positive"
    return dq.inputs[0], float(s.reshape(-1)[0]), int(zp.reshape(-1)[0]), zp.dtype == np.uint8, None


def _weight(ix: GraphIndex, value: str, out_axis: int = 0) -> tuple[str, np.ndarray] | str:
    """(int8 weight initializer name, per-output-channel scales) of ``DQ(W_int8, ws, 0)`` whose
    output channels lie along ``out_axis``, or why not."""
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
    if w.ndim <= out_axis:
        return f"weight of rank {w.ndim}"
    m = w.shape[out_axis]
    axis = int(dq.attrs.get("axis", 1))
    if ws.size != 1 and not (ws.ndim == 1 and ws.size == m and axis % w.ndim == out_axis):
        return (f"weight scales of shape {list(ws.shape)} are not per-tensor or per output channel "
                f"(axis {out_axis})")
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


def _input(ix: GraphIndex, value: str) -> tuple[str, float, int, bool, int, int, list[Node]] | str:
    """The quantised activation of a layer: (x, scale, zero point, unsigned, q_min, q_max, absorbed Clip)."""
    act = _activation_qdq(ix, value)
    if isinstance(act, str):
        return act
    x, s, zp, unsigned, q = act
    clip = None if q is None else _absorbed_clip(ix, x, q, s, zp, unsigned)
    if clip is None:
        return x, s, zp, unsigned, -1000, 1000, []
    return clip[0], s, zp, unsigned, clip[1], clip[2], [ix.producers[x]]


def _residual_add(ix: GraphIndex, value: str) -> tuple[Node, str] | None:
    """(Add, the other input) when ``value`` is read only by an ``Add`` of a float tensor of the
    same static shape (a residual connection, not a broadcast bias): the int8 conv adds it in its
    epilogue (input ``Z``) before the activation."""
    add = ix.sole_consumer(value)
    if not is_op(add, "Add") or add is None or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    other = ix.other_input(add, value)
    if other is None or ix.const(other) is not None:
        return None
    a, b = ix.desc(value), ix.desc(other)
    if a is None or b is None or a.shape is None or b.shape != a.shape or b.dtype != 1 or len(a.shape) != 4:
        return None
    if not all(isinstance(d, int) for d in a.shape[1:]):
        return None
    return add, other


def _activation_clip(ix: GraphIndex, clip: Node) -> tuple[float, float] | None:
    """(lo, hi) of a Clip with constant bounds after a conv (ReLU6), to run in the int8 epilogue;
    None when it is not one, or when a QuantizeLinear reads it (then the next layer absorbs it as
    its quantisation clamp, ``_absorbed_clip``)."""
    if not is_op(clip, "Clip") or len(clip.inputs) != 3 or not clip.inputs[1] or not clip.inputs[2]:
        return None
    if any(is_op(r, "QuantizeLinear") for r in ix.consumers.get(clip.outputs[0], [])):
        return None
    lo, hi = ix.scalar(clip.inputs[1]), ix.scalar(clip.inputs[2])
    return None if lo is None or hi is None or not lo <= hi else (float(lo), float(hi))


def _relu_after(ix: GraphIndex, value: str) -> Node | None:
    relu = ix.sole_consumer(value)
    return relu if is_op(relu, "Relu") else None


def _match_matmul(ix: GraphIndex, g: Graph, mm: Node) -> tuple[list[Node], Node] | str:
    """MatMul(DQ(Q(x)), DQ(W (K, N))) [+ Add(bias (N))] or Gemm(DQ(Q(x)), DQ(W), C) [-> Relu]."""
    act = _input(ix, mm.inputs[0])
    if isinstance(act, str):
        return act
    x, s, zp, unsigned, q_min, q_max, absorbed = act
    nodes = [*absorbed, mm]
    b: np.ndarray | None = None
    if mm.op_type == "Gemm":
        if int(mm.attrs.get("transA", 0)) or float(mm.attrs.get("alpha", 1.0)) != 1.0 or float(mm.attrs.get("beta", 1.0)) != 1.0:
            return "Gemm with transA, alpha or beta other than 0, 1, 1"
        trans_b = int(mm.attrs.get("transB", 0))
        w = _weight(ix, mm.inputs[1], 0 if trans_b else 1)
        if isinstance(w, str):
            return w
        bias = _bias(ix, mm)
        if isinstance(bias, str):
            return bias
        b = bias
    else:
        trans_b = 0
        w = _weight(ix, mm.inputs[1], 1)
        if isinstance(w, str):
            return w
    w_name, ws = w
    wt = ix.const(w_name)
    if wt is None or wt.ndim != 2:
        return "only rank-2 weights"
    n = wt.shape[0] if trans_b else wt.shape[1]
    if b is not None:
        b = b.reshape(-1) if b.size == n else None
        if b is None:
            return "Gemm C does not have one value per output column"
    out = mm.outputs[0]
    if mm.op_type == "MatMul":
        add = ix.sole_consumer(out)
        other = ix.other_input(add, out) if is_op(add, "Add") and add is not None else None
        c = ix.const(other) if other else None
        if add is not None and c is not None and c.dtype == np.float32 and c.size == n and c.shape[-1] == n:
            b = c.reshape(-1).astype(np.float32)
            nodes.append(add)
            out = add.outputs[0]
    activation = ""
    relu = _relu_after(ix, out)
    if relu is not None:
        nodes.append(relu)
        out = relu.outputs[0]
        activation = "Relu"
    w_nk = np.ascontiguousarray(wt if trans_b else wt.T)
    w_nk.flags.writeable = False
    wn = g.fresh_name(f"{mm.name}_w_nk")
    g.initializers[wn] = w_nk
    ins = [x, wn]
    if b is not None:
        bn = g.fresh_name(f"{mm.name}_qbias")
        b = np.array(b, np.float32)
        b.flags.writeable = False
        g.initializers[bn] = b
        ins.append(bn)
    attrs = dict(x_scale=s, x_zero_point=zp, x_unsigned=int(unsigned), w_scale=[float(v) for v in ws],
                 activation=activation, seven_bit=int(unsigned and q_max <= 127), q_min=q_min, q_max=q_max,
                 narrow_w=narrow_weights(w_nk))
    return nodes, Node("QuantMatMul", ins, [out], attrs, name=f"{mm.name}_int8", domain=DOMAIN, opset=1)


def _match(ix: GraphIndex, g: Graph, conv: Node, residual_ok: bool = True) -> tuple[list[Node], Node] | str:
    act = _input(ix, conv.inputs[0])
    if isinstance(act, str):
        return act
    x, s, zp, unsigned, q_min, q_max, absorbed = act
    if len(conv.inputs) < 2:
        return "conv without a weight"
    w = _weight(ix, conv.inputs[1], 0)
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
    residual = _residual_add(ix, out) if residual_ok else None
    if residual is not None:
        nodes.append(residual[0])
        out = residual[0].outputs[0]
    relu = ix.sole_consumer(out)
    clip_bounds: list[float] = []
    if is_op(relu, "Relu") and relu is not None:
        nodes.append(relu)
        out = relu.outputs[0]
        activation = "Relu"
    elif relu is not None and (bounds := _activation_clip(ix, relu)) is not None:
        nodes.append(relu)
        out = relu.outputs[0]
        activation, clip_bounds = "Clip", list(bounds)
    ins = [x, w_name]
    if b is None and residual is not None:
        b = np.zeros(wt.shape[0], np.float32)  # Z is input 3: B must be there
    if b is not None:
        b_name = g.fresh_name(f"{conv.name}_qbias")
        b.flags.writeable = False
        g.initializers[b_name] = b
        ins.append(b_name)
    if residual is not None:
        ins.append(residual[1])
    attrs = {k: v for k, v in conv.attrs.items() if not k.startswith("_")}
    if clip_bounds:
        attrs.update(clip_min=clip_bounds[0], clip_max=clip_bounds[1])
    attrs.update(x_scale=s, x_zero_point=zp, x_unsigned=int(unsigned), w_scale=[float(v) for v in ws],
                 activation=activation, seven_bit=int(unsigned and q_max <= 127), q_min=q_min, q_max=q_max,
                 narrow_w=narrow_weights(wt))
    return nodes, Node("QuantConv", ins, [out], attrs, name=f"{conv.name}_int8", domain=DOMAIN, opset=1)


def _as_fp32(g: Graph, ix: GraphIndex, old: list[Node], q: Node) -> tuple[list[Node], list[Node]]:
    """The float layer for a fused ``q`` that stays fp32 (int8_choice): the float op on the
    dequantised weight, reading the activation before its QuantizeLinear (after a Clip the fused
    layer absorbed: the Clip stays), or a DequantizeLinear of an already quantised one. Returns
    (nodes to remove, new nodes)."""
    # an absorbed Clip may be the model's own activation (ReLU6 = Clip(0, 6) before the next
    # layer's QuantizeLinear: MobileNet, EfficientNet-Lite), not only AMCT's 7-bit range clamp: the
    # float layer must read its output (dropping it changed EfficientNet-Lite0's every top-1), and
    # the QuantizeLinear's own saturation stays too (range_clip)
    # (the absorbed Clip may also be removed by an int8 reader of the same QuantizeLinear: a new
    # Clip of its input, intersected with the quantisation's range, is written instead)
    layer = next(i for i, n in enumerate(old) if n.op_type in ("Conv", "MatMul", "Gemm"))
    clips = [n for n in old[:layer] if n.op_type == "Clip"]  # before the layer: its input's (after: its activation)
    x = q.inputs[0]
    new: list[Node] = []
    desc = ix.desc(x)
    if desc is None or desc.dtype not in (2, 3):  # the QuantizeLinear's saturation stays (see range_clip)
        bounds = (ix.scalar(clips[0].inputs[1]), ix.scalar(clips[0].inputs[2])) if clips else None
        nodes, x = range_clip(g, ix, x, float(q.attrs["x_scale"]), int(q.attrs["x_zero_point"]),
                               bool(q.attrs.get("x_unsigned", 1)), f"{q.name}_x", bounds)
        new.extend(nodes)
    if desc is not None and desc.dtype in (2, 3):  # uint8 / int8: an already quantised activation
        s = g.fresh_name(f"{q.name}_x_scale")
        z = g.fresh_name(f"{q.name}_x_zero_point")
        g.initializers[s] = np.array(q.attrs["x_scale"], np.float32)
        g.initializers[z] = np.array(q.attrs["x_zero_point"], np.uint8 if desc.dtype == 2 else np.int8)
        xf = g.fresh_name(f"{q.name}_x_dq")
        new.append(Node("DequantizeLinear", [x, s, z], [xf], {}, name=f"{q.name}_dq", opset=13))
        x = xf
    w = ix.const(q.inputs[1])
    assert w is not None
    ws = np.asarray(q.attrs["w_scale"], np.float32).reshape((-1,) + (1,) * (w.ndim - 1))
    wf = (w.astype(np.float32) * ws).astype(np.float32)
    if q.op_type == "QuantMatMul":
        wf = np.ascontiguousarray(wf.T)
    wn = g.fresh_name(f"{q.name}_w_fp32")
    wf.flags.writeable = False
    g.initializers[wn] = wf
    act = q.attrs.get("activation") in ("Relu", "Clip")
    out = q.outputs[0]
    y = g.fresh_name(f"{q.name}_fp32") if act else out
    if q.op_type == "QuantConv":
        attrs: dict[str, Any] = {k: q.attrs[k] for k in ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape")
                 if k in q.attrs and q.attrs[k] not in ([], None)}
        new.append(Node("Conv", [x, wn, *q.inputs[2:3]], [y], attrs, name=f"{q.name}_fp32", opset=13))
    else:
        mm = g.fresh_name(f"{q.name}_mm") if len(q.inputs) > 2 else y
        new.append(Node("MatMul", [x, wn], [mm], {}, name=f"{q.name}_fp32", opset=13))
        if len(q.inputs) > 2:
            new.append(Node("Add", [mm, q.inputs[2]], [y], {}, name=f"{q.name}_bias", opset=13))
    if q.attrs.get("activation") == "Clip":
        lo, hi = g.fresh_name(f"{q.name}_clip_lo"), g.fresh_name(f"{q.name}_clip_hi")
        g.initializers[lo] = np.array(q.attrs["clip_min"], np.float32)
        g.initializers[hi] = np.array(q.attrs["clip_max"], np.float32)
        new.append(Node("Clip", [y, lo, hi], [out], {}, name=f"{q.name}_clip", opset=13))
    elif act:
        new.append(Node("Relu", [y], [out], {}, name=f"{q.name}_relu", opset=13))
    return old, new


def fuse(g: Graph, fp32_fallback: frozenset[str] = frozenset({"QuantConv", "QuantMatMul"})) -> tuple[int, list[str]]:
    """Fuse every matching QDQ layer; the layers of the op types in ``fp32_fallback`` that
    ``int8_choice`` keeps fp32 become float layers. Returns (fused count, one line per layer left or kept fp32, with why)."""
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for conv in list(g.nodes):
        if not is_op(conv, "Conv", "MatMul", "Gemm") or rw.taken(conv) or len(conv.inputs) < 2:
            continue
        if not is_op(ix.producers.get(conv.inputs[0]), "DequantizeLinear"):
            continue  # not a QDQ layer: nothing to report
        if not is_op(ix.producers.get(conv.inputs[1]), "DequantizeLinear"):
            continue  # activation x activation products (attention) stay float
        res = _match(ix, g, conv) if conv.op_type == "Conv" else _match_matmul(ix, g, conv)
        if isinstance(res, str):
            rw.missed.append(f"{conv.name}: {res}")
            continue
        old, new = res
        if rw.taken(*old) and conv.op_type == "Conv":
            # the residual Add is the other branch's (both convs of a ResNet block's Add are QDQ
            # layers; the first in node order took it): this one keeps a plain output
            res = _match(ix, g, conv, residual_ok=False)
            if isinstance(res, str):
                rw.missed.append(f"{conv.name}: {res}")
                continue
            old, new = res
        w = ix.const(new.inputs[1])
        choice = int8_choice.choose(new, ix.desc(new.inputs[0]), tuple(w.shape) if w is not None else ())
        if not choice.int8 and new.op_type in fp32_fallback:
            if len(new.inputs) > 3:  # the residual Add stays a float Add after the float layer
                old, new = old[:-2] if old[-1].op_type in ("Relu", "Clip") else old[:-1], _without_residual(new, old)
            old, nodes = _as_fp32(g, ix, old, new)
            rw.missed.append(f"{conv.name}: kept fp32 ({choice.reason})")
            rw.replace(old, nodes)
            rw.applied -= 1
            continue
        if new.op_type in fp32_fallback:
            new.attrs["fast_quant"] = 1  # high_performance: quantise in oneDNN, within 1 LSB
        rw.replace(old, [new])
    rw.commit()
    return rw.applied, rw.missed


def _without_residual(q: Node, old: list[Node]) -> Node:
    """``q`` without its residual input and the ops after the conv (they stay in the graph)."""
    conv_out = next(n for n in old if n.op_type == "Conv").outputs[0]
    attrs = dict(q.attrs, activation="")
    return Node(q.op_type, q.inputs[:3], [conv_out], attrs, name=q.name, domain=q.domain, opset=q.opset)


def drop_qdq_pairs(g: Graph) -> int:
    """``DequantizeLinear(QuantizeLinear(x))`` with the same constant per-tensor scale and zero point,
    left after the fusion around float ops (a QDQ or QOperator model's Add, pooling, Concat): their
    readers read ``x`` instead, clamped where the quantisation's saturation is a folded activation
    (``range_clip``; the activation rounding is dropped, as for a layer kept fp32; the
    QuantizeLinear stays while a fused layer reads its integers). Returns how many DQs were bypassed."""
    ix = GraphIndex(g)
    n = 0
    clips: list[tuple[Node, list[Node]]] = []
    for dq in list(g.nodes):
        if not is_op(dq, "DequantizeLinear") or len(dq.inputs) < 3 or dq.outputs[0] in ix.outputs:
            continue
        if not ix.consumers.get(dq.outputs[0]):
            continue  # left dead by the fusion: dead-code elimination removes it
        q = ix.producers.get(dq.inputs[0])
        if not is_op(q, "QuantizeLinear") or q is None or len(q.inputs) < 3:
            continue
        s_, zp = ix.const(q.inputs[1]), ix.const(q.inputs[2])
        if s_ is None or zp is None or s_.size != 1 or zp.size != 1 or zp.dtype not in (np.uint8, np.int8):
            continue
        if not (_same(ix, q.inputs[1], dq.inputs[1]) and _same(ix, q.inputs[2], dq.inputs[2])):
            continue
        nodes, y = range_clip(g, ix, q.inputs[0], float(s_.reshape(-1)[0]), int(zp.reshape(-1)[0]),
                               zp.dtype == np.uint8, dq.name)
        if nodes:
            clips.append((dq, nodes))
        rename_uses(g, dq.outputs[0], y)
        n += 1
    if clips:
        after = {id(d): c for d, c in clips}
        g.nodes = [m for d in g.nodes for m in ((d, *after[id(d)]) if id(d) in after else (d,))]
    return n


def run(graph: Graph, ctx: PassContext) -> PassResult:
    fallback = frozenset(t for t in ("QuantConv", "QuantMatMul") if approx_allowed(graph.context, t))
    n, missed = fuse(graph, fallback)
    # under high_performance the rounding of activations that no int8 layer reads is dropped too
    pairs = drop_qdq_pairs(graph) if fallback else 0
    chained, left = fuse_qdq_chain.chain_requant(graph) if fallback else (0, [])
    return PassResult(graph, n > 0 or pairs > 0, f"{n} QDQ convs / matmuls -> QuantConv / QuantMatMul; "
                      f"{pairs} QuantizeLinear -> DequantizeLinear pairs around float ops bypassed; "
                      f"{chained} int8 layers requantise their output for the int8 layers reading it",
                      missed + left)
