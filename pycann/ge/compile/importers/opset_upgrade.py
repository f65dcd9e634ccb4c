"""Rewrite older-opset node forms into the latest form the op library implements.

Each entry of ``UPGRADES`` is ``op_type -> (first opset with the new form, rewrite)``: a node
imported at an older opset is rewritten. Mostly attributes that later became inputs
(ONNX Changelog.md for each op). The node keeps its ``opset``; definitions with distinct old
semantics (e.g. Softmax-1) are separate ``OpDef``s in the library, chosen by that opset.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from pycann.dtypes import to_numpy
from pycann.ge.ir import Graph, Node

Rewrite = Callable[[Node, Graph], list[Node]]


def _const_input(node: Node, g: Graph, pos: int, value: np.ndarray, tag: str) -> None:
    name = g.fresh_name(f"{node.name}_{tag}")
    g.initializers[name] = value
    while len(node.inputs) <= pos:
        node.inputs.append("")
    node.inputs[pos] = name


def _attr_to_input(*specs: tuple[str, int, str]) -> Rewrite:
    """specs: (attribute, input position, dtype: 'int64' or 'like0' = dtype of input 0)."""

    def rewrite(node: Node, g: Graph) -> list[Node]:
        for attr, pos, kind in specs:
            if attr not in node.attrs:
                continue
            v = node.attrs.pop(attr)
            if kind == "int64":
                arr = np.asarray(v, dtype=np.int64)
            else:
                arr = np.asarray(v, dtype=_dtype_of(node.inputs[0], g))
            _const_input(node, g, pos, arr, attr)
        return [node]

    return rewrite


def _dtype_of(name: str, g: Graph) -> np.dtype:
    if name in g.initializers:
        return g.initializers[name].dtype
    d = g.descs.get(name)
    if d is not None and d.dtype:
        try:
            return to_numpy(d.dtype)
        except TypeError:
            pass
    return np.dtype(np.float32)  # the old forms (Pad-2, Clip-6) only accepted float tensors


def _drop(*attrs: str) -> Rewrite:
    def rewrite(node: Node, g: Graph) -> list[Node]:
        for a in attrs:
            node.attrs.pop(a, None)
        return [node]

    return rewrite


def _clip(node: Node, g: Graph) -> list[Node]:
    # Clip-6 had min/max attributes with defaults of +-FLT_MAX; only pass the ones given.
    return _attr_to_input(("min", 1, "like0"), ("max", 2, "like0"))(node, g)


def _pad(node: Node, g: Graph) -> list[Node]:
    if "paddings" in node.attrs:  # Pad-1 spelling
        node.attrs["pads"] = node.attrs.pop("paddings")
    return _attr_to_input(("pads", 1, "int64"), ("value", 2, "like0"))(node, g)


def _slice(node: Node, g: Graph) -> list[Node]:
    return _attr_to_input(("starts", 1, "int64"), ("ends", 2, "int64"), ("axes", 3, "int64"))(node, g)


def _topk(node: Node, g: Graph) -> list[Node]:
    if "k" in node.attrs:
        _const_input(node, g, 1, np.array([node.attrs.pop("k")], dtype=np.int64), "k")
    return [node]


def _cast(node: Node, g: Graph) -> list[Node]:
    to = node.attrs.get("to")
    if isinstance(to, str):  # Cast-1 names the type
        node.attrs["to"] = int(onnx.TensorProto.DataType.Value(to.upper()))
    return [node]


def _legacy_broadcast(node: Node, g: Graph) -> list[Node]:
    """Opset <7 binary ops: ``broadcast=1, axis=k`` aligns B at axis k of A (not at the end)."""
    bc = node.attrs.pop("broadcast", 0)
    axis = node.attrs.pop("axis", None)
    node.attrs.pop("consumed_inputs", None)
    if not bc or axis is None or len(node.inputs) < 2:
        return [node]
    a, b = node.inputs[0], node.inputs[1]
    da = g.descs.get(a)
    ra = None if da is None or da.shape is None else len(da.shape)
    if ra is None and a in g.initializers:
        ra = g.initializers[a].ndim
    bv = g.initializers.get(b)
    rb = bv.ndim if bv is not None else (None if g.descs.get(b) is None else g.descs[b].rank)
    if ra is None or rb is None:
        return [node]
    axis = axis % ra if ra else 0
    trailing = ra - axis - rb
    if trailing <= 0:
        return [node]
    axes = np.arange(axis + rb, ra, dtype=np.int64)
    if bv is not None:
        _const_input(node, g, 1, bv.reshape(bv.shape + (1,) * trailing), "aligned")
        return [node]
    axes_name = g.fresh_name(f"{node.name}_axes")
    g.initializers[axes_name] = axes
    out = g.fresh_name(f"{b}_aligned")
    unsq = Node("Unsqueeze", [b, axes_name], [out], name=g.fresh_name(f"{node.name}_align"), opset=13, origin=list(node.origin))
    node.inputs[1] = out
    return [unsq, node]


def _prelu(node: Node, g: Graph) -> list[Node]:
    """PRelu < 7: a 1-D slope of C values applies per channel (axis 1), not to the last axis."""
    node.attrs.pop("consumed_inputs", None)
    slope = g.initializers.get(node.inputs[1]) if len(node.inputs) > 1 else None
    d = g.descs.get(node.inputs[0])
    rank = None if d is None or d.shape is None else len(d.shape)
    if slope is not None and slope.ndim == 1 and slope.size > 1 and rank is not None and rank > 2:
        _const_input(node, g, 1, slope.reshape((-1,) + (1,) * (rank - 2)), "slope_per_channel")
    return [node]


def _bn(node: Node, g: Graph) -> list[Node]:
    """Before opset 14 there is no training_mode attribute: a node with Y alone is an inference BN
    whatever momentum/spatial/is_test/consumed_inputs say (Paddle exports set momentum). One that
    names its running-stat outputs (opset 7-13: Y, mean, var, saved_mean, saved_var) is the spec's
    training form, as ONNX Runtime runs it: ``_bn_training``. From opset 14 an explicit
    training_mode=1 is kept."""
    if node.opset >= 14 and node.attrs.get("training_mode", 0):
        return [node]
    if node.opset < 9 and not int(node.attrs.get("spatial", 1)) and len(node.inputs) >= 5:
        return _bn_per_activation(node, g)
    if 7 <= node.opset < 14 and any(node.outputs[1:]):
        return _bn_training(node, g)
    for a in ("momentum", "spatial", "is_test", "consumed_inputs", "training_mode"):
        node.attrs.pop(a, None)
    node.outputs = node.outputs[:1]
    return [node]


def _bn_training(node: Node, g: Graph) -> list[Node]:
    """BatchNormalization-7..13 with output case #1 (training): the opset-15 op with
    training_mode=1 computes Y and the updated running mean / var; saved_mean (the batch mean) and
    saved_var (ONNX Runtime's: the batch's 1 / sqrt(var + epsilon)), when named, as their own nodes
    over X reshaped to [N, C, -1] (any rank)."""
    outs = list(node.outputs) + [""] * (5 - len(node.outputs))
    for a in ("spatial", "is_test", "consumed_inputs"):
        node.attrs.pop(a, None)
    node.attrs["training_mode"] = 1
    node.outputs = outs[:3]
    while node.outputs and not node.outputs[-1]:
        node.outputs.pop()
    new = [node]
    if not (outs[3] or outs[4]):
        return new
    dt = _dtype_of(node.inputs[1], g)  # scale: X's type T before opset 14
    op = max(node.opset, 18)

    def const(tag: str, value: np.ndarray) -> str:
        name = g.fresh_name(f"{node.name}_{tag}")
        g.initializers[name] = value
        return name

    def add(op_type: str, ins: list[str], out: str = "", **attrs: object) -> str:
        out = out or g.fresh_name(f"{node.name}_saved_stats{len(new)}")  # (fresh_name reserves nothing)
        new.append(Node(op_type, ins, [out], dict(attrs), name=f"{out}_node", opset=op, origin=list(node.origin)))
        return out

    axes = const("stat_axes", np.array([0, 2], np.int64))
    r = add("Reshape", [node.inputs[0], const("ncx", np.array([0, 0, -1], np.int64))])
    if outs[3]:
        add("ReduceMean", [r, axes], outs[3], keepdims=0)
    if outs[4]:
        d = add("Sub", [r, add("ReduceMean", [r, axes], keepdims=1)])
        v = add("ReduceMean", [add("Mul", [d, d]), axes], keepdims=0)
        eps = const("epsilon", np.asarray(float(node.attrs.get("epsilon", 1e-5)), dtype=dt))
        add("Reciprocal", [add("Sqrt", [add("Add", [v, eps])])], outs[4])
    return new


def _bn_per_activation(node: Node, g: Graph) -> list[Node]:
    """BatchNormalization-6/7 with spatial=0: scale, B, mean and var hold one value per activation
    (shape C x D1 x ... x Dn, X's dims after the batch), which the opset-15 op has no form for:
    ``(X - mean) / sqrt(var + epsilon) * scale + B`` as elementwise ops (opset-7 broadcasting, over N)."""
    x, scale, b, mean, var = node.inputs[:5]
    eps = g.fresh_name(f"{node.name}_epsilon")
    g.initializers[eps] = np.asarray(float(node.attrs.get("epsilon", 1e-5)), dtype=_dtype_of(x, g))
    d, ve, sd, nv, sv = (g.fresh_name(f"{node.name}_{t}") for t in ("centred", "var_eps", "std", "normed", "scaled"))
    steps = [("Sub", [x, mean], d), ("Add", [var, eps], ve), ("Sqrt", [ve], sd), ("Div", [d, sd], nv),
             ("Mul", [nv, scale], sv), ("Add", [sv, b], node.outputs[0])]
    return [Node(op, ins, [out], {}, name=f"{node.name}_{op.lower()}{i}", opset=max(node.opset, 7), origin=list(node.origin))
            for i, (op, ins, out) in enumerate(steps)]


def _dropout(node: Node, g: Graph) -> list[Node]:
    for a in ("ratio", "is_test", "consumed_inputs", "seed"):
        node.attrs.pop(a, None)
    return [node]


def _concat(node: Node, g: Graph) -> list[Node]:
    node.attrs.setdefault("axis", 1)  # Concat-1/-4 default
    return [node]


_REDUCE = ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
           "ReduceLogSumExp", "ReduceSumSquare"]

UPGRADES: dict[str, tuple[int, Rewrite]] = {
    "Squeeze": (13, _attr_to_input(("axes", 1, "int64"))),
    "Unsqueeze": (13, _attr_to_input(("axes", 1, "int64"))),
    "ReduceSum": (13, _attr_to_input(("axes", 1, "int64"))),
    **{op: (18, _attr_to_input(("axes", 1, "int64"))) for op in _REDUCE},
    "Split": (13, _attr_to_input(("split", 1, "int64"))),
    "Pad": (11, _pad),
    "Clip": (11, _clip),
    "Slice": (10, _slice),
    "TopK": (10, _topk),
    "Reshape": (5, _attr_to_input(("shape", 1, "int64"))),
    "Cast": (6, _cast),
    "BatchNormalization": (10**6, _bn),
    "Dropout": (10**6, _dropout),
    "Concat": (4, _concat),
    **{op: (7, _legacy_broadcast) for op in ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor",
                                             "Equal", "Less", "Greater", "Gemm")},
    "PRelu": (7, _prelu),
    **{op: (6, _drop("consumed_inputs")) for op in ("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Exp", "Log",
                                                    "Sqrt", "Reciprocal", "Floor", "Ceil", "LeakyRelu",
                                                    "Elu", "Selu", "HardSigmoid", "Max", "Min", "Sum",
                                                    "Mean", "InstanceNormalization")},
}


def upgrade_node(node: Node, g: Graph) -> list[Node]:
    """Rewrite ``node`` (imported at ``node.opset``) into its latest form; may add nodes/initializers."""
    if node.domain != "":
        return [node]
    entry = UPGRADES.get(node.op_type)
    if entry is None or node.opset >= entry[0]:
        return [node]
    return entry[1](node, g)
