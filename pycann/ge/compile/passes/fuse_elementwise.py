"""ElementwiseChainFusion: chains of float elementwise ops -> one pycann.ElementwiseChain,
evaluated in place in one buffer (no temporary per op).

Pattern: a chainable op (Add Sub Mul Div Pow Max Min, Relu Sigmoid Tanh Exp Log Sqrt Neg
Abs Reciprocal Floor Ceil Erf Clip HardSigmoid HardSwish LeakyRelu) whose output's only
reader is another chainable op; the other operand of each binary step may be any value
available before the chain's last node (constants, or the chain's own input, as in
x * sigmoid(x)). Check: float32/float64 values, no graph outputs inside the chain, constant
Clip bounds, length >= 2.
"""

from __future__ import annotations

import math

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, clip_defaults
from pycann.ge.ir import Graph, Node
from pycann.ops.fused import DOMAIN
from pycann.ops.fused_chain import CHAIN_BINARY, CHAIN_UNARY

name = "ElementwiseChainFusion"

_FLOATS = (1, 11)


def _params(ix: GraphIndex, n: Node) -> tuple[float, float] | None:
    if n.op_type == "Clip":
        d_lo, d_hi = clip_defaults(ix.desc(n.outputs[0]))
        lo = ix.scalar(n.inputs[1]) if len(n.inputs) > 1 and n.inputs[1] else d_lo
        hi = ix.scalar(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else d_hi
        # a NaN bound is no bound (the Clip op, as ORT); the chain's np.clip would make every value NaN
        return None if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) else (lo, hi)
    if n.op_type == "HardSigmoid":
        return float(n.attrs.get("alpha", 0.2)), float(n.attrs.get("beta", 0.5))
    if n.op_type == "LeakyRelu":
        return float(n.attrs.get("alpha", 0.01)), 0.0
    return 0.0, 0.0


def _chainable(ix: GraphIndex, n: Node | None) -> bool:
    if n is None or n.domain or n.op_type not in CHAIN_BINARY | CHAIN_UNARY or len(n.outputs) != 1:
        return False
    d = ix.desc(n.outputs[0])
    if d is None or d.dtype not in _FLOATS:
        return False
    if n.op_type in CHAIN_BINARY and len(n.inputs) != 2:
        return False
    return _params(ix, n) is not None


class _Operands:
    """Index of a value among the fused node's inputs (appended on first use)."""

    def __init__(self, inputs: list[str]) -> None:
        self.inputs = inputs

    def __call__(self, v: str) -> int:
        if v not in self.inputs:
            self.inputs.append(v)
        return self.inputs.index(v)


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for first in list(g.nodes):
        if rw.taken(first) or not _chainable(ix, first):
            continue
        inputs: list[str] = []
        operand = _Operands(inputs)
        if first.op_type in CHAIN_BINARY:
            a, b = first.inputs
            x_right = ix.const(a) is not None and ix.const(b) is None
            x = b if x_right else a
            operand(x)
            steps = [[first.op_type, operand(a if x_right else b), int(x_right), 0.0, 0.0]]
        else:
            operand(first.inputs[0])
            p = _params(ix, first)
            assert p is not None
            steps = [[first.op_type, -1, 0, p[0], p[1]]]
        nodes = [first]
        cur = first.outputs[0]
        while True:
            nxt = ix.sole_consumer(cur)
            if not _chainable(ix, nxt) or nxt is None or rw.taken(nxt):
                break
            if nxt.op_type in CHAIN_BINARY:
                other = ix.other_input(nxt, cur)
                if other is None or other in (n.outputs[0] for n in nodes):
                    break
                steps.append([nxt.op_type, operand(other), int(nxt.inputs[1] == cur), 0.0, 0.0])
            else:
                if nxt.inputs[0] != cur:
                    break
                p = _params(ix, nxt)
                assert p is not None
                steps.append([nxt.op_type, -1, 0, p[0], p[1]])
            nodes.append(nxt)
            cur = nxt.outputs[0]
        if len(nodes) < 2:
            continue
        fused = Node("ElementwiseChain", inputs, [cur], {"steps": steps},
                     name=f"{first.name}_chain{len(nodes)}", domain=DOMAIN, opset=1)
        rw.replace(nodes, [fused])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} elementwise chains fused", missed)
