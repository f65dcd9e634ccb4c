"""SqueezeExciteProjectFusion: ``pycann.SqueezeExcite -> [Fused]Conv 1x1`` becomes one
``pycann.SqueezeExciteProject`` (ops/squeeze_excite.py), whose kernel scales the projection's weights by
the gate instead of writing the gated tensor.

Pattern (MobileNetV3's and EfficientNet's inverted residual block: the depthwise conv, its SE block,
then the linear 1x1 projection, with the block's residual added in the projection's FusedConv):
  Y = SqueezeExcite(X, ...) of static shape (N, C, H, W), read by nothing but
  P = Conv or FusedConv(Y, Wp[, Bp][, Z]): a 1x1 kernel, stride 1, no pads, dilation 1, group 1, constant
      float32 Wp (M, C, 1, 1) and Bp (M), Z (FusedConv's residual) float32 of P's static shape or absent,
      no activation and no affine after it (RegNetY's projection has a ReLU after its residual: it stays);
  H * W >= MIN_PIXELS_PER_OUTPUT * M: the gate then scales far fewer numbers in Wp (M x C per image, which
  oneDNN also repacks on every call) than in Y (C x H x W). Measured in EfficientNet-B0 (bench/RESULTS.md):
  blocks at H*W / M of 78 to 20 ran ~2x as fast fused, those at 1.75 to 2.45 (14 x 14, M = 80..112) no
  faster or slower; so the 14 x 14 and 7 x 7 stages keep their Mul.
Each check that fails on a block whose output a conv reads is a missed fusion with its reason
(atc --log=info). Runs after SqueezeExciteFusion (which makes the SE ops; static shapes, no
dtype-changing ``--precision_mode``), before the elementwise fusions.
"""

from __future__ import annotations

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.fuse_squeeze_excite import pointwise
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node
from pycann.ops.squeeze_excite import DOMAIN

name = "SqueezeExciteProjectFusion"
MIN_PIXELS_PER_OUTPUT = 4


def _projection(ix: GraphIndex, se: Node, p: Node, xs: tuple[int, ...]) -> list[str] | str:
    """The fused op's inputs after the block's five (Wp, Bp or "", Z or ""), or why ``p`` is not fused."""
    where = f"{p.op_type} {p.name or p.outputs[0]}"
    plain = is_op(p, "Conv")
    if not plain and not (p.domain == DOMAIN and p.op_type == "FusedConv"):
        return f"{where} reads it, not a 1x1 Conv"
    if p.inputs[0] != se.outputs[0] or len(p.inputs) < 2 or se.outputs[0] in p.inputs[1:]:
        return f"{where} does not read the block's output as its X alone"
    n, c, h, w = xs
    why = pointwise(ix, p, c, where)
    if why is not None:
        return why
    m = int(ix.const(p.inputs[1]).shape[0])  # type: ignore[union-attr]
    bias = p.inputs[2] if len(p.inputs) > 2 else ""
    a = p.attrs
    if not plain and (str(a.get("activation", "")) or float(a.get("post_scale", 1.0)) != 1.0
                      or float(a.get("post_shift", 0.0)) != 0.0):
        return f"{where}: an activation or affine after the projection ({a.get('activation') or 'affine'})"
    z = p.inputs[3] if len(p.inputs) > 3 else ""
    if z:
        d = ix.desc(z)
        if d is None or d.dtype != 1 or ix.static_shape(z) != (n, m, h, w):
            return f"{where}: residual {z} is not float32 of the output's shape [{n}, {m}, {h}, {w}]"
    if h * w < MIN_PIXELS_PER_OUTPUT * m:
        return (f"{where}: {m} outputs for H*W = {h * w} pixels (< {MIN_PIXELS_PER_OUTPUT} per output: gating"
                " the weights would cost as much as gating X)")
    return [p.inputs[1], bias, z]


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for se in list(g.nodes):
        if rw.taken(se) or se.domain != DOMAIN or se.op_type != "SqueezeExcite":
            continue
        xs = ix.static_shape(se.inputs[0])
        p = ix.sole_consumer(se.outputs[0])
        if p is None or xs is None or p.op_type not in ("Conv", "FusedConv"):
            continue
        extra = _projection(ix, se, p, xs)
        if isinstance(extra, str):
            rw.missed.append(f"{se.name or se.outputs[0]}: {extra}")
            continue
        if rw.taken(p):
            continue
        ins = list(se.inputs) + [""] * (5 - len(se.inputs))
        fused = Node("SqueezeExciteProject", [*ins, *extra], list(p.outputs), dict(se.attrs),
                     name=f"{se.name or se.outputs[0]}_project", domain=DOMAIN, opset=1)
        rw.replace([se, p], [fused])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} squeeze-excitation blocks fused with their projection", missed)
