"""SqueezeExciteFusion: ``GlobalAveragePool -> [Fused]Conv 1x1 -> [Fused]Conv 1x1 -> Mul`` becomes one
``pycann.SqueezeExcite`` (ops/squeeze_excite.py).

Pattern (a squeeze-and-excitation block as torchvision's EfficientNet, MobileNetV3 and RegNetY
export it with either exporter, after canonicalisation turned ``ReduceMean`` over H, W into
GlobalAveragePool and ConvActivationFusion put each activation into its conv):
  S = GlobalAveragePool(X), X float32 of static shape (N, C, H, W);
  Z = Conv or FusedConv(S, W1[, B1]) and G = Conv or FusedConv(Z, W2[, B2]): 1x1 kernels, stride 1,
      no pads, dilation 1, group 1, constant float32 weights and biases, no residual input, no
      post-activation affine, any FusedConv activation;
  Y = Mul(X, G) or Mul(G, X), of X's shape.
Checks: S, Z and G have one reader each and are not graph outputs; Y's only reader is not an
elementwise op (ElementwiseChainFusion then takes the Mul into its chain: one pass over X for
``x * g + x`` instead of two). Each check that fails after
the pool matched is a missed fusion with its reason (atc --log=info). Shapes must be static
(``--input_shape`` or a static model): the shape-generic plan of a dynamic model keeps the
separate ops, and so does a compile with a ``--precision_mode`` that changes dtypes (PrecisionMode
chooses per op). The activations must be in their convs already: with ConvActivationFusion switched
off (``--fusion_switch_file``, e.g. ``ALL`` off) a block with activations does not match.
"""

from __future__ import annotations

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node
from pycann.ops.fused import ACTIVATIONS
from pycann.ops.fused_chain import CHAIN_BINARY, CHAIN_UNARY
from pycann.ops.squeeze_excite import DOMAIN

name = "SqueezeExciteFusion"


def _readers(ix: GraphIndex, value: str) -> str:
    """Why ``value`` has no sole reader: a graph output, or how many nodes read it (and which)."""
    if value in ix.outputs:
        return "is a graph output"
    users = ix.consumers.get(value, [])
    return f"has {len(users)} readers ({', '.join(u.op_type for u in users)})" if users else "has no reader"


def pointwise(ix: GraphIndex, n: Node, c_in: int, where: str) -> str | None:
    """Why conv ``n`` is not a 1x1 / stride-1 / unpadded / group-1 conv with a constant float32
    [M, ``c_in``, 1, 1] weight and a constant float32 [M] bias or none; None when it is."""
    w = ix.const(n.inputs[1])
    b = ix.const(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else None
    if w is None or w.dtype.name != "float32" or w.ndim != 4 or w.shape[1:] != (c_in, 1, 1):
        return f"{where}: weight is not a constant float32 [M, {c_in}, 1, 1]"
    if len(n.inputs) > 2 and n.inputs[2] and (b is None or b.dtype.name != "float32" or b.shape != (w.shape[0],)):
        return f"{where}: bias is not a constant float32 [{w.shape[0]}]"
    a = n.attrs
    if int(a.get("group", 1)) != 1 or any(int(v) != 1 for v in a.get("strides") or []) \
            or any(int(v) != 1 for v in a.get("dilations") or []) or any(int(v) != 0 for v in a.get("pads") or []) \
            or str(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER") \
            or list(a.get("kernel_shape") or [1, 1]) != [1, 1]:
        return f"{where}: not a 1x1 / stride-1 / unpadded / group-1 conv"
    return None


def _conv_1x1(ix: GraphIndex, n: Node | None, src: str, c_in: int,
              what: str = "the pooled value") -> tuple[str, str, tuple[str, float, float]] | str:
    """(W, B or "", activation) of a 1x1 pointwise conv of ``src`` with ``c_in`` input channels, or why not."""
    if n is None:
        return f"{what} {src} {_readers(ix, src)}"
    plain = is_op(n, "Conv")
    if not plain and not (n.domain == DOMAIN and n.op_type == "FusedConv"):
        return f"{n.op_type} {n.name or n.outputs[0]} reads it, not a 1x1 Conv"
    where = f"{n.op_type} {n.name or n.outputs[0]}"
    if n.inputs[0] != src or len(n.inputs) < 2 or (len(n.inputs) > 3 and n.inputs[3]):
        return f"{where}: not a conv of the pooled value alone (a residual input)"
    why = pointwise(ix, n, c_in, where)
    if why is not None:
        return why
    a = n.attrs
    if float(a.get("post_scale", 1.0)) != 1.0 or float(a.get("post_shift", 0.0)) != 0.0:
        return f"{where}: an affine after its activation"
    act = ("", 0.0, 0.0) if plain else (str(a.get("activation", "")), float(a.get("act_alpha", 0.0)),
                                        float(a.get("act_beta", 0.0)))
    if act[0] not in ACTIVATIONS:
        return f"{where}: activation {act[0]!r}"
    return n.inputs[1], (n.inputs[2] if len(n.inputs) > 2 else ""), act


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for pool in list(g.nodes):
        if rw.taken(pool) or not is_op(pool, "GlobalAveragePool"):
            continue
        x = pool.inputs[0]
        xs = ix.static_shape(x)
        d = ix.desc(x)
        where = pool.name or pool.outputs[0]
        c1 = ix.sole_consumer(pool.outputs[0])
        if xs is None or len(xs) != 4 or d is None or d.dtype != 1 or 0 in xs:
            # (not a block this op computes: dynamic or other-rank tensors keep the pool); a pool that feeds
            # a conv is said, so that --log=info tells why a dynamic model's blocks stayed apart
            if c1 is not None and c1.op_type in ("Conv", "FusedConv") and d is not None and d.dtype == 1 \
                    and d.shape is not None and len(d.shape) == 4 and xs is None:
                dims = ",".join(str(v) if isinstance(v, int) else str(v or "?") for v in d.shape)
                rw.missed.append(f"{where}: {x} has dynamic dims [{dims}] (a static --input_shape fuses it)")
            continue
        c = xs[1]
        first = _conv_1x1(ix, c1, pool.outputs[0], c)
        if isinstance(first, str) or c1 is None:
            if c1 is not None and c1.op_type in ("Conv", "FusedConv"):
                rw.missed.append(f"{where}: {first}")
            continue
        r = int(ix.const(first[0]).shape[0])  # type: ignore[union-attr]
        c2 = ix.sole_consumer(c1.outputs[0])
        second = _conv_1x1(ix, c2, c1.outputs[0], r, "the first conv's output")
        if isinstance(second, str) or c2 is None:
            rw.missed.append(f"{where}: second conv: {second}")
            continue
        if int(ix.const(second[0]).shape[0]) != c:  # type: ignore[union-attr]
            rw.missed.append(f"{where}: the second conv has {ix.const(second[0]).shape[0]} outputs, not {c}")  # type: ignore[union-attr]
            continue
        mul = ix.sole_consumer(c2.outputs[0])
        if not is_op(mul, "Mul") or mul is None or sorted(mul.inputs) != sorted([x, c2.outputs[0]]) \
                or ix.static_shape(mul.outputs[0]) != xs:
            rw.missed.append(f"{where}: the gate is not multiplied into the pooled tensor {x}")
            continue
        nxt = ix.sole_consumer(mul.outputs[0])
        if nxt is not None and not nxt.domain and nxt.op_type in CHAIN_BINARY | CHAIN_UNARY:
            # (PP-OCR det's x * se(x) + x: ElementwiseChainFusion computes the Mul and the ops after it
            # in one pass over X; the fused op would write Y and leave the Add a pass of its own)
            rw.missed.append(f"{where}: the gated tensor goes on into {nxt.op_type} {nxt.name or nxt.outputs[0]} "
                             "(an elementwise chain takes the Mul)")
            continue
        if rw.taken(c1, c2, mul):
            continue
        (w1, b1, act1), (w2, b2, act2) = first, second
        attrs = {"act1": act1[0], "act1_alpha": act1[1], "act1_beta": act1[2],
                 "act2": act2[0], "act2_alpha": act2[1], "act2_beta": act2[2]}
        fused = Node("SqueezeExcite", [x, w1, b1, w2, b2], list(mul.outputs), attrs,
                     name=f"{where}_se", domain=DOMAIN, opset=1)
        rw.replace([pool, c1, c2, mul], [fused])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    settings = ctx.options.get("precision")
    if settings is not None and settings.active:
        # PrecisionMode (next) gives each op its dtype; the fused op has none of its own (it would stay
        # float32 between two full-tensor Casts and leave the NHWC chain), so the block's ops stay apart
        return PassResult(graph, False, f"not applied: {settings.mode} chooses a dtype per op")
    n, missed = fuse(graph)
    if missed and "ConvActivationFusion" in ctx.options.get("disabled_passes", ()):
        # (the reasons below then name the activations' readers, not the switch that left them apart)
        missed.insert(0, "ConvActivationFusion is off: a block's convs must carry their activations to match")
    return PassResult(graph, n > 0, f"{n} squeeze-excitation blocks fused", missed)
