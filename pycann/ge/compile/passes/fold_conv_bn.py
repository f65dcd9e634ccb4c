"""Conv/ConvTranspose + BatchNormalization folding (inference): BN(conv(x, W) + b) = conv(x, W') + b'
with W' = W scaled by s per output channel, b' = (b - mean) * s + beta, s = gamma / sqrt(var + eps).

Pattern: Conv whose output feeds only a BatchNormalization; check: inference mode (training_mode=0), W, B and the four BN
parameters are constants, the scale s is finite (an inf gamma or var + eps = 0 gives +-inf,
which folded weights turn into NaN), and Conv's output is not a graph output; rewrite: new constants,
BN removed, Conv writes BN's output.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.fold_conv_affine import CONV_TYPES, out_channels, scale_out_channels
from pycann.ge.ir import Graph

name = "ConvBatchNormFusionPass"


def fold(g: Graph) -> tuple[int, list[str]]:
    """Fold in place; returns (fused count, reasons for candidates that did not fuse)."""
    producers = g.producers()
    consumers = g.consumers()
    outputs = set(g.outputs)
    removed: set[int] = set()
    missed: list[str] = []
    fused = 0
    for bn in g.nodes:
        if bn.op_type != "BatchNormalization" or bn.domain:
            continue
        conv = producers.get(bn.inputs[0])
        if conv is None or conv.op_type not in CONV_TYPES or conv.domain:
            continue
        why = None
        if len(consumers.get(conv.outputs[0], [])) != 1 or conv.outputs[0] in outputs:
            why = "conv output has other consumers"
        elif int(bn.attrs.get("training_mode", 0) or 0):
            why = "training_mode=1 (batch statistics, not the running ones)"
        params = [g.initializers.get(i) for i in bn.inputs[1:5]]
        w = g.initializers.get(conv.inputs[1])
        if why is None and (w is None or any(p is None for p in params)):
            why = "weights or BN parameters are not constants"
        b_name = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else ""
        if why is None and b_name and b_name not in g.initializers:
            why = "conv bias is not a constant"
        if why is None and w is not None and w.dtype.kind != "f":
            why = f"weights have dtype {w.dtype}"
        if why is not None:
            missed.append(f"{conv.name}+{bn.name}: {why}")
            continue
        assert w is not None
        gamma, beta, mean, var = (np.asarray(p, dtype=np.float64) for p in params)  # type: ignore[arg-type]
        eps = float(bn.attrs.get("epsilon", 1e-5))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            s = gamma / np.sqrt(var + eps)
        b = g.initializers[b_name].astype(np.float64) if b_name else np.zeros_like(mean)
        if not np.all(np.isfinite(s)):
            # conv(x) * inf is +-inf where the folded weights' inf * 0 terms (and inf - inf) give NaN
            missed.append(f"{conv.name}+{bn.name}: scale gamma / sqrt(var + eps) is not finite")
            continue
        if len(s) != out_channels(conv, w):
            missed.append(f"{conv.name}+{bn.name}: {len(s)} BN channels, {out_channels(conv, w)} conv outputs")
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            w_new = scale_out_channels(conv, w, s).astype(w.dtype)
            b_new = ((b - mean) * s + beta).astype(w.dtype)
        if np.isfinite(w).all() and not np.isfinite(w_new).all():  # overflowed (float16): inf * a 0 input is NaN
            missed.append(f"{conv.name}+{bn.name}: scaled weights overflow {w.dtype}")
            continue
        wn = g.fresh_name(f"{conv.name}_W_bnfold")
        g.initializers[wn] = w_new
        bname = g.fresh_name(f"{conv.name}_B_bnfold")
        g.initializers[bname] = b_new
        conv.inputs = [conv.inputs[0], wn, bname]
        conv.outputs = [bn.outputs[0]]
        conv.origin = conv.origin + bn.origin
        removed.add(id(bn))
        fused += 1
    if removed:
        g.nodes = [n for n in g.nodes if id(n) not in removed]
    return fused, missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fold(graph)
    return PassResult(graph, n > 0, f"{n} Conv+BatchNormalization folded", missed)
