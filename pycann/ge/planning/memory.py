"""Memory plan: tensor lifetimes -> offsets in one arena (greedy best-fit by size).

Input: a graph whose intermediate values have static descs (after specialisation to concrete
input shapes). Graph inputs, outputs and constants are not placed in the arena: inputs and
outputs belong to the caller, constants to the weights section.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pycann.ge.ir import Graph, node_reads

ALIGN = 64  # bytes; cache-line alignment keeps SIMD loads aligned


@dataclass
class MemoryPlan:
    """``offsets[name] = (offset, nbytes)``; ``peak_bytes`` is the arena size."""

    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)
    peak_bytes: int = 0
    total_bytes: int = 0  # what the same tensors would need without reuse
    dynamic: list[str] = field(default_factory=list)  # values whose size is not static
    shared: dict[str, str] = field(default_factory=dict)  # output -> the input whose buffer it reuses

    def summary(self) -> str:
        saved = 1 - self.peak_bytes / self.total_bytes if self.total_bytes else 0.0
        text = (f"arena {self.peak_bytes / 2**20:.2f} MiB for {len(self.offsets)} tensors "
                f"(no reuse: {self.total_bytes / 2**20:.2f} MiB, {saved:.0%} saved)")
        if self.dynamic:  # their sizes (and so the real arena) are known only when a run fixes the shapes
            text += f"; {len(self.dynamic)} more values are sized at run time, per input shape"
        return text


def lifetimes(g: Graph) -> dict[str, tuple[int, int]]:
    """value -> (defining step, last reading step) for values produced by nodes."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for i, n in enumerate(g.nodes):
        for name in node_reads(n):
            last[name] = i
        for o in n.outputs:
            if o:
                first[o] = i
    return {v: (s, last.get(v, s)) for v, s in first.items()}


def alias_extended(g: Graph, fresh: set[str] | None = None) -> dict[str, tuple[int, int]]:
    """Lifetimes extended through possible aliases.

    A kernel may return a view of its input (Reshape, Transpose, Slice, ...), so a buffer
    must stay reserved while any value that may alias it is alive. Values in ``fresh`` are
    known to own new memory (outputs written into the arena); every other node's outputs are
    assumed to alias all of its inputs, and all outer names its If/Loop/Scan bodies read (a body
    may return one of them unchanged).
    """
    life = lifetimes(g)
    roots: dict[str, set[str]] = {}
    for n in g.nodes:
        if fresh is not None and all(o in fresh for o in n.outputs if o):
            for o in n.outputs:
                if o:
                    roots[o] = {o}
            continue
        # node_reads: an If/Loop body may hand an outer value it reads by name straight out
        reads = node_reads(n)
        inherited = set().union(*(roots.get(i, set()) for i in reads)) if reads else set()
        for o in n.outputs:
            if o:
                roots[o] = inherited | {o}
    end = {v: e for v, (_, e) in life.items()}
    outputs = set(g.outputs)
    last_step = len(g.nodes)
    for v, rs in roots.items():
        e = last_step if v in outputs else end.get(v, 0)
        for r in rs:
            if r in end and e > end[r]:
                end[r] = e
    return {v: (s, end[v]) for v, (s, _) in life.items()}


def _share_groups(spans: dict[str, tuple[int, int]], sizes: dict[str, int],
                  share: Mapping[str, str]) -> dict[str, str]:
    """Which requested ``output -> input`` pairs may share one buffer: the input is placed, has
    the output's size and its last use (through aliases) is the step that defines the output
    (the in-place kernel's own read). Returns output -> group root (the first buffer of a chain)."""
    parent: dict[str, str] = {}
    taken: set[str] = set()
    for out, inp in share.items():
        if out not in sizes or inp not in sizes or sizes[out] != sizes[inp] or out == inp or inp in taken:
            continue
        if spans[inp][1] != spans[out][0]:
            continue  # the input is read again later (or a view of it lives on)
        parent[out] = inp
        taken.add(inp)
    root: dict[str, str] = {}
    for out in parent:
        r = parent[out]
        while r in parent:  # a chain: conv3 over a residual that is itself an in-place output
            r = parent[r]
        root[out] = r
    return root


def plan_memory(g: Graph, only: set[str] | None = None, share: Mapping[str, str] | None = None) -> MemoryPlan:
    """Assign arena offsets so that values with overlapping lifetimes never overlap in memory.

    ``only``: place just these values (those whose producers write into the arena); lifetimes
    are then extended through possible aliases (``alias_extended``). ``share``: output -> input
    pairs whose kernel can compute in place (a FusedConv writing over its residual); each pair
    whose input dies at that step gets one buffer (``MemoryPlan.shared`` lists them), so the
    kernel neither reads nor write-allocates a second tensor.
    """
    plan = MemoryPlan()
    outputs = set(g.outputs)
    spans = alias_extended(g, only) if only is not None else lifetimes(g)
    sizes: dict[str, int] = {}
    for v in spans:
        if v in outputs or v in g.initializers or (only is not None and v not in only):
            continue
        d = g.descs.get(v)
        nb = d.nbytes() if d is not None else None
        if nb is None:
            plan.dynamic.append(v)
            continue
        sizes[v] = (nb + ALIGN - 1) // ALIGN * ALIGN
    root = _share_groups(spans, sizes, share or {})
    groups: dict[str, list[str]] = {}
    for v in sizes:
        groups.setdefault(root.get(v, v), []).append(v)
    items = []
    for r, members in groups.items():
        s = min(spans[v][0] for v in members)
        e = max(spans[v][1] for v in members)
        items.append((sizes[r], s, e, r))
    items.sort(key=lambda t: (-t[0], t[1]))
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, start, end)
    for size, s, e, r in items:
        busy = sorted((o, o + sz) for o, sz, ps, pe in placed if not (pe < s or e < ps))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((offset, size, s, e))
        for v in groups[r]:
            plan.offsets[v] = (offset, size)
            plan.total_bytes += size
        plan.peak_bytes = max(plan.peak_bytes, offset + size)
    plan.shared = {out: share[out] for out in root} if share else {}
    return plan
