"""ConvScaleBiasFold: Conv (or ConvTranspose) followed by Mul and/or Add of constants that act
per output channel folds into the conv's weights and bias (inference):

    conv(x, W, b) * s + d  =  conv(x, W * s[:, None, ...], b * s + d)

PaddleOCR's PP-LCNetV3 (the PP-OCRv4 detector's backbone) writes such "learnable affine
blocks" after its convs as a scalar Mul and a scalar Add; PyTorch exports of frozen norms or
scaled residual branches produce per-channel ones.

Pattern: Conv -> Mul(c) or Add(c), repeated while they chain. Check (the reason is reported when
a candidate does not fold): the conv's output has one reader and is not a graph output; the
weight (and bias) are float constants; ``c`` is a float constant whose shape broadcasts as a
per-output-channel value, i.e. the shape after dropping leading 1s is ``()``, ``(1,)``,
``(M, 1, ..)`` or ``(1, ..)`` with every non-channel dim 1, and it would not enlarge the output;
it is finite (``conv(x) * inf`` is +-inf where the folded weights' ``inf * 0`` terms give NaN; a
zero scale folds: ``0 * inf`` and ``0 * NaN`` inputs are NaN in the folded conv as in ``conv(x) * 0``).
Rewrite: new weight/bias constants (computed in float64, stored in the weight dtype); the conv
writes the Mul/Add's output, which is removed.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node

name = "ConvScaleBiasFold"


CONV_TYPES = ("Conv", "ConvTranspose")


def out_channels(conv: Node, w: np.ndarray) -> int:
    """Output channels of a Conv (W: M x C/g x k...) or ConvTranspose (W: C x M/g x k...)."""
    return int(w.shape[0]) if conv.op_type == "Conv" else int(w.shape[1]) * int(conv.attrs.get("group", 1) or 1)


def scale_out_channels(conv: Node, w: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``w`` (float64 result) with output channel ``o`` multiplied by ``s[o]``."""
    w64 = w.astype(np.float64)
    if conv.op_type == "Conv":
        return w64 * s.reshape((-1,) + (1,) * (w.ndim - 1))
    g = int(conv.attrs.get("group", 1) or 1)
    cin, mg = w.shape[0], w.shape[1]
    blocks = w64.reshape((g, cin // g, mg) + w.shape[2:])
    return (blocks * s.reshape((g, 1, mg) + (1,) * (w.ndim - 2))).reshape(w.shape)


def per_channel(c: np.ndarray, m: int, out_rank: int) -> np.ndarray | str:
    """``c`` as a length-``m`` per-output-channel vector, or why it is not one."""
    if c.ndim > out_rank:
        return f"constant of rank {c.ndim} enlarges the rank-{out_rank} conv output"
    full = (1,) * (out_rank - c.ndim) + tuple(c.shape)  # numpy broadcasting aligns trailing dims
    if any(d != 1 for i, d in enumerate(full) if i != 1):
        return f"constant of shape {list(c.shape)} varies along batch or spatial dims"
    if full[1] not in (1, m):
        return f"constant of shape {list(c.shape)} does not match {m} output channels"
    return np.broadcast_to(c.reshape(-1).astype(np.float64), (m,)) if full[1] == 1 else c.reshape(m).astype(np.float64)


def _check(g: Graph, conv: Node, op: Node, consumers: dict[str, list[Node]], outputs: set[str]) -> str | np.ndarray:
    """The per-channel vector of ``op``'s constant, or why ``op`` does not fold into ``conv``."""
    y = conv.outputs[0]
    if len(consumers.get(y, [])) != 1 or y in outputs:
        return "conv output has other readers or is a graph output"
    if len(op.inputs) != 2 or op.inputs.count(y) != 1:
        return f"{op.op_type} reads the conv output twice"
    other = op.inputs[1] if op.inputs[0] == y else op.inputs[0]
    c = g.initializers.get(other)
    if c is None:
        return f"{op.op_type} operand {other} is not a constant"
    w = g.initializers.get(conv.inputs[1])
    if w is None or w.dtype.kind != "f":
        return "conv weight is not a float constant"
    b_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
    if b_name and b_name not in g.initializers:
        return "conv bias is not a constant"
    if c.dtype != w.dtype:
        return f"{op.op_type} constant has dtype {c.dtype}, weight {w.dtype}"
    vec = per_channel(c, out_channels(conv, w), w.ndim)
    if isinstance(vec, str):
        return vec
    if not np.isfinite(vec).all():  # W * inf: an inf weight times a 0 input is NaN where conv(x) * inf is +-inf
        return f"{op.op_type} constant is not finite"
    return vec


def fold(g: Graph) -> tuple[int, list[str]]:
    """Fold in place; returns (folded count, reasons for candidates that did not fold)."""
    folded = 0
    missed: list[str] = []
    outputs = set(g.outputs)
    changed = True
    while changed:
        changed = False
        producers, consumers = g.producers(), g.consumers()
        for op in g.nodes:
            if op.domain or op.op_type not in ("Mul", "Add") or len(op.inputs) != 2:
                continue
            conv = next((producers[i] for i in op.inputs if i in producers and producers[i].op_type in CONV_TYPES
                         and not producers[i].domain), None)
            if conv is None:
                continue
            if len(consumers.get(conv.outputs[0], [])) != 1:
                continue  # not the pattern (the conv's value is used elsewhere too), not a near miss
            other = op.inputs[1] if op.inputs[0] == conv.outputs[0] else op.inputs[0]
            if other not in g.initializers and other != conv.outputs[0]:
                continue  # Add of two activations (a residual): ConvActivationFusion's case, not a miss
            r = _check(g, conv, op, consumers, outputs)
            if isinstance(r, str):
                missed.append(f"{conv.name}+{op.name or op.op_type}: {r}")
                continue
            vec = r
            w = g.initializers[conv.inputs[1]]
            b_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
            b = g.initializers[b_name].astype(np.float64) if b_name else np.zeros(out_channels(conv, w))
            if op.op_type == "Mul":
                with np.errstate(over="ignore"):
                    w2 = scale_out_channels(conv, w, vec).astype(w.dtype)
                if np.isfinite(w).all() and not np.isfinite(w2).all():  # overflowed: inf * a 0 input is NaN
                    missed.append(f"{conv.name}+{op.name or op.op_type}: scaled weights overflow {w.dtype}")
                    continue
                w, b = w2, b * vec
            else:
                b = b + vec
            wn, bn = g.fresh_name(f"{conv.name}_W_affine"), g.fresh_name(f"{conv.name}_B_affine")
            g.initializers[wn] = w
            g.initializers[bn] = b.astype(w.dtype)
            conv.inputs = [conv.inputs[0], wn, bn]
            conv.outputs = [op.outputs[0]]
            conv.origin = conv.origin + op.origin
            g.nodes = [n for n in g.nodes if n is not op]
            folded += 1
            changed = True
            break  # producers/consumers changed: rescan
    return folded, sorted(set(missed))


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fold(graph)
    return PassResult(graph, n > 0, f"{n} Mul/Add constants folded into convs", missed)
