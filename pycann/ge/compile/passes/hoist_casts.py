"""Narrowing Casts moved above the ops that only move data, after PrecisionMode inserted them.

Why: in the reduced-precision modes a float32 "vector" island (PP-OCRv4 det's FPN: Add chains,
nearest Resizes, one Concat) ends in a ``Cast`` to bfloat16/float16 before the next matrix op, and
that Cast converts the island's largest tensor: det's Concat of four upsampled 24-channel maps,
2.4 M values, ~0.9 ms, then its Resizes and the Concat itself move float32 bytes. An op that only
selects or copies elements (Concat, a nearest Resize, Reshape, Transpose, Slice, ...) commutes with
an elementwise Cast exactly: ``Cast(Concat(a, b)) == Concat(Cast(a), Cast(b))`` bit for bit,
NaN and infinities included. So the Cast moves to the op's data inputs (before an upsampling
Resize: on the smaller tensor), the op runs on the narrow dtype (half the bytes), and a moved
Cast that meets ``Cast(y, float32)`` of a value ``y`` already in the narrow dtype folds away
(``precision.simplify_casts``; bf16 -> f32 -> bf16 is the identity).

Where: only when every reader of the op's output is a Cast to the same narrow dtype (a float32
reader, a graph output or a subgraph would still need the wide value), the op has one output,
and no data input is a constant (its Cast would run at every call). An op the user pinned to its
dtype (``--keep_dtype``, ``--customize_dtypes``: the ``pinned`` predicate) keeps it. The numbers
do not change: tests compare the graph with and without this rewrite bit for bit (tests/ge/test_hoist_casts.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pycann.dtypes import DType, TensorDesc
from pycann.ge.ir import Graph, Node, free_names

__all__ = ["DATA_INPUTS", "hoist_casts", "moves_data"]

_F32 = int(DType.FLOAT)
_NARROW = (int(DType.FLOAT16), int(DType.BFLOAT16))

# Ops that only select, repeat or reorder elements, and which of their inputs are the data (the
# rest are indices, shapes or scales, which keep their dtype). None: every input.
DATA_INPUTS: Mapping[str, tuple[int, ...] | None] = {
    "Concat": None,
    "Reshape": (0,),
    "Transpose": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
    "Flatten": (0,),
    "Identity": (0,),
    "Slice": (0,),
    "Resize": (0,),  # nearest only (``moves_data``): linear and cubic compute new values
}


def moves_data(n: Node) -> bool:
    """``n`` is a single-output ONNX op that only moves data."""
    if n.domain or n.op_type not in DATA_INPUTS or len([o for o in n.outputs if o]) != 1:
        return False
    if n.op_type == "Resize":
        mode = n.attrs.get("mode", "nearest")
        ct = n.attrs.get("coordinate_transformation_mode", "half_pixel")
        # (tf_crop_and_resize writes extrapolation_value where a sample falls outside: a new value)
        return (mode.decode() if isinstance(mode, bytes) else mode) == "nearest" and \
            (ct.decode() if isinstance(ct, bytes) else ct) != "tf_crop_and_resize"
    return True


def _narrowing(n: Node, g: Graph) -> int:
    """The narrow dtype of ``n`` when it is a float32 -> float16/bfloat16 Cast, else 0."""
    if n.op_type != "Cast" or n.domain or not n.inputs or not n.inputs[0]:
        return 0
    to = int(n.attrs.get("to", 0))
    src = g.descs.get(n.inputs[0])
    return to if to in _NARROW and src is not None and src.dtype == _F32 else 0


def hoist_casts(g: Graph, pinned: Callable[[Node], bool] | None = None) -> int:
    """Move every narrowing Cast that reads a data-moving op's output onto that op's data inputs,
    repeatedly (through chains such as Resize -> Concat), except above an op for which ``pinned``
    is true. Returns the number of ops moved over."""
    moved = 0
    while True:
        step = _hoist_one(g, pinned)
        if not step:
            return moved
        moved += step


def _hoist_one(g: Graph, pinned: Callable[[Node], bool] | None) -> int:
    producers = g.producers()
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in n.inputs:
            if i:
                readers.setdefault(i, []).append(n)
    outer = set(g.outputs)
    for n in g.nodes:
        for s in n.subgraphs.values():
            outer |= free_names(s)
    done = 0
    for cast in list(g.nodes):
        to = _narrowing(cast, g)
        if not to:
            continue
        op = producers.get(cast.inputs[0])
        v = cast.inputs[0]
        if op is None or not moves_data(op) or v in outer or (pinned is not None and pinned(op)):
            continue
        casts = readers.get(v, [])
        if any(_narrowing(r, g) != to or r.inputs[0] != v for r in casts) or \
                any(c.outputs[0] in outer for c in casts if c is not cast):
            continue  # a reader needs the wide value (or a twin's value is read where renaming cannot reach)
        want = DATA_INPUTS[op.op_type]
        data = [i for i, x in enumerate(op.inputs) if x and (want is None or i in want)]
        if not data or any(op.inputs[i] in g.initializers or g.descs.get(op.inputs[i]) is None
                           or g.descs[op.inputs[i]].dtype != _F32 for i in data):
            continue
        _rewire(g, op, cast, casts, data, to, readers)
        done += 1
        producers = g.producers()
    return done


def _rewire(g: Graph, op: Node, cast: Node, casts: list[Node], data: list[int], to: int,
            readers: dict[str, list[Node]]) -> None:
    """``op`` reads narrow copies of its data inputs (an existing Cast of the same kind reused)
    and writes ``cast``'s output; ``cast`` and its twins go, their readers read that output."""
    at = g.nodes.index(op)
    for i in data:
        x = op.inputs[i]
        twin = next((r for r in readers.get(x, []) if r.op_type == "Cast" and not r.domain
                     and int(r.attrs.get("to", 0)) == to and r.inputs[0] == x and r.outputs[0]
                     and g.nodes.index(r) < at), None)
        if twin is not None:
            op.inputs[i] = twin.outputs[0]
            continue
        y = g.fresh_name(f"{x}_{'bf16' if to == int(DType.BFLOAT16) else 'fp16'}")
        g.descs[y] = TensorDesc(to, g.descs[x].shape, g.descs[x].format)
        node = Node("Cast", [x], [y], {"to": to}, name=g.fresh_name(f"{y}_Cast"), opset=19)
        g.nodes.insert(at, node)
        at += 1
        readers.setdefault(x, []).append(node)
        op.inputs[i] = y
    out = cast.outputs[0]
    old = op.outputs[0]
    op.outputs[0] = out
    g.descs[out] = TensorDesc(to, g.descs[old].shape if old in g.descs else None, g.descs[out].format
                              if out in g.descs else g.descs[old].format)
    g.descs.pop(old, None)
    for twin in casts:
        if twin is not cast:
            for n in g.nodes:
                n.inputs = [out if i == twin.outputs[0] else i for i in n.inputs]
            g.outputs = [out if o == twin.outputs[0] else o for o in g.outputs]
    gone = {id(c) for c in casts}
    g.nodes = [n for n in g.nodes if id(n) not in gone]
