"""The instruction trace: one typed record per executed instruction, for cost models (issue 19).

A twin run with ``trace=callback`` calls ``callback(record)`` for every instruction every core
executes, in each core's program order (cores run one after another).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pycann.ascendc.enums import Pipe


@dataclass(frozen=True)
class Operand:
    """One operand of an instruction: where it lives, its dtype and how much it moves."""

    position: str        # TPosition name, or "GM"
    dtype: str           # Ascend C type name
    elements: int
    nbytes: int
    is_output: bool = False
    addr: int = -1       # byte offset in its memory (GM: in its GM buffer); -1 unknown (issue 19 cost model)
    space: int = 0       # which GM buffer (an id within one run); 0 for on-chip memories


@dataclass(frozen=True)
class InstrRecord:
    """One executed instruction on one core."""

    core: int
    seq: int                       # program-order index on that core
    pipe: Pipe
    api: str                       # Ascend C API name: 'DataCopy', 'Add', 'Mmad', 'SetFlag', ...
    dtype: str | None
    operands: tuple[Operand, ...]
    where: str                     # kernel file:line
    params: tuple[tuple[str, int], ...] = ()  # e.g. (('m', 16), ('n', 16), ('k', 32)) for Mmad; repeat


TraceHook = Callable[[InstrRecord], None]
