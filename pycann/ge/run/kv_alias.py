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

Only the generic plan's graph is rewritten (``ge/run/executor.Executor.generic_plan``):
specialised plans keep Concat (their outputs are off-arena copies anyway) and compiled graphs and
.om files never hold CacheAppend. ``PYCANN_KV_CACHE=off`` (``config.kv_cache``) leaves Concat.
"""

from __future__ import annotations

from dataclasses import replace

from pycann.ge.ir import Graph, Node
from pycann.ge.ir.graph import node_reads

__all__ = ["alias"]

# ops that read only their input's shape: a past's length is read this way (positions, masks)
_SHAPE_READERS = {("", "Shape"), ("ai.onnx", "Shape"), ("", "Size"), ("ai.onnx", "Size"), ("pycann", "ShapeOf")}


def _qualifies(n: Node, inputs: set[str], outputs: set[str], graph: Graph, value_reads: dict[str, int]) -> bool:
    if n.op_type != "Concat" or n.domain not in ("", "ai.onnx") or n.subgraphs:
        return False
    if len(n.inputs) != 2 or len(n.outputs) != 1 or "axis" not in n.attrs:
        return False
    past, new = n.inputs
    if not (past in inputs and past not in graph.initializers and bool(new) and new not in inputs
            and new not in graph.initializers and n.outputs[0] in outputs):
        return False
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


def alias(graph: Graph) -> tuple[Graph, int]:
    """A copy of ``graph`` with its KV-cache Concats as CacheAppend (module doc), and how many were
    rewritten (0: ``graph`` itself is returned). ``graph`` is not changed."""
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    value_reads = _value_reads(graph)
    nodes: list[Node] = []
    count = 0
    for n in graph.nodes:
        if _qualifies(n, inputs, outputs, graph, value_reads):
            n = replace(n, op_type="CacheAppend", domain="pycann", opset=1, attrs={"axis": int(n.attrs["axis"])})
            count += 1
        nodes.append(n)
    if not count:
        return graph, 0
    return replace(graph, nodes=nodes), count
