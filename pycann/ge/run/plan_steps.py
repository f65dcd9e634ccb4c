"""The steps of an execution plan (``ge/run/executor.py``): one typed ``Step`` per node, over integer
slots, so a run does no name handling, dict lookups or tuple unpacking per node.

A step's kernel is called in one of three ways (``StepKind``):

* ``NORMAL``: ``run(inputs, attrs) -> outputs``;
* ``ARENA``: ``run(inputs, attrs, views)`` writes into the arena views of its outputs (the
  executor's memory plan), which become the outputs;
* ``SCOPED``: ``run(inputs, attrs, run_body)`` for control flow (If, Loop, Scan bodies).

``Step.outputs_of(result, views)`` is the one hand-off of a kernel's result to the output slots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from pycann.ge.ir import Node
from pycann.kernels.algorithm import Threads
from pycann.kernels.bound import BoundKernel


class StepKind(Enum):
    """How a step's kernel receives its outputs (module docstring)."""

    NORMAL = 0
    SCOPED = 1
    ARENA = 2


NORMAL, SCOPED, ARENA = StepKind.NORMAL, StepKind.SCOPED, StepKind.ARENA


@dataclass(slots=True)
class Step:
    """One node of a plan.

    ``inputs`` / ``outputs``: slot numbers (slot 0 reads as None and swallows an omitted output);
    ``release``: slots no later step reads, cleared after this one (intermediates follow the
    memory plan's lifetimes); ``view``: for ``ARENA``, the index of this step's output views in
    the arena; ``bound``: the kernel bound at plan time for this node's static signature, or None
    when ``run`` is the op's kernel from the kernel table.
    """

    run: Callable[..., Any]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: dict[str, Any]
    node: Node
    kind: StepKind = NORMAL
    view: int = -1
    release: tuple[int, ...] = ()
    bound: BoundKernel | None = None

    @property
    def openmp(self) -> bool:
        """Its bound kernel runs on an OpenMP pool (oneDNN / torch)."""
        return self.bound is not None and self.bound.threads is Threads.OPENMP

    @property
    def plan_bytes(self) -> int:
        """Memory its bound kernel owns beyond the model."""
        return self.bound.plan_bytes if self.bound is not None else 0

    @property
    def inplace(self) -> bool:
        """Its bound kernel may write output 0 over an input's buffer (the memory plan's choice)."""
        return self.bound is not None and self.bound.inplace

    def call(self, args: list[Any], views: Sequence[list[np.ndarray]], body: Any) -> Sequence[Any]:
        """Run the kernel on ``args``; returns the step's outputs (for ``ARENA``, its views)."""
        if self.kind is NORMAL:
            return self.run(args, self.attrs)  # type: ignore[no-any-return]
        if self.kind is ARENA:
            res = views[self.view]
            self.run(args, self.attrs, res)
            return res
        return self.run(args, self.attrs, body)  # type: ignore[no-any-return]
