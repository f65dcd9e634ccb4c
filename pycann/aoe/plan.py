"""What a compiled model actually runs, for the tuners' before/after: its kernel choices, and the
banked kernel choices the compile overrode (and why).

A banked kernel choice (``aoe --job_type=2``) is measured alone; ``KernelSelection`` then applies
GE's one-thread-pool rule (``ge/compile/passes/select_kernels.one_pool``: a model runs on one spinning
thread pool, so the nodes of the minority provider by FLOPs move to the majority provider), and
swaps a prepacked-weight algorithm for its plain form when the weight is not a constant of the
compute dtype. So a choice in the bank is not necessarily a choice in the .om: the tuners compare
plans by what they contain, and say which banked choices did not make it and why.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pycann.ge.ir import Graph
from pycann.kernels import algorithm


def plan_signature(g: Graph) -> str:
    """The compiled plan's structure: nodes, edges and attributes (the kernel choice ``_algo`` and the
    layouts included), constants' shapes and dtypes, subgraphs (``ge.compile.tuned.graph_fingerprint``). Two
    compiles with the same signature run the same kernels on the same graph."""
    from pycann.ge.compile.tuned import graph_fingerprint

    return graph_fingerprint(g)


@dataclass(frozen=True)
class Override:
    """One node whose banked kernel is not the compiled one."""

    node: str
    banked: str
    compiled: str
    reason: str


SWITCHED_OFF = ("the model's subgraph-tuning record in the bank (aoe --job_type=1) keeps GE's static kernels "
                "for this model (the banked kernels did not measure faster in the whole model)")


def overrides(g: Graph, switched_off: bool = False) -> list[Override]:
    """The nodes of compiled graph ``g`` whose banked kernel (the bank of ``g.context``) differs from
    the kernel compiled into ``g``, with the rule that overrode it. When kernel records are off for
    this model (``g.context.kernel_bank`` False): nothing, or with ``switched_off`` every differing banked
    choice, for the reason ``SWITCHED_OFF`` (a subgraph-tuning record turned them off)."""
    from pycann.ge.compile.passes.select_kernels import node_specs
    from pycann.ge.compile.tuned import tuned_algorithm

    off = not g.context.kernel_bank
    if off and not switched_off:
        return []
    context = dataclasses.replace(g.context, kernel_bank=True)
    found: list[Override] = []
    for ns in node_specs(g):
        banked = tuned_algorithm(ns.spec, ns.approx, context)
        compiled = algorithm.of(ns.node.attrs)
        if banked is None or compiled is None or banked.algo == compiled:
            continue
        provider = compiled.provider
        if off:
            why = SWITCHED_OFF
        elif provider != banked.provider:
            why = (f"GE's one-thread-pool rule moved it to {provider} (the model's majority provider by FLOPs: "
                   f"alternating thread pools run several times slower)")
        else:
            why = "its weight is not a constant of the compute dtype, so the prepacked form was not used"
        found.append(Override(ns.node.name, banked.key, compiled.key, why))
    return found


def overrides_note(found: list[Override]) -> str:
    """``GE's one-thread-pool rule reverted 12 banked kernels to onednn`` (one clause per reason)."""
    by: Counter[tuple[str, str]] = Counter()
    for o in found:
        provider = o.compiled.split(":", 1)[0]
        if o.reason == SWITCHED_OFF:
            by[("the model's subgraph-tuning record (static kernels kept)", provider)] += 1
            continue
        rule = "GE's one-thread-pool rule" if o.reason.startswith("GE's one-thread-pool") else "the prepacked-weight rule"
        by[(rule, provider)] += 1
    return "; ".join(f"{rule} reverted {n} banked kernel{'s' if n > 1 else ''} to {p}" for (rule, p), n in by.items())


def mark_entries(entries: list[dict[str, Any]], found: list[Override]) -> int:
    """Mark the op-tuning report entries whose nodes did not get the banked kernel: ``in_om`` False and
    ``override`` the compiled kernel and why. Returns how many entries were marked."""
    by_node = {o.node: o for o in found}
    marked = 0
    for e in entries:
        if e.get("kind") != "kernel":
            continue
        hit = [by_node[n] for n in e.get("nodes", []) if n in by_node]
        e["in_om"] = not hit
        if hit:
            e["override"] = f"the .om runs {hit[0].compiled} on {len(hit)} of {len(e['nodes'])} nodes: {hit[0].reason}"
            marked += 1
    return marked
