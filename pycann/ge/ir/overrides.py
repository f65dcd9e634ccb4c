"""Overridable initializers: an ONNX graph input that also has an initializer (IR version >= 4).

ONNX semantics: the initializer is the input's default value and a feed overrides it (ONNX
Runtime lists such names under ``get_overridable_initializers()``, not ``get_inputs()``). pycann
compiles the default as a constant, so the common case (nobody feeds it: PyTorch's
``keep_initializers_as_inputs=True`` lists every weight) keeps constant folding and fused,
pre-packed kernels. The importer records the names in ``graph.metadata[METADATA_KEY]``.

A run that feeds one runs a variant of the model in which those names are inputs:

* every default the compiler kept verbatim (the same array, read by as many nodes as in the
  source, a floating-point value no shape depends on): the variant is the compiled graph with
  those constants turned into inputs (``with_inputs``), no compile;
* a default the compiler folded into other constants (e.g. a BatchNormalization's scale folded
  into a Conv's weights), changed, or whose value shape inference may have read (an integer
  Reshape target: ``keep_source``): the compiled graph keeps ``override_source``, the graph as
  it entered the pass pipeline (``snapshot`` / ``keep_source``; stored in the .om, its unchanged
  weights shared with the compiled graph's), and the variant is compiled from it with the fed
  names live (``pycann.ge.compile.compiler.compile_variant``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from pycann.dtypes import Dim, TensorDesc, from_numpy
from pycann.errors import InputError
from pycann.ge.ir.graph import Graph, Node

METADATA_KEY = "overridable_initializers"
SHAPES_KEY = "overridable_initializer_shapes"


def record(names: Iterable[str]) -> str:
    """The metadata value listing ``names`` (a JSON list: an ONNX name may hold a comma)."""
    return json.dumps(sorted(names))


def overridable(graph: Graph) -> set[str]:
    """Names of the graph's overridable initializers (recorded at import: ``record``; an .om
    written before that lists them comma-separated)."""
    text = graph.metadata.get(METADATA_KEY, "")
    if text.startswith("["):
        try:
            names = json.loads(text)
        except ValueError:
            names = None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return {n for n in names if n}
    return {n for n in text.split(",") if n}


def record_shapes(shapes: Mapping[str, Sequence[Dim] | None]) -> str:
    """The metadata value (``SHAPES_KEY``) of the declared input shapes that are not the defaults'
    (a dim: int, symbolic name or None; no shape at all: None)."""
    return json.dumps({n: None if s is None else list(s) for n, s in sorted(shapes.items())})


def declared_shapes(graph: Graph) -> dict[str, tuple[Dim, ...] | None]:
    """The shapes of the overridable initializers whose graph input declares other dims than the
    default's (``record_shapes``): as in ONNX Runtime, a feed is checked against the declared shape."""
    try:
        found = json.loads(graph.metadata.get(SHAPES_KEY, "{}"))
    except ValueError:
        return {}
    out: dict[str, tuple[Dim, ...] | None] = {}
    for n, dims in found.items() if isinstance(found, dict) else ():
        if dims is None:
            out[n] = None
        elif isinstance(dims, list) and all(d is None or isinstance(d, (int, str)) for d in dims):
            out[n] = tuple(dims)
    return out


def with_inputs(graph: Graph, names: Iterable[str]) -> Graph:
    """A copy of ``graph`` in which the initializers ``names`` are graph inputs (appended in
    sorted order), described by the default's dtype and shape (the declared one where the graph
    input declares other dims: ``declared_shapes``). Raises ``InputError`` for a name
    that is no overridable initializer or that the compiler folded away (a compiled graph with an
    ``override_source`` compiles its variants from that instead: ``LoadedModel._overriding``)."""
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
    loose = declared_shapes(graph)
    for n in names:
        arr = graph.initializers[n]
        shape: tuple[Dim, ...] | None = tuple(int(d) for d in arr.shape)
        if n in loose:  # (an unnamed dim gets a name of its own: any size, like ORT's check)
            dims = loose[n]
            shape = None if dims is None else tuple(f"{n}:{i}" if d is None else d for i, d in enumerate(dims))
        descs[n] = TensorDesc(int(from_numpy(arr.dtype)), shape)
    return Graph(nodes=list(graph.nodes), inputs=list(graph.inputs) + names, outputs=list(graph.outputs),
                 initializers={k: v for k, v in graph.initializers.items() if k not in names},
                 descs=descs, name=graph.name, opsets=dict(graph.opsets), metadata=dict(graph.metadata), context=graph.context)


def snapshot(graph: Graph) -> Graph:
    """A copy of ``graph`` that the pass pipeline cannot change: new node objects with their own
    attribute dicts, subgraphs copied alike; initializer arrays shared (passes replace arrays,
    they do not write into them)."""
    def node(n: Node) -> Node:
        attrs = {k: snapshot(v) if isinstance(v, Graph) else v for k, v in n.attrs.items()}
        return Node(n.op_type, list(n.inputs), list(n.outputs), attrs, n.name, n.domain, n.opset, list(n.origin))

    return Graph(nodes=[node(n) for n in graph.nodes], inputs=list(graph.inputs), outputs=list(graph.outputs),
                 initializers=dict(graph.initializers), descs=dict(graph.descs), name=graph.name,
                 opsets=dict(graph.opsets), metadata=dict(graph.metadata), context=graph.context)


# ops whose output shape a floating-point input's value sets (shape inference reads it when constant)
_VALUE_SHAPED = frozenset({"Resize", "Upsample", "Range", "NonZero", "Unique", "Compress", "OneHot"})


def keep_source(source: Graph, compiled: Graph) -> Graph | None:
    """``source`` (the ``snapshot`` taken before the passes) when feeding some overridable
    initializer needs a variant compiled from it; else None (the compiled graph with the constants
    made inputs computes the same as the source for any value). The source is needed where the
    compiled graph may hold a consequence of a default's value: the default is gone or another
    array; fewer nodes read it than in the source (a consumer folded with it into a constant, as
    ``Mul(k, c)`` beside ``Add(x, k)``, or fused it into attributes); it is an integer or bool tensor
    (a Reshape target, Slice bounds, Tile repeats, a condition: shape inference and folding read
    its value); a node whose output shape its value sets reads it (``_VALUE_SHAPED``); or a graph
    input declares other dims than its default's (``declared_shapes``)."""
    if declared_shapes(source):
        return source  # a feed of another shape than the default's: its variant infers from the source
    names = overridable(source)
    reads_src = Counter(i for _, n in source.walk() for i in n.inputs if i in names)
    reads = Counter(i for _, n in compiled.walk() for i in n.inputs if i in names)
    value_shaped = {i for _, n in source.walk() if n.op_type in _VALUE_SHAPED and not n.domain for i in n.inputs}
    for name in names:
        arr, default = compiled.initializers.get(name), source.initializers.get(name)
        if arr is None or arr is not default or reads[name] == 0 or reads[name] < reads_src[name]:
            return source
        if np.asarray(default).dtype.kind in "biu" or name in value_shaped:
            return source
    return None
