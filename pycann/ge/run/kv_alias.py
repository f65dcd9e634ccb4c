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
fed-back cache), the second computed, and its output a graph output. Other readers of ``present``
inside the graph (attention) read the view as they read the Concat's array.

Only the generic plan's graph is rewritten (``ge/run/executor.Executor.generic_plan``):
specialised plans keep Concat (their outputs are off-arena copies anyway) and compiled graphs and
.om files never hold CacheAppend. ``PYCANN_KV_CACHE=off`` (``config.kv_cache``) leaves Concat.
"""

from __future__ import annotations

from dataclasses import replace

from pycann.ge.ir import Graph, Node

__all__ = ["alias"]


def _qualifies(n: Node, inputs: set[str], outputs: set[str], graph: Graph) -> bool:
    if n.op_type != "Concat" or n.domain not in ("", "ai.onnx") or n.subgraphs:
        return False
    if len(n.inputs) != 2 or len(n.outputs) != 1 or "axis" not in n.attrs:
        return False
    past, new = n.inputs
    return (past in inputs and past not in graph.initializers and bool(new) and new not in inputs
            and new not in graph.initializers and n.outputs[0] in outputs)


def alias(graph: Graph) -> tuple[Graph, int]:
    """A copy of ``graph`` with its KV-cache Concats as CacheAppend (module doc), and how many were
    rewritten (0: ``graph`` itself is returned). ``graph`` is not changed."""
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    nodes: list[Node] = []
    count = 0
    for n in graph.nodes:
        if _qualifies(n, inputs, outputs, graph):
            n = replace(n, op_type="CacheAppend", domain="pycann", opset=1, attrs={"axis": int(n.attrs["axis"])})
            count += 1
        nodes.append(n)
    if not count:
        return graph, 0
    return replace(graph, nodes=nodes), count
