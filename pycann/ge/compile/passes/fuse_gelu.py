"""GeluFusion: the GELU subgraphs PyTorch exports -> one ONNX Gelu (opset 20).

erf form:  y = Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)   (or Mul(x, 1/sqrt 2), or 0.5*x first, or
           x * (0.5 * (erf + 1)) as the dynamo exporter writes it)
tanh form: y = Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)), sqrt(2/pi))), 1))
Check: constants within 1e-3 relative of the textbook values, single readers inside the pattern.
"""

from __future__ import annotations

import math

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node

name = "GeluFusion"


def _close(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-3 * abs(want)


def _const_operand(ix: GraphIndex, node: Node, value: str) -> float | None:
    other = ix.other_input(node, value)
    return ix.scalar(other, within=value) if other else None


def _final_half(ix: GraphIndex, x: str, s: str) -> tuple[list[Node], str] | str:
    """After s = Erf/Tanh(...) + 1: y = x * s * 0.5 in one of the exported orders."""
    mul = ix.sole_consumer(s)
    if not is_op(mul, "Mul") or mul is None:
        return "no Mul after the +1"
    other = ix.other_input(mul, s)
    if other != x and _close(ix.scalar(other or "", within=s), 0.5):  # x * (s * 0.5): PyTorch's dynamo exporter
        outer = ix.sole_consumer(mul.outputs[0])
        if is_op(outer, "Mul") and outer is not None and ix.other_input(outer, mul.outputs[0]) == x:
            return [mul, outer], outer.outputs[0]
        return "s * 0.5 is not multiplied by x"
    if other == x:  # (x * s) * 0.5
        half = ix.sole_consumer(mul.outputs[0])
        if is_op(half, "Mul") and half is not None and _close(_const_operand(ix, half, mul.outputs[0]), 0.5):
            return [mul, half], half.outputs[0]
        return "missing the final * 0.5"
    h = ix.producers.get(other or "")
    if is_op(h, "Mul") and h is not None and x in h.inputs and _close(_const_operand(ix, h, x), 0.5):
        if ix.sole_consumer(h.outputs[0]) is mul:
            return [h, mul], mul.outputs[0]
    return "the multiplication by x * 0.5 does not match"


def _erf_form(ix: GraphIndex, erf: Node) -> tuple[list[Node], str, str] | str:
    d = ix.producers.get(erf.inputs[0])
    if d is None or not is_op(d, "Div", "Mul") or ix.sole_consumer(d.outputs[0]) is not erf:
        return "Erf input is not x / sqrt(2)"
    x = d.inputs[0]
    c = ix.scalar(d.inputs[1], within=d.inputs[0])
    if not (_close(c, math.sqrt(2)) if d.op_type == "Div" else _close(c, 1 / math.sqrt(2))):
        return f"scale {c} is not sqrt(2)"
    add = ix.sole_consumer(erf.outputs[0])
    if not is_op(add, "Add") or add is None or not _close(_const_operand(ix, add, erf.outputs[0]), 1.0):
        return "Erf is not followed by + 1"
    tail = _final_half(ix, x, add.outputs[0])
    if isinstance(tail, str):
        return tail
    return [d, erf, add, *tail[0]], x, tail[1]


def _tanh_form(ix: GraphIndex, tanh: Node) -> tuple[list[Node], str, str] | str:
    m = ix.producers.get(tanh.inputs[0])
    if not is_op(m, "Mul") or m is None or ix.sole_consumer(m.outputs[0]) is not tanh:
        return "Tanh input is not a scaled sum"
    inner = next((i for i in m.inputs if ix.scalar(i) is None), None)
    if inner is None or not _close(_const_operand(ix, m, inner), math.sqrt(2 / math.pi)):
        return "scale is not sqrt(2/pi)"
    a = ix.producers.get(inner)
    if not is_op(a, "Add") or a is None or ix.sole_consumer(a.outputs[0]) is not m:
        return "no x + 0.044715 x^3"
    for x in a.inputs:
        cube = ix.producers.get(ix.other_input(a, x) or "")
        if is_op(cube, "Mul") and cube is not None:
            p_val = next((i for i in cube.inputs if ix.scalar(i) is None), None)
            p = ix.producers.get(p_val or "")
            if is_op(p, "Pow") and p is not None and p.inputs[0] == x and _close(ix.scalar(p.inputs[1], within=x), 3.0) \
                    and _close(_const_operand(ix, cube, p_val or ""), 0.044715):
                if ix.sole_consumer(p.outputs[0]) is not cube or ix.sole_consumer(cube.outputs[0]) is not a:
                    return "x^3 or 0.044715 x^3 is read outside the pattern (or a graph output)"
                one = ix.sole_consumer(tanh.outputs[0])
                if not is_op(one, "Add") or one is None or not _close(_const_operand(ix, one, tanh.outputs[0]), 1.0):
                    return "Tanh is not followed by + 1"
                tail = _final_half(ix, x, one.outputs[0])
                if isinstance(tail, str):
                    return tail
                return [p, cube, a, m, tanh, one, *tail[0]], x, tail[1]
    return "no x^3 * 0.044715 term"


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for n in list(g.nodes):
        if rw.taken(n) or not is_op(n, "Erf", "Tanh"):
            continue
        res = _erf_form(ix, n) if n.op_type == "Erf" else _tanh_form(ix, n)
        if isinstance(res, str):
            rw.missed.append(f"{n.name}: {res}")
            continue
        nodes, x, out = res
        if rw.taken(*nodes):
            continue
        approx = "none" if n.op_type == "Erf" else "tanh"
        gelu = Node("Gelu", [x], [out], {"approximate": approx}, name=f"{n.name}_gelu", opset=20)
        rw.replace(nodes, [gelu])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} GELU subgraphs -> Gelu", missed)
