"""BatchNormToScaleShift: an inference BatchNormalization that no conv absorbed becomes
``Mul(x, a) -> Add(c)`` with per-channel constants, so ElementwiseChainFusion chains it with the
Relu (or other elementwise ops) around it and the chain runs as one oneDNN binary primitive.

The BatchNormalization of a pre-activation network (DenseNet's norm -> relu -> conv, ResNet v2)
reads a Concat or an Add, not a conv, so ConvBatchNormFusionPass cannot fold it; pycann's kernel
ran it as two single-threaded numpy passes plus one for the Relu after it (DenseNet-121: 62 of each,
~14 of 38 ms on 2 cores). The formula is the kernel's own (``ops/nn/norm.py``, BatchNormalization-15
in inference mode): ``a = scale / sqrt(var + epsilon)``, ``c = B - mean * a``, ``y = x * a + c``,
with ``a`` and ``c`` computed in float32 as the kernel does, so the values are unchanged.

Pattern: BatchNormalization (default domain) whose scale, B, mean and var are 1-D float constants of
the channel count; check (the reason is reported otherwise): X is float32 of rank >= 2, training
mode off, only Y is read (the optional running-stat outputs unused). Runs after the conv folds, so
a BN a conv can absorb is folded there first.
"""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node
from pycann.ops.nn.norm import batch_norm_scale_shift

name = "BatchNormToScaleShift"


def _why_not(g: Graph, bn: Node, read: set[str]) -> str | None:
    """Why ``bn`` stays a BatchNormalization, or None when it can be rewritten."""
    d = g.descs.get(bn.inputs[0])
    if d is None or d.dtype != 1 or d.shape is None or len(d.shape) < 2:
        return "X is not float32 of known rank >= 2"
    if int(bn.attrs.get("training_mode", 0) or 0):
        return "training_mode=1 (batch statistics)"
    if any(o and o in read for o in bn.outputs[1:]):
        return "its running-statistics outputs are read"
    params = [g.initializers.get(i) for i in bn.inputs[1:5]] if len(bn.inputs) >= 5 else [None]
    if any(p is None for p in params):
        return "scale, B, mean or var is not a constant"
    c = d.shape[1]
    if any(p.ndim != 1 or p.dtype.kind != "f" for p in params) or (isinstance(c, int) and params[0].shape[0] != c):  # type: ignore[union-attr]
        return "its parameters are not 1-D float vectors of the channel count"
    return None


def rewrite(g: Graph) -> tuple[int, list[str]]:
    """Rewrite in place; returns (count, reasons for BatchNormalizations left as they are)."""
    read = {i for n in g.nodes for i in n.inputs} | set(g.outputs)
    opset = int(g.opsets.get("", 13) or 13)
    out: list[Node] = []
    missed: list[str] = []
    n_done = 0
    for bn in g.nodes:
        if bn.op_type != "BatchNormalization" or bn.domain:
            out.append(bn)
            continue
        why = _why_not(g, bn, read)
        if why is not None:
            missed.append(f"{bn.name}: {why}")
            out.append(bn)
            continue
        scale, b, mean, var = (g.initializers[i] for i in bn.inputs[1:5])
        rank = len(g.descs[bn.inputs[0]].shape or ())
        a, c = batch_norm_scale_shift(scale, b, mean, var, float(bn.attrs.get("epsilon", 1e-5)), np.dtype(np.float32))
        shape = (-1,) + (1,) * (rank - 2)
        a_name, c_name = g.fresh_name(f"{bn.name}_scale"), g.fresh_name(f"{bn.name}_shift")
        g.initializers[a_name] = a.reshape(shape)
        g.initializers[c_name] = c.reshape(shape)
        mid = g.fresh_name(f"{bn.name}_scaled")
        out.append(Node("Mul", [bn.inputs[0], a_name], [mid], name=f"{bn.name}_mul", opset=opset, origin=list(bn.origin)))
        out.append(Node("Add", [mid, c_name], [bn.outputs[0]], name=f"{bn.name}_add", opset=opset,
                        origin=list(bn.origin)))
        n_done += 1
    g.nodes = out
    return n_done, missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = rewrite(graph)
    return PassResult(graph, n > 0, f"{n} BatchNormalization -> Mul + Add by per-channel constants", missed)
