"""Random models for the named-dims fuzzer: inputs whose dynamic dims carry shared ``dim_param``
names, shape arithmetic on them (Shape with start, Gather, Unsqueeze, Concat, Add/Sub/Mul, Slice)
feeding shape-sensitive ops (Reshape with 0 / -1, or allowzero with a target of sizes, Expand, Tile, Pad, Slice with
clamped bounds, Range with steps 1, 2, -1, ConstantOfShape, Squeeze without axes, Flatten,
broadcasts, Where), GPT-2-like masks sliced from a per-layer constant table, and repeated nodes.
Half the models are "decoders": one random block applied to each of several inputs of the same
named dims (a layer per past), constants stored once per layer, so that the generic plan's named
dims and its merge of equal nodes (ge/run/shape_program.py, ge/run/dedup.py) have work to do.
Feeds give each name one size (sometimes 0), now and then another size on one input; each ``?``
dim its own size."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
NAMES = ("n", "m", "k", "?")  # ('?': a placeholder, Paddle2ONNX's: no name, each dim its own size)


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.count = 0

    def new(self, prefix: str = "v") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, a: Any) -> str:
        name = self.new("c")
        self.inits[name] = np.asarray(a)
        return name

    def emit(self, op: str, ins: list[str], **attrs: Any) -> str:
        out = self.new()
        self.nodes.append(helper.make_node(op, ins, [out], **attrs))
        return out


def _block(rng: np.random.Generator, b: _Builder, tens: list[str]) -> list[str]:
    """Random nodes over ``tens`` (float tensors); returns the float tensors made."""
    tens = list(tens)
    made: list[str] = []
    vecs: list[str] = []  # int64 vectors
    scal: list[str] = []  # int64 scalars

    def pick(xs: list[str]) -> str:
        return xs[int(rng.integers(0, len(xs)))]

    def i64(*v: int) -> str:
        return b.const(np.array(v, np.int64))

    for _ in range(int(rng.integers(4, 16))):
        c = rng.random()
        out: str | None = None
        if c < 0.15 or not vecs:
            attrs = {"start": int(rng.integers(-2, 2))} if rng.random() < 0.2 else {}
            vecs.append(b.emit("Shape", [pick(tens)], **attrs))
        elif c < 0.25:
            scal.append(b.emit("Gather", [pick(vecs), b.const(np.array(int(rng.integers(-1, 1)), np.int64))], axis=0))
        elif c < 0.31 and scal:
            vecs.append(b.emit("Unsqueeze", [pick(scal), i64(0)]))
        elif c < 0.38:
            other = pick(vecs) if rng.random() < 0.5 else i64(int(rng.integers(-1, 3)))
            vecs.append(b.emit("Concat", [pick(vecs), other], axis=0))
        elif c < 0.44:
            x = pick(vecs + scal)
            y = i64(int(rng.integers(0, 3))) if rng.random() < 0.6 else pick(vecs + scal)
            v = b.emit(str(rng.choice(["Add", "Sub", "Mul"])), [x, y])
            (scal if x in scal and y in scal else vecs).append(v)
        elif c < 0.48:
            vecs.append(b.emit("Slice", [pick(vecs), i64(int(rng.integers(-2, 1))), i64(int(rng.integers(1, 4)))]))
        elif c < 0.54:
            if rng.random() < 0.8:
                out = b.emit("Reshape", [pick(tens), pick(vecs)])
            else:  # allowzero: a target without -1 (0 and -1 together are invalid, ONNX's Reshape)
                dims = b.emit("Shape", [pick(tens)])
                target = b.emit("Concat", [dims, i64(int(rng.integers(0, 3)))], axis=0) if rng.random() < 0.5 else dims
                out = b.emit("Reshape", [pick(tens), target], allowzero=1)
        elif c < 0.58:
            out = b.emit("Expand", [pick(tens), pick(vecs)])
        elif c < 0.62:
            out = b.emit("Cast", [b.emit("ConstantOfShape", [pick(vecs)])], to=F)
        elif c < 0.68 and scal:
            # a GPT-2-like mask: a table stored per layer (equal bytes) sliced by shape-derived bounds
            table = b.const(np.tril(np.ones((6, 6), np.float32)))
            lo, hi = b.emit("Unsqueeze", [pick(scal), i64(0)]), b.emit("Unsqueeze", [pick(scal), i64(0)])
            rows = b.emit("Slice", [table, lo, hi, i64(0)])
            mask = b.emit("Slice", [rows, i64(0), hi, i64(1)])
            cond = b.emit("Greater", [mask, b.const(np.array(0.5, np.float32))])
            out = b.emit("Where", [cond, mask, b.const(np.array(-1e4, np.float32))])
        elif c < 0.72 and scal:
            start = pick(scal) if rng.random() < 0.3 else b.const(np.array(0, np.int64))
            step = b.const(np.array(int(rng.choice([1, 1, 2, -1])), np.int64))
            out = b.emit("Cast", [b.emit("Range", [start, pick(scal), step])], to=F)
        elif c < 0.78:
            out = b.emit(str(rng.choice(["Add", "Mul", "Sub"])), [pick(tens), pick(tens)])
        elif c < 0.81:
            out = b.emit("Tile", [pick(tens), pick(vecs)])
        elif c < 0.85:
            lo = pick(vecs + [i64(int(rng.integers(-3, 3)))])
            hi = pick(vecs + [i64(int(rng.integers(-3, 5)))])
            out = b.emit("Slice", [pick(tens), lo, hi, i64(int(rng.integers(0, 2)))])
        elif c < 0.88:
            x, y = pick(tens), pick(tens)
            out = b.emit("Where", [b.emit("Greater", [x, y]), x, y])
        elif c < 0.91:
            v = pick(vecs)
            out = b.emit("Pad", [pick(tens), b.emit("Concat", [v, v], axis=0)])
        elif c < 0.94:
            out = b.emit("Squeeze", [pick(tens)])
        elif c < 0.97:
            out = b.emit("Flatten", [pick(tens)], axis=int(rng.integers(0, 2)))
        elif b.nodes:  # a node again, verbatim
            n0 = b.nodes[int(rng.integers(0, len(b.nodes)))]
            o = b.new()
            n1 = helper.make_node(n0.op_type, list(n0.input), [o])
            n1.attribute.extend(n0.attribute)
            b.nodes.append(n1)
            src = n0.output[0]
            if src in tens:
                out = o
            else:
                (vecs if src in vecs else scal).append(o)
        if out is not None:
            tens.append(out)
            made.append(out)
    return made


def named_dims_model(seed: int) -> tuple[onnx.ModelProto, list[tuple[str, list[Any]]]]:
    """A random model (module doc) and its inputs' (name, dims)."""
    rng = np.random.default_rng(seed)
    b = _Builder()
    inputs = []
    for i in range(int(rng.integers(1, 4))):
        dims = [NAMES[int(rng.integers(0, len(NAMES)))] if rng.random() < 0.7 else int(rng.integers(1, 4))
                for _ in range(int(rng.integers(1, 4)))]
        inputs.append((f"x{i}", dims))
    if rng.random() < 0.5:  # a decoder: the same block per layer's past
        inputs = [(x, inputs[0][1]) for x, _ in inputs] + [("ids", [NAMES[int(rng.integers(0, 3))], 2])]
        block_seed = int(rng.integers(0, 1 << 30))
        made = []
        for x, _ in inputs[:-1]:
            made += _block(np.random.default_rng(block_seed), b, [x, "ids"])
    else:
        made = _block(rng, b, [x for x, _ in inputs])
    shapes = [o for n in b.nodes for o in n.output if n.op_type == "Shape"]
    outs = made[-4:] + [b.emit("ConstantOfShape", [v]) if rng.random() < 0.5 else v for v in shapes[-2:]]
    outs = list(dict.fromkeys(outs)) or [b.emit("Identity", [inputs[0][0]])]
    graph = helper.make_graph(b.nodes, "g", [helper.make_tensor_value_info(x, F, d) for x, d in inputs],
                              [helper.make_value_info(o, onnx.TypeProto()) for o in outs],
                              [numpy_helper.from_array(a, k) for k, a in b.inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    typed = {v.name: v for v in model.graph.value_info}
    for o in model.graph.output:  # the outputs' types from ONNX's inference, their shapes left open
        if not o.type.HasField("tensor_type") and o.name in typed:
            o.CopyFrom(typed[o.name])
        o.type.tensor_type.ClearField("shape")
    return model, inputs


def named_dims_feeds(seed: int, inputs: list[tuple[str, list[Any]]]) -> list[np.ndarray]:
    """Feeds giving each name one size (0 now and then), one input now and then another."""
    rng = np.random.default_rng(seed)
    size = {n: int(rng.integers(0, 5)) if rng.random() < 0.15 else int(rng.integers(1, 5)) for n in NAMES}
    feeds = []
    for _, dims in inputs:
        shape = [d if isinstance(d, int) else size[d] if d != "?" and rng.random() < 0.9 else int(rng.integers(0, 5))
                 for d in dims]
        feeds.append(np.round(rng.standard_normal(shape) * 2).astype(np.float32))
    return feeds
