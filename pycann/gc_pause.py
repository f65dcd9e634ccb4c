"""Pausing Python's cyclic garbage collector around work that allocates many long-lived objects.

Why a module of its own: loading a model (``ge/run/model.py``) and compiling one
(``ge/compile/compiler.py``) both build tens of thousands of objects that live on (graph, nodes,
kernels, plans), and each automatic collection they trigger walks every live object: DenseNet-121's
load spent ~30 ms of its ~170 in them, its compile ~10 ms of ~180 (bench/RESULTS.md). Both layers
use this one switch, so it sits below them.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused"]


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No automatic collections of Python's cyclic garbage collector during the block. Loading a
    model allocates tens of thousands of long-lived objects (graph, kernels, plan), and the
    collections they trigger walk every live object: DenseNet-121's load spent ~30 ms of its
    ~170 in them (bench/RESULTS.md, first run). Whatever cyclic garbage the block leaves is
    collected by the next collection after it.

    By the first generation's threshold (0: no automatic collection, Python's gc docs), not
    ``gc.disable()``: the collector's on/off switch is process-wide, so restoring it at the end
    would undo a ``gc.disable()`` (or ``enable()``) that another thread of the application made
    meanwhile; the switch is never touched here. The threshold is put back only if it is still
    0 (a thread that set its own meanwhile keeps it; overlapping loads end with the first one's)."""
    prior = gc.get_threshold()
    gc.set_threshold(0, *prior[1:])
    try:
        yield
    finally:
        if gc.get_threshold()[0] == 0:
            gc.set_threshold(*prior)
