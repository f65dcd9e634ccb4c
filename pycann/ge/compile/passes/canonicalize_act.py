"""Canonical activation spellings, part of the Canonicalize pass (``canonicalize.py``).

Exporters write the hard activations and Mish as small subgraphs (TensorFlow/Keras and
PaddlePaddle through Relu6 = Clip(0, 6); PyTorch before opset 14/18). Each becomes its ONNX op,
which ConvActivationFusion and MatMulBiasActivationFusion take as one post-op:

- ``HardSigmoidSpelling``: ``Mul(Clip(Add(x, 3), 0, 6), 1/6)`` and ``Clip(Add(Mul(x, a), b), 0, 1)``
  -> ``HardSigmoid(alpha, beta)`` (``max(0, min(1, alpha * x + beta))``, Operators.md).
  Runs after DivByConstant, so ``Div(., 6)`` arrives here as ``Mul(., 1/6)``.
- ``HardSwishSpelling``: ``Mul(x, HardSigmoid(x; 1/6, 0.5))`` and
  ``Mul(Mul(x, Clip(Add(x, 3), 0, 6)), 1/6)`` -> ``HardSwish(x)``.
- ``MishSpelling``: ``Mul(x, Tanh(Softplus(x)))`` -> ``Mish(x)`` (opset 18).
- ``Softmax13Spelling`` (a row of its own in ``canonicalize.REWRITES``, before FlattenToReshape):
  ``Reshape(Softmax(Flatten(x, axis=r-1), axis=-1 or 1), Shape(x))`` for ``x`` of rank ``r`` (or
  the Reshape to ``x``'s static shape that constant folding makes of it) ->
  ``Softmax(x, axis=-1)``. ONNX's version converter writes that form for every Softmax it lifts
  from opset < 13 (AMCT and ONNX Runtime's quantiser lift models to 13 for per-channel
  DequantizeLinear); unrewritten, AttentionFusion misses it and a quantised transformer runs its
  attention unfused (PP-OCRv4 rec's INT8 plan was slower than fp32 by that).

All keep NaN as NaN (every spelling and the op propagate it) and agree to within float rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node

Result = tuple[list[Node], list[Node]] | str | None


@dataclass(frozen=True)
class Rewrite:
    """One canonical rewrite: ``fn(ix, g, anchor, rw)`` returns (replaced nodes, new nodes), a
    reason the anchor does not qualify (``atc --log=info``), or None (not a candidate)."""

    name: str
    anchors: tuple[str, ...]
    fn: Callable[[GraphIndex, Graph, Node, Rewrites], Result]


_FLOAT_TYPES = (1, 10, 11, 16)  # ONNX float, float16, double, bfloat16: the dtypes HardSigmoid takes


def _close(v: float | None, want: float) -> bool:
    return v is not None and abs(v - want) <= 1e-6 * max(1.0, abs(want))


def clip_bounds(ix: GraphIndex, clip: Node) -> tuple[float | None, float | None]:
    """Constant (lo, hi) of a Clip (inputs from opset 11, attributes before; None = absent or not
    constant)."""
    if clip.opset and clip.opset < 11:
        return float(clip.attrs.get("min", -3.4e38)), float(clip.attrs.get("max", 3.4e38))
    lo = ix.scalar(clip.inputs[1]) if len(clip.inputs) > 1 and clip.inputs[1] else None
    hi = ix.scalar(clip.inputs[2]) if len(clip.inputs) > 2 and clip.inputs[2] else None
    return lo, hi


def _scalar_operand(ix: GraphIndex, n: Node, value: str) -> float | None:
    other = ix.other_input(n, value)
    return ix.scalar(other, within=value) if other else None


def _relu6_of_x_plus_3(ix: GraphIndex, clip: Node) -> tuple[Node, str] | None:
    """For ``Clip(Add(x, 3), 0, 6)``: (the Add, x); the Add read only by the Clip."""
    if not is_op(clip, "Clip") or clip_bounds(ix, clip) != (0.0, 6.0):
        return None
    add = ix.producers.get(clip.inputs[0])
    if not is_op(add, "Add") or add is None or ix.sole_consumer(add.outputs[0]) is not clip:
        return None
    for x in add.inputs:
        if ix.const(x) is None and _close(_scalar_operand(ix, add, x), 3.0):
            return add, x
    return None


def _hard_sigmoid(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> Result:
    if n.op_type == "Mul":  # Mul(Clip(Add(x, 3), 0, 6), 1/6)
        for c_out in n.inputs:
            clip = ix.producers.get(c_out)
            if clip is None or not _close(_scalar_operand(ix, n, c_out), 1 / 6):
                continue
            m = _relu6_of_x_plus_3(ix, clip)
            if m is None or ix.sole_consumer(c_out) is not n:
                continue
            add, x = m
            return [add, clip, n], [Node("HardSigmoid", [x], list(n.outputs), {"alpha": 1 / 6, "beta": 0.5},
                                         name=f"{n.name}_hard_sigmoid", opset=6)]
        return None
    # Clip(Add(Mul(x, a), b), 0, 1)
    if clip_bounds(ix, n) != (0.0, 1.0):
        return None
    d = ix.desc(n.outputs[0])
    if d is None or d.dtype not in _FLOAT_TYPES:
        return None  # an integer Mul -> Add -> Clip(0, 1) is no HardSigmoid (the op takes floats only)
    a_node = ix.producers.get(n.inputs[0])
    if not is_op(a_node, "Add") or a_node is None or ix.sole_consumer(a_node.outputs[0]) is not n:
        return None
    add = a_node
    for mo in add.inputs:
        mul = ix.producers.get(mo)
        b = _scalar_operand(ix, add, mo)
        if not is_op(mul, "Mul") or mul is None or b is None or ix.sole_consumer(mo) is not add:
            continue
        for x in mul.inputs:
            a = _scalar_operand(ix, mul, x)
            if a is not None and ix.const(x) is None:
                return [mul, add, n], [Node("HardSigmoid", [x], list(n.outputs), {"alpha": a, "beta": b},
                                            name=f"{n.name}_hard_sigmoid", opset=6)]
    return None


def _hard_swish(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> Result:
    # Mul(x, HardSigmoid(x; 1/6, 0.5))
    for hs_out in n.inputs:
        hs = ix.producers.get(hs_out)
        if not is_op(hs, "HardSigmoid") or hs is None:
            continue
        x = hs.inputs[0]
        if ix.other_input(n, hs_out) != x or ix.sole_consumer(hs_out) is not n:
            continue
        if not (_close(float(hs.attrs.get("alpha", 0.2)), 1 / 6) and _close(float(hs.attrs.get("beta", 0.5)), 0.5)):
            return f"{n.name}: x * HardSigmoid(x) with alpha/beta other than 1/6, 0.5 is no HardSwish"
        return [hs, n], [Node("HardSwish", [x], list(n.outputs), name=f"{n.name}_hard_swish", opset=14)]
    # Mul(Mul(x, Clip(Add(x, 3), 0, 6)), 1/6)
    for inner_out in n.inputs:
        inner = ix.producers.get(inner_out)
        if not is_op(inner, "Mul") or inner is None or not _close(_scalar_operand(ix, n, inner_out), 1 / 6):
            continue
        if ix.sole_consumer(inner_out) is not n:
            continue
        for c_out in inner.inputs:
            clip_n = ix.producers.get(c_out)
            m = _relu6_of_x_plus_3(ix, clip_n) if clip_n is not None else None
            if clip_n is None or m is None or ix.other_input(inner, c_out) != m[1] or ix.sole_consumer(c_out) is not inner:
                continue
            add, x = m
            return [add, clip_n, inner, n], [Node("HardSwish", [x], list(n.outputs), name=f"{n.name}_hard_swish",
                                                  opset=14)]
    return None


def _mish(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> Result:
    for t_out in n.inputs:
        tanh = ix.producers.get(t_out)
        if not is_op(tanh, "Tanh") or tanh is None or ix.sole_consumer(t_out) is not n:
            continue
        sp = ix.producers.get(tanh.inputs[0])
        if not is_op(sp, "Softplus") or sp is None or ix.sole_consumer(sp.outputs[0]) is not tanh:
            continue
        x = sp.inputs[0]
        if ix.other_input(n, t_out) != x:
            continue
        return [sp, tanh, n], [Node("Mish", [x], list(n.outputs), name=f"{n.name}_mish", opset=18)]
    return None


def _softmax13(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> Result:
    fl = ix.producers.get(n.inputs[0])
    if not is_op(fl, "Flatten") or fl is None or ix.sole_consumer(fl.outputs[0]) is not n:
        return None
    rs = ix.sole_consumer(n.outputs[0])
    if not is_op(rs, "Reshape") or rs is None or len(rs.inputs) < 2 or rs.inputs[0] != n.outputs[0]:
        return None
    shp = ix.producers.get(rs.inputs[1])
    x = fl.inputs[0]
    d = ix.desc(x)
    # the target shape is Shape(x), or, where x's shape is static, that shape folded to a constant
    of_x = is_op(shp, "Shape") and shp is not None and shp.inputs[0] == x and not shp.attrs.get("start") \
        and not shp.attrs.get("end")
    folded = ix.const(rs.inputs[1])
    if not of_x and not (folded is not None and d is not None and d.shape is not None
                         and all(isinstance(v, int) for v in d.shape) and folded.tolist() == list(d.shape)):
        return None
    if d is None or d.shape is None:
        return f"Softmax {n.name}: the rank of the Flatten's input is not known"
    rank = len(d.shape)
    axis = int(fl.attrs.get("axis", 1))
    if (axis + rank if axis < 0 else axis) != rank - 1 or int(n.attrs.get("axis", -1)) not in (-1, 1):
        return f"Softmax {n.name}: the Flatten merges more than the last axis (not one Softmax over an axis)"
    return [fl, n, rs], [Node("Softmax", [x], list(rs.outputs), {"axis": -1}, name=f"{n.name}_axis", opset=13)]


SOFTMAX13_REWRITE = Rewrite("Softmax13Spelling", ("Softmax",), _softmax13)

ACT_REWRITES: tuple[Rewrite, ...] = (
    Rewrite("HardSigmoidSpelling", ("Mul", "Clip"), _hard_sigmoid),
    Rewrite("HardSwishSpelling", ("Mul",), _hard_swish),
    Rewrite("MishSpelling", ("Mul",), _mish),
)
