"""GE's view of the AOE knowledge bank (pycann/aoe/bank.py): the keys of GE's tuned choices and
their lookup on compiles (docs/aoe.md).

* Kernel choices (``kind="kernel"``): the provider algorithm of one Conv/ConvTranspose/MatMul/Gemm
  spec, measured by ``aoe --job_type=2`` on this machine. ``KernelSelection`` takes a banked choice
  over its static table and over ``measure`` mode (nothing is re-measured).
* Graph choices (``kind="graph"``): the fusion switches and kernel-bank use that
  ``aoe --job_type=1`` measured best for one model (keyed by its structure and input shapes, not
  its weight values). ``compile_model`` applies them.

The bank folder: ``graph.context.op_bank_path`` (atc ``--op_bank_path``) else
``config.tune_bank_dir()``. ``graph.context.kernel_bank`` False skips kernel records (a
model whose subgraph tuning found the static choices faster). A bank that cannot be read is
logged once and ignored: a compile never fails because of it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.aoe.bank import (
    BankError,
    BankKey,
    BankRecord,
    KnowledgeBank,
    canonical,
    host_soc,
    kit_version,
    open_bank,
)
from pycann.config import ConfigError
from pycann.ge.ir import CompileContext, Graph
from pycann.kernels.providers import ConvSpec, Implementation, OpSpec, accept

log = logging.getLogger("pycann.ge.compile.tuned")
_warned: set[str] = set()


def kernel_key(spec: OpSpec, approx: bool) -> BankKey:
    """The bank key of one kernel choice: op, operand shapes/dtypes/formats, window, approx flag."""
    if isinstance(spec, ConvSpec):
        w = spec.win
        attrs = {"group": spec.group, "kernel": list(w.kernel), "strides": list(w.strides),
                 "dilations": list(w.dilations), "pads": [list(w.pads_begin), list(w.pads_end)],
                 "out": list(spec.out_sizes), "approx": approx}
        shapes, fmt = (spec.x_shape, spec.w_shape), ("NCHW", "NCHW")
    else:
        attrs = {"trans_a": spec.trans_a, "trans_b": spec.trans_b, "approx": approx}
        shapes, fmt = (spec.a_shape, spec.b_shape), ("ND", "ND")
    return BankKey("kernel", spec.op_type, shapes, (spec.dtype, spec.dtype), fmt, canonical(attrs),
                   host_soc(), kit_version())


def _bank(path: str) -> KnowledgeBank | None:
    try:
        return open_bank(path or None)
    except ConfigError as e:
        _warn(str(e))
        return None


def _warn(msg: str) -> None:
    if msg not in _warned:
        _warned.add(msg)
        log.warning("%s (tuned choices ignored)", msg)


def lookup(bank: KnowledgeBank, key: BankKey) -> BankRecord | None:
    """``bank.get(key)``; a broken bank is logged once and reads as empty."""
    try:
        return bank.get(key)
    except BankError as e:
        _warn(str(e))
        return None


def tuned_algorithm(spec: OpSpec, approx: bool, context: CompileContext) -> Implementation | None:
    """The banked algorithm for ``spec`` if there is one, it is available here and supports the spec."""
    if not context.kernel_bank:
        return None
    bank = _bank(context.op_bank_path)
    rec = lookup(bank, kernel_key(spec, approx)) if bank is not None else None
    if rec is None:
        return None
    return accept(spec, str(rec.choice.get("algorithm", "")), approx)


def graph_fingerprint(g: Graph) -> str:
    """sha256 of a graph's structure: inputs and their descs, nodes (op, edges, attrs), constants'
    names, shapes and dtypes. Weight values are left out: they do not change the best choices."""
    import hashlib  # here: ~3 ms of every pycann import otherwise, for a function only aoe and atc call

    h = hashlib.sha256()

    def attr(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return ["array", list(v.shape), v.dtype.name]
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, (bytes, str, int, float, bool)) or v is None:
            return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        if isinstance(v, (list, tuple)):
            return [attr(x) for x in v]
        return type(v).__name__  # subgraphs, tensors: hashed by their nodes below

    def walk(graph: Graph) -> None:
        h.update(canonical({"in": [[n, str(graph.descs.get(n))] for n in graph.inputs], "out": graph.outputs}).encode())
        for name, arr in sorted(graph.initializers.items()):
            h.update(canonical([name, list(getattr(arr, "shape", ())), str(getattr(arr, "dtype", ""))]).encode())
        for n in graph.nodes:
            h.update(canonical([n.domain, n.op_type, n.inputs, n.outputs,
                                {k: attr(v) for k, v in sorted(n.attrs.items())}]).encode())
            for sub in n.subgraphs.values():
                walk(sub)

    walk(g)
    return h.hexdigest()


@dataclass(frozen=True)
class GraphChoice:
    """What subgraph tuning chose for one model: passes switched off, whether banked kernels are used."""

    disabled_passes: tuple[str, ...] = ()
    kernel_bank: bool = True
    layout: bool = True  # False: LayoutSelection off (NCHW everywhere)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"disabled_passes": list(self.disabled_passes), "kernel_bank": self.kernel_bank, "layout": self.layout}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> GraphChoice:
        return cls(tuple(d.get("disabled_passes", ())), bool(d.get("kernel_bank", True)), bool(d.get("layout", True)))

    def passes_off(self) -> list[str]:
        return [*self.disabled_passes, *([] if self.layout else ["LayoutSelection"])]


def graph_key(g: Graph, soc_version: str, implmode: str) -> BankKey:
    """The bank key of a model's subgraph-tuning record (``g`` after import and --input_shape)."""
    shapes = tuple(tuple(d if isinstance(d, int) else -1 for d in (g.descs[n].shape or ()))
                   for n in g.inputs if n in g.descs)
    dtypes = tuple(str(g.descs[n].dtype) for n in g.inputs if n in g.descs)
    attrs = canonical({"structure": graph_fingerprint(g), "target": soc_version, "implmode": implmode})
    return BankKey("graph", "model", shapes, dtypes, ("NCHW",) * len(shapes), attrs, host_soc(), kit_version())


def graph_choice(g: Graph, soc_version: str, implmode: str, bank_path: str = "") -> tuple[BankKey, GraphChoice | None]:
    """(key, the banked subgraph-tuning choice or None) of a model about to be compiled."""
    key = graph_key(g, soc_version, implmode)
    bank = _bank(bank_path)
    rec = lookup(bank, key) if bank is not None else None
    return key, GraphChoice.from_json(rec.choice) if rec is not None else None
