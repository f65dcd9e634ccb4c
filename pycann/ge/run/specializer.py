"""The graph a loaded model plans a signature on: the compiled graph itself when ``atc`` already planned
it for these shapes in this environment, else ``specialize.specialize``'s (imported on first use).

A static model (every input a tensor of fixed shape, no control input, no If left) is compiled for
exactly the shapes it will run: the compile ran the whole pass pipeline on them and chose kernels
and layouts. Run-time specialisation would repeat that (shape inference, the signature pipeline,
the kernel and layout choices) to the same graph, as long as those choices would come out the
same: the .om records the environment they were made in (``kernels.environment``) and the loader
compares it with its own. Saves the pipeline's run at load and the import of the compile side
(about 20 ms of import and 12 ms of planning on ResNet-50 and MobileNetV2; bench/RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.ge.ir import Graph
from pycann.kernels.environment import choice_environment


def compiled_plan_holds(graph: Graph, manifest: Mapping[str, Any]) -> bool:
    """Whether ``graph``'s compiled kernel and layout choices hold here: the manifest's
    ``kernel_env`` equals this process's ``choice_environment`` for the graph's knowledge bank, and
    the graph has no subgraph (control flow re-plans per shape)."""
    recorded = manifest.get("kernel_env")
    if not isinstance(recorded, dict) or any(n.subgraphs for n in graph.nodes):
        return False
    ctx = graph.context
    return recorded == choice_environment(ctx.op_bank_path, ctx.kernel_bank)


class Specializer:
    """``specialize(graph, shapes, values, memo) -> Graph`` for an ``Executor``.

    ``static_shapes``: the input shapes the compiled graph was planned for, when
    ``compiled_plan_holds``; a call with exactly those shapes and no control values gets the
    compiled graph (never mutated by planning). Any other call runs ``specialize.specialize`` with
    this model's ``SpecializeMemo`` (one pass-pipeline run per symbolic signature)."""

    def __init__(self, static_shapes: Sequence[tuple[int, ...]] | None = None) -> None:
        self.static_shapes = None if static_shapes is None else tuple(tuple(s) for s in static_shapes)
        self.memo: Any = None  # specialize.SpecializeMemo, made with the first specialisation
        self.compiled_reused = 0  # plans built on the compiled graph as it is

    @property
    def pipeline_runs(self) -> int:
        """Pass-pipeline runs so far (``CacheStats.pipelines``)."""
        return int(getattr(self.memo, "pipeline_runs", 0))

    @property
    def templates(self) -> dict[Any, Graph | None]:
        """The symbolic signatures' template graphs so far (``SpecializeMemo.templates``)."""
        return dict(getattr(self.memo, "templates", {}))

    @property
    def specialized(self) -> int:
        """Graphs ``specialize.specialize`` made so far (``compiled_reused`` counts the others)."""
        return int(getattr(self.memo, "specialized", 0))

    def __call__(self, graph: Graph, shapes: Sequence[tuple[int, ...] | None],
                 values: Mapping[str, np.ndarray] | None = None, memo: Any = None) -> Graph:
        """The graph planned for ``shapes`` (``graph.inputs`` order) and control ``values``.
        ``memo`` is ignored (this object keeps the model's). Raises ``ShapeError`` as
        ``specialize.specialize`` does."""
        if self.static_shapes is not None and not values \
                and tuple(None if s is None else tuple(s) for s in shapes) == self.static_shapes:
            self.compiled_reused += 1
            return checked(graph)
        # (~20 ms of imports a static model never needs)
        from pycann.ge.compile.specialize import SpecializeMemo, specialize

        if self.memo is None:
            self.memo = SpecializeMemo()
        return specialize(graph, shapes, dict(values) if values else None, self.memo)


    def check(self, graph: Graph, shapes: Sequence[tuple[int, ...] | None],
              values: Mapping[str, np.ndarray] | None = None) -> None:
        """Raise the ``ShapeError`` that specialising ``graph`` for ``shapes`` and ``values`` would, with
        nothing built and the memo untouched (``specialize.check_shapes``); return when they fit."""
        from pycann.ge.compile.specialize import check_shapes

        check_shapes(graph, shapes, dict(values) if values else None)

def checked(graph: Graph) -> Graph:
    """``graph`` with its value descs inferred again from its inputs and constants (a copy: nodes and
    constants shared). An .om is read from a file that may have been edited after ``atc``: shape
    inference refuses constants that do not fit their nodes (a bias of the wrong length) with a
    ``ShapeError`` naming the node, before any kernel is bound (~1-2 ms on ResNet-50)."""
    from pycann.ge.compile.passes.infer_shapes import infer_graph

    g = Graph(nodes=list(graph.nodes), inputs=list(graph.inputs), outputs=list(graph.outputs),
              initializers=graph.initializers, descs=dict(graph.descs), name=graph.name,
              opsets=dict(graph.opsets), metadata=graph.metadata, context=graph.context)
    infer_graph(g, recurse=False)
    return g
