"""The operator table: every op pycann knows, read from the family modules' ``OPS`` lists.

Adding an op = adding an ``OpDef`` to a family's ``OPS`` list (and the family to ``CORE_FAMILIES``
or ``OTHER_FAMILIES`` if new). Nothing registers itself at import time.

The table starts with ``CORE_FAMILIES``: the ops of convolutional nets, transformers, detectors and
OCR models, and the families the runtime imports anyway (quantized conv/matmul, AIPP). The other
families (RNNs, control flow, sequences, strings, classic ML, training, quantize ops, the rest)
are imported on the first lookup that misses, or by ``complete()``: a static model of the common
kind never imports them (~5 ms of every ``import``; bench/RESULTS.md, first run). The two sets
define disjoint op keys (tests/ops/test_registry_lazy.py), so a lookup answers the same whether the
rest was imported or not.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType

from pycann.errors import UnsupportedOpError
from pycann.ops import custom
from pycann.ops.opdef import OpDef

# Family modules under pycann.ops, in table order (a key's definitions keep this order before the
# sort by ``since``).
CORE_FAMILIES: tuple[str, ...] = (
    "fused", "fused_deconv", "quant_conv", "quant_matmul", "math_misc", "elementwise", "activation", "cast",
    "reduce", "tensor", "tensor_gen", "indexing", "matmul", "nn.conv", "nn.pool", "nn.norm", "nn.resize", "aipp",
)
OTHER_FAMILIES: tuple[str, ...] = (
    "quant", "quant_ms", "nn.rnn", "misc", "loss", "control", "sequence", "string", "ml", "training", "image",
)
FAMILIES: tuple[str, ...] = CORE_FAMILIES + OTHER_FAMILIES

_Table = dict[tuple[str, str], list[OpDef]]
_lock = threading.Lock()


def _canon_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def family_modules(names: tuple[str, ...] = FAMILIES) -> list[ModuleType]:
    """The family modules ``names`` (``pycann.ops.<name>``), imported."""
    return [importlib.import_module(f"pycann.ops.{n}") for n in names]


def _add(table: _Table, names: tuple[str, ...]) -> None:
    for fam in family_modules(names):
        for op in fam.OPS:
            table.setdefault((_canon_domain(op.domain), op.op_type), []).append(op)


def _build(complete: bool) -> tuple[_Table, bool]:
    """(the table, whether it holds every family)."""
    table: _Table = {}
    _add(table, CORE_FAMILIES)
    ops = custom.load_ops()  # installed custom ops (ASCEND_CUSTOM_OPP_PATH); built-ins win
    complete = complete or bool(ops)  # (a custom op must not shadow a built-in of a family not read yet)
    if complete:
        _add(table, OTHER_FAMILIES)
    for op in ops:
        table.setdefault((_canon_domain(op.domain), op.op_type), [op])
    for defs in table.values():
        defs.sort(key=lambda d: d.since)
    return table, complete


REGISTRY, _complete = _build(False)


def complete() -> _Table:
    """Import the families not read yet and add their ops to ``REGISTRY`` (once); returns it.
    Entries already in the table stay (tests may have patched them)."""
    global _complete
    with _lock:
        if not _complete:
            rest: _Table = {}
            _add(rest, OTHER_FAMILIES)
            for key, defs in rest.items():
                defs.sort(key=lambda d: d.since)
                REGISTRY.setdefault(key, defs)
            _complete = True
    return REGISTRY


def known(domain: str, op_type: str) -> bool:
    """Whether any family (or installed custom op) defines ``op_type`` in ``domain``."""
    key = (_canon_domain(domain), op_type)
    return key in REGISTRY or key in complete()


def reload_custom_ops() -> None:
    """Rebuild the table after installing custom ops or changing ASCEND_CUSTOM_OPP_PATH."""
    global _complete
    with _lock:
        table, _complete = _build(True)
        REGISTRY.clear()
        REGISTRY.update(table)


def lookup(op_type: str, domain: str = "", opset: int | None = None, where: str = "") -> OpDef:
    """The definition serving ``op_type`` at ``opset`` of ``domain`` (newest if ``opset`` is None).

    Raises ``UnsupportedOpError`` (atc E19010) naming the node, op, domain and opset.
    """
    key = (_canon_domain(domain), op_type)
    defs = REGISTRY.get(key)
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
