"""The shape-generic plan's shape arithmetic as one ``pycann.ShapeOf`` step per value it feeds.

An exported transformer computes each Reshape's target shape at run time: ``Shape`` of an
activation, ``Gather`` of a dim, ``Unsqueeze``, ``Concat`` with constants (and ``Add`` for a KV
cache's past + new length). A specialised plan folds those chains into constants; the plan that
serves every shape (``Executor.generic_plan``: a decoder's steps, a new OCR shape's first call) ran
each node, on int64 arrays of one to four elements: 174 of the 304 steps of a GPT-2 6L decode step.

``collapse(graph)`` returns a copy of ``graph`` in which every such value that a node outside the
arithmetic reads (a Reshape's shape, a Range's bound, a graph output) is computed by one ShapeOf node
(ops/shape_of.py) from the shapes of the tensors the chain queried, and the chain's nodes that nothing
else reads are gone. The values are the ones the chain computes: each is tracked as a vector of
affine dims, ``const + sum(coeff * shape(X)[axis])``, through these ONNX ops and only these (int64
throughout; anything else ends the chain and stays a node):

* ``Shape`` (``start``/``end``); a dim inference knows as a number is a constant;
* ``Gather`` on axis 0 with constant indices (a scalar index gives a scalar);
* ``Unsqueeze`` of a scalar and ``Squeeze`` of a one-element vector on axis 0;
* ``Concat`` on axis 0; ``Slice`` on axis 0 with constant starts, ends and step 1;
* ``Add``, ``Sub`` (scalars or vectors, one-element vectors broadcast) and ``Mul`` by constants;
* ``Cast`` to int64 and ``Identity``; int64 constants of rank 0 or 1 (at most 64 elements).

Only the top-level graph is rewritten (a body that reads a value still finds it under its name).

**Named dims** (``collapse(graph, named=input_dim_names(graph))``): ONNX names a dynamic dim with a
``dim_param``, and inputs that share a name have that dim equal (the convention TensorRT checks and
exporters follow: a decoder's ``past_key_i`` all carry ``past_seq``). Given that, a dim whose desc
carries a name is read from the first graph input carrying it, so the per-layer programs of a
decoder (each reading its own ``past_key_i`` or activation) become one program, computed once. The
names come from shape inference run again from the inputs' names (``InferShapes``' rules, which
keep a name only where the op makes the dim equal), with two additions from the arithmetic: a
``Range`` of step 1 whose length is a named dim, and a ``Reshape`` whose target dims are named
dims, get those names (with ``allowzero`` 0 a target dim that is 0 copies the input's dim: such a
name is one the call must give a size other than 0, ``collapse``'s ``nonzero``). The caller must
check the names at run time (``names_agree``) and use a plan without them when they differ.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeGuard

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.ge.compile.passes.infer_shapes import infer_node
from pycann.ge.ir import Graph, Node, free_names, node_reads
from pycann.ops.registry import lookup

__all__ = ["Dim", "Vec", "collapse", "input_dim_names", "name_groups", "names_agree"]

MAX_CONST = 64  # elements of a constant vector taken into the arithmetic


@dataclass(frozen=True)
class Dim:
    """``const + sum(coeff * shape(source)[axis])`` over ``terms`` = ((source, axis, coeff), ...), sorted."""

    const: int
    terms: tuple[tuple[str, int, int], ...] = ()

    def __add__(self, other: Dim) -> Dim:
        acc: dict[tuple[str, int], int] = {}
        for s, a, c in (*self.terms, *other.terms):
            acc[(s, a)] = acc.get((s, a), 0) + c
        return Dim(self.const + other.const, tuple(sorted((s, a, c) for (s, a), c in acc.items() if c)))

    def scaled(self, k: int) -> Dim:
        return Dim(self.const * k, tuple((s, a, c * k) for s, a, c in self.terms if c * k))


@dataclass(frozen=True)
class Vec:
    """An int64 value of the arithmetic: its ``dims`` (one per element) and whether it is 0-d."""

    dims: tuple[Dim, ...]
    scalar: bool = False


def _const_vec(a: np.ndarray) -> Vec | None:
    if a.dtype != np.int64 or a.ndim > 1 or a.size > MAX_CONST:
        return None
    return Vec(tuple(Dim(int(v)) for v in a.reshape(-1)), scalar=a.ndim == 0)


def _const_ints(g: Graph, name: str) -> list[int] | None:
    a = g.initializers.get(name) if name else None
    if a is None or a.dtype.kind not in "iu" or a.ndim > 1:
        return None
    return [int(v) for v in a.reshape(-1)]


def _shape(node: Node, descs: Mapping[str, TensorDesc], named: Mapping[str, tuple[str, int]]) -> Vec | None:
    d = descs.get(node.inputs[0])
    if d is None or d.shape is None:
        return None
    r = len(d.shape)
    start = int(node.attrs.get("start", 0) or 0)
    end = node.attrs.get("end")
    end = r if end is None else int(end)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    x = node.inputs[0]
    return Vec(tuple(Dim(s) if isinstance(s, int) else Dim(0, (named[s] + (1,),)) if isinstance(s, str) and s in named
                     else Dim(0, ((x, i, 1),)) for i, s in zip(range(start, end), d.shape[start:end])))


def _axis0(node: Node, g: Graph, default: list[int] | None) -> bool:
    """The node's axes (input 1 from opset 13, else the attribute) are exactly axis 0 of a 1-D value."""
    axes = _const_ints(g, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("axes", default)
    return axes is not None and list(axes) in ([0], [-1])


def _binary(node: Node, a: Vec, b: Vec) -> Vec | None:
    if a.scalar or len(a.dims) == 1:
        a_dims = a.dims * (1 if b.scalar else len(b.dims))
    else:
        a_dims = a.dims
    if b.scalar or len(b.dims) == 1:
        b_dims = b.dims * len(a_dims)
    else:
        b_dims = b.dims
    if len(a_dims) != len(b_dims):
        return None
    scalar = a.scalar and b.scalar
    if node.op_type == "Add":
        out = [x + y for x, y in zip(a_dims, b_dims)]
    elif node.op_type == "Sub":
        out = [x + y.scaled(-1) for x, y in zip(a_dims, b_dims)]
    else:  # Mul: one side constant keeps the dims affine
        out = []
        for x, y in zip(a_dims, b_dims):
            if not y.terms:
                out.append(x.scaled(y.const))
            elif not x.terms:
                out.append(y.scaled(x.const))
            else:
                return None
    return Vec(tuple(out), scalar=scalar)


def _track(node: Node, g: Graph, vals: dict[str, Vec], descs: Mapping[str, TensorDesc] | None = None,
           named: Mapping[str, tuple[str, int]] | None = None) -> Vec | None:
    """The output of ``node`` as a ``Vec`` when its op and inputs allow it (module doc), else None."""
    op, ins = node.op_type, node.inputs
    if node.domain or len(node.outputs) != 1:
        return None
    if op == "Shape":
        return _shape(node, g.descs if descs is None else descs, named or {})
    v = vals.get(ins[0]) if ins and ins[0] else None
    if v is None:
        return None
    if op == "Identity":
        return v
    if op == "Cast":
        return v if node.attrs.get("to") == DType.INT64 else None
    if op == "Gather":
        idx = g.initializers.get(ins[1]) if len(ins) > 1 else None
        if v.scalar or int(node.attrs.get("axis", 0)) not in (0, -1) or idx is None or idx.dtype.kind not in "iu" \
                or idx.ndim > 1:
            return None
        n = len(v.dims)
        picks = [int(i) + n if int(i) < 0 else int(i) for i in idx.reshape(-1)]
        if any(not 0 <= i < n for i in picks):
            return None  # out of range: the node raises at run time, naming itself
        return Vec(tuple(v.dims[i] for i in picks), scalar=idx.ndim == 0)
    if op == "Unsqueeze":
        return Vec(v.dims) if v.scalar and _axis0(node, g, None) else None
    if op == "Squeeze":
        return Vec(v.dims, scalar=True) if not v.scalar and len(v.dims) == 1 and _axis0(node, g, [0]) else None
    if op == "Concat":
        parts = [vals.get(i) for i in ins]
        if int(node.attrs.get("axis", 0)) not in (0, -1) or any(p is None or p.scalar for p in parts):
            return None
        return Vec(tuple(d for p in parts if p is not None for d in p.dims))
    if op == "Slice":
        starts, ends = (_const_ints(g, ins[i]) if len(ins) > i else None for i in (1, 2))
        axes = _const_ints(g, ins[3]) if len(ins) > 3 and ins[3] else [0]
        steps = _const_ints(g, ins[4]) if len(ins) > 4 and ins[4] else [1]
        if v.scalar or starts is None or ends is None or len(starts) != 1 or len(ends) != 1 \
                or axes not in ([0], [-1]) or steps != [1]:
            return None
        return Vec(v.dims[slice(starts[0], ends[0])])
    if op in ("Add", "Sub", "Mul") and len(ins) == 2:
        w = vals.get(ins[1])
        return _binary(node, v, w) if w is not None else None
    return None


def _shape_of(name: str, v: Vec, node: Node) -> Node | None:
    """The ShapeOf node computing ``v`` under ``name`` (None when ``v`` reads no shape: a constant)."""
    sources: list[str] = []
    flat: list[int] = []
    for d in v.dims:
        flat += [d.const, len(d.terms)]
        for s, a, c in d.terms:
            if s not in sources:
                sources.append(s)
            flat += [sources.index(s), a, c]
    if not sources:
        return None
    return Node("ShapeOf", sources, [name], {"dims": flat, "scalar": int(v.scalar)},
                name=f"{node.name or name}/ShapeOf", domain="pycann", opset=1, origin=list(node.origin or [node.name]))


# dim_params that exporters write for "unknown" rather than as a name (Paddle2ONNX writes "?" on
# every dynamic dim): never taken to make two dims equal
PLACEHOLDERS = frozenset({"?", "-1", "none", "null", "unknown", "unk", "dynamic", "n/a"})


def _is_name(s: Any) -> TypeGuard[str]:
    return isinstance(s, str) and any(c.isalnum() for c in s) and s.strip().lower() not in PLACEHOLDERS


def input_dim_names(graph: Graph) -> dict[str, tuple[str, int]]:
    """The named dims (ONNX ``dim_param``, not a placeholder such as ``?``) of ``graph``'s inputs:
    name -> (the first input carrying it, its axis)."""
    named: dict[str, tuple[str, int]] = {}
    for x in graph.inputs:
        d = graph.descs.get(x)
        for axis, s in enumerate(() if d is None or d.shape is None else d.shape):
            if _is_name(s):
                named.setdefault(s, (x, axis))
    return named


def name_groups(graph: Graph) -> tuple[tuple[tuple[int, int], ...], ...]:
    """For each dim name ``graph``'s inputs carry more than once: its (input index, axis) pairs."""
    at: dict[str, list[tuple[int, int]]] = {}
    for i, x in enumerate(graph.inputs):
        d = graph.descs.get(x)
        for axis, s in enumerate(() if d is None or d.shape is None else d.shape):
            if _is_name(s):
                at.setdefault(s, []).append((i, axis))
    return tuple(tuple(v) for v in at.values() if len(v) > 1)


def names_agree(groups: tuple[tuple[tuple[int, int], ...], ...], feeds: Sequence[Any],
                nonzero: Sequence[tuple[int, int]] = ()) -> bool:
    """Whether ``feeds`` (arrays in graph-input order) give each group of ``name_groups`` one size, and
    the dims at ``nonzero`` ((input index, axis): names ``collapse`` assumed not 0) are not 0."""
    for i, axis in nonzero:
        shape = getattr(feeds[i] if i < len(feeds) else None, "shape", None)
        if shape is None or axis >= len(shape) or shape[axis] == 0:
            return False
    for group in groups:
        size = None
        for i, axis in group:
            x = feeds[i] if i < len(feeds) else None
            shape = getattr(x, "shape", None)
            if shape is None or axis >= len(shape):
                return False
            if size is None:
                size = shape[axis]
            elif shape[axis] != size:
                return False
    return True


def _symbol(d: Dim, descs: Mapping[str, TensorDesc]) -> int | str | None:
    """``d`` as a desc dim: its size when constant, the name of the one named dim it equals, else None."""
    if not d.terms:
        return d.const if d.const >= 0 else None
    if d.const or len(d.terms) != 1 or d.terms[0][2] != 1:
        return None
    src, axis, _ = d.terms[0]
    desc = descs.get(src)
    s = None if desc is None or desc.shape is None or axis >= len(desc.shape) else desc.shape[axis]
    return s if isinstance(s, str) else None


def _refine(node: Node, g: Graph, vals: Mapping[str, Vec], descs: dict[str, TensorDesc],
            nonzero: set[str] | None = None) -> None:
    """``descs`` of ``node``'s outputs inferred again from ``descs`` (names included), plus the names
    a Range's length or a Reshape's target carries (module doc). A node that cannot be inferred (a body,
    an error) gets its outputs' compiled descs without names. A Reshape target's named dim that holds
    only while the name is not 0 (``allowzero`` 0 copies the input's dim for a 0) is kept and added to
    ``nonzero`` when given, else dropped."""
    outs: list[TensorDesc] | None = None
    if not node.subgraphs:
        try:
            op = lookup(node.op_type, node.domain, node.opset or g.opsets.get(node.domain), node.label())
            outs = infer_node(node, op, descs, g.initializers, {}, strict=False)
        except Exception:  # noqa: BLE001 - any failure: the outputs lose their names, nothing else
            outs = None
    if outs is None:
        for o in node.outputs:
            d = g.descs.get(o)
            if o and d is not None:
                descs[o] = d if d.shape is None else TensorDesc(
                    d.dtype, tuple(None if isinstance(s, str) else s for s in d.shape), d.format, d.kind)
        return
    ins = node.inputs
    if node.op_type == "Range" and len(ins) == 3 and len(outs) == 1 and not node.domain:
        start, limit = vals.get(ins[0]), vals.get(ins[1])
        delta = g.initializers.get(ins[2])
        if start is not None and limit is not None and start.scalar and limit.scalar and delta is not None \
                and delta.size == 1 and delta.dtype.kind in "iu" and int(delta.reshape(-1)[0]) == 1:
            n = _symbol(limit.dims[0] + start.dims[0].scaled(-1), descs)
            if n is not None:
                outs = [TensorDesc(outs[0].dtype, (n,))]
    elif node.op_type == "Reshape" and len(ins) == 2 and len(outs) == 1 and not node.domain:
        target, data = vals.get(ins[1]), descs.get(ins[0])
        got = outs[0].shape if outs[0].shape is not None or target is None else (None,) * len(target.dims)
        if target is not None and not target.scalar and got is not None and len(got) == len(target.dims):
            keep = bool(node.attrs.get("allowzero", 0))
            dims: list[Any] = []
            for i, (dim, have) in enumerate(zip(target.dims, got)):
                s = _symbol(dim, descs)
                if not keep and (s == 0 or isinstance(s, str)):
                    # 0 copies the input's dim, so a named dim that is 0 in a call copies it too: the
                    # name holds where the input's dim is that name (or 0), else only while it is not 0
                    copied = data.shape[i] if data is not None and data.shape is not None and i < len(data.shape) else None
                    if not isinstance(s, str):
                        s = copied
                    elif copied not in (s, 0):
                        if nonzero is None:
                            s = None
                        else:
                            nonzero.add(s)
                dims.append(have if have is not None or s is None else s)
            outs = [TensorDesc(outs[0].dtype, tuple(dims), outs[0].format, outs[0].kind)]
    for o, out in zip(node.outputs, outs):
        if o:
            descs[o] = out


def collapse(graph: Graph, named: Mapping[str, tuple[str, int]] | None = None,
             nonzero: set[str] | None = None) -> tuple[Graph, int]:
    """A copy of ``graph`` with its shape arithmetic collapsed (module doc), and how many nodes it removed
    (0: the graph itself is returned). ``graph`` is not changed. ``named`` (``input_dim_names``): read
    named dims from the input carrying the name first (the caller checks ``names_agree`` per call).
    ``nonzero``: gets the names the reading assumed not 0 (a Reshape's target: ``_refine``), which the
    caller checks too; without it such names are not carried."""
    vals: dict[str, Vec] = {}
    for name, a in graph.initializers.items():
        v = _const_vec(a)
        if v is not None:
            vals[name] = v
    descs: dict[str, TensorDesc] | None = None
    if named:
        descs = dict(graph.descs)  # refined node by node from the inputs' names (``_refine``)
    tracked: set[int] = set()  # ids of nodes whose output is tracked
    for n in graph.nodes:
        v = _track(n, graph, vals, descs, named)
        if v is not None:
            vals[n.outputs[0]] = v
            tracked.add(id(n))
        elif descs is not None:
            _refine(n, graph, vals, descs, nonzero)
    if nonzero is not None and named is not None:
        # only the names read from the inputs make an assumption (a placeholder such as '?', or a name
        # an output's declared shape gave a shape value, is read from the value itself)
        nonzero.intersection_update(named)
    if not tracked:
        return graph, 0
    # values the rest of the graph reads: each gets one ShapeOf (or a constant) in place of its producer
    needed = set(graph.outputs)
    for n in graph.nodes:
        if id(n) not in tracked:
            needed.update(node_reads(n))  # (a body's reads of outer values included)
    # a value read only as a node's direct input (no body, not an output) may share an equal one computed
    # earlier: the same program over the same tensors (a transformer's per-layer Reshape targets)
    direct = {x for n in graph.nodes if id(n) not in tracked for g in n.subgraphs.values() for x in free_names(g)}
    direct.update(graph.outputs)
    nodes: list[Node] = []
    inits: dict[str, Any] = {}
    first: dict[tuple[Any, ...], str] = {}
    renamed: dict[str, str] = {}
    for n in graph.nodes:
        if id(n) not in tracked:
            if any(i in renamed for i in n.inputs):
                n = replace(n, inputs=[renamed.get(i, i) for i in n.inputs])
            nodes.append(n)
            continue
        name = n.outputs[0]
        if name not in needed:
            continue
        v = vals[name]
        new = _shape_of(name, v, n)
        if new is None:
            consts = [d.const for d in v.dims]
            inits[name] = np.array(consts[0] if v.scalar else consts, dtype=np.int64)
            continue
        if any(i in renamed for i in new.inputs):  # a source that is itself a shared shape value
            new = replace(new, inputs=[renamed.get(i, i) for i in new.inputs])
        key = (tuple(new.inputs), tuple(new.attrs["dims"]), new.attrs["scalar"])
        if key in first and name not in direct:
            renamed[name] = first[key]
            continue
        first.setdefault(key, name)
        nodes.append(new)
    if len(nodes) == len(graph.nodes) and not inits:
        return graph, 0
    out = replace(graph, nodes=nodes, initializers={**graph.initializers, **inits})
    return out, len(graph.nodes) - len(nodes)

