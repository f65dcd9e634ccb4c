"""The shape-generic plan's KV caches: ``present = Concat(past, new)`` as ``pycann.CacheAppend``.

A decoder exported with ``past_key_values`` (Hugging Face, ``torch.onnx.export`` of a module that
takes and returns its cache) appends each step's key and value with a Concat whose first input is
a graph input (``past``) and whose output is a graph output (``present``, fed back as the next
step's ``past``). Every decode step runs on the shape-generic plan (the past length is new each
time), and Concat copies the whole past there: 12 x P x row bytes a step for a 6-layer model.

``alias(graph)`` returns a copy of ``graph`` in which each such Concat is a CacheAppend
(ops/cache_append.py: Concat's semantics; its plan kernel, kernels/kv_cache.py, appends in place
to a buffer that ``present`` is a view of). A Concat qualifies when it has exactly two inputs, the
first a graph input that is not also an initializer (an overridable constant is never a
fed-back cache), the second computed, and its output a graph output. The past must also look like
a cache: its length on the concat axis is not a fixed number (a past grows from step to step) and
nothing else reads its values (Shape/Size/ShapeOf read only its shape; a subgraph's outer-scope read
counts as a value read). ``Concat(x, Relu(x))`` of an image batch is no cache: rewritten, its
output would be read-only, strided and held in a buffer of 64 extra rows. Other readers of
``present`` inside the graph (attention) read the view as they read the Concat's array.

A reduced-precision mode (``force_fp16``, ``allow_mix_precision``) casts around the Concat:
``present = Cast(Concat(Cast(past, lo), new_lo), f32)``, three copies of the whole past a step and no
cache. That becomes ``present = CacheAppend(past, Cast(new_lo, f32); round_to=lo)`` and
``Concat's output = Cast(present, lo)`` for the attention that read it: one cast a step. ``round_to``
makes the values Concat's exactly (ops/cache_append.py: a ``past`` the buffer did not write is
rounded through ``lo`` as the Cast did; rows it wrote already were).

Only the generic plan's graph is rewritten (``ge/run/executor.Executor.generic_plan``):
specialised plans keep Concat (their outputs are off-arena copies anyway) and compiled graphs and
.om files never hold CacheAppend. ``PYCANN_KV_CACHE=off`` (``config.kv_cache``) leaves Concat.
"""

from __future__ import annotations

from dataclasses import replace

from pycann.dtypes import DType, TensorDesc
from pycann.ge.ir import Graph, Node
from pycann.ge.ir.graph import node_reads

__all__ = ["alias"]

# ops that read only their input's shape: a past's length is read this way (positions, masks)
_SHAPE_READERS = {("", "Shape"), ("ai.onnx", "Shape"), ("", "Size"), ("ai.onnx", "Size"), ("pycann", "ShapeOf")}


_NARROW = (int(DType.FLOAT16), int(DType.BFLOAT16))  # the dtypes a precision mode's Casts round a cache through


def _is_op(n: Node | None, op: str) -> bool:
    return n is not None and n.op_type == op and n.domain in ("", "ai.onnx") and not n.subgraphs


def _qualifies(n: Node, inputs: set[str], outputs: set[str], graph: Graph, value_reads: dict[str, int]) -> bool:
    if not _is_op(n, "Concat") or len(n.inputs) != 2 or len(n.outputs) != 1 or "axis" not in n.attrs:
        return False
    past, new = n.inputs
    if not (past in inputs and past not in graph.initializers and bool(new) and new not in inputs
            and new not in graph.initializers and n.outputs[0] in outputs):
        return False
    return _cache_like(n, past, graph, value_reads)


def _cache_like(n: Node, past: str, graph: Graph, value_reads: dict[str, int]) -> bool:
    """``past`` (read by ``n``, directly or through its Cast) looks like a fed-back cache (module doc)."""
    if value_reads.get(past, 0) != 1:  # read by something besides this Concat: not a fed-back cache
        return False
    d = graph.descs.get(past)
    shape = d.shape if d is not None else None
    if shape:
        axis = int(n.attrs["axis"])
        if -len(shape) <= axis < len(shape) and isinstance(shape[axis], int):
            return False  # a fixed length on the concat axis: it never grows, no cache
    return True


def _value_reads(graph: Graph) -> dict[str, int]:
    """How many times each name is read by a node for its values (not only its shape)."""
    reads: dict[str, int] = {}
    for n in graph.nodes:
        if (n.domain, n.op_type) in _SHAPE_READERS:
            continue
        for name in node_reads(n):
            reads[name] = reads.get(name, 0) + 1
    return reads


def _cast_wrapped(n: Node, graph: Graph, made_by: dict[str, Node], readers: dict[str, list[Node]],
                  value_reads: dict[str, int]) -> tuple[Node, Node] | None:
    """``(cast_in, cast_out)`` when ``n`` is the Concat of ``Cast(Concat(Cast(past, lo), new), past's
    dtype)`` = a graph output, ``past`` a float32 graph input that looks like a cache (module doc)."""
    if not _is_op(n, "Concat") or len(n.inputs) != 2 or len(n.outputs) != 1 or "axis" not in n.attrs:
        return None
    lo_past, new = n.inputs
    cast_in = made_by.get(lo_past)
    if not _is_op(cast_in, "Cast") or cast_in is None or int(cast_in.attrs.get("to", 0)) not in _NARROW:
        return None
    past = cast_in.inputs[0]
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    d = graph.descs.get(past)
    if past not in inputs or past in graph.initializers or d is None or d.dtype != DType.FLOAT \
            or lo_past in outputs or value_reads.get(lo_past, 0) != 1 or not new or new in inputs \
            or new in graph.initializers or n.outputs[0] in outputs:
        return None
    outs = [r for r in readers.get(n.outputs[0], []) if _is_op(r, "Cast") and int(r.attrs.get("to", 0)) == DType.FLOAT
            and r.outputs[0] in outputs]
    if len(outs) != 1 or not _cache_like(n, past, graph, value_reads):
        return None
    return cast_in, outs[0]


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 0
    while name in taken:
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def alias(graph: Graph) -> tuple[Graph, int]:
    """A copy of ``graph`` with its KV-cache Concats as CacheAppend (module doc), and how many were
    rewritten (0: ``graph`` itself is returned). ``graph`` is not changed."""
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    value_reads = _value_reads(graph)
    made_by = graph.producers()
    readers = graph.consumers()
    dropped: set[int] = set()
    taken = {v for n in graph.nodes for v in (*n.inputs, *n.outputs)} | inputs
    descs = dict(graph.descs)
    nodes: list[Node] = []
    count = 0
    for n in graph.nodes:
        if id(n) in dropped:
            continue
        if _qualifies(n, inputs, outputs, graph, value_reads):
            n = replace(n, op_type="CacheAppend", domain="pycann", opset=1, attrs={"axis": int(n.attrs["axis"])})
            count += 1
        else:
            wrapped = _cast_wrapped(n, graph, made_by, readers, value_reads)
            if wrapped is not None:
                cast_in, cast_out = wrapped
                lo, past, new, present = int(cast_in.attrs["to"]), cast_in.inputs[0], n.inputs[1], cast_out.outputs[0]
                wide = _fresh(f"{new}_cache_f32", taken)
                nd = graph.descs.get(new)
                descs[wide] = TensorDesc(DType.FLOAT, nd.shape if nd is not None else None)
                nodes = [m for m in nodes if m is not cast_in]  # (it came before: its only reader was n)
                dropped.add(id(cast_out))
                nodes += [Node("Cast", [new], [wide], {"to": int(DType.FLOAT)}, name=f"{n.name}_new_f32", opset=19),
                          Node("CacheAppend", [past, wide], [present], {"axis": int(n.attrs["axis"]), "round_to": lo},
                               name=n.name, domain="pycann", opset=1)]
                if len(readers.get(n.outputs[0], [])) > 1:  # (the attention reads it; not made for no reader)
                    nodes.append(Node("Cast", [present], [n.outputs[0]], {"to": lo}, name=f"{n.name}_lo", opset=19))
                count += 1
                continue
        nodes.append(n)
    if not count:
        return graph, 0
    return replace(graph, nodes=nodes, descs=descs), count
