"""ATen-level FX graphs (AOTAutograd's forward and backward graphs) lowered to ONNX for GE.

AOTAutograd hands the npu backend functional graphs of ATen overloads (``aten.convolution``,
``aten.addmm``, ``aten.where.self``, ...) whose nodes carry FakeTensor metadata
(``node.meta["val"]``: shape and dtype). ``CONVERTERS`` maps each overload that GE's ONNX op
set computes exactly to a function emitting the ONNX nodes (opset 17); ``supported(node)`` says
whether a node can go to GE; ``to_onnx(gm)`` lowers a graph made only of supported nodes (one
partition of a forward or backward graph) to an ONNX model whose inputs are the graph's
placeholders and whose outputs are its outputs, in order. Semantics are ATen's
(``native_functions.yaml``): binary ops cast their operands to the result dtype FX recorded,
comparisons to the promoted dtype; shape ops use the static shapes of the metadata.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
aten = torch.ops.aten

_DTYPES: dict[torch.dtype, int] = {
    torch.float32: TensorProto.FLOAT, torch.float64: TensorProto.DOUBLE, torch.float16: TensorProto.FLOAT16,
    torch.int64: TensorProto.INT64, torch.int32: TensorProto.INT32, torch.bool: TensorProto.BOOL,
    torch.int8: TensorProto.INT8, torch.uint8: TensorProto.UINT8,
}
_NP: dict[torch.dtype, Any] = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64,
    torch.int32: np.int32, torch.bool: np.bool_, torch.int8: np.int8, torch.uint8: np.uint8,
}


class LoweringError(ValueError):
    """A node cannot be expressed in ONNX for GE (names the node and the reason)."""


def _val(n: Any) -> Any:
    """The node's value metadata: the concrete one ``to_onnx`` recorded (a meta tensor), else
    FX's FakeTensor."""
    if not isinstance(n, torch.fx.Node):
        return None
    return n.meta.get("pycann_val", n.meta.get("val"))


def _as_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(_as_meta(e) for e in x)
    return x


def _record_concrete(gm: torch.fx.GraphModule, args: Sequence[Any]) -> None:
    """Run ``gm`` once on ``args`` and store every node's concrete shape and dtype (for graphs
    whose metadata has symbolic sizes)."""

    class _Rec(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            r = super().run_node(n)
            n.meta["pycann_val"] = _as_meta(r)
            return r

    from pycann.torch._alias import to_cpu

    # on CPU views of the inputs: the ops are torch's either way, and nothing is reported as an
    # npu op (or a CPU fallback) for this shape-finding run
    _Rec(gm).run(*[to_cpu(a) if isinstance(a, torch.Tensor) and a.device.type == "npu" else a for a in args])


@dataclass
class _Ctx:
    """The ONNX graph being built: node list, constants, and FX node -> ONNX value names."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    names: dict[torch.fx.Node, list[str]] = field(default_factory=dict)
    counter: int = 0

    def fresh(self, hint: str) -> str:
        self.counter += 1
        return f"{hint}_{self.counter}"

    def add(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def const(self, value: Any, dtype: torch.dtype) -> str:
        name = self.fresh("c")
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=_NP[dtype]), name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(list(values), torch.int64)

    def value(self, a: Any, dtype: torch.dtype) -> str:
        """An FX argument (node or Python scalar) as an ONNX value of ``dtype``."""
        if isinstance(a, torch.fx.Node):
            name = self.names[a][0]
            v = _val(a)
            if v is not None and v.dtype != dtype:
                name = self.add("Cast", [name], to=_DTYPES[dtype])[0]
            return name
        return self.const(a, dtype)


Converter = Callable[[_Ctx, torch.fx.Node], list[str]]
CONVERTERS: dict[Any, Converter] = {}


def _reg(*ops: Any) -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for op in ops:
            CONVERTERS[op] = fn
        return fn

    return deco


def _out(node: torch.fx.Node) -> Any:
    v = _val(node)
    if v is None:
        raise LoweringError(f"{node.format_node()}: no shape metadata (meta['val'])")
    return v


def _A(node: torch.fx.Node) -> tuple[Any, ...]:  # noqa: N802 - FX arguments, typed loosely
    return tuple(node.args)


def _K(node: torch.fx.Node) -> dict[str, Any]:  # noqa: N802
    return dict(node.kwargs)


def _arg(node: torch.fx.Node, i: int, name: str, default: Any = None) -> Any:
    if i < len(node.args):
        return _A(node)[i]
    return _K(node).get(name, default)


# -- elementwise ---------------------------------------------------------------------------------

_UNARY: dict[Any, str] = {aten.relu.default: "Relu", aten.neg.default: "Neg", aten.exp.default: "Exp", aten.log.default: "Log",
          aten.sqrt.default: "Sqrt", aten.sigmoid.default: "Sigmoid", aten.tanh.default: "Tanh",
          aten.abs.default: "Abs", aten.reciprocal.default: "Reciprocal", aten.erf.default: "Erf",
          aten.clone.default: "Identity", aten.alias.default: "Identity", aten.detach.default: "Identity",
          aten.lift_fresh_copy.default: "Identity"}


@_reg(*_UNARY)
def _unary(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    dt = _out(node).dtype
    return ctx.add(_UNARY[node.target], [ctx.value(_A(node)[0], dt)])


@_reg(aten.rsqrt.default)
def _rsqrt(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    dt = _out(node).dtype
    return ctx.add("Reciprocal", ctx.add("Sqrt", [ctx.value(_A(node)[0], dt)]))


_BINARY: dict[Any, str] = {aten.add.Tensor: "Add", aten.add.Scalar: "Add", aten.sub.Tensor: "Sub", aten.sub.Scalar: "Sub",
           aten.mul.Tensor: "Mul", aten.mul.Scalar: "Mul", aten.div.Tensor: "Div", aten.div.Scalar: "Div",
           aten.pow.Tensor_Scalar: "Pow", aten.pow.Tensor_Tensor: "Pow", aten.maximum.default: "Max",
           aten.minimum.default: "Min"}


@_reg(*_BINARY)
def _binary(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    dt = _out(node).dtype
    a = ctx.value(_A(node)[0], dt)
    b = ctx.value(_A(node)[1], dt)
    alpha = _K(node).get("alpha", 1)
    if alpha != 1:
        b = ctx.add("Mul", [b, ctx.const(alpha, dt)])[0]
    return ctx.add(_BINARY[node.target], [a, b])


_COMPARE: dict[Any, tuple[str, bool]] = {aten.le.Scalar: ("LessOrEqual", False), aten.le.Tensor: ("LessOrEqual", False),
            aten.lt.Scalar: ("Less", False), aten.lt.Tensor: ("Less", False),
            aten.ge.Scalar: ("GreaterOrEqual", False), aten.ge.Tensor: ("GreaterOrEqual", False),
            aten.gt.Scalar: ("Greater", False), aten.gt.Tensor: ("Greater", False),
            aten.eq.Scalar: ("Equal", False), aten.eq.Tensor: ("Equal", False),
            aten.ne.Scalar: ("Equal", True), aten.ne.Tensor: ("Equal", True)}


def _promoted(a: Any, b: Any) -> torch.dtype:
    va, vb = _val(a), _val(b)
    if va is not None and vb is not None:
        return torch.promote_types(va.dtype, vb.dtype)
    t = va if va is not None else vb
    other = b if va is not None else a
    if isinstance(other, float) and not t.dtype.is_floating_point:
        return torch.get_default_dtype()
    return t.dtype


@_reg(*_COMPARE)
def _compare(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    op, negate = _COMPARE[node.target]
    dt = _promoted(_A(node)[0], _A(node)[1])
    out = ctx.add(op, [ctx.value(_A(node)[0], dt), ctx.value(_A(node)[1], dt)])
    return ctx.add("Not", out) if negate else out


@_reg(aten.where.self)
def _where(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    dt = _out(node).dtype
    cond = ctx.value(_A(node)[0], torch.bool)
    return ctx.add("Where", [cond, ctx.value(_A(node)[1], dt), ctx.value(_A(node)[2], dt)])


@_reg(aten._to_copy.default)
def _to_copy(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    return ctx.add("Identity", [ctx.value(_A(node)[0], _out(node).dtype)])


@_reg(aten.scalar_tensor.default, aten.full.default, aten.zeros.default, aten.ones.default)
def _constant(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    v = _out(node)
    fills: dict[Any, int] = {aten.zeros.default: 0, aten.ones.default: 1}
    fill: Any = fills.get(node.target)
    if fill is None:
        fill = _A(node)[0] if node.target is aten.scalar_tensor.default else _A(node)[1]
    return ctx.add("Identity", [ctx.const(np.full(tuple(v.shape), fill), v.dtype)])


# -- shapes ----------------------------------------------------------------------------------------

_RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
             aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints)


@_reg(*_RESHAPES)
def _reshape(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    v = _out(node)
    return ctx.add("Reshape", [ctx.value(_A(node)[0], v.dtype), ctx.ints(list(v.shape))])


@_reg(aten.expand.default)
def _expand(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    v = _out(node)
    return ctx.add("Expand", [ctx.value(_A(node)[0], v.dtype), ctx.ints(list(v.shape))])


@_reg(aten.slice.Tensor)
def _slice(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    src = _val(_A(node)[0])
    dim = int(_arg(node, 1, "dim", 0)) % src.dim()
    size = int(src.shape[dim])
    start, end, step = _arg(node, 2, "start"), _arg(node, 3, "end"), int(_arg(node, 4, "step", 1))
    start = 0 if start is None else int(start)
    end = size if end is None else min(int(end), size)
    ins = [ctx.names[_A(node)[0]][0], ctx.ints([start]), ctx.ints([end]), ctx.ints([dim]), ctx.ints([step])]
    return ctx.add("Slice", ins)


@_reg(aten.t.default, aten.transpose.int, aten.permute.default)
def _transpose(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    rank = _out(node).dim()
    if node.target is aten.permute.default:
        perm = [d % rank for d in _A(node)[1]]
    else:
        perm = list(range(rank))
        i, j = (0, 1) if node.target is aten.t.default or rank < 2 else (
            int(_A(node)[1]) % rank, int(_A(node)[2]) % rank)
        if rank >= 2:
            perm[i], perm[j] = perm[j], perm[i]
    return ctx.add("Transpose", [ctx.names[_A(node)[0]][0]], perm=perm)


# -- reductions, matmuls, NN ----------------------------------------------------------------------


def _axes(node: torch.fx.Node, rank: int) -> list[int] | None:
    dims = _arg(node, 1, "dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [d % max(rank, 1) for d in dims]


@_reg(aten.sum.dim_IntList, aten.sum.default)
def _sum(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    src = _val(_A(node)[0])
    dt = _out(node).dtype
    axes = None if node.target is aten.sum.default else _axes(node, src.dim())
    keep = int(bool(_arg(node, 2, "keepdim", False))) if node.target is aten.sum.dim_IntList else 0
    ins = [ctx.value(_A(node)[0], dt)] + ([ctx.ints(axes)] if axes is not None else [])
    return ctx.add("ReduceSum", ins, keepdims=keep)


@_reg(aten.mean.dim)
def _mean(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    src = _val(_A(node)[0])
    axes = _axes(node, src.dim())
    keep = int(bool(_arg(node, 2, "keepdim", False)))
    attrs: dict[str, Any] = {"keepdims": keep}
    if axes is not None:
        attrs["axes"] = axes
    return ctx.add("ReduceMean", [ctx.value(_A(node)[0], _out(node).dtype)], **attrs)


@_reg(aten.var_mean.correction)
def _var_mean(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    src = _val(_A(node)[0])
    axes = _axes(node, src.dim()) or list(range(src.dim()))
    correction = _K(node).get("correction", 1)
    correction = 1 if correction is None else correction
    keep = int(bool(_K(node).get("keepdim", False)))
    x = ctx.value(_A(node)[0], src.dtype)
    mean_k = ctx.add("ReduceMean", [x], axes=axes, keepdims=1)[0]
    d = ctx.add("Sub", [x, mean_k])[0]
    sq = ctx.add("ReduceMean", ctx.add("Mul", [d, d]), axes=axes, keepdims=keep)[0]
    n = int(np.prod([src.shape[a] for a in axes]))
    var = ctx.add("Mul", [sq, ctx.const(n / max(n - correction, 1), src.dtype)])[0]
    mean = mean_k if keep else ctx.add("ReduceMean", [x], axes=axes, keepdims=0)[0]
    return [var, mean]


@_reg(aten.mm.default, aten.bmm.default)
def _matmul(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    dt = _out(node).dtype
    return ctx.add("MatMul", [ctx.value(_A(node)[0], dt), ctx.value(_A(node)[1], dt)])


@_reg(aten.addmm.default)
def _addmm(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    dt = _out(node).dtype
    ins = [ctx.value(_A(node)[i], dt) for i in (1, 2, 0)]
    return ctx.add("Gemm", ins, alpha=float(_K(node).get("alpha", 1.0)), beta=float(_K(node).get("beta", 1.0)))


@_reg(aten._softmax.default, aten._log_softmax.default)
def _softmax(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    op = "Softmax" if node.target is aten._softmax.default else "LogSoftmax"
    dt = _out(node).dtype
    return ctx.add(op, [ctx.value(_A(node)[0], dt)], axis=int(_A(node)[1]))


@_reg(aten.convolution.default)
def _convolution(ctx: _Ctx, node: torch.fx.Node) -> list[str]:
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = _A(node)
    dt = _out(node).dtype
    ins = [ctx.value(x, dt), ctx.value(w, dt)] + ([ctx.value(b, dt)] if b is not None else [])
    pads = list(padding) * 2
    attrs: dict[str, Any] = {"strides": list(stride), "pads": pads, "dilations": list(dilation),
                             "group": int(groups)}
    if transposed:
        attrs["output_padding"] = list(output_padding)
        return ctx.add("ConvTranspose", ins, **attrs)
    return ctx.add("Conv", ins, **attrs)


def _empty_reduction(node: torch.fx.Node) -> bool:
    """A mean over no elements, or a variance with ``n - correction <= 0``: eager gives NaN (or
    inf), ReduceMean over nothing 0 and ``_var_mean``'s factor would be clamped to 0. Sizes known
    here only (Dynamo specializes sizes 0 and 1, so a symbolic reduced size is at least 2)."""
    src = _val(_A(node)[0])
    if not isinstance(src, torch.Tensor):
        return False
    axes = _axes(node, src.dim())
    sizes = [src.shape[a] for a in (range(src.dim()) if not axes else axes)]
    if not all(isinstance(d, int) for d in sizes):
        return False
    n = int(np.prod(sizes))
    if node.target is aten.var_mean.correction:
        c = _K(node).get("correction", 1)
        return n - (1 if c is None else c) <= 0
    return n == 0


def supported(node: torch.fx.Node) -> bool:
    """Whether ``node`` (a call_function of an ATen graph) can be lowered to GE: its op has a
    converter, its result dtype has an ONNX type, and the arguments fit the converter."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = _A(node)[0]
        return isinstance(src, torch.fx.Node) and src.op == "call_function" and supported(src)
    if node.target not in CONVERTERS:
        return False
    vals = _val(node)
    for v in (vals if isinstance(vals, (tuple, list)) else [vals]):
        if not isinstance(v, torch.Tensor) or v.dtype not in _DTYPES:
            return False
    if node.target is aten.div.Tensor and _K(node).get("rounding_mode") is not None:
        return False
    if node.target is aten._to_copy.default and any(k not in ("dtype", "layout", "device") for k in node.kwargs):
        return False
    if node.target is aten.convolution.default and len(node.args) < 9:
        return False
    if node.target in (aten.mean.dim, aten.var_mean.correction) and _empty_reduction(node):
        return False
    if node.target is aten.slice.Tensor and not all(isinstance(a, int) or a is None for a in _A(node)[1:]):
        return False
    # tensor inputs only (a SymInt or float computed by another node cannot be a constant)
    return all(isinstance(_val(a), torch.Tensor) and _val(a).dtype in _DTYPES for a in node.all_input_nodes)


def _symbolic(gm: torch.fx.GraphModule) -> bool:
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for v in (vals if isinstance(vals, (tuple, list)) else [vals]):
            if isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in v.shape):
                return True
    return False


def to_onnx(gm: torch.fx.GraphModule, args: Sequence[Any] | None = None) -> bytes:
    """``gm`` (placeholders, supported call_function nodes, one output) as a serialized ONNX
    model (opset 17) with static shapes. ``args``: real inputs, required when the graph's
    metadata has symbolic sizes (the graph is run once on them to learn every shape). Raises
    ``LoweringError`` naming the first node it cannot express."""
    if _symbolic(gm):
        if args is None:
            raise LoweringError("the graph has symbolic shapes: pass real inputs to lower it")
        _record_concrete(gm, args)
    ctx = _Ctx()
    inputs: list[onnx.ValueInfoProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            v = _val(node)
            if not isinstance(v, torch.Tensor) or v.dtype not in _DTYPES:
                raise LoweringError(f"input {node.name}: not a tensor of an ONNX dtype ({type(v).__name__})")
            name = f"in{len(inputs)}"
            inputs.append(helper.make_tensor_value_info(name, _DTYPES[v.dtype], list(v.shape)))
            ctx.names[node] = [name]
        elif node.op == "call_function":
            if node.target is operator.getitem:
                ctx.names[node] = [ctx.names[_A(node)[0]][int(_A(node)[1])]]
                continue
            fn = CONVERTERS.get(node.target)
            if fn is None or not supported(node):
                raise LoweringError(f"{node.format_node()}: no ONNX lowering for {node.target}")
            ctx.names[node] = fn(ctx, node)
        elif node.op == "output":
            results = _A(node)[0] if isinstance(_A(node)[0], (tuple, list)) else [_A(node)[0]]
            for i, r in enumerate(results):
                if not isinstance(r, torch.fx.Node):
                    raise LoweringError(f"output {i}: not a tensor ({r!r})")
                v = _out(r)
                name = f"out{i}"
                ctx.nodes.append(helper.make_node("Identity", [ctx.names[r][0]], [name]))
                outputs.append(helper.make_tensor_value_info(name, _DTYPES[v.dtype], list(v.shape)))
        else:
            raise LoweringError(f"{node.format_node()}: {node.op} nodes are not lowered")
    graph = helper.make_graph(ctx.nodes, "aten_partition", inputs, outputs, ctx.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model.SerializeToString()
