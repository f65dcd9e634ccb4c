"""Overridable initializers: an ONNX graph input that also has an initializer (IR version >= 4).

ONNX semantics: the initializer is the input's default value and a feed overrides it (ONNX
Runtime lists such names under ``get_overridable_initializers()``, not ``get_inputs()``). pycann
compiles the default as a constant, so the common case (nobody feeds it: PyTorch's
``keep_initializers_as_inputs=True`` lists every weight) keeps constant folding and fused,
pre-packed kernels. The importer records the names in ``graph.metadata[METADATA_KEY]``; a run
that feeds one runs a variant of the compiled graph in which those constants are inputs. A
default that the compiler folded into another constant (e.g. a BatchNormalization folded into a
Conv's weights) no longer exists by itself and cannot be fed: that is refused, naming it.
"""

from __future__ import annotations

from collections.abc import Iterable

from pycann.dtypes import TensorDesc, from_numpy
from pycann.errors import InputError
from pycann.ge.ir.graph import Graph

METADATA_KEY = "overridable_initializers"


def overridable(graph: Graph) -> set[str]:
    """Names of the graph's overridable initializers (recorded at import)."""
    return {n for n in graph.metadata.get(METADATA_KEY, "").split(",") if n}


def with_inputs(graph: Graph, names: Iterable[str]) -> Graph:
    """A copy of ``graph`` in which the initializers ``names`` are graph inputs (appended in
    sorted order), described by the default's dtype and shape. Raises ``InputError`` for a name
    that is no overridable initializer or that the compiler folded away."""
    names = sorted(names)
    allowed = overridable(graph)
    for n in names:
        if n not in allowed:
            raise InputError(f"'{n}' is neither an input nor an overridable initializer of the model")
        if n not in graph.initializers:
            raise InputError(
                f"initializer '{n}' (an input with a default value) was folded into other constants at "
                "compile time, so it cannot be fed; to feed it, remove its initializer from the ONNX "
                "model so that it is a plain input"
            )
    descs = dict(graph.descs)
    for n in names:
        arr = graph.initializers[n]
        descs[n] = TensorDesc(int(from_numpy(arr.dtype)), tuple(int(d) for d in arr.shape))
    return Graph(nodes=list(graph.nodes), inputs=list(graph.inputs) + names, outputs=list(graph.outputs),
                 initializers={k: v for k, v in graph.initializers.items() if k not in names},
                 descs=descs, name=graph.name, opsets=dict(graph.opsets), metadata=dict(graph.metadata), context=graph.context)
