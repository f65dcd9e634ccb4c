"""What a float reader of a bypassed QuantizeLinear sees (QuantizedConvFusion under
``--op_select_implmode=high_performance``): the float value, rounding dropped, with the two things
that are not rounding kept: an absorbed Clip (the model's own activation, e.g. ReLU6) and a
saturation at 0 that a quantiser folded a Relu / ReLU6 into (docs/amct.md "What a float reader sees")."""

from __future__ import annotations

import numpy as np

from pycann.ge.compile.passes.pattern import GraphIndex
from pycann.ge.ir import Graph, Node


def range_clip(g: Graph, ix: GraphIndex | None, x: str, scale: float, zp: int, unsigned: bool, base: str,
                bounds: tuple[float | None, float | None] | None = None) -> tuple[list[Node], str]:
    """(nodes, value) for a float reader of ``x`` whose QuantizeLinear (scale, zp) is bypassed.

    With ``bounds`` (a Clip the fused layer had absorbed, ``x`` its input): that Clip again, as a
    new node (the model's own activation, e.g. ReLU6; the absorbed node may be gone with an int8
    reader). Otherwise the QuantizeLinear's saturation is kept only where it is an activation the
    quantiser folded in: a zero point at the type's minimum (the range starts at 0: ONNX Runtime
    removes a Relu / ReLU6 Clip before such a QuantizeLinear) on a value no Relu / Clip >= 0 already
    bounds; then ``Clip(x, 0, top of the range)``. Elsewhere (AMCT's models keep their activations)
    the value passes unclamped: only rounding and the outlier clamp of the calibrated range drop."""
    qmin, qmax = (0, 255) if unsigned else (-128, 127)
    if bounds is not None:
        lo, hi = bounds
    elif zp == qmin and (ix is None or not nonneg(ix, x)):
        lo, hi = 0.0, float(np.float32((qmax - zp) * scale))
    else:
        return [], x
    names = [g.fresh_name(f"{base}_{k}") for k in ("lo", "hi", "clip")]
    g.initializers[names[0]] = np.array(-np.inf if lo is None else lo, np.float32)
    g.initializers[names[1]] = np.array(np.inf if hi is None else hi, np.float32)
    return [Node("Clip", [x, names[0], names[1]], [names[2]], {}, name=f"{base}_range", opset=13)], names[2]


def nonneg(ix: GraphIndex, value: str, depth: int = 4) -> bool:
    """``value`` is provably >= 0: a Relu's, a Clip's with a constant lower bound >= 0, or that
    through pooling / reshaping ops (an explicit activation: nothing was folded)."""
    p = ix.producers.get(value)
    if p is None or depth == 0:
        return False
    if p.op_type == "Relu" or (p.op_type == "QuantConv" and p.attrs.get("activation") == "Relu"):
        return True
    if p.op_type == "QuantConv" and p.attrs.get("activation") == "Clip":
        return float(p.attrs.get("clip_min", -1.0)) >= 0
    if p.op_type == "Clip" and len(p.inputs) > 1 and p.inputs[1]:
        lo = ix.scalar(p.inputs[1])
        return lo is not None and lo >= 0
    if p.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Flatten", "Transpose"):
        return nonneg(ix, p.inputs[0], depth - 1)
    return False
