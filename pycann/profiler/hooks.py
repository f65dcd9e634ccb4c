"""Observation hooks that the executor (and runtime) report into.

Costs nothing when nothing observes: the executor reads ``OBSERVERS`` once per run and takes
its plain loop when the tuple is empty. Profilers and dumpers register with ``observe()``.

Besides the ``NodeObserver`` protocol (``on_node`` / ``on_run``), an observer may define the
optional methods ``on_api(name, track, start_ns, end_ns, args)`` (host API calls and memory
copies, reported with ``record_api``) and ``on_model_load(model)`` (a ``LoadedModel`` was
created). ``on_model_load`` here is what ``ge/run/model.py`` calls once per load: it remembers the
model's name and, the first time, starts a profiler if ``PYCANN_PROFILE_DIR`` is set (the
``msprof`` command line sets it; cann-interfaces.md §4.1).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from pycann import config


class NodeObserver(Protocol):
    """Receives every executed node: its inputs/outputs and wall-clock span (ns, perf_counter_ns)."""

    def on_node(self, node: Any, inputs: Sequence[Any], outputs: Sequence[Any], start_ns: int, end_ns: int,
                graph_name: str) -> None: ...

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None: ...


OBSERVERS: tuple[NodeObserver, ...] = ()
_lock = threading.Lock()

# graph name -> model name (the .om file's stem, as CANN names dumped/profiled models)
MODEL_NAMES: dict[str, str] = {}
PROFILE_ENV = "PYCANN_PROFILE_DIR"
_env_checked = False


def add_observer(obs: NodeObserver) -> None:
    """Start sending events to ``obs``."""
    global OBSERVERS
    with _lock:
        OBSERVERS = (*OBSERVERS, obs)


def remove_observer(obs: NodeObserver) -> None:
    """Stop sending events to ``obs`` (no error if it was not registered)."""
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


def active() -> bool:
    """True when something observes (callers may skip taking timestamps otherwise)."""
    return bool(OBSERVERS)


def record_api(name: str, start_ns: int, end_ns: int, track: str = "api", args: dict[str, Any] | None = None) -> None:
    """Report a host API call or memory copy (``track="memcpy"``) spanning ``start_ns..end_ns``
    (``time.perf_counter_ns``). One tuple check when nothing observes."""
    observers = OBSERVERS
    if not observers:
        return
    for obs in observers:
        fn = getattr(obs, "on_api", None)
        if fn is not None:
            fn(name, track, start_ns, end_ns, args or {})


ACL_MODEL_IDS: dict[str, int] = {}
"""Graph name -> the model id ``acl.mdl.load_*`` returned for it (dump paths and the index use it, as
CANN's ``{model_name}/{model_id}`` do); models loaded otherwise are numbered per dump from 0."""


def model_name_of(graph_name: str) -> str:
    """The model name registered for ``graph_name`` (the .om stem), else the graph name."""
    return MODEL_NAMES.get(graph_name, graph_name)


LOADED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Models loaded in this process and still alive (the profiler's summary shows their plan caches)."""


def plan_cache_lines() -> str:
    """One line per live model with a plan cache: its counters (``CacheStats.summary``)."""
    out = []
    for m in list(LOADED):
        fn = getattr(m, "plan_cache_stats", None)
        if fn is not None:
            name = MODEL_NAMES.get(getattr(getattr(m, "graph", None), "name", "") or "", "?")
            out.append(f"{name}: {fn().summary()}\n")
    return "".join(out)


def _atc_output(manifest: Any) -> str:
    """The ``--output`` of the atc command that compiled a model (its .om stem) when it was loaded
    from memory (``acl.mdl.load_from_mem``, no path), else ""."""
    cmd = manifest.get("atc_command_line", "") if isinstance(manifest, dict) else ""
    if not isinstance(cmd, str) or "--output" not in cmd:
        return ""
    import shlex

    try:
        args = shlex.split(cmd)
    except ValueError:
        return ""
    for i, a in enumerate(args):
        if a.startswith("--output="):
            return a[len("--output="):]
        if a == "--output" and i + 1 < len(args):
            return args[i + 1]
    return ""


def _model_name(gname: str, path: str, manifest: Any) -> str:
    """A model's name in profiles and dumps: its .om stem (from memory: atc's --output), else its graph name."""
    if not path or path.startswith("<"):  # ("<memory>": acl.mdl.load_from_mem)
        path = _atc_output(manifest)
    return os.path.splitext(os.path.basename(path))[0] if path else gname


def _source(path: str, manifest: Any, graph: Any) -> str:
    """What identifies a loaded model's file: its resolved path (from memory: atc's --output; a model
    made from a compiled graph in this process, ``from_compiled``: that graph object)."""
    if not path:
        return f"<compiled>:{id(graph)}"
    if path.startswith("<"):
        return "<memory>:" + _atc_output(manifest)
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return path


def claim_graph_name(graph: Any, path: str, manifest: Any) -> Any:
    """Called by ``LoadedModel`` for every model it makes (from a file, from memory, ``from_compiled``),
    before it builds plans; returns the graph the model is to use. Profiles and dumps find a run's model
    by its graph's name, and exporters name every graph alike (PyTorch's "main_graph", Paddle's "Model
    from PaddlePaddle."), so a graph whose name a live model holds is renamed ``<name>#2``, ``#3``, ...
    (else one model's ops were reported and dumped under the other's name, and the second model's name
    replaced the first's). The model name (the .om stem; ``from_compiled``: the graph's name) of a model
    from another source whose name a live model's already is gets the same ``#k`` (``small.om`` and
    ``sub/small.om``: "small" and "small#2"). The same file (or compiled graph) loaded again keeps its
    model name but not the graph name (``main_graph#2``): profiles and dumps tell loads apart by graph
    name, and each load is its own Model ID, as in CANN; no graph name is claimed twice in a process, so
    a load made after another's end is not taken for it either. A graph object another live
    model holds (one ``CompiledModel`` loaded twice), or a compiled graph (``path`` empty: the caller's
    ``CompiledModel`` keeps its name), is renamed on a shallow copy (nodes and weights shared)."""
    base = getattr(graph, "name", "") or ""
    stem = _model_name(base, path, manifest)
    source = _source(path, manifest, graph)
    with _claim_lock:  # (a load on another thread claims between this one's claim and its registration)
        held = [getattr(m, "graph", None) for m in list(LOADED)] + list(_CLAIMED)
        shared = any(g is graph for g in held)
        graphs = [g for g in held if g is not graph]
        live = {getattr(g, "name", None) for g in graphs}
        if shared:
            live.add(base)  # (that model keeps the name: this one needs its own)
        others = {MODEL_NAMES.get(getattr(g, "name", None) or "", "") for g in graphs
                  if _SOURCES.get(getattr(g, "name", None) or "") != source}
        # (the same file loaded again too: each load is its own Model ID; and a name once claimed is never
        # claimed again: a dump or profile that saw a freed model's runs would take the new one for it)
        k = _NEXT.get(base, 1)
        gname = base if k == 1 else f"{base}#{k}"
        while gname in live or gname in _USED:
            k += 1
            gname = f"{base}#{k}"
        _NEXT[base] = k + 1
        _USED.add(gname)
        name, j = stem, 1
        while name in others:
            j += 1
            name = f"{stem}#{j}"
        if gname != base and (shared or not path):
            graph = _renamed_copy(graph)
        graph.name = gname
        MODEL_NAMES[gname] = name  # (as ``on_model_load`` registers it, once the load's plans are built)
        _SOURCES[gname] = source
        try:
            _CLAIMED.add(graph)
            _CLAIMED_NAMES[graph] = name
        except TypeError:  # (a graph without weak references)
            pass
    return graph


def _renamed_copy(graph: Any) -> Any:
    """A shallow copy of ``graph`` to rename: its own lists and maps, the nodes and weights shared."""
    import copy

    g = copy.copy(graph)
    for attr in ("nodes", "inputs", "outputs"):
        if isinstance(getattr(g, attr, None), list):
            setattr(g, attr, list(getattr(g, attr)))
    for attr in ("initializers", "descs", "opsets"):
        if isinstance(getattr(g, attr, None), dict):
            setattr(g, attr, dict(getattr(g, attr)))
    return g


# Graphs whose loads claimed a name and have not registered their model yet (``on_model_load``): a
# load on another thread then sees the name taken (both kept "main_graph"). Weak: a failed load's
# graph goes with it.
_CLAIMED: weakref.WeakSet[Any] = weakref.WeakSet()
# graph -> the model name its claim gave it (``on_model_load`` keeps it); graph name -> the file it came from
_CLAIMED_NAMES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_SOURCES: dict[str, str] = {}
# graph names claimed so far in this process (never claimed twice) and, per base name, the next ``#k`` to try
_USED: set[str] = set()
_NEXT: dict[str, int] = {}
_claim_lock = threading.Lock()
if hasattr(os, "register_at_fork"):  # (a thread of the parent may hold it at a fork)
    os.register_at_fork(after_in_child=lambda: globals().update(_claim_lock=threading.Lock()))


def on_model_load(model: Any) -> None:
    """Called by ``LoadedModel.__init__``: register the model's name; the first time, start the
    profiler that ``PYCANN_PROFILE_DIR`` asks for (``pycann.profiler.session.start_from_env``)."""
    global _env_checked
    graph = getattr(model, "graph", None)
    gname = getattr(graph, "name", "") or ""
    try:
        claimed = _CLAIMED_NAMES.get(graph) if graph is not None else None
    except TypeError:  # (a graph without weak references: never claimed)
        claimed = None
    MODEL_NAMES[gname] = claimed if claimed is not None else \
        _model_name(gname, getattr(model, "path", "") or "", getattr(model, "manifest", None))
    try:
        LOADED.add(model)
    except TypeError:  # (an object without weak references: not listed)
        pass
    if graph is not None:
        try:
            _CLAIMED.discard(graph)
        except TypeError:
            pass
    if not _env_checked:
        _env_checked = True
        if config.profile_env().out:
            from pycann.profiler.session import start_from_env

            start_from_env()
    for obs in OBSERVERS:
        fn = getattr(obs, "on_model_load", None)
        if fn is not None:
            fn(model)
