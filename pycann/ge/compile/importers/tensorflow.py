"""TensorFlow frozen GraphDef (``atc --framework=3``) -> pycann IR ``Graph`` of ONNX ops.

Parsing uses TensorFlow's own protobuf messages (tensorflow_proto.py: tensorboard's compiled
copies), so TensorFlow need not be installed. Steps:

1. read the GraphDef (frozen ``.pb``, ``.pbtxt``, or the frozen graph inside a SavedModel);
2. choose the outputs (``--out_nodes`` by TF node name, else the nodes nobody reads) and keep
   only the nodes they need (data edges; control edges only place nodes in cond/loop frames);
3. list every op without a converter at once (E19010) and refuse unfrozen graphs;
4. convert in topological order through the per-op tables (tensorflow_ops_*.py); TF1 control
   flow (Switch/Merge -> If, Enter/Merge/Switch/LoopCond/NextIteration/Exit -> Loop) is built
   by tensorflow_control.py.

Graph inputs are the Placeholder names (``--input_shape "input:1,224,224,3"``): those the outputs
need and those ``--input_shape`` names (all of them when the outputs need none), outputs keep
the TF tensor names (``logits/Softmax:0``). Layout: TF's NHWC is kept at the graph boundary;
NHWC ops run as NCHW ONNX ops between Transposes that cancel along conv chains.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.errors import ModelError, OptionError, PycannError, UnsupportedOpError
from pycann.ge.compile.importers import tensorflow_control as control
from pycann.ge.compile.importers.tensorflow_emit import OPSET, Emitter, Names, tensor_ref
from pycann.ge.compile.importers.tensorflow_functions import (
    FUNCTIONAL_OPS,
    Instance,
    called_functions,
    emit_functional,
)
from pycann.ge.compile.importers.tensorflow_ops_math import MATH_OPS
from pycann.ge.compile.importers.tensorflow_ops_nn import NN_OPS
from pycann.ge.compile.importers.tensorflow_ops_tensor import TENSOR_OPS
from pycann.ge.compile.importers.tensorflow_proto import (
    TF_TO_DTYPE,
    attr,
    check_frozen,
    const_value,
    read_graph_def,
    shape_list,
)
from pycann.ge.ir import Graph

CONVERTERS = {**NN_OPS, **MATH_OPS, **TENSOR_OPS}
# Ops handled by the driver itself: aliases (no node), constants, inputs, control flow.
IDENTITY_OPS = frozenset({"Identity", "StopGradient", "Snapshot", "PreventGradient", "IdentityN",
                          "EnsureShape", "CheckNumerics", "PlaceholderWithDefault"})
DRIVER_OPS = IDENTITY_OPS | {"Const", "Placeholder", "NoOp"} | control.CONTROL_OPS | FUNCTIONAL_OPS
# Never chosen as default outputs (side effects or graph plumbing).
NOT_OUTPUTS = frozenset({"NoOp", "Const", "Assert", "Print", "PrintV2", "SaveV2", "RestoreV2", "Placeholder"})


def supported_ops() -> list[str]:
    """Every TensorFlow op type the importer converts (docs/importers.md lists them)."""
    return sorted(set(CONVERTERS) | DRIVER_OPS)


def load_tensorflow(path: str | os.PathLike[str], out_nodes: Sequence[tuple[str, int] | str] = (),
                    inputs: Iterable[str] = ()) -> Graph:
    """Import a TensorFlow frozen graph.

    ``out_nodes``: ``(node name, output index)`` pairs (atc's ``--out_nodes``) or TensorFlow tensor
    names (``"name:0"``) choosing the outputs and their order; default: every node whose outputs
    nobody reads, in GraphDef order. ``inputs``: Placeholder names the user declared (atc's
    ``--input_shape`` names): each stays a model input even when no output needs it (see
    ``_kept_placeholders``).
    Raises ``ModelError`` (unreadable/unfrozen graph, a constant input computed at run time),
    ``UnsupportedOpError`` (E19010, naming every unsupported node at once), ``OptionError``
    (E10016: an ``out_nodes`` name that is not in the graph, or an entry of neither form).
    """
    gd = read_graph_def(path)
    return import_graph_def(gd, out_nodes, inputs)


def _default_outputs(nodes: dict[str, Any], builder: control.Builder) -> list[tuple[str, int]]:
    read: set[str] = set()
    for n in nodes.values():
        for i in n.input:
            read.add(i.lstrip("^").rpartition(":")[0] if ":" in i else i.lstrip("^"))
    # (a sink inside a cond/loop frame, such as an unused branch pivot, is no graph output)
    sinks = [n for n in nodes.values() if n.name not in read and n.op not in NOT_OUTPUTS
             and builder.home.get(n.name, ()) == ()]
    non_exit = [n for n in sinks if n.op != "Exit"]
    return [(n.name, 0) for n in (non_exit or sinks)]


def _needed(nodes: dict[str, Any], outputs: list[str]) -> set[str]:
    """Data-edge ancestors of the outputs (NextIteration back edges included)."""
    seen: set[str] = set()
    stack = list(outputs)
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        stack.extend(tensor_ref(i).rpartition(":")[0] for i in nodes[name].input if not i.startswith("^"))
    return seen


def _out_node(entry: Any) -> tuple[str, int]:
    """One ``out_nodes`` entry as ``(node name, output index)``: the pair itself, or TensorFlow's tensor
    name ``"name:index"`` (``"name"``: output 0). Raises ``OptionError`` (E10016) for anything else."""
    if isinstance(entry, str):
        name, sep, index = entry.rpartition(":")
        if sep and name and index.isdigit():
            return name, int(index)
        if not sep:
            return entry, 0
    elif isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str) \
            and isinstance(entry[1], int) and not isinstance(entry[1], bool) and entry[1] >= 0:
        return entry[0], entry[1]
    raise OptionError(f"E10016: --out_nodes entry {entry!r} is neither a (node name, output index) pair nor a "
                      "tensor name 'node:index'", code="E10016")


def _kept_placeholders(nodes: dict[str, Any], needed: set[str], declared: Iterable[str]) -> set[str]:
    """Placeholders that stay model inputs though no output needs them (GE keeps Data nodes its prune
    pass would drop, so the .om's inputs are what the user feeds): those the user declared
    (``--input_shape``) and, when the outputs need no Placeholder at all (constant-only paths), every
    Placeholder; an .om without inputs from a graph that has them would silently ignore the feeds."""
    placeholders = [name for name, n in nodes.items() if n.op == "Placeholder"]
    wanted = set(declared)
    kept = {p for p in placeholders if p in wanted}
    if not kept and not any(p in needed for p in placeholders):
        kept = set(placeholders)
    return kept


def import_graph_def(gd: Any, out_nodes: Sequence[tuple[str, int] | str] = (), inputs: Iterable[str] = ()) -> Graph:
    """A ``GraphDef`` message -> ``Graph`` (see ``load_tensorflow``)."""
    nodes = {n.name: n for n in gd.node}
    if len(nodes) != len(gd.node):
        dup = next(name for name, k in Counter(n.name for n in gd.node).items() if k > 1)
        raise ModelError(f"the GraphDef has two nodes named [{dup}]: node names must be unique (TensorFlow refuses "
                         "such a graph too); re-export or freeze the model again")
    builder = control.Builder(nodes, convert_node)
    outs = [_out_node(e) for e in out_nodes] or _default_outputs(nodes, builder)
    if not outs:
        raise ModelError("the TensorFlow graph has no output: every node's result is read by another node, or is "
                         "a Placeholder/Const/NoOp; name the outputs with --out_nodes \"node:0\"")
    for name, _ in outs:
        if name not in nodes:
            raise OptionError(f"E10016: node [{name}] in --out_nodes is not in the TensorFlow graph", code="E10016")
    needed = _needed(nodes, [n for n, _ in outs])
    needed |= control.loop_closure(nodes, needed)
    needed |= _kept_placeholders(nodes, needed, inputs)
    check_frozen(gd, needed)
    library = {f.signature.name: f for f in gd.library.function}
    bad = [f"{n} ({nodes[n].op})" for n in sorted(needed) if nodes[n].op not in CONVERTERS
           and nodes[n].op not in DRIVER_OPS]
    bad += _unsupported_in_functions([nodes[n] for n in sorted(needed)], library)
    if bad:
        raise UnsupportedOpError(
            f"E19010: No parser is registered for {len(bad)} TensorFlow node(s) [framework type TensorFlow]: "
            f"{'; '.join(bad)}. pycann converts the ops listed in docs/importers.md; replace these ops in the "
            "model or export it to ONNX (tf2onnx) instead", code="E19010")
    g = Graph(name="main", opsets={"": OPSET})
    g.metadata["producer"] = f"tensorflow GraphDef (producer {gd.versions.producer})"
    e = Emitter(g, g, Names(library), {}, {})
    for n in gd.node:
        if n.name not in needed:
            continue
        if n.op == "Placeholder":
            dt = attr(n, "dtype")
            if dt not in TF_TO_DTYPE:
                raise ModelError(f"node {n.name} (Placeholder): dtype {dt} has no pycann equivalent")
            shape = shape_list(n.attr["shape"].shape) if "shape" in n.attr else None
            g.inputs.append(n.name)
            g.descs[n.name] = TensorDesc(TF_TO_DTYPE[dt], None if shape is None else tuple(shape))
            e.values[f"{n.name}:0"] = n.name
        elif n.op == "Const":
            g.initializers[f"{n.name}:0"] = const_value(n)
            e.values[f"{n.name}:0"] = f"{n.name}:0"
    builder.emit_scope(e, (), needed)
    _check_dims(g, e.names)
    g.outputs = []
    for name, idx in outs:
        ref = f"{name}:{idx}"
        if ref not in e.values:
            raise OptionError(f"E10001: node [{name}] has no output {idx} in pycann's import", code="E10001")
        v = e.values[ref]
        if v != ref and ref not in g.initializers and not any(ref in n.outputs for n in g.nodes):
            e.node = nodes[name]
            v = e.add("Identity", [v], ref)
        g.outputs.append(v)
    return g


def _check_dims(g: Graph, names: Names) -> None:
    """Run the converters' TF shape checks (``Names.dim_checks``) on the dims shape inference knows."""
    if not names.dim_checks:
        return
    from pycann.ge.compile.passes.infer_shapes import infer_graph

    saved = dict(g.descs)  # the compiler infers again with atc's --input_shape: leave no inferred desc
    try:
        infer_graph(g, recurse=False, strict=False)
    except PycannError:  # a graph the compiler refuses anyway (with the shapes atc is given): no check here
        return
    finally:
        inferred = dict(g.descs)
        g.descs.clear()
        g.descs.update(saved)
    for where, value, axis, check in names.dim_checks:
        desc = inferred.get(value)
        if desc is None or desc.shape is None or not -len(desc.shape) <= axis < len(desc.shape):
            continue
        dim = desc.shape[axis]
        why = check(dim) if isinstance(dim, int) and dim >= 0 else None
        if why is not None:
            raise ModelError(f"{where}: {why} (input {value} is {desc}); TensorFlow refuses it, and ONNX's op "
                             "would give another answer without a word")


def convert_node(e: Emitter, node: Any) -> None:
    """Convert one ordinary (non-control-flow) TF node, mapping its outputs in ``e.values``."""
    e.node = node
    op = node.op
    if op in ("Const", "Placeholder") and f"{node.name}:0" in e.values:
        return
    if op == "Const":  # a constant first met inside a subgraph still lives in the root graph
        e.root.initializers[f"{node.name}:0"] = const_value(node)
        e.values[f"{node.name}:0"] = f"{node.name}:0"
        return
    if op == "NoOp":
        return
    if op in IDENTITY_OPS:
        for i, v in enumerate(e.inputs() if op == "IdentityN" else e.inputs()[:1]):
            e.values[f"{node.name}:{i}"] = v
        return
    if op in FUNCTIONAL_OPS:
        for i, v in enumerate(emit_functional(e, node, e.names.library, _emit_instance)):
            e.values[f"{node.name}:{i}"] = v
        return
    folded = _fold(e, node)
    if folded is not None:
        e.root.initializers[e.out()] = folded
        e.values[f"{node.name}:0"] = e.out()
        return
    try:
        outs = CONVERTERS[op](e)
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # an attribute the converter did not check
        raise ModelError(f"{e.where()}: cannot convert: {exc}") from None
    for i, v in enumerate(outs):
        e.values[f"{node.name}:{i}"] = v


def _emit_instance(e: Emitter, inst: Instance, args: list[str]) -> list[str]:
    """Import one function instance into ``e``'s graph, its args bound to ``args``."""
    if len(args) != len(inst.args):
        raise ModelError(f"{e.where()}: {len(args)} inputs for a function of {len(inst.args)} arguments")
    sub = e.child(e.graph, dict(zip(inst.arg_refs, args)), e.suffix)
    control.Builder(inst.nodes, convert_node).emit_scope(sub, (), set(inst.nodes))
    return [sub.resolve(o) for o in inst.outputs]


def _unsupported_in_functions(nodes: list[Any], library: dict[str, Any], seen: set[str] | None = None) -> list[str]:
    """``name (Op)`` of unsupported ops inside the functions functional control flow calls."""
    seen = set() if seen is None else seen
    bad: list[str] = []
    for n in nodes:
        if n.op not in FUNCTIONAL_OPS:
            continue
        for f in called_functions(n):
            if f in seen or f not in library:
                continue
            seen.add(f)
            body = list(library[f].node_def)
            bad += [f"{f}/{b.name} ({b.op})" for b in body if b.op not in CONVERTERS and b.op not in DRIVER_OPS]
            bad += _unsupported_in_functions(body, library, seen)
    return bad


# Elementwise ops on constants are evaluated at import (keras' inference batch norm computes
# gamma * rsqrt(var + eps) in the graph): the per-channel results then broadcast over NCHW twins.
_FOLD: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add, "AddV2": np.add, "Sub": np.subtract, "Mul": np.multiply, "RealDiv": np.divide,
    "Maximum": np.maximum, "Minimum": np.minimum, "Neg": np.negative, "Sqrt": np.sqrt,
    "Rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "Reciprocal": np.reciprocal, "Square": np.square,
}


_SHAPE_FOLD = frozenset({"Reshape", "Cast", "Squeeze", "ExpandDims"})
# integer shape arithmetic on constants (tf.nn.softmax(axis=1) builds its Transpose perm from
# Range / Sub / Pack / ConcatV2 of constants): folded so that ops needing a constant get one
_INT_FOLD = frozenset({"Add", "AddV2", "Sub", "Mul", "Maximum", "Minimum", "Neg"})
_STRUCT_FOLD = frozenset({"Range", "Pack", "ConcatV2", "Concat"})
_FOLD_LIMIT = 1 << 16


def _fold_struct(e: Emitter, node: Any) -> np.ndarray | None:
    """Integer ``Range`` and ``Pack`` / ``ConcatV2`` / ``Concat`` of small constants."""
    args = [e.const(i) for i in range(e.n_inputs())]
    if not args or any(a is None for a in args):
        return None
    vals: list[np.ndarray] = [np.asarray(a) for a in args]
    if sum(v.size for v in vals) > _FOLD_LIMIT:
        return None
    if node.op == "Range":
        if len(vals) != 3 or any(v.size != 1 or v.dtype.kind not in "iu" for v in vals):
            return None
        start, limit, delta = (int(v.reshape(())) for v in vals)
        if delta == 0 or len(range(start, limit, delta)) > _FOLD_LIMIT:
            return None
        return np.arange(start, limit, delta).astype(vals[0].dtype)
    if node.op == "Pack":
        return np.stack(vals, axis=int(e.attr("axis", 0)))
    axis, parts = (vals[-1], vals[:-1]) if node.op == "ConcatV2" else (vals[0], vals[1:])
    if axis.size != 1 or not parts or any(p.ndim == 0 for p in parts):
        return None
    return np.concatenate(parts, axis=int(axis.reshape(())))


def _fold(e: Emitter, node: Any) -> np.ndarray | None:
    if node.op in _SHAPE_FOLD and e.const(0) is not None and e.root.initializers[e.input(0)].size <= 1 << 16:
        x = e.root.initializers[e.input(0)]
        if node.op == "Cast":
            from pycann.dtypes import to_numpy

            return x.astype(to_numpy(e.dtype("DstT")))
        if node.op == "Squeeze":
            dims = e.attr("squeeze_dims", []) or None
            return np.squeeze(x, axis=tuple(dims) if dims else None)
        shape = e.const(1)
        if node.op == "ExpandDims":
            return None if shape is None else np.expand_dims(x, int(np.ravel(shape)[0]))
        return None if shape is None else x.reshape([int(v) for v in np.ravel(shape)])
    if node.op in _STRUCT_FOLD:
        try:
            return _fold_struct(e, node)
        except (ValueError, IndexError, TypeError):  # a bad axis: the converter names the node
            return None
    fn = _FOLD.get(node.op)
    if fn is None:
        return None
    args = [e.const(i) for i in range(e.n_inputs())]
    kinds = "fiu" if node.op in _INT_FOLD else "f"
    if not args or any(a is None for a in args) or any(a.dtype.kind not in kinds for a in args):  # type: ignore[union-attr]
        return None
    with np.errstate(all="ignore"):
        return np.asarray(fn(*args)).astype(args[0].dtype)  # type: ignore[union-attr]
