"""The emitter the TensorFlow op converters write pycann IR through.

One ``Emitter`` per (sub)graph being built. TensorFlow tensor references (``node:1``, ``node``)
resolve to IR value names through ``values``; the canonical IR name of a TF output is the TF
tensor name (``conv1/Conv2D:0``) plus the emitter's ``suffix`` (set when a TF node is emitted a
second time, e.g. a while loop's condition both before the loop and in its body).

NHWC (TensorFlow's data format): an NHWC op runs as its ONNX NCHW op between Transposes. The
NCHW value is remembered as the *twin* of the NHWC output, so the next NHWC op, and per-channel
elementwise ops (BiasAdd, batch norm, activations, residual adds), work on the twin instead of
adding Transposes back; a Transpose nobody reads is removed by dead-code elimination.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.dtypes import DType
from pycann.errors import ModelError
from pycann.ge.compile.importers.tensorflow_proto import TF_TO_DTYPE, attr
from pycann.ge.ir import Graph, Node

OPSET = 18
TO_NCHW = [0, 3, 1, 2]
TO_NHWC = [0, 2, 3, 1]
INT64_MAX = np.iinfo(np.int64).max


class Names:
    """State shared by all graphs of one import: unique helper names (subgraphs see the outer
    names) and the GraphDef's function library (TF2 functional control flow)."""

    def __init__(self, library: dict[str, Any] | None = None) -> None:
        self.k = 0
        self.library: dict[str, Any] = library or {}
        # (where, value, axis, check(dim) -> complaint or None): TF shape rules that ONNX's op
        # would not enforce (it clamps a Slice, splits unevenly), checked once shapes are inferred
        self.dim_checks: list[tuple[str, str, int, Callable[[int], str | None]]] = []

    def fresh(self, base: str) -> str:
        self.k += 1
        return f"{base}/pycann_{self.k}"


def tensor_ref(ref: str) -> str:
    """``name`` -> ``name:0``; ``name:1`` unchanged (control inputs ``^x`` never get here)."""
    head, _, tail = ref.rpartition(":")
    return ref if head and tail.isdigit() else f"{ref}:0"


class Emitter:
    """Builds one IR graph from TF nodes (see the module docstring)."""

    def __init__(self, graph: Graph, root: Graph, names: Names, values: dict[str, str],
                 twin: dict[str, str], suffix: str = "") -> None:
        self.graph = graph
        self.root = root
        self.names = names
        self.values = values
        self.twin = twin
        self.suffix = suffix
        self.node: Any = None

    def child(self, graph: Graph, own: dict[str, str] | None = None, suffix: str = "") -> Emitter:
        """An emitter for ``graph`` (a subgraph, or this graph with extra names) that resolves
        ``own`` first, then everything this emitter resolves."""
        from collections import ChainMap

        maps = self.values.maps if isinstance(self.values, ChainMap) else [self.values]
        values: Any = ChainMap(own if own is not None else {}, *maps)
        c = Emitter(graph, self.root, self.names, values, self.twin, suffix)
        c.node = self.node
        return c

    # ----------------------------------------------------------------- the current TF node
    @property
    def op(self) -> str:
        return str(self.node.op)

    @property
    def name(self) -> str:
        return str(self.node.name)

    def where(self) -> str:
        return f"node {self.name} ({self.op})"

    def data_refs(self) -> list[str]:
        return [i for i in self.node.input if not i.startswith("^")]

    def n_inputs(self) -> int:
        return len(self.data_refs())

    def input(self, i: int) -> str:
        refs = self.data_refs()
        if i >= len(refs):
            raise ModelError(f"{self.where()}: expected at least {i + 1} inputs, found {len(refs)}")
        return self.resolve(refs[i])

    def inputs(self) -> list[str]:
        return [self.resolve(r) for r in self.data_refs()]

    def resolve(self, ref: str) -> str:
        key = tensor_ref(ref)
        if key not in self.values:
            raise ModelError(f"{self.where()}: input '{ref}' is produced by no node that was imported")
        return self.values[key]

    def attr(self, name: str, default: Any = None) -> Any:
        return attr(self.node, name, default)

    def dtype(self, name: str = "T") -> DType:
        t = self.attr(name)
        if t is None:
            raise ModelError(f"{self.where()}: attribute {name} (dtype) is missing")
        if t not in TF_TO_DTYPE:
            raise ModelError(f"{self.where()}: TensorFlow dtype {t} has no pycann equivalent")
        return TF_TO_DTYPE[t]

    def nhwc(self) -> bool:
        fmt = self.attr("data_format", "NHWC")
        if fmt not in ("NHWC", "NCHW"):
            raise ModelError(f"{self.where()}: data_format {fmt} is not supported (NHWC or NCHW)")
        return bool(fmt == "NHWC")

    def out(self, i: int = 0) -> str:
        return f"{self.name}:{i}{self.suffix}"

    # ----------------------------------------------------------------- constants
    def const(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it is a constant, else None."""
        v = self.input(i)
        c = self.root.initializers.get(v)
        return c if c is not None else self.graph.initializers.get(v)

    def need_const(self, i: int, what: str) -> np.ndarray:
        c = self.const(i)
        if c is None:
            raise ModelError(f"{self.where()}: input {i} ({what}) must be a constant in a frozen graph; "
                             "it is computed at run time here, which pycann does not support for this op")
        return c

    def constant(self, value: Any, base: str = "const", dtype: Any = None) -> str:
        name = self.names.fresh(f"{self.name}/{base}")
        self.root.initializers[name] = np.asarray(value, dtype=dtype)
        return name

    def int64(self, value: str) -> str:
        """``value`` as int64 (ONNX shape/index inputs), folding constants at import."""
        c = self.root.initializers.get(value)
        if c is not None:
            return value if c.dtype == np.int64 else self.constant(c.astype(np.int64), "i64")
        return self.add("Cast", [value], to=int(DType.INT64))

    # ----------------------------------------------------------------- nodes
    def add_node(self, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> list[str]:
        self.graph.nodes.append(Node(op, list(inputs), list(outputs), dict(attrs), name=self.names.fresh(self.name),
                                     opset=OPSET, origin=[self.name]))
        return outputs

    def add(self, op: str, inputs: list[str], out: str | None = None, **attrs: Any) -> str:
        """One node with one output (named ``out``, else a fresh name); returns the output."""
        o = out or self.names.fresh(f"{self.name}/{op}")
        self.add_node(op, inputs, [o], **attrs)
        return o

    # ----------------------------------------------------------------- NHWC <-> NCHW
    def to_nchw(self, v: str) -> str:
        t = self.twin.get(v)
        return t if t is not None else self.add("Transpose", [v], perm=TO_NCHW)

    def from_nchw(self, v: str, out: str) -> str:
        """Emit ``out`` = ``v`` in NHWC and remember ``v`` as its twin."""
        self.add("Transpose", [v], out, perm=TO_NHWC)
        self.twin[out] = v
        return out

    def nchw_op(self, op: str, x: str, extra: list[str] | None = None, nhwc: bool = True, **attrs: Any) -> str:
        """``op`` (an ONNX NCHW op) on TF input ``x`` in the node's data format -> ``out(0)``."""
        if not nhwc:
            return self.add(op, [x, *(extra or [])], self.out(), **attrs)
        y = self.add(op, [self.to_nchw(x), *(extra or [])], **attrs)
        return self.from_nchw(y, self.out())
