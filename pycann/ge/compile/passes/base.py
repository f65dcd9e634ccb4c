"""Pass contract: ``run(graph, ctx) -> PassResult``. Each pass lives in its own module."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pycann.ge.ir import Graph


@dataclass
class PassContext:
    """Options visible to passes. ``log`` receives human-readable lines (``atc --log=info``);
    ``results`` receives what a pass reports for the .om manifest, by pass (PrecisionMode's
    summary), as data rather than strings in ``graph.metadata``."""

    options: dict[str, Any] = field(default_factory=dict)
    log: Callable[[str], None] = lambda line: None
    debug: bool = False
    results: dict[str, Any] = field(default_factory=dict)


@dataclass
class PassResult:
    """What a pass returns: the (possibly same) graph, whether it changed, and a short report."""

    graph: Graph
    changed: bool
    report: str = ""
    missed: list[str] = field(default_factory=list)


class Pass(Protocol):
    name: str

    def __call__(self, graph: Graph, ctx: PassContext) -> PassResult: ...
