"""QOperatorToQDQ: the QOperator form of a quantised model (what ONNX Runtime's
``quantize_static(..., quant_format=QuantFormat.QOperator)`` writes) rewritten into the QDQ form,
so that ``QuantizedConvFusion`` (the next pass) maps its convolutions and matrix products onto
the same int8 kernels as AMCT's and other tools' QDQ models.

    QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B)  ->  Q(Conv(DQ(x), DQ(w, axis 0), DQ(B, xs * ws)), ys, yz)
    QLinearMatMul(a, as, az, b, bs, bz, ys, yz)   ->  Q(MatMul(DQ(a), DQ(b, axis 1)), ys, yz)
    QGemm(A, as, az, B, bs, bz, C, ys, yz)        ->  [Q](Gemm(DQ(A), DQ(B), DQ(C, as * bs)), ys, yz)   (com.microsoft)
    QLinearAdd(A, .., B, .., cs, cz)              ->  Q(Add(DQ(A), DQ(B)), cs, cz)                      (com.microsoft)
    QLinearGlobalAveragePool(X, .., ys, yz)       ->  Q(GlobalAveragePool(DQ(X)), ys, yz)               (com.microsoft)
    QLinearMul / QLinearSigmoid / QLinearLeakyRelu / QLinearSoftmax / QLinearConcat / QLinearAveragePool
                                                  ->  Q(op(DQ(..)))                                    (com.microsoft)

Exactness: the QOperator ops requantise the int32 accumulator with one multiplier
``xs * ws / ys``; the QDQ form rounds ``acc * xs * ws`` (a float conv) and then divides by ``ys``.
The two agree except where a value lies within float rounding of a half-way point, where the
output differs by one unit of its quantisation (1 LSB; tests/amct/test_qoperator.py).

Checked (a failed check keeps the op on its reference kernel, reported by ``atc --log=info``):
constant scales and zero points, per-tensor activation parameters, per-channel weight scales of
the right length, ``channels_last=0`` for the pooling, ``alpha`` 1 for a QGemm with C.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites
from pycann.ge.ir import Graph, Node
from pycann.ops.quant_ms import MS_DOMAIN

name = "QOperatorToQDQ"

_STANDARD = ("QLinearConv", "QLinearMatMul")
_CONTRIB = ("QGemm", "QLinearAdd", "QLinearGlobalAveragePool", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
            "QLinearSoftmax", "QLinearConcat", "QLinearAveragePool")


class _Builder:
    """Emits the replacement nodes of one QOperator node."""

    def __init__(self, g: Graph, node: Node) -> None:
        self.g, self.node = g, node
        self.nodes: list[Node] = []
        self.opset = max(13, g.opsets.get("", 13))

    def const(self, base: str, value: np.ndarray) -> str:
        n = self.g.fresh_name(f"{self.node.name}_{base}")
        value = np.ascontiguousarray(value)
        value.flags.writeable = False
        self.g.initializers[n] = value
        return n

    def add(self, op: str, inputs: list[str], out: str | None = None, attrs: dict[str, Any] | None = None) -> str:
        o = out or self.g.fresh_name(f"{self.node.name}_{op}_{len(self.nodes)}_out")
        self.nodes.append(Node(op, inputs, [o], dict(attrs or {}), name=f"{self.node.name}_{op}_{len(self.nodes)}",
                               opset=self.opset))
        return o

    def dq(self, x: str, s: str, z: str, axis: int | None = None) -> str:
        ins = [x, s, z] if z else [x, s]
        return self.add("DequantizeLinear", ins, attrs=None if axis is None else {"axis": axis})


def _scalar_params(ix: GraphIndex, node: Node, scales: tuple[int, ...], zero_points: tuple[int, ...]) -> str | None:
    """Why the per-tensor scales (required) and zero points (may be absent: 0) are not constant scalars."""
    for i in scales + zero_points:
        v = _inp(node, i)
        if not v:
            if i in zero_points:
                continue
            return f"input {i} is missing"
        c = ix.const(v)
        if c is None:
            return f"input {i} ({v}) is not a constant"
        if c.size != 1:
            return f"input {i} ({v}) of shape {list(c.shape)} is not per-tensor"
    return None


def _per_channel(ix: GraphIndex, node: Node, si: int, zi: int, m: int | None) -> str | None:
    s = ix.const(node.inputs[si])
    if s is None:
        return f"weight scale {node.inputs[si]} is not a constant"
    z = ix.const(node.inputs[zi]) if zi < len(node.inputs) and node.inputs[zi] else None
    if zi < len(node.inputs) and node.inputs[zi] and z is None:
        return f"weight zero point {node.inputs[zi]} is not a constant"
    for c in (s, z):
        if c is not None and c.size != 1 and (c.ndim != 1 or (m is not None and c.size != m)):
            return f"weight parameter of shape {list(c.shape)} is neither per-tensor nor one per output channel ({m})"
    return None


def _inp(node: Node, i: int) -> str:
    return node.inputs[i] if i < len(node.inputs) else ""


def _conv(ix: GraphIndex, b: _Builder) -> str | None:
    n = b.node
    why = _scalar_params(ix, n, (1, 6), (2, 7))
    w = ix.const(_inp(n, 3))
    why = why or _per_channel(ix, n, 4, 5, None if w is None else w.shape[0])
    if why:
        return why
    xd = b.dq(n.inputs[0], n.inputs[1], _inp(n, 2))
    ws = ix.const(n.inputs[4])
    assert ws is not None
    wd = b.dq(n.inputs[3], n.inputs[4], _inp(n, 5), axis=0)
    ins = [xd, wd]
    if _inp(n, 8):
        xs = ix.const(n.inputs[1])
        assert xs is not None
        bs = (np.float32(xs.reshape(())) * ws.reshape(-1).astype(np.float32)).astype(np.float32)
        ins.append(b.dq(n.inputs[8], b.const("bias_scale", bs), "", axis=0))
    y = b.add("Conv", ins, attrs={k: v for k, v in n.attrs.items() if not k.startswith("_")})
    b.add("QuantizeLinear", [y, n.inputs[6], _inp(n, 7)], n.outputs[0])
    return None


def _matmul(ix: GraphIndex, b: _Builder) -> str | None:
    n = b.node
    why = _scalar_params(ix, n, (1, 6), (2, 7))
    w = ix.const(_inp(n, 3))
    why = why or _per_channel(ix, n, 4, 5, None if w is None or w.ndim != 2 else w.shape[1])
    if why:
        return why
    ad = b.dq(n.inputs[0], n.inputs[1], _inp(n, 2))
    bd = b.dq(n.inputs[3], n.inputs[4], _inp(n, 5), axis=1)
    y = b.add("MatMul", [ad, bd])
    b.add("QuantizeLinear", [y, n.inputs[6], _inp(n, 7)], n.outputs[0])
    return None


def _qgemm(ix: GraphIndex, b: _Builder) -> str | None:
    n = b.node
    trans_b = int(n.attrs.get("transB", 0))
    has_y = bool(_inp(n, 7))
    why = _scalar_params(ix, n, (1, 7) if has_y else (1,), (2, 8) if has_y else (2,))
    w = ix.const(_inp(n, 3))
    m = None if w is None or w.ndim != 2 else w.shape[0 if trans_b else 1]
    why = why or _per_channel(ix, n, 4, 5, m)
    if why:
        return why
    alpha = float(n.attrs.get("alpha", 1.0))
    if _inp(n, 6) and alpha != 1.0:
        return f"QGemm with C and alpha {alpha} (only alpha 1 is rewritten)"
    ad = b.dq(n.inputs[0], n.inputs[1], _inp(n, 2))
    bd = b.dq(n.inputs[3], n.inputs[4], _inp(n, 5), axis=0 if trans_b else 1)
    ins = [ad, bd]
    if _inp(n, 6):
        a_s, b_s = ix.const(n.inputs[1]), ix.const(n.inputs[4])
        assert a_s is not None and b_s is not None
        cs = (np.float32(a_s.reshape(())) * b_s.reshape(-1).astype(np.float32)).astype(np.float32)
        ins.append(b.dq(n.inputs[6], b.const("c_scale", cs), "", axis=0 if cs.size > 1 else None))
    attrs: dict[str, Any] = {"alpha": alpha, "beta": 1.0, "transA": int(n.attrs.get("transA", 0)), "transB": trans_b}
    if has_y:
        y = b.add("Gemm", ins, attrs=attrs)
        b.add("QuantizeLinear", [y, n.inputs[7], _inp(n, 8)], n.outputs[0])
    else:
        b.add("Gemm", ins, n.outputs[0], attrs)
    return None


def _qbinary(ix: GraphIndex, b: _Builder) -> str | None:
    n = b.node
    why = _scalar_params(ix, n, (1, 4, 6), (2, 5, 7))
    if why:
        return why
    op = n.op_type[len("QLinear"):]  # Add, Mul
    y = b.add(op, [b.dq(n.inputs[0], n.inputs[1], _inp(n, 2)), b.dq(n.inputs[3], n.inputs[4], _inp(n, 5))])
    b.add("QuantizeLinear", [y, n.inputs[6], _inp(n, 7)], n.outputs[0])
    return None


def _qunary(ix: GraphIndex, b: _Builder) -> str | None:
    """QLinearSigmoid / QLinearLeakyRelu / QLinearSoftmax (X, xs, xz, ys, yz)."""
    n = b.node
    why = _scalar_params(ix, n, (1, 3), (2, 4))
    if why:
        return why
    attrs: dict[str, Any] = {}
    if n.op_type == "QLinearLeakyRelu":
        attrs["alpha"] = float(n.attrs.get("alpha", 0.01))
    if n.op_type == "QLinearSoftmax":
        axis = int(n.attrs.get("axis", -1))
        d = b.g.descs.get(n.inputs[0])
        rank = None if d is None or d.shape is None else len(d.shape)
        # before opset 13 Softmax coerced its input to 2-D at axis: the same as opset 13's only on the last axis
        if int(n.attrs.get("opset", 13)) < 13 and (rank is None or axis % rank != rank - 1):
            return f"opset {n.attrs.get('opset')} Softmax over the axes from {axis} on (of rank {rank})"
        attrs["axis"] = axis
    y = b.add(n.op_type[len("QLinear"):], [b.dq(n.inputs[0], n.inputs[1], _inp(n, 2))], attrs=attrs)
    b.add("QuantizeLinear", [y, n.inputs[3], _inp(n, 4)], n.outputs[0])
    return None


def _qpool(ix: GraphIndex, b: _Builder, op: str, attrs: dict[str, Any] | None = None) -> str | None:
    """QLinearAveragePool / QLinearGlobalAveragePool (X, x_scale, x_zp, y_scale, y_zp) as
    DequantizeLinear -> ``op`` -> QuantizeLinear."""
    n = b.node
    if int(n.attrs.get("channels_last", 0)):
        return "channels_last=1 (NHWC) pooling is kept on its reference kernel"
    why = _scalar_params(ix, n, (1, 3), (2, 4))
    if why:
        return why
    y = b.add(op, [b.dq(n.inputs[0], n.inputs[1], _inp(n, 2))], attrs=attrs)
    b.add("QuantizeLinear", [y, n.inputs[3], _inp(n, 4)], n.outputs[0])
    return None


def _qavgpool(ix: GraphIndex, b: _Builder) -> str | None:
    attrs = {k: v for k, v in b.node.attrs.items() if k != "channels_last" and not k.startswith("_")}
    return _qpool(ix, b, "AveragePool", attrs)


def _qconcat(ix: GraphIndex, b: _Builder) -> str | None:
    """QLinearConcat(ys, yz, X1, s1, z1, X2, s2, z2, ...)."""
    n = b.node
    triples = len(n.inputs) - 2
    if triples <= 0 or triples % 3:
        return f"{len(n.inputs)} inputs are not Y_scale, Y_zero_point and (X, scale, zero point) triples"
    why = _scalar_params(ix, n, (0, *range(3, len(n.inputs), 3)), (1, *range(4, len(n.inputs), 3)))
    if why:
        return why
    parts = [b.dq(n.inputs[i], n.inputs[i + 1], _inp(n, i + 2)) for i in range(2, len(n.inputs), 3)]
    y = b.add("Concat", parts, attrs={"axis": int(n.attrs["axis"])})
    b.add("QuantizeLinear", [y, n.inputs[0], _inp(n, 1)], n.outputs[0])
    return None


def _qgap(ix: GraphIndex, b: _Builder) -> str | None:
    return _qpool(ix, b, "GlobalAveragePool")


_RULES = {"QLinearConv": _conv, "QLinearMatMul": _matmul, "QGemm": _qgemm, "QLinearAdd": _qbinary,
          "QLinearMul": _qbinary, "QLinearGlobalAveragePool": _qgap, "QLinearSigmoid": _qunary,
          "QLinearLeakyRelu": _qunary, "QLinearSoftmax": _qunary, "QLinearConcat": _qconcat,
          "QLinearAveragePool": _qavgpool}


def rewrite(g: Graph) -> tuple[int, list[str]]:
    """Rewrite every QOperator node of ``g`` that passes the checks; returns (count, reasons for the others)."""
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for node in list(g.nodes):
        std = node.domain in ("", "ai.onnx") and node.op_type in _STANDARD
        if not (std or (node.domain == MS_DOMAIN and node.op_type in _CONTRIB)):
            continue
        b = _Builder(g, node)
        why = _RULES[node.op_type](ix, b)
        if why:
            rw.missed.append(f"{node.name} ({node.op_type}): {why}; kept on its reference kernel")
            continue
        rw.replace([node], b.nodes)
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    before = len(graph.initializers)
    n, missed = rewrite(graph)
    # exact (pipelines.EXACT_CHANGED): a rule that gave up after ``_Builder.const`` left an
    # initializer behind, which the next InferShapes must type; nothing else changes without a rewrite
    return PassResult(graph, n > 0 or len(graph.initializers) != before, f"{n} QOperator nodes -> QDQ", missed)
