"""The AOE knowledge bank: tuned choices on disk, in one sqlite file (``<folder>/bank.sqlite``).

One row per tuned workload. The key is what decides the best choice and nothing else (not the
candidate list, so adding a candidate does not forget the others' timings):

==============  ==========================================================================
column          meaning
==============  ==========================================================================
kind            ``kernel`` (CPU kernel provider choice, measured), ``tiling`` (Da Vinci
                tiling priced on the cost model), ``graph`` (subgraph tuning of one model),
                ``model`` (the index of one model's operator tuning: which records it
                produced, so a second run need not compile; ``aoe/model_index.py``)
op_type         ``Conv``, ``MatMul``, ...; ``graph``: ``model``; ``model``: ``opat``
shapes          JSON list of the operand shapes (``graph``: the model's input shapes)
dtypes          JSON list of the operand dtypes (numpy names)
formats         JSON list of the operand formats (``NCHW``, ``ND``, ...)
attrs           canonical JSON of the rest of the key (strides, pads, group, whether
                approximate kernels were allowed, the graph's structure hash)
soc_version     the target: an Ascend soc for ``tiling``; ``CPU:<machine fingerprint>``
                for measured choices (they hold for the machine they were measured on)
kit_version     pycann's version and the kernel libraries' versions
choice          JSON of the chosen configuration
cost_us         its measured (or simulated) time, microseconds
baseline_us     the default choice's time, microseconds
trials          how many candidates the search measured
detail          JSON: every trial, the verification of the choice's output
created         Unix time of the write
==============  ==========================================================================

Readers never create the file; a file that is not a bank raises ``BankError`` naming it. Several
processes may read and write at once (sqlite's locking; a write replaces the row of its key).
This module is a leaf (stdlib, ``pycann``'s version, ``pycann.config``, ``pycann.errors``): GE reads it on compiles.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import sqlite3
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pycann
from pycann.config import tune_bank_dir
from pycann.errors import PycannError
from pycann.host import cpu_identity

FILENAME = "bank.sqlite"
SCHEMA_VERSION = 1
KINDS = ("kernel", "tiling", "graph", "model")
_KEY_COLUMNS = ("kind", "op_type", "shapes", "dtypes", "formats", "attrs", "soc_version", "kit_version")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    kind TEXT NOT NULL, op_type TEXT NOT NULL, shapes TEXT NOT NULL, dtypes TEXT NOT NULL,
    formats TEXT NOT NULL, attrs TEXT NOT NULL, soc_version TEXT NOT NULL, kit_version TEXT NOT NULL,
    choice TEXT NOT NULL, cost_us REAL NOT NULL, baseline_us REAL NOT NULL, trials INTEGER NOT NULL,
    detail TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY ({", ".join(_KEY_COLUMNS)}));
"""


@functools.lru_cache(maxsize=1)
def host_soc() -> str:
    """``CPU:<machine>:<cpu model>:<cores>``: measured choices hold for the machine they came from."""
    return f"CPU:{cpu_identity()}"


@functools.lru_cache(maxsize=1)
def kit_version() -> str:
    """pycann's version plus the kernel libraries' (a new numpy/oneDNN/torch invalidates measurements)."""
    import importlib.metadata  # here, not at module level: it costs ~11 ms of every pycann import

    parts = [f"pycann {pycann.__version__}"]
    for dist in ("numpy", "onednn-cpu-gomp", "torch"):
        try:
            parts.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return ", ".join(parts)


class BankError(PycannError):
    """The knowledge bank file cannot be read or written (not a bank, newer schema, no access)."""

    code = "E10001"


def canonical(obj: Any) -> str:
    """The JSON text used in keys: sorted keys, no spaces, tuples as lists."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class BankKey:
    """What a tuned choice is valid for (see the module docstring's table)."""

    kind: str
    op_type: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    formats: tuple[str, ...]
    attrs: str  # canonical JSON (``canonical``)
    soc_version: str
    kit_version: str

    def columns(self) -> tuple[str, ...]:
        return (self.kind, self.op_type, canonical([list(s) for s in self.shapes]), canonical(list(self.dtypes)),
                canonical(list(self.formats)), self.attrs, self.soc_version, self.kit_version)


@dataclass(frozen=True)
class BankRecord:
    """One tuned choice: ``choice`` (JSON-able dict), its cost and the default's, microseconds."""

    key: BankKey
    choice: dict[str, Any]
    cost_us: float
    baseline_us: float
    trials: int
    detail: dict[str, Any] = field(default_factory=dict)
    created: float = 0.0

    @property
    def speedup(self) -> float:
        return self.baseline_us / self.cost_us if self.cost_us > 0 else 1.0


class KnowledgeBank:
    """The bank in ``folder`` (default: ``config.tune_bank_dir()``). Thread-safe."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder else tune_bank_dir()
        self.path = self.folder / FILENAME
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        _BANKS.add(self)

    def _after_fork(self) -> None:
        """In a forked child: a fresh lock and, at the next use, a fresh connection (sqlite's must not
        cross a fork: the inherited one is never used nor closed in the child, ``_abandon``)."""
        self._lock = threading.Lock()
        if self._conn is not None:
            _abandon(self._conn)
            self._conn = None

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not create and not self.path.is_file():
            return None
        try:
            if create:
                self.folder.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False)
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE name='schema'").fetchone()
            if row is None:
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
                conn.commit()
            elif int(row[0]) > SCHEMA_VERSION:
                raise BankError(f"knowledge bank {self.path} has schema {row[0]}, newer than this pycann's "
                                f"{SCHEMA_VERSION}; upgrade pycann or point TUNE_BANK_PATH at another folder")
        except (sqlite3.DatabaseError, OSError) as e:
            raise BankError(f"knowledge bank {self.path} cannot be used ({e}); delete it or point "
                            "TUNE_BANK_PATH / --op_bank_path at another folder") from None
        self._conn = conn
        return conn

    def check(self) -> None:
        """Open (creating) the bank now: ``BankError`` naming the file and the fix when it cannot be used.
        aoe calls this before compiling, so a broken bank is one error, not a compile warning then a failure."""
        with self._lock:
            self._connect(create=True)

    def get(self, key: BankKey) -> BankRecord | None:
        """The record of ``key``, or None (also when the bank file does not exist yet)."""
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return None
            where = " AND ".join(f"{c}=?" for c in _KEY_COLUMNS)
            try:
                row = conn.execute(f"SELECT choice, cost_us, baseline_us, trials, detail, created FROM records "
                                   f"WHERE {where}", key.columns()).fetchone()
            except sqlite3.DatabaseError as e:
                raise BankError(f"knowledge bank {self.path}: read failed ({e})") from None
        if row is None:
            return None
        return BankRecord(key, json.loads(row[0]), float(row[1]), float(row[2]), int(row[3]), json.loads(row[4]),
                          float(row[5]))

    def put(self, rec: BankRecord) -> None:
        """Store ``rec``, replacing the record of the same key. Raises ``BankError``."""
        if rec.key.kind not in KINDS:
            raise ValueError(f"bank record kind {rec.key.kind!r}: expected one of {', '.join(KINDS)}")
        with self._lock:
            conn = self._connect(create=True)
            assert conn is not None
            try:
                conn.execute("INSERT OR REPLACE INTO records VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                             (*rec.key.columns(), canonical(rec.choice), rec.cost_us, rec.baseline_us, rec.trials,
                              canonical(rec.detail), rec.created or time.time()))
                conn.commit()
            except sqlite3.DatabaseError as e:
                raise BankError(f"knowledge bank {self.path}: write failed ({e})") from None

    def count(self, kind: str | None = None) -> int:
        """Records in the bank (of ``kind`` when given)."""
        with self._lock:
            conn = self._connect(create=False)
            if conn is None:
                return 0
            q = "SELECT COUNT(*) FROM records" + (" WHERE kind=?" if kind else "")
            return int(conn.execute(q, (kind,) if kind else ()).fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


_open: dict[str, KnowledgeBank] = {}
_open_lock = threading.Lock()
_BANKS: weakref.WeakSet[KnowledgeBank] = weakref.WeakSet()


def _abandon(conn: sqlite3.Connection) -> None:
    """Keep an inherited connection alive for good, unclosed: closing it takes its sqlite mutex,
    which the parent's thread may have held at the fork (the child would hang at exit)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(conn))


# Forks: every use of sqlite here holds its bank's lock, and a fork waits for those locks
# (``_before_fork``), so no thread of the parent is inside sqlite at a fork. A thread inside ``get`` at
# the fork (a background plan build's kernel selection) left the lock taken in the child, whose first
# plan build then waited forever; and a fresh connection there could still hang on a mutex of sqlite's
# own that the thread held (3 of 10 'fork' children of a process running PP-OCRv4 rec threads, then 1 of
# 14). A fork waits at most for one query (or sqlite's busy timeout, while another process writes).
_held: list[threading.Lock] = []


def _before_fork() -> None:
    for bank in sorted(_BANKS, key=id):  # (a thread holds one bank's lock at a time: no order to keep)
        bank._lock.acquire()
        _held.append(bank._lock)


def _after_fork_in_parent() -> None:
    while _held:
        _held.pop().release()


def _after_fork_in_child() -> None:
    global _open_lock
    _held.clear()
    _open_lock = threading.Lock()
    for bank in list(_BANKS):
        bank._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


def open_bank(folder: str | Path | None = None) -> KnowledgeBank:
    """The process's ``KnowledgeBank`` for ``folder`` (resolved with ``config.tune_bank_dir``), reused.
    Raises ``ConfigError`` (from ``tune_bank_dir``) when the default folder is a file."""
    path = Path(folder).expanduser() if folder else tune_bank_dir()
    with _open_lock:
        bank = _open.get(str(path))
        if bank is None:
            bank = _open[str(path)] = KnowledgeBank(path)
        return bank
