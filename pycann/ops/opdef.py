"""The operator-definition contract shared by graph mode and single-op mode (``acl.op``).

One ``OpDef`` per (domain, op_type, first opset version). The kernel implements the *latest*
ONNX semantics of the op: the GE importer rewrites older opset forms (attributes that became
inputs, e.g. ``axes``, ``split``, ``pads``, Clip's ``min``/``max``) before passes see them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.errors import ShapeError

# Kernel: (inputs, attrs) -> outputs. ``inputs`` holds ``None`` for omitted optional inputs.
# Attributes arrive with the schema defaults filled in. Outputs must be ``np.ndarray`` (never
# numpy scalars) of the dtype the infer function promised.
Kernel = Callable[[Sequence[np.ndarray | None], Mapping[str, Any]], Sequence[np.ndarray]]
# Out kernel: (inputs, attrs, outs) -> None, writing into preallocated ``outs`` (arena views of
# exactly the inferred shape and dtype). Optional; lets the executor place outputs in its arena.
OutKernel = Callable[[Sequence[np.ndarray | None], Mapping[str, Any], Sequence[np.ndarray]], None]
# Scoped kernel (If/Loop/Scan): also gets ``run_body(attr_name, feeds) -> outputs`` which runs
# the named GRAPH attribute with ``feeds`` bound to its inputs and the caller's outer scope.
ScopedKernel = Callable[..., Sequence[np.ndarray]]

REQUIRED = object()
"""Schema default marking an attribute that must be present."""


@dataclass
class InferContext:
    """What an infer function sees: input descs, compile-time constant values, attributes."""

    node: str
    op_type: str
    attrs: Mapping[str, Any]
    inputs: Sequence[TensorDesc | None]
    values: Sequence[np.ndarray | None]
    opset: int = 0
    n_outputs: int = 1

    def fail(self, message: str) -> ShapeError:
        """A ``ShapeError`` naming this node; ``raise ctx.fail("...")``."""
        return ShapeError(f"node {self.node} ({self.op_type}, opset {self.opset}): {message}")

    def input(self, i: int) -> TensorDesc | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def flag(self, name: str) -> bool:
        """The 0/1 attribute ``name`` (keepdims, noop_with_empty_axes, select_last_index ...) as a
        bool; ``fail`` for any other value. The spec gives these only 0 and 1, and runtimes read other
        values differently (ONNX Runtime's reduce ops take keepdims=2 as 0, numpy's as 1), so a model
        that relies on one reading gets an error rather than a silent choice."""
        v = self.attrs.get(name)
        if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and int(v) in (0, 1)):
            return bool(v)
        raise self.fail(f"attribute {name}={v!r}: must be 0 or 1")

    def required(self, i: int) -> TensorDesc:
        """The desc of input ``i``, which the op requires; ``fail`` when it is absent."""
        d = self.input(i)
        if d is None:
            raise self.fail(f"required input {i} is missing")
        return d

    def value(self, i: int) -> np.ndarray | None:
        return self.values[i] if i < len(self.values) else None


InferFn = Callable[[InferContext], Sequence[TensorDesc]]


@dataclass(frozen=True)
class OpDef:
    """An operator: schema, shape/dtype inference and kernel.

    ``since`` is the first opset version this definition serves; the registry picks the
    newest definition whose ``since`` is <= the model's opset for ``domain``.
    ``foldable`` is False for ops that must not be evaluated at compile time (random ops).
    ``scoped`` kernels receive a ``run_body`` callback (control flow).
    ``out_kernel`` (optional) computes the same result into preallocated outputs.
    """

    op_type: str
    infer: InferFn
    kernel: Kernel | ScopedKernel
    domain: str = ""
    since: int = 1
    attrs: Mapping[str, Any] = field(default_factory=dict)
    foldable: bool = True
    scoped: bool = False
    doc: str = ""
    out_kernel: OutKernel | None = None

    def with_defaults(self, attrs: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """Attributes with schema defaults filled in. Raises ``ShapeError`` on a missing required one."""
        out = dict(attrs)
        for k, default in self.attrs.items():
            if k not in out:
                if default is REQUIRED:
                    raise ShapeError(
                        f"{where or self.op_type}: required attribute '{k}' of {self.op_type} is missing"
                    )
                out[k] = default
        return out
