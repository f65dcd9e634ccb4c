"""What the npu ``torch.compile`` backend did with each graph it was given (``graph_report()``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

_lock = threading.Lock()


@dataclass
class GraphRecord:
    """One FX graph the backend saw.

    ``kind``: "inference" (a Dynamo graph compiled whole), "forward" or "backward" (AOTAutograd's
    graphs of a training step). ``compiled``: at least part of it runs as a GE plan.
    ``ge_partitions`` / ``ge_ops``: the GE plans made of it and the FX ops in them;
    ``eager_ops``: (ATen op, node count) of the ops that ran eagerly on the npu device instead.
    ``compile_seconds``: host seconds spent lowering and compiling (for AOTAutograd graphs, the
    GE compiles on first call). ``relowers``: times an inference plan was built again because
    a parameter or buffer it embedded was replaced or written after compiling (``frozen.py``)."""

    index: int
    ops: int
    compiled: bool
    reason: str = ""
    unsupported: tuple[str, ...] = ()
    compile_seconds: float = 0.0
    relowers: int = 0
    calls: int = 0
    kind: str = "inference"
    ge_partitions: int = 0
    ge_ops: int = 0
    eager_ops: tuple[tuple[str, int], ...] = ()


records: list[GraphRecord] = []


def new_record(ops: int, kind: str = "inference") -> GraphRecord:
    """A new record, appended to ``records``."""
    with _lock:
        rec = GraphRecord(len(records), ops, False, kind=kind)
        records.append(rec)
    return rec
