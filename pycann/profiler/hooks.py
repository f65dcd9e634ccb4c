"""Observation hooks that the executor (and runtime) report into.

Costs nothing when nothing observes: the executor reads ``OBSERVERS`` once per run and takes
its plain loop when the tuple is empty. Profilers and dumpers register with ``observe()``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol


class NodeObserver(Protocol):
    """Receives every executed node: its inputs/outputs and wall-clock span (ns, perf_counter_ns)."""

    def on_node(self, node: Any, inputs: Sequence[Any], outputs: Sequence[Any], start_ns: int, end_ns: int,
                graph_name: str) -> None: ...

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None: ...


OBSERVERS: tuple[NodeObserver, ...] = ()
_lock = threading.Lock()


def add_observer(obs: NodeObserver) -> None:
    """Start sending events to ``obs``."""
    global OBSERVERS
    with _lock:
        OBSERVERS = (*OBSERVERS, obs)


def remove_observer(obs: NodeObserver) -> None:
    global OBSERVERS
    with _lock:
        OBSERVERS = tuple(o for o in OBSERVERS if o is not obs)


@contextmanager
def observe(obs: NodeObserver) -> Iterator[NodeObserver]:
    """``with observe(my_observer): ...`` — events flow to it inside the block."""
    add_observer(obs)
    try:
        yield obs
    finally:
        remove_observer(obs)
