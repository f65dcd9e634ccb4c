"""Run-time planning of a compiled graph for concrete input shapes (``specialize``): the pass
pipeline once per symbolic signature (``signature_template``, kept in a ``SpecializeMemo``), then
per shape shape inference, the folding of the shape computations and the size-dependent kernel
choices (docs/dynamic-shapes.md). ``ge/run/specializer.py`` calls it; ``compiler.py`` makes the
graphs it starts from.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ge.compile.passes.base import PassContext
from pycann.ge.compile.passes.constant_folding import fold_graph, infer_and_fold
from pycann.ge.compile.passes.dead_code import eliminate
from pycann.ge.compile.passes.infer_shapes import infer_graph
from pycann.ge.compile.passes.inline_if import inline_constant_ifs
from pycann.ge.compile.pipelines import SHAPE_CHOICES, SIGNATURE_PIPELINE, SPECIALIZE_PIPELINE, run_pipeline
from pycann.ge.ir import Graph, Node

__all__ = ["SpecializeMemo", "check_shapes", "signature_template", "specialize"]


@dataclass
class SpecializeMemo:
    """One model's symbolic signatures and their template graphs (one memo per ``Executor``).

    A *symbolic signature* is what the plan depends on beyond the sizes: the values of the
    control inputs (``values`` of ``specialize``; the input ranks and dtypes are the model's).
    ``templates`` maps each to the graph optimised for it (``SIGNATURE_PIPELINE`` run once, the
    input shapes still symbolic), or to None where Ifs on the shapes remain (those graphs are
    optimised per shape when an If inlines). Counters: ``pipeline_runs`` (template builds plus
    those per-shape re-optimisations) and ``specialized`` (concrete graphs made)."""

    templates: dict[Hashable, Graph | None] = field(default_factory=dict)
    pipeline_runs: int = 0
    specialized: int = 0


def _signature_key(values: dict[str, np.ndarray] | None) -> Hashable:
    return tuple(sorted((k, v.dtype.str, v.shape, v.tobytes()) for k, v in (values or {}).items()))


def _copy_graph(graph: Graph) -> Graph:
    """A copy whose top-level nodes, initializer and desc maps may be rewritten (attrs and
    subgraph objects stay shared with ``graph``, which never changes)."""
    return Graph(
        nodes=[_copy_node(n) for n in graph.nodes], inputs=list(graph.inputs), outputs=list(graph.outputs),
        initializers=dict(graph.initializers), descs=dict(graph.descs), name=graph.name,
        opsets=dict(graph.opsets), metadata=graph.metadata, context=graph.context,
    )


def _resolve(g: Graph) -> None:
    """Shape inference and folding to a fixed point, inlining the Ifs whose condition folds
    (a graph without subgraphs: one sweep, ``infer_and_fold``)."""
    if not any(n.subgraphs for n in g.nodes):
        infer_and_fold(g)
        return
    for _ in range(64):
        infer_graph(g, recurse=False)
        folded = fold_graph(g, recurse=False)
        if not inline_constant_ifs(g) and not folded:
            break


def _optimise(g: Graph, pipeline: list[tuple[str, Any]], memo: SpecializeMemo | None) -> Graph:
    if memo is not None and pipeline is not SHAPE_CHOICES:
        memo.pipeline_runs += 1
    return run_pipeline(g, PassContext(options={"disabled_passes": list(g.context.disabled_passes)}), pipeline)


def signature_template(graph: Graph, values: dict[str, np.ndarray] | None = None,
                       memo: SpecializeMemo | None = None) -> Graph | None:
    """The template of ``graph`` for control ``values`` (``SpecializeMemo``), built on first use:
    the values bound as constants, inference and folding with the input shapes still symbolic,
    Ifs on the values inlined, then ``SIGNATURE_PIPELINE`` once. None when subgraphs remain."""
    key = _signature_key(values)
    if memo is not None and key in memo.templates:
        return memo.templates[key]
    g = _copy_graph(graph)
    for name, v in (values or {}).items():
        g.initializers[name] = v
    _resolve(g)
    t = None if any(n.subgraphs for n in g.nodes) else _optimise(g, SIGNATURE_PIPELINE, memo)
    if memo is not None:
        memo.templates[key] = t
    return t


def specialize(graph: Graph, shapes: Sequence[tuple[int, ...] | None],
               values: dict[str, np.ndarray] | None = None, memo: SpecializeMemo | None = None) -> Graph:
    """A copy of ``graph`` planned for concrete input ``shapes`` (in ``graph.inputs`` order).

    ``values`` binds small control inputs (e.g. a scalar sample rate) to constants as well, so
    shape arithmetic folds and If nodes on them are inlined (IfInlining). Node and subgraph
    objects are shared with ``graph`` and never mutated here.

    With a ``memo`` (one per model) the pass pipeline runs once per symbolic signature
    (``signature_template``); each shape then only gets shape inference, the folding of its
    shape arithmetic and ``SHAPE_CHOICES`` (dead nodes, residual post-ops, kernel and layout
    selection) on a copy of the template. Without one, the graph is optimised for this shape
    alone (``SPECIALIZE_PIPELINE``: gears, tools). Raises ``ShapeError`` for shapes the graph
    cannot take.
    """
    template = signature_template(graph, values, memo) if memo is not None else None
    g = _copy_graph(template if template is not None else graph)
    for name, shape in zip(g.inputs, shapes):
        old = g.descs.get(name)
        if shape is None:
            continue  # sequence / optional input: keep the compiled desc
        g.descs[name] = TensorDesc(old.dtype if old else 1, tuple(int(d) for d in shape))
    if template is None:
        for name, v in (values or {}).items():
            g.initializers[name] = v
    _resolve(g)
    if any(n.subgraphs for n in g.nodes):
        eliminate(g, top=False, recurse=False)  # subgraphs are shared: do not rename inside them
    elif template is not None:
        g = _optimise(g, SHAPE_CHOICES, memo)
    else:
        # control flow is gone (If inlined): the flat graph gets the fusion passes again
        g = _optimise(g, SPECIALIZE_PIPELINE, memo)
    if memo is not None:
        memo.specialized += 1
    for name in values or {}:
        # the feed still arrives through the input slot; keeping it constant would hide a wrong feed
        g.initializers.pop(name, None)
    return g


def check_shapes(graph: Graph, shapes: Sequence[tuple[int, ...] | None],
                 values: dict[str, np.ndarray] | None = None) -> None:
    """Shape inference and folding of ``graph`` for concrete input ``shapes`` and control ``values``
    on a copy, nothing planned or cached (no ``SpecializeMemo``): raises the ``ShapeError`` naming the
    node and op that cannot take them, as ``specialize`` would; returns when they fit. The executor's
    diagnosis of a call the shape-generic plan refused under ``PlanPolicy.GENERIC``, where no
    specialised plan may be built."""
    g = _copy_graph(graph)
    for name, shape in zip(g.inputs, shapes):
        old = g.descs.get(name)
        if shape is not None:
            g.descs[name] = TensorDesc(old.dtype if old else 1, tuple(int(d) for d in shape))
    for name, v in (values or {}).items():
        g.initializers[name] = v
    _resolve(g)


def _copy_node(n: Node) -> Node:
    return Node(n.op_type, list(n.inputs), list(n.outputs), n.attrs, n.name, n.domain, n.opset, n.origin)
