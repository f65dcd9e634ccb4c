"""Canonicalize: equivalent spellings of one computation become one form, before the fusion
passes look for their patterns (issue 23: graphs from other exporters missed every fusion).

Each rewrite is a row of ``REWRITES``: a name (printed by ``atc --log=info`` with its count), the
op types it anchors at, and a function that returns the replacement nodes, or a reason string when
the anchor does not qualify (printed as "not applied"), or None when there is nothing to say.

Rewrites (ONNX semantics, Operators.md):
- ``VariadicToBinary``: ``Sum``/``Max``/``Min`` of two inputs -> ``Add``/``Max``/``Min`` of two
  (binary form), of n > 2 -> a left-to-right chain, of one -> ``Identity``; ``Mean`` -> the
  ``Add`` chain times ``1/n`` (exact for n a power of two; within one rounding otherwise), for
  float32 / float64 (a float16 Mean, or Sum of more than two, stays: the op accumulates in float32,
  as ORT, where an Add chain in float16 would overflow).
- ``DivByConstant``: ``Div(x, c)`` with a float constant ``c`` whose reciprocal is finite ->
  ``Mul(x, 1/c)`` (exact when ``c`` is a power of two; otherwise within one float rounding, which
  is what ORT's own ``Div`` -> ``Mul`` rewrite accepts).
- ``GemmToMatMul``: ``Gemm(A, B, C)`` with ``transA = 0``, a rank-2 ``A`` and a constant ``B``
  (``alpha`` and ``transB`` folded into it, unless ``alpha * B`` overflows) and a constant or absent
  ``C`` (``beta`` folded in, unless that overflows) ->
  ``MatMul`` [+ ``Add``]: the form MatMulBiasActivationFusion matches.
- ``FlattenToReshape``: ``Flatten(axis)`` whose input dims after ``axis`` are known ->
  ``Reshape(x, [0,] * axis-part, prod(rest))``: one spelling for TransposeReshapeCancellation.
- ``PadIntoConv``: a zero constant ``Pad`` of only the spatial dims read by one ``Conv``
  (explicit pads) -> the Conv's ``pads`` grow by the Pad's.
- ``ReduceMeanToGlobalAveragePool``: ``ReduceMean`` of a float ``[N, C, H, W, ...]`` over exactly the
  spatial axes ``2..rank-1`` (attribute, or constant input from opset 18) with ``keepdims=1``, unless
  ``x - mean(x)`` follows (a normalisation, left to LayerNormFusion) -> ``GlobalAveragePool`` (the dynamo exporter's spelling of ``adaptive_avg_pool2d(1)``; same mean,
  summation order aside).
- activation spellings live in ``canonicalize_act`` (HardSigmoid, HardSwish, Mish; the version
  converter's Softmax-13 form, ``Softmax13Spelling``).
"""

from __future__ import annotations

import numpy as np

from pycann.dtypes import TensorDesc, to_numpy
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.canonicalize_act import ACT_REWRITES, SOFTMAX13_REWRITE, Rewrite
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node
from pycann.ge.ir.arrays import owned_copy

name = "Canonicalize"

def np_dtype(d: TensorDesc | None) -> np.dtype | None:
    """The numpy dtype of a described value, None when unknown."""
    if d is None or not d.dtype or d.kind != "tensor":
        return None
    try:
        return to_numpy(d.dtype)
    except Exception:  # an ONNX type numpy has no dtype for (string, ...)
        return None


def _fresh(g: Graph, base: str) -> str:
    """A new value name, reserved at once (rewrites are committed at the end of a sweep, so two
    anchors must not be handed the same name); InferShapes replaces the placeholder desc."""
    name = g.fresh_name(base)
    g.descs[name] = TensorDesc(0, None)
    return name


def _const_name(g: Graph, base: str, value: np.ndarray) -> str:
    n = g.fresh_name(base)
    arr = owned_copy(value)  # (a Gemm's transB weight: a tiled copy, ~6x numpy's for a transposed view)
    arr.flags.writeable = False
    g.initializers[n] = arr
    return n


# ------------------------------------------------------------------------------ variadic


def _variadic(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> tuple[list[Node], list[Node]] | str | None:
    ins = [i for i in n.inputs]
    if any(not i for i in ins) or not ins:
        return None
    if n.op_type in ("Max", "Min") and len(ins) == 2:
        return None  # already the binary form
    out = n.outputs[0]
    if len(ins) == 1:
        return [n], [Node("Identity", [ins[0]], [out], name=f"{n.name}_identity", opset=n.opset)]
    dt = np_dtype(ix.desc(ins[0]))
    wide = dt is not None and dt.kind == "f" and dt.itemsize >= 4  # float32 / float64
    half = dt is not None and (dt == np.float16 or dt.name == "bfloat16")
    if (n.op_type == "Mean" and not wide) or (n.op_type == "Sum" and len(ins) > 2 and half):
        # (float16: the op accumulates in float32, as ORT; an Add chain in float16 overflows past 65504)
        return f"{n.op_type} {n.name}: dtype {dt} kept (a Mean of float32 / float64 and a Sum of no 16-bit float are rewritten)"
    base = "Add" if n.op_type in ("Sum", "Mean") else n.op_type
    new: list[Node] = []
    acc = ins[0]
    for k, x in enumerate(ins[1:]):
        last = k == len(ins) - 2 and n.op_type != "Mean"
        y = out if last else _fresh(g, f"{n.name or base}_acc{k}")
        new.append(Node(base, [acc, x], [y], name=f"{n.name}_{base.lower()}{k}", opset=n.opset))
        acc = y
    if n.op_type == "Mean":
        assert dt is not None
        k_name = _const_name(g, f"{n.name}_inv_n", np.asarray(1.0 / len(ins), dtype=dt))
        new.append(Node("Mul", [acc, k_name], [out], name=f"{n.name}_scale", opset=n.opset))
    return [n], new


# ------------------------------------------------------------------------------ Div by constant


def _div_const(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> tuple[list[Node], list[Node]] | str | None:
    c = ix.const(n.inputs[1])
    if c is None or c.dtype.kind != "f":
        return None
    if np_dtype(ix.desc(n.inputs[0])) != c.dtype:
        return f"Div {n.name}: dtype of x unknown or differs from the constant's"
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inv = (np.asarray(1.0, dtype=c.dtype) / c).astype(c.dtype)
    if not np.all(np.isfinite(inv)) or np.any(c == 0) or np.any(np.abs(inv) < np.finfo(c.dtype).tiny):
        return f"Div {n.name}: constant has 0, inf or a reciprocal outside the normal range"
    k = _const_name(g, f"{n.inputs[1]}_reciprocal", inv)
    return [n], [Node("Mul", [n.inputs[0], k], list(n.outputs), name=f"{n.name}_as_mul", opset=n.opset)]


# ------------------------------------------------------------------------------ Gemm


def _gemm(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> tuple[list[Node], list[Node]] | str | None:
    if int(n.attrs.get("transA", 0)):
        return f"Gemm {n.name}: transA=1 kept"
    b = ix.const(n.inputs[1])
    a = ix.desc(n.inputs[0])
    if b is None or b.dtype.kind != "f" or b.ndim != 2:
        return f"Gemm {n.name}: B is not a constant float matrix"
    if a is None or a.shape is None or len(a.shape) != 2:
        return f"Gemm {n.name}: A's rank is not known to be 2"
    alpha = float(n.attrs.get("alpha", 1.0))
    beta = float(n.attrs.get("beta", 1.0))
    c_name = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
    c = ix.const(c_name) if c_name else None
    if c_name and (c is None or c.dtype != b.dtype):
        return f"Gemm {n.name}: C is not a constant of B's dtype"
    bt = b.T if int(n.attrs.get("transB", 0)) else b
    if alpha != 1.0:
        with np.errstate(over="ignore", invalid="ignore"):
            bt = (bt.astype(np.float64) * alpha).astype(b.dtype)
        if np.isfinite(b).all() and not np.isfinite(bt).all():  # alpha * (A @ B) may be finite: A @ inf is not
            return f"Gemm {n.name}: alpha * B overflows {b.dtype}"
    cc = None
    if c is not None and beta not in (0.0, 1.0):
        with np.errstate(over="ignore", invalid="ignore"):
            cc = (c.astype(np.float64) * beta).astype(c.dtype)
        if np.isfinite(c).all() and not np.isfinite(cc).all():
            return f"Gemm {n.name}: beta * C overflows {c.dtype}"
    w = _const_name(g, f"{n.inputs[1]}_matmul", bt)
    if c is None or (beta == 0.0):
        return [n], [Node("MatMul", [n.inputs[0], w], list(n.outputs), name=f"{n.name}_matmul", opset=13)]
    cc = c if cc is None else cc
    bias = _const_name(g, f"{c_name}_bias", cc)
    mid = _fresh(g, f"{n.name}_mm")
    return [n], [Node("MatMul", [n.inputs[0], w], [mid], name=f"{n.name}_matmul", opset=13),
                 Node("Add", [mid, bias], list(n.outputs), name=f"{n.name}_bias", opset=14)]


# ------------------------------------------------------------------------------ Flatten


def _prod(dims: tuple[object, ...]) -> int:
    p = 1
    for v in dims:
        p *= int(v)  # type: ignore[call-overload]
    return p


def _flatten(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> tuple[list[Node], list[Node]] | str | None:
    d = ix.desc(n.inputs[0])
    if d is None or d.shape is None:
        return None
    rank = len(d.shape)
    axis = int(n.attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    rest = d.shape[axis:]
    head = d.shape[:axis]
    if not all(isinstance(v, int) for v in rest):
        return f"Flatten {n.name}: dims after axis {axis} are not known"
    inner = _prod(rest)
    attrs: dict[str, object] = {}
    if all(isinstance(v, int) for v in head):
        first = _prod(head)
        if 0 in (first, inner):
            attrs["allowzero"] = 1  # an empty dim is a literal 0, not Reshape's "copy this dim"
    elif axis == 1 and inner:
        first = 0  # Reshape's 0 copies the (symbolic) batch dim; valid for a 0-sized batch too
    elif axis == 1:
        return f"Flatten {n.name}: the dims after a symbolic batch are empty (0 would copy, not be 0)"
    else:
        return f"Flatten {n.name}: several leading dims are symbolic"
    shape = _const_name(g, f"{n.name}_shape", np.array([first, inner], np.int64))
    return [n], [Node("Reshape", [n.inputs[0], shape], list(n.outputs), attrs, name=f"{n.name}_as_reshape",
                      opset=14)]


# ------------------------------------------------------------------------------ Pad into Conv


def _pad_conv(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> tuple[list[Node], list[Node]] | str | None:
    conv = ix.sole_consumer(n.outputs[0])
    if not is_op(conv, "Conv") or conv is None or conv.inputs[0] != n.outputs[0] or rw.taken(conv):
        return None
    why = f"Pad {n.name} -> Conv {conv.name}: "
    if n.attrs.get("mode", "constant") not in ("constant", b"constant"):
        return why + "Pad mode is not constant"
    if str(conv.attrs.get("auto_pad", "NOTSET")) not in ("NOTSET", "b'NOTSET'"):
        return why + "Conv uses auto_pad"
    pads = ix.const(n.inputs[1]) if len(n.inputs) > 1 else None
    if pads is None:
        return why + "pads are not constant"
    value = ix.const(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else np.zeros(1)
    if value is None or value.size != 1 or float(value.reshape(-1)[0]) != 0.0:
        return why + "pad value is not a constant 0"
    d = ix.desc(n.inputs[0])
    if d is None or d.shape is None:
        return why + "input rank unknown"
    rank = len(d.shape)
    axes = list(range(rank))
    if len(n.inputs) > 3 and n.inputs[3]:
        ax = ix.const(n.inputs[3])
        if ax is None:
            return why + "axes are not constant"
        axes = [int(a) + rank if int(a) < 0 else int(a) for a in ax.reshape(-1)]
    p = [int(v) for v in pads.reshape(-1)]
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = p[i], p[len(axes) + i]
    if any(v < 0 for v in full):
        return why + "negative pads (a crop) kept"
    if full[0] or full[1] or full[rank] or full[rank + 1]:
        return why + "Pad pads the batch or channel dim"
    sp = rank - 2
    old = [int(v) for v in conv.attrs.get("pads", [0] * (2 * sp))]
    new_pads = [old[i] + full[2 + i] for i in range(sp)] + [old[sp + i] + full[rank + 2 + i] for i in range(sp)]
    attrs = dict(conv.attrs)
    attrs["pads"] = new_pads
    fused = Node("Conv", [n.inputs[0], *conv.inputs[1:]], list(conv.outputs), attrs, name=conv.name,
                 domain=conv.domain, opset=conv.opset, origin=[*n.origin, *conv.origin])
    return [n, conv], [fused]


# ------------------------------------------------------------------------------ ReduceMean over H, W


def _reduce_mean_gap(ix: GraphIndex, g: Graph, n: Node, rw: Rewrites) -> tuple[list[Node], list[Node]] | str | None:
    d = ix.desc(n.inputs[0])
    if d is None or d.shape is None or len(d.shape) < 4 or d.dtype not in (1, 10, 11):
        return None  # not an image (rank-3 means are LayerNorm / GroupNorm statistics), or dtype unknown
    rank = len(d.shape)
    if len(n.inputs) > 1 and n.inputs[1]:  # opset 18: axes as an input
        c = ix.const(n.inputs[1])
        if c is None:
            return f"ReduceMean {n.name}: axes are not constant"
        axes = [int(v) for v in np.asarray(c).reshape(-1)]
    else:
        axes = [int(v) for v in n.attrs.get("axes", [])]
    if not axes or not int(n.attrs.get("keepdims", 1)):
        return f"ReduceMean {n.name}: keepdims=0 or no axes kept"
    if sorted(a + rank if a < 0 else a for a in axes) != list(range(2, rank)):
        return None  # another reduction (LayerNorm's last axis, ...): not a candidate
    if 0 in d.shape[2:]:
        return f"ReduceMean {n.name}: an empty spatial dim (the mean of nothing is 0, GlobalAveragePool's NaN)"
    if any(c.op_type == "Sub" and n.inputs[0] in c.inputs for c in ix.consumers.get(n.outputs[0], [])):
        return f"ReduceMean {n.name}: x - mean(x) follows (a normalisation: LayerNormFusion's pattern)"
    return [n], [Node("GlobalAveragePool", [n.inputs[0]], list(n.outputs), name=f"{n.name}_as_gap", opset=n.opset)]


REWRITES: tuple[Rewrite, ...] = (
    Rewrite("VariadicToBinary", ("Sum", "Mean", "Max", "Min"), _variadic),
    Rewrite("ReduceMeanToGlobalAveragePool", ("ReduceMean",), _reduce_mean_gap),
    Rewrite("DivByConstant", ("Div",), _div_const),
    Rewrite("GemmToMatMul", ("Gemm",), _gemm),
    SOFTMAX13_REWRITE,
    Rewrite("FlattenToReshape", ("Flatten",), _flatten),
    Rewrite("PadIntoConv", ("Pad",), _pad_conv),
    *ACT_REWRITES,
)


def canonicalize(g: Graph) -> tuple[dict[str, int], list[str]]:
    """Apply every row of ``REWRITES`` once over ``g`` (top level); returns counts per rewrite and
    the reasons candidates were kept."""
    counts: dict[str, int] = {}
    missed: list[str] = []
    for r in REWRITES:
        ix = GraphIndex(g)
        rw = Rewrites(g)
        for node in list(g.nodes):
            if rw.taken(node) or not is_op(node, *r.anchors):
                continue
            res = r.fn(ix, g, node, rw)
            if isinstance(res, str):
                missed.append(f"{r.name}: {res}")
            elif res is not None:
                old, new = res
                if rw.taken(*old):
                    continue
                rw.replace(old, new)
                counts[r.name] = counts.get(r.name, 0) + 1
        rw.commit()
    return counts, missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    counts, missed = canonicalize(graph)
    report = ", ".join(f"{k} x{v}" for k, v in counts.items()) or "nothing to rewrite"
    return PassResult(graph, bool(counts), report, missed)
