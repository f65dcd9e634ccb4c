"""The operator table: every op pycann knows, read from the family modules' ``OPS`` lists.

Adding an op = adding an ``OpDef`` to a family's ``OPS`` list (and the family to ``FAMILIES``
if new). Nothing registers itself at import time.
"""

from __future__ import annotations

from types import ModuleType

from pycann.errors import UnsupportedOpError
from pycann.ops import (
    activation,
    aipp,
    cast,
    control,
    custom,
    elementwise,
    fused,
    fused_deconv,
    image,
    indexing,
    loss,
    math_misc,
    matmul,
    misc,
    ml,
    quant,
    quant_conv,
    quant_matmul,
    quant_ms,
    reduce,
    sequence,
    string,
    tensor,
    tensor_gen,
    training,
)
from pycann.ops.nn import conv, norm, pool, resize, rnn
from pycann.ops.opdef import OpDef

FAMILIES: tuple[ModuleType, ...] = (
    fused,
    fused_deconv,
    quant,
    quant_conv,
    quant_matmul,
    quant_ms,
    math_misc,
    elementwise,
    activation,
    cast,
    reduce,
    tensor,
    tensor_gen,
    indexing,
    matmul,
    conv,
    pool,
    norm,
    rnn,
    resize,
    misc,
    loss,
    control,
    sequence,
    string,
    ml,
    training,
    image,
    aipp,
)


def _canon_domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


def _build() -> dict[tuple[str, str], list[OpDef]]:
    table: dict[tuple[str, str], list[OpDef]] = {}
    for fam in FAMILIES:
        for op in fam.OPS:
            table.setdefault((_canon_domain(op.domain), op.op_type), []).append(op)
    for op in custom.load_ops():  # installed custom ops (ASCEND_CUSTOM_OPP_PATH); built-ins win
        table.setdefault((_canon_domain(op.domain), op.op_type), [op])
    for defs in table.values():
        defs.sort(key=lambda d: d.since)
    return table


REGISTRY: dict[tuple[str, str], list[OpDef]] = _build()


def reload_custom_ops() -> None:
    """Rebuild the table after installing custom ops or changing ASCEND_CUSTOM_OPP_PATH."""
    table = _build()
    REGISTRY.clear()
    REGISTRY.update(table)


def lookup(op_type: str, domain: str = "", opset: int | None = None, where: str = "") -> OpDef:
    """The definition serving ``op_type`` at ``opset`` of ``domain`` (newest if ``opset`` is None).

    Raises ``UnsupportedOpError`` (atc E19010) naming the node, op, domain and opset.
    """
    defs = REGISTRY.get((_canon_domain(domain), op_type))
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
    return sorted((d.domain, d.op_type, d.since) for defs in REGISTRY.values() for d in defs)
