"""Tensor dump: acl.json's ``"dump"`` block (cann-interfaces.md §1.9) writes each selected
layer's tensors as ``.npy`` files plus an index, for accuracy work (``pycann compare``).

Config keys used: ``dump_path`` (required), ``dump_list`` (``[{"model_name": m, "layer": [...]}]``;
``[]`` = every model; an entry without ``layer`` or with ``[]`` = every layer of that model; a
layer matches the node's name or any original ONNX node it stands for, ``Node.origin``),
``dump_mode`` (``input`` / ``output`` (default) / ``all``) and ``dump_step`` (``"0|3|5-9"``:
iterations to dump, default all). Others (``dump_op_switch``, ``dump_debug``, ``dump_data``, ...)
are accepted and ignored. ``model_name`` is the .om file's stem (or the graph's name).

Layout, following CANN's ``{dump_path}/{time}/{device_id}/{model_name}/{model_id}/{iteration}/``::

    <dump_path>/<YYYYmmddHHMMSS>/dump_index.csv
    <dump_path>/<YYYYmmddHHMMSS>/0/<model>/<model_id>/<iteration>/<OpType>.<op_name>.<input|output>.<i>.npy

``dump_index.csv`` columns: ``model_name, model_id, iteration, op_name, op_type, origin, io, index,
value_name, dtype, shape, file`` (``file`` relative to the index's folder). ``load_index`` reads it.
Sequence values and omitted inputs are not dumped.
"""

from __future__ import annotations

import atexit
import csv
import os
import re
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.profiler import hooks

INDEX_NAME = "dump_index.csv"
INDEX_COLUMNS = ["model_name", "model_id", "iteration", "op_name", "op_type", "origin", "io", "index",
                 "value_name", "dtype", "shape", "file"]
MODES = ("input", "output", "all")
_SAFE = re.compile(r"[^A-Za-z0-9_.\-]+")


def parse_steps(text: str | None) -> list[tuple[int, int]] | None:
    """``"0|3|5-9"`` -> [(0, 0), (3, 3), (5, 9)]; None/empty -> None (every iteration)."""
    if not text:
        return None
    out = []
    for part in str(text).split("|"):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"dump_step {text!r}: {part.strip()!r} is not an iteration or a range "
                             "'first-last' (e.g. \"0|3|5-9\")") from None
        if a < 0 or b < a:
            raise ValueError(f"dump_step {text!r}: {part.strip()!r} must be iterations >= 0, first <= last")
        out.append((a, b))
    return out


class TensorDump:
    """A ``NodeObserver`` writing the selected nodes' tensors as .npy files plus ``dump_index.csv``."""

    def __init__(self, dump_path: str | os.PathLike[str], dump_list: Sequence[Mapping[str, Any]] | None = None,
                 dump_mode: str = "output", dump_step: str | None = None) -> None:
        if dump_mode not in MODES:
            raise ValueError(f"dump_mode must be one of {MODES}, not {dump_mode!r}")
        self.root = os.path.join(os.fspath(dump_path), time.strftime("%Y%m%d%H%M%S"))
        os.makedirs(self.root, exist_ok=True)
        self.mode = dump_mode
        self.steps = parse_steps(dump_step)
        # model name -> set of layers (None = all); None = every model
        self.select: dict[str, set[str] | None] | None = None
        if dump_list:
            self.select = {}
            for e in dump_list:
                layers = e.get("layer") or None
                self.select[str(e.get("model_name", ""))] = set(layers) if layers else None
        # graph name -> runs numbered so far (the next run's iteration); the iteration of the run a thread
        # is in, per graph, is that thread's own (``_iteration``)
        self.iterations: dict[str, int] = {}
        self._current = threading.local()
        self.model_ids: dict[str, int] = {}
        self.files = 0
        self._lock = threading.Lock()
        self._index_f = open(os.path.join(self.root, INDEX_NAME), "w", newline="", encoding="utf-8")
        self._index = csv.writer(self._index_f)
        self._index.writerow(INDEX_COLUMNS)
        _DUMPERS.add(self)

    @property
    def index_path(self) -> str:
        return os.path.join(self.root, INDEX_NAME)

    def _iteration(self, graph_name: str) -> int:
        """The iteration of the run of ``graph_name`` that the calling thread is in, numbered when its
        first node reports. Runs of one model on several threads at once each get their own (they read
        one shared count, bumped as a run ended: two such runs wrote one folder, the later files over
        the earlier, and the index listed both runs' rows for them)."""
        runs: dict[str, int] | None = getattr(self._current, "runs", None)
        if runs is None:
            runs = self._current.runs = {}
        it = runs.get(graph_name)
        if it is None:
            with self._lock:
                it = self.iterations.get(graph_name, 0)
                self.iterations[graph_name] = it + 1
            runs[graph_name] = it
        return it

    def _wanted(self, model: str, graph_name: str, node: Any, it: int) -> bool:
        if self.steps is not None:
            if not any(lo <= it <= hi for lo, hi in self.steps):
                return False
        if self.select is None:
            return True
        key = model if model in self.select else graph_name if graph_name in self.select else None
        if key is None:
            return False
        layers = self.select[key]
        return layers is None or node.name in layers or any(o in layers for o in getattr(node, "origin", ()))

    def on_node(self, node: Any, inputs: Sequence[Any], outputs: Sequence[Any], start_ns: int, end_ns: int,
                graph_name: str) -> None:
        model = hooks.model_name_of(graph_name)
        it = self._iteration(graph_name)
        if not self._wanted(model, graph_name, node, it):
            return
        with self._lock:
            mid = hooks.ACL_MODEL_IDS.get(graph_name)
            if mid is None:
                mid = self.model_ids.setdefault(graph_name, len(self.model_ids))  # (per load: its graph name)
            rel_dir = os.path.join("0", _SAFE.sub("_", model) or "model", str(mid), str(it))
            os.makedirs(os.path.join(self.root, rel_dir), exist_ok=True)
            if self.mode in ("input", "all"):
                self._save(rel_dir, model, mid, it, node, "input", node.inputs, inputs)
            if self.mode in ("output", "all"):
                self._save(rel_dir, model, mid, it, node, "output", node.outputs, outputs)
            self._index_f.flush()

    def _save(self, rel_dir: str, model: str, mid: int, it: int, node: Any, io: str, names: Sequence[str],
              values: Sequence[Any]) -> None:
        base = f"{_SAFE.sub('_', node.op_type)}.{_SAFE.sub('_', node.name or node.op_type)}.{io}"
        for i, v in enumerate(values):
            if not isinstance(v, np.ndarray):
                continue
            arr = v.astype(str) if v.dtype == object else v
            rel = os.path.join(rel_dir, f"{base}.{i}.npy")
            np.save(os.path.join(self.root, rel), arr, allow_pickle=False)
            self.files += 1
            self._index.writerow([model, mid, it, node.name, node.op_type, ";".join(getattr(node, "origin", ())),
                                  io, i, names[i] if i < len(names) else "", v.dtype.name,
                                  ",".join(map(str, v.shape)), rel])

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None:
        runs: dict[str, int] | None = getattr(self._current, "runs", None)
        if runs is None or runs.pop(graph_name, None) is None:
            with self._lock:  # a run no node of which reported (an empty graph) is numbered all the same
                self.iterations[graph_name] = self.iterations.get(graph_name, 0) + 1

    def close(self) -> None:
        """Stop receiving events and close the index (idempotent)."""
        hooks.remove_observer(self)
        with self._lock:
            if not self._index_f.closed:
                self._index_f.close()

    def _in_child(self) -> None:
        """In a forked child (``_after_fork_in_child``): a folder of its own, ``<root>-<pid>``, with its own
        index. The child went on in the parent's folder and index, its iteration numbers the parent's
        next ones: the parent's later runs wrote their files over the child's, and the index listed the
        child's rows for them."""
        self._lock = threading.Lock()
        self._current = threading.local()
        if self._index_f.closed:
            return
        self._index_f.close()  # (the child's descriptor; empty buffer: each write flushes under the lock)
        self.root = f"{self.root}-{os.getpid()}"
        os.makedirs(self.root, exist_ok=True)
        self._index_f = open(os.path.join(self.root, INDEX_NAME), "w", newline="", encoding="utf-8")
        self._index = csv.writer(self._index_f)
        self._index.writerow(INDEX_COLUMNS)
        self._index_f.flush()
        self.files = 0


_DUMPERS: weakref.WeakSet[TensorDump] = weakref.WeakSet()
_held: list[threading.Lock] = []


def _before_fork() -> None:
    # no dump write in progress at a fork (a parent thread's row half in the index buffer, flushed
    # again by the child): each dumper's lock is taken across it
    for d in sorted(_DUMPERS, key=id):
        d._lock.acquire()
        _held.append(d._lock)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop().release()


def _after_fork_in_child() -> None:
    _held.clear()
    for d in list(_DUMPERS):
        d._in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


class TensorCapture:
    """In-memory dump: copies of every output of the nodes of one graph (``graph_name``; None =
    the first graph seen), keyed by value name, plus the nodes in execution order (last run)."""

    def __init__(self, graph_name: str | None = None) -> None:
        self.graph_name = graph_name
        self.values: dict[str, np.ndarray] = {}
        self.nodes: list[Any] = []

    def on_node(self, node: Any, inputs: Sequence[Any], outputs: Sequence[Any], start_ns: int, end_ns: int,
                graph_name: str) -> None:
        if self.graph_name is None:
            self.graph_name = graph_name
        if graph_name != self.graph_name:
            return
        self.nodes.append(node)
        for name, v in zip(node.outputs, outputs):
            if name and isinstance(v, np.ndarray):
                self.values[name] = np.array(v, copy=True)

    def on_run(self, graph_name: str, start_ns: int, end_ns: int) -> None:
        pass


def load_index(dump_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of ``dump_index.csv`` in ``dump_dir`` (the ``<time>`` folder), each with an
    absolute ``path`` added."""
    root = os.fspath(dump_dir)
    with open(os.path.join(root, INDEX_NAME), newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r["path"] = os.path.join(root, r["file"])
    return rows


_ACTIVE: list[TensorDump] = []
_atexit_registered = False


def active_dumpers() -> list[TensorDump]:
    """Dumpers started by ``configure_from_acl_json`` and not finalized yet."""
    return list(_ACTIVE)


def configure_from_acl_json(cfg: Mapping[str, Any] | None) -> TensorDump | None:
    """Start dumping as acl.json's ``"dump"`` block asks (``cfg``: the whole acl.json object or
    just the block). Needs ``dump_path`` and ``dump_list``; returns the dumper or None."""
    global _atexit_registered
    if not cfg:
        return None
    block = cfg["dump"] if "dump" in cfg else cfg
    if not isinstance(block, Mapping) or not block.get("dump_path") or "dump_list" not in block:
        return None
    from pycann.profiler import session

    if any(p.running for p in session._MANAGED):
        import warnings

        warnings.warn("acl.json enables dump and profiling together: dumping skews the timings (CANN advises "
                      "against it)", UserWarning, stacklevel=2)
    d = TensorDump(block["dump_path"], block.get("dump_list") or None, str(block.get("dump_mode", "output")),
                   block.get("dump_step"))
    hooks.add_observer(d)
    _ACTIVE.append(d)
    if not _atexit_registered:
        _atexit_registered = True
        atexit.register(finalize)
    return d


def finalize() -> list[str]:
    """Close the dumpers started from acl.json (``acl.finalize``; also at exit). Returns their folders."""
    out = []
    while _ACTIVE:
        d = _ACTIVE.pop(0)
        d.close()
        out.append(d.root)
    return out
