"""The operator table: every op pycann knows, read from the family modules' ``OPS`` lists.

Adding an op = adding an ``OpDef`` to a family's ``OPS`` list and its name to the family's entry in
``families.FAMILY_OPS`` (a new family goes to both ``FAMILIES`` and that table). Nothing registers
itself at import time.

The table fills per family: a lookup of a key imports the one family ``FAMILY_OPS`` names for it,
so loading a model imports the families its ops use and no others (a static CNN never imports the
RNN, control-flow, sequence, string, classic-ML, training or quantization families: ~5 ms of a first
run; bench/RESULTS.md). ``complete()`` imports every family (op listings, unknown keys). Installed
custom ops (ASCEND_CUSTOM_OPP_PATH) make the table complete at import: a built-in must win over a
custom op of the same name whether or not its family was read yet.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

from pycann.errors import UnsupportedOpError
from pycann.ops import custom
from pycann.ops.families import FAMILY_OPS
from pycann.ops.opdef import OpDef

# Family modules under pycann.ops, in table order.
FAMILIES: tuple[str, ...] = tuple(FAMILY_OPS)

_Key = tuple[str, str]
_Table = dict[_Key, list[OpDef]]
_lock = threading.RLock()
# (domain, op type) -> the family that defines it
_FAMILY_OF: dict[_Key, str] = {(d, t): fam for fam, by in FAMILY_OPS.items() for d, types in by.items() for t in types}
_loaded: set[str] = set()  # families whose ops are in REGISTRY


def _canon_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def family_modules(names: tuple[str, ...] = FAMILIES) -> list[ModuleType]:
    """The family modules ``names`` (``pycann.ops.<name>``), imported."""
    return [importlib.import_module(f"pycann.ops.{n}") for n in names]


def _load(names: tuple[str, ...]) -> None:
    """Add the ops of the families ``names`` not read yet to ``REGISTRY``. Keys already in the
    table stay (tests may have patched them)."""
    with _lock:
        todo = tuple(n for n in names if n not in _loaded)
        rest: _Table = {}
        for fam in family_modules(todo):
            for op in fam.OPS:
                rest.setdefault((_canon_domain(op.domain), op.op_type), []).append(op)
        for key, defs in rest.items():
            defs.sort(key=lambda d: d.since)
            REGISTRY.setdefault(key, defs)
        _loaded.update(todo)


def _restore(key: _Key) -> list[OpDef]:
    """The entry of the indexed ``key``; its family's definitions again when a patch removed or
    emptied it after the family was read (``monkeypatch.setitem`` on a key not in the table yet
    deletes it on undo; the family is not read twice, so the op would be gone for the process)."""
    with _lock:
        defs = REGISTRY.get(key)
        if not defs and _FAMILY_OF[key] in _loaded:
            fam = importlib.import_module(f"pycann.ops.{_FAMILY_OF[key]}")
            defs = sorted((op for op in fam.OPS if (_canon_domain(op.domain), op.op_type) == key), key=lambda d: d.since)
            REGISTRY[key] = defs
        return defs or []


REGISTRY: _Table = {}
_complete = False


def _start() -> None:
    """Installed custom ops: read every family first (built-ins win), then add the custom ops."""
    global _complete
    ops = custom.load_ops()
    if ops:
        _load(FAMILIES)
        _complete = True
        for op in ops:
            REGISTRY.setdefault((_canon_domain(op.domain), op.op_type), [op])


_start()


def complete() -> _Table:
    """Import the families not read yet and add their ops to ``REGISTRY`` (once); returns it.
    Entries already in the table stay (tests may have patched them)."""
    global _complete
    if not _complete:
        _load(FAMILIES)
        _complete = True
    for key in [k for k in _FAMILY_OF if not REGISTRY.get(k)]:
        _restore(key)
    return REGISTRY


def known(domain: str, op_type: str) -> bool:
    """Whether any family (or installed custom op) defines ``op_type`` in ``domain``."""
    key = (_canon_domain(domain), op_type)
    return key in REGISTRY or key in _FAMILY_OF or key in complete()


def reload_custom_ops() -> None:
    """Rebuild the table after installing custom ops or changing ASCEND_CUSTOM_OPP_PATH."""
    global _complete
    with _lock:
        REGISTRY.clear()
        _loaded.clear()
        _complete = False
        _start()
        complete()


def lookup(op_type: str, domain: str = "", opset: int | None = None, where: str = "") -> OpDef:
    """The definition serving ``op_type`` at ``opset`` of ``domain`` (newest if ``opset`` is None).

    Raises ``UnsupportedOpError`` (atc E19010) naming the node, op, domain and opset.
    """
    key = (_canon_domain(domain), op_type)
    fam = _FAMILY_OF.get(key)
    if fam is not None and fam not in _loaded:
        _load((fam,))
    defs = REGISTRY.get(key)
    if not defs and fam is not None:
        defs = _restore(key)
    if not defs and not _complete:
        defs = complete().get(key)
    loc = f"node {where}: " if where else ""
    dom = domain or "ai.onnx"
    if not defs:
        raise UnsupportedOpError(
            f"{loc}no parser is registered for op {op_type} (domain {dom}, opset {opset}); "
            "pycann does not implement this op — see docs/ops.md for the supported list"
        )
    if opset is None:
        return defs[-1]
    for d in reversed(defs):
        if d.since <= opset:
            return d
    raise UnsupportedOpError(
        f"{loc}op {op_type} (domain {dom}) is not defined at opset {opset}; "
        f"pycann supports it from opset {defs[0].since}"
    )


def supported_ops() -> list[tuple[str, str, int]]:
    """(domain, op_type, since) for every definition, sorted."""
    return sorted((d.domain, d.op_type, d.since) for defs in complete().values() for d in defs)
