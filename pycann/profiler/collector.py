"""The profiler's event collector: a ``NodeObserver`` that only appends tuples while a model
runs (shapes, dtypes and byte counts are read off the arrays; nothing is copied). The analysis
(``analysis.analyze``) turns the raw events into msprof-style rows afterwards.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from pycann.profiler import hooks
from pycann.profiler.flops import Meta

# (node, graph name, thread ident, start ns, end ns, input metas, output metas)
NodeEvent = tuple[Any, str, int, int, int, tuple[Meta, ...], tuple[Meta, ...]]
# (graph name, thread ident, start ns, end ns, the id acl.mdl.load_* gave the model or None)
RunEvent = tuple[str, int, int, int, int | None]
# (name, track, thread ident, start ns, end ns, args)
ApiEvent = tuple[str, str, int, int, int, dict[str, Any]]


def meta(x: Any) -> Meta:
    """``(shape, dtype name, nbytes)`` of an array, a sequence value summed over its elements, else None."""
    if isinstance(x, list):
        metas = [meta(e) for e in x]
        return (len(x),), "sequence", sum(m[2] for m in metas if m is not None)
    nbytes = getattr(x, "nbytes", None)
    if nbytes is None:
        return None
    return tuple(x.shape), x.dtype.name, int(nbytes)


class Collector:
    """Records node, run and API events with ``time.perf_counter_ns`` timestamps.

    ``perf0`` / ``epoch0`` pair the performance counter with wall-clock time at start so the
    writers can print absolute timestamps (msprof's ``Task Start Time(us)``, §4.3).
    ``api=False`` ignores ``record_api`` events (``msprof --ascendcl=off``).
    """

    def __init__(self, api: bool = True) -> None:
        self.perf0 = time.perf_counter_ns()
        self.epoch0 = time.time_ns()
        self.nodes: list[NodeEvent] = []
        self.runs: list[RunEvent] = []
        self.apis: list[ApiEvent] = []
        self.acl_ids: dict[str, int] = {}  # graph name -> the id acl.mdl.load_* gave it (latest seen at run time)
        self.api = api
        self.stopped_ns: int | None = None

    def on_node(self, node: Any, inputs: Sequence[Any], outputs: Sequence[Any], start_ns: int, end_ns: int,
                graph_name: str) -> None:
        self.nodes.append((node, graph_name, threading.get_ident(), start_ns, end_ns,
                           tuple(meta(x) for x in inputs), tuple(meta(x) for x in outputs)))

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None:
        # (kept per run: unload forgets it before the report is made, and a later load that takes the
        # graph name back gets another id)
        mid = hooks.ACL_MODEL_IDS.get(graph_name)
        self.runs.append((graph_name, threading.get_ident(), start_ns, end_ns, mid))
        if mid is not None:
            self.acl_ids[graph_name] = mid

    def on_api(self, name: str, track: str, start_ns: int, end_ns: int, args: dict[str, Any]) -> None:
        if self.api:
            self.apis.append((name, track, threading.get_ident(), start_ns, end_ns, dict(args)))

    def clear(self) -> None:
        """Forget everything recorded so far (e.g. warm-up runs)."""
        self.nodes.clear()
        self.runs.clear()
        self.apis.clear()
