"""Int8 chains for QuantizedConvFusion: an int8 layer whose output is read only by int8 layers
quantising it the same way writes that uint8 tensor itself (``y_scale`` / ``y_zero_point`` /
``y_q_min`` / ``y_q_max`` on ``pycann.QuantConv`` / ``QuantMatMul``, pycann/ops/quant_epilogue.py):
the requantisation is fused into its int8 kernel's epilogue and the readers take the uint8 tensor as
it is, so no float tensor is written and no quantisation pass runs between them.

Semantics: the QDQ graph's ``QuantizeLinear`` of the float output (after the ReLU; with the Clip
that the readers' QuantizeLinear absorbed), done by the producer. Values: oneDNN's requantisation
multiplies by the reciprocal of ``y_scale`` where QuantizeLinear divides, so a value within float
rounding of a half-way point may land one step away: within 1 LSB of the QDQ graph's quantised
activations. Applied only to layers with ``fast_quant`` (``--op_select_implmode=high_performance``,
the default); ``high_precision`` keeps the exact QDQ arithmetic.
"""

from __future__ import annotations

from pycann.ge.compile.passes.pattern import GraphIndex
from pycann.ge.ir import Graph, Node
from pycann.ops.quant_conv import DOMAIN

_INT8 = ("QuantConv", "QuantMatMul")


def _int8(n: Node | None) -> bool:
    return n is not None and n.domain == DOMAIN and n.op_type in _INT8


def _read_in_subgraphs(g: Graph) -> set[str]:
    names: set[str] = set()
    for n in g.nodes:
        for sub in n.subgraphs.values():
            names |= {i for m in sub.nodes for i in m.inputs} | set(sub.outputs) | _read_in_subgraphs(sub)
    return names


def _quantisation(r: Node) -> tuple[float, int, int, int]:
    a = r.attrs
    return (float(a["x_scale"]), int(a["x_zero_point"]), max(0, int(a.get("q_min", -1000))),
            min(255, int(a.get("q_max", 1000))))


def _dead(g: Graph, keep: set[str]) -> set[int]:
    """Nodes none of whose outputs reach a graph output or a live reader (the QuantizeLinear /
    DequantizeLinear pairs the fusion left for dead-code elimination)."""
    dead: set[int] = set()
    changed = True
    while changed:
        changed = False
        read = {i for n in g.nodes if id(n) not in dead for i in n.inputs} | keep
        for n in g.nodes:
            if id(n) not in dead and not n.subgraphs and not any(o in read for o in n.outputs):
                dead.add(id(n))
                changed = True
    return dead


def chain_requant(g: Graph) -> tuple[int, list[str]]:
    """Set the requantisation of every int8 layer whose readers are all int8 layers with one uint8
    quantisation of it as their activation (input 0). Returns (count, why others were left)."""
    ix = GraphIndex(g)
    outputs = set(g.outputs) | _read_in_subgraphs(g)
    dead = _dead(g, outputs)
    done = 0
    left: list[str] = []
    for n in g.nodes:
        if not _int8(n) or float(n.attrs.get("y_scale", 0.0) or 0.0) > 0 or not int(n.attrs.get("fast_quant", 0)):
            continue
        out = n.outputs[0]
        readers = [r for r in ix.consumers.get(out, []) if id(r) not in dead]
        if not readers or out in outputs:
            continue
        if not all(_int8(r) and r.inputs[0] == out and out not in r.inputs[1:] for r in readers):
            continue  # a float reader (Add, pooling, a layer kept fp32) needs the float tensor
        if not all(int(r.attrs.get("x_unsigned", 1)) and int(r.attrs.get("fast_quant", 0)) for r in readers):
            left.append(f"{n.name}: a reader quantises to int8 or keeps the exact QDQ arithmetic")
            continue
        quants = {_quantisation(r) for r in readers}
        if len(quants) != 1:
            left.append(f"{n.name}: its readers quantise it with different scales")
            continue
        s, zp, lo, hi = quants.pop()
        n.attrs.update(y_scale=s, y_zero_point=zp, y_q_min=lo, y_q_max=hi)
        done += 1
    if done:  # the dead QuantizeLinear of a now uint8 value would no longer type-check: drop them all now
        g.nodes = [n for n in g.nodes if id(n) not in dead]
    return done, left
