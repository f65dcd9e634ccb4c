"""pycann's graph IR: ``Graph`` / ``Node`` / ``Value``.

Edges are value names (strings), exactly as in ONNX, which keeps import and export one-to-one
and lets subgraphs refer to outer-scope values by name. Nodes are kept in topological order;
``verify`` checks that invariant and runs after every pass in debug mode.
Why our own IR rather than onnx-ir: see docs/architecture.md ("IR decision").
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, dtype_name
from pycann.errors import ModelError
from pycann.ge.ir.context import CompileContext


@dataclass(eq=False)
class Node:
    """One operator application.

    ``inputs`` may contain ``""`` for an omitted optional input. ``attrs`` hold Python values:
    int, float, str, bytes, lists of those, ``np.ndarray`` (TENSOR attributes) or ``Graph``
    (GRAPH attributes: If/Loop/Scan bodies). ``opset`` is the version of ``domain`` the model
    imported, after the importer normalised the op to its latest meaning. ``origin`` lists the
    original ONNX node names a fused node stands for (for accuracy comparison and Netron export).
    """

    op_type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    domain: str = ""
    opset: int = 0
    origin: list[str] = field(default_factory=list)

    @property
    def subgraphs(self) -> dict[str, Graph]:
        """GRAPH attributes by attribute name (e.g. ``then_branch``)."""
        return {k: v for k, v in self.attrs.items() if isinstance(v, Graph)}

    def label(self) -> str:
        """``name (OpType)`` for error messages."""
        return f"{self.name or '<unnamed>'} ({self.op_type})"


@dataclass(eq=False)
class Graph:
    """A (sub)graph.

    ``inputs``/``outputs`` are value names; ``descs`` maps value names to their ``TensorDesc``
    where known; ``initializers`` hold constant tensors (weights and folded constants).
    A subgraph may use names it does not define: they resolve in the enclosing graph.
    """

    nodes: list[Node] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    descs: dict[str, TensorDesc] = field(default_factory=dict)
    name: str = "main"
    opsets: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    # the compile options later specialisations repeat (ge/ir/context.py); the .om's "compile" section
    context: CompileContext = field(default_factory=CompileContext)
    # a compiled graph whose overridable initializers were folded away: the graph as it entered the
    # pass pipeline, from which a run that feeds one compiles its variant (ge/ir/overrides.py)
    override_source: Graph | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ queries
    def producers(self) -> dict[str, Node]:
        """Map value name -> node producing it (this graph's nodes only)."""
        return {o: n for n in self.nodes for o in n.outputs if o}

    def consumers(self) -> dict[str, list[Node]]:
        """Map value name -> nodes reading it, including reads inside subgraphs (outer scope)."""
        out: dict[str, list[Node]] = {}
        get = out.get
        for n in self.nodes:
            # (the passes ask for this ~30 times a compile: node_reads' list per node was most of it)
            names = node_reads(n) if _has_subgraph(n) else n.inputs
            for name in names:
                if name:
                    users = get(name)
                    if users is None:
                        out[name] = [n]
                    else:
                        users.append(n)
        return out

    def walk(self) -> Iterator[tuple[Graph, Node]]:
        """Every (graph, node) pair, recursing into subgraphs."""
        for n in self.nodes:
            yield self, n
            for g in n.subgraphs.values():
                yield from g.walk()

    def const(self, name: str) -> np.ndarray | None:
        """The constant value of ``name`` if it is an initializer, else ``None``."""
        return self.initializers.get(name)

    def fresh_name(self, base: str) -> str:
        """A value/node name not yet used in this graph (as a desc, an initializer, a node's output
        or a node's name): ``base``, else ``base_1``, ``base_2``, ..."""
        i, cand = 0, base
        while self._uses(cand):
            i += 1
            cand = f"{base}_{i}"
        return cand

    def _uses(self, name: str) -> bool:
        # a scan per candidate, not a set of every name: passes ask once per new value (DenseNet:
        # ~190 times a compile), and building the sets was ~35x the scan (260 vs 7.5 us a call)
        if name in self.descs or name in self.initializers:
            return True
        for n in self.nodes:
            if n.name == name or name in n.outputs:
                return True
        return False

    def op_counts(self) -> dict[str, int]:
        """Op type histogram over the top-level nodes."""
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return counts

    def __repr__(self) -> str:
        """One line: name, op histogram, typed inputs and outputs, weights. The dataclass repr
        printed every initializer's values and every node: a REPL that echoed ``compile_model(...)``
        scrolled a whole model's weights past."""
        def value(name: str) -> str:
            d = self.descs.get(name)
            if d is None:
                return name
            shape = "?" if d.shape is None else ",".join("?" if v is None else str(v) for v in d.shape)
            return f"{name} {dtype_name(d.dtype)}[{shape}]"

        ops = ", ".join(f"{k} {v}" for k, v in sorted(self.op_counts().items()))
        nbytes = sum(int(getattr(a, "nbytes", 0)) for a in self.initializers.values())
        return (f"Graph({self.name!r}, {len(self.nodes)} nodes ({ops}); inputs: "
                f"{'; '.join(value(i) for i in self.inputs)}; outputs: {'; '.join(value(o) for o in self.outputs)}; "
                f"{len(self.initializers)} initializers, {nbytes / 1024:.1f} KiB)")


def _has_subgraph(node: Node) -> bool:
    """Whether an attribute of ``node`` is a GRAPH (If, Loop, Scan bodies)."""
    for v in node.attrs.values():
        if isinstance(v, Graph):
            return True
    return False


def node_reads(node: Node) -> list[str]:
    """Names a node reads: its inputs plus outer-scope names its subgraphs use."""
    reads = [i for i in node.inputs if i]
    if _has_subgraph(node):
        for g in node.subgraphs.values():
            reads.extend(sorted(free_names(g)))
    return reads


def free_names(graph: Graph) -> set[str]:
    """Names a subgraph uses but does not define (they come from an enclosing scope)."""
    defined = set(graph.inputs) | set(graph.initializers)
    free: set[str] = set()
    for n in graph.nodes:
        for name in node_reads(n):
            if name not in defined:
                free.add(name)
        defined.update(o for o in n.outputs if o)
    free.update(o for o in graph.outputs if o not in defined)
    return free


def verify(graph: Graph, outer: frozenset[str] = frozenset()) -> None:
    """Check SSA form and topological order (recursively). Raises ``ModelError``."""
    defined = set(outer) | set(graph.inputs) | set(graph.initializers)
    for n in graph.nodes:
        for i in n.inputs:
            if i and i not in defined:
                raise ModelError(
                    f"node {n.label()}: input '{i}' is used before it is defined "
                    "(graph not in topological order or dangling edge)"
                )
        for g in n.subgraphs.values():
            verify(g, frozenset(defined))
        for o in n.outputs:
            if o and o in defined and o not in outer:
                raise ModelError(f"node {n.label()}: output '{o}' is defined twice")
            if o:
                defined.add(o)
    for o in graph.outputs:
        if o not in defined:
            raise ModelError(f"graph '{graph.name}': output '{o}' is never produced")
