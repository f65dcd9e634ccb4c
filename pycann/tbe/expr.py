"""The TBE DSL's compute graph: placeholders and compute nodes (TVM-like tensors).

Every node remembers the user's file:line where it was created, so the twin's findings on the
code lowered from it point at the DSL statement.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

_PKG = os.path.dirname(os.path.abspath(__file__))
_KIT = os.path.join(os.path.dirname(_PKG), "ascendc")

DTYPES = ("float16", "float32", "int32", "int8", "uint8", "bfloat16")


class TbeError(ValueError):
    """A DSL program the lowering cannot handle, or a wrong argument; names the op and the fix."""


def dsl_location() -> str:
    f = sys._getframe(1)
    while f is not None:
        d = os.path.dirname(os.path.abspath(f.f_code.co_filename))
        if d not in (_PKG, _KIT):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back  # type: ignore[assignment]
    return "<unknown>:0"


@dataclass(eq=False)
class Tensor:
    """A DSL tensor: ``op`` is 'placeholder' or a compute name ('vadd', 'reduce_sum', ...)."""

    op: str
    shape: tuple[int, ...]
    dtype: str
    inputs: tuple[Tensor, ...] = ()
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    where: str = ""

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"Tensor({self.name or self.op}, {list(self.shape)}, {self.dtype})"


def placeholder(shape: tuple[int, ...] | list[int], name: str = "data", dtype: str = "float16") -> Tensor:
    """``tvm.placeholder(shape, name, dtype)``: a kernel input."""
    shp = tuple(int(d) for d in shape)
    if not shp or any(d <= 0 for d in shp):
        raise TbeError(f"placeholder {name}: shape {list(shape)} must be non-empty with positive dims")
    if dtype not in DTYPES:
        raise TbeError(f"placeholder {name}: dtype {dtype!r} not one of {', '.join(DTYPES)}")
    return Tensor("placeholder", shp, dtype, name=name, where=dsl_location())


class _Target:
    """``tvm.target.cce()``: the compile target context (the twin needs no state from it)."""

    def __enter__(self) -> _Target:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class target:  # noqa: N801 - tvm.target namespace
    @staticmethod
    def cce() -> _Target:
        return _Target()


def topo(out: Tensor) -> list[Tensor]:
    """Nodes reachable from ``out``, inputs first."""
    order: list[Tensor] = []
    seen: set[int] = set()

    def visit(t: Tensor) -> None:
        if id(t) in seen:
            return
        seen.add(id(t))
        for i in t.inputs:
            visit(i)
        order.append(t)

    visit(out)
    return order
