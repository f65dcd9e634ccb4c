"""KernelSelection: pick the kernel provider algorithm of every Conv, ConvTranspose, MatMul and
Gemm node (and FusedConv) whose input shapes are static, and record it in the node attribute
``_algo`` (a ``pycann.kernels.algorithm.Algorithm``), which the .om keeps as its key
(``"torch:conv2d"``, ``"numpy:depthwise"``, ...).

Mode: ``ctx.options["kernel_selection"]``, else the environment variable
``PYCANN_KERNEL_SELECTION``: ``static`` (default: ``pycann.kernels.providers.STATIC_TABLE``),
``measure`` (time every candidate once per distinct shape at compile time) or ``off``. In the
first two, a choice ``aoe --job_type=2`` stored in the knowledge bank for the node's spec on this
machine wins (``pycann.ge.compile.tuned``; docs/aoe.md).

Implementation mode (CANN's ``--op_select_implmode``, kept in ``graph.context``):
``high_performance`` (the default, as in CANN) lets Conv take algorithms that round differently
from the direct sum (``Algorithm.exact`` False: Winograd); ``high_precision`` /
``high_precision_for_all`` keep the exact ones, for the op types in ``--optypelist_for_implmode``
when given (else all).

One thread pool per graph: numpy's BLAS (OpenBLAS threads) and torch (OpenMP threads) spin
on the same cores after each call, so a model that alternates between them runs several
times slower than either alone (docs/kernels.md). When both would be used, the nodes of the
provider with fewer FLOPs move to the other provider where it supports them.

Nodes are never mutated in place: a chosen node gets a new ``attrs`` dict (run-time
specialisation shares attrs dicts with the compiled graph).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from pycann import config
from pycann.dtypes import to_numpy
from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.tuned import tuned_algorithm
from pycann.ge.ir import CompileContext, Graph, Node
from pycann.kernels.algorithm import FAMILIES, ONEDNN_CONV_WINOGRAD, Algorithm, Packing
from pycann.kernels.providers import (
    ConvSpec,
    Implementation,
    OpSpec,
    candidates,
    make_spec,
    onednn_bf16,
    select,
)
from pycann.ops.fused import post_affine

name = "KernelSelection"

# (domain, op type) -> the op family whose providers compute it
TARGETS = FAMILIES
MODES = ("static", "measure", "off")
Choice = tuple[Node, str, OpSpec, Implementation]


def _static_shape(g: Graph, value: str) -> tuple[tuple[int, ...], str] | None:
    """(shape, dtype name) of a value when fully known."""
    if value in g.initializers:
        arr = g.initializers[value]
        return tuple(arr.shape), arr.dtype.name
    d = g.descs.get(value)
    if d is None or d.shape is None or not all(isinstance(s, int) for s in d.shape):
        return None
    try:
        dtype = to_numpy(d.dtype).name
    except (KeyError, ValueError, TypeError):
        return None
    return tuple(int(s) for s in d.shape), dtype  # type: ignore[arg-type]


def _spec(g: Graph, n: Node, family: str) -> OpSpec | None:
    if len(n.inputs) < 2 or not n.inputs[0] or not n.inputs[1]:
        return None
    a, b = _static_shape(g, n.inputs[0]), _static_shape(g, n.inputs[1])
    if a is None or b is None or a[1] not in ("float32", "float64", "float16", "bfloat16"):
        return None
    try:
        return make_spec(family, [a[0], b[0]], n.attrs, a[1])
    except (ValueError, AssertionError, IndexError, TypeError):
        return None  # malformed attributes: the kernel reports them at run time


def approx_allowed(context: CompileContext, op_type: str) -> bool:
    """Whether ``op_type`` may take a non-exact algorithm under the graph's implmode options."""
    return context.approx_allowed(op_type)


def _plain_epilogue(n: Node) -> bool:
    """No residual (FusedConv input 3) and at most a plain ReLU after the conv: all the
    epilogue oneDNN's Winograd kernels take (``onednn_wino.takes_post_ops``), so a recorded
    ``onednn:conv_winograd`` is what runs. (They also need a constant weight to pack.)"""
    if len(n.inputs) > 3 and n.inputs[3]:
        return False
    act = n.attrs.get("activation")
    act = act.decode() if isinstance(act, bytes) else act
    return act in (None, "", "Relu") and post_affine(n.attrs) is None


@dataclass(frozen=True)
class NodeSpec:
    """One target node with static shapes: its kernel spec, constant weight and approx permission."""

    node: Node
    spec: OpSpec
    weight: np.ndarray | None
    approx: bool


def node_specs(g: Graph, skipped: Counter[str] | None = None, context: CompileContext | None = None) -> list[NodeSpec]:
    """Every Conv/ConvTranspose/MatMul/Gemm (and fused) node with static shapes, subgraphs
    included (aoe tunes these); nodes with unknown shapes are counted in ``skipped`` by op type.
    ``context``: the compile context that decides approximate algorithms (default the graph's)."""
    context = g.context if context is None else context
    out: list[NodeSpec] = []
    for n in g.nodes:
        for sub in n.subgraphs.values():
            out += node_specs(sub, skipped, context)
        family = TARGETS.get((n.domain, n.op_type))
        if family is None:
            continue
        spec = _spec(g, n, family)
        if spec is None:
            if skipped is not None:
                skipped[n.op_type] += 1
            continue
        weight = g.initializers.get(n.inputs[1])
        w = weight if isinstance(weight, np.ndarray) else None
        approx = context.approx_allowed(family) and w is not None and w.dtype == np.float32 and _plain_epilogue(n)
        out.append(NodeSpec(n, spec, w, approx))
    return out


def _collect(g: Graph, mode: str, out: list[Choice], skipped: Counter[str], banked: dict[int, Algorithm]) -> None:
    for ns in node_specs(g, skipped):
        spec, w = ns.spec, ns.weight
        # a choice tuned by aoe (knowledge bank, pycann/ge/compile/tuned.py) wins: it is not measured again
        tuned = tuned_algorithm(spec, ns.approx, g.context)
        if tuned is not None:
            banked[id(ns.node)] = tuned.algo
        algo = tuned or select(spec, mode, w, ns.approx)
        if tuned is None and _static_shape(g, ns.node.inputs[0]) is not None \
                and _static_shape(g, ns.node.inputs[0])[1] == _static_shape(g, ns.node.inputs[1])[1] == "bfloat16":  # type: ignore[index]
            # the bf16 precision modes' matrix ops: oneDNN's native bf16 kernels where the CPU has them
            algo = onednn_bf16.bf16_choice(spec, w is not None) or algo
        if algo.algo.packing is Packing.PACKED and (w is None or w.dtype.name != spec.dtype):
            # a prepacked weight is cached per weight array: only for constant, compute-dtype weights
            algo = next(a for a in candidates(spec, {algo.provider, "numpy"}) if a.algo.packing is not Packing.PACKED)
        out.append((ns.node, ns.node.op_type, spec, algo))


def one_pool(choices: list[Choice]) -> int:
    """Move nodes off the minority provider (by FLOPs) where the majority one supports them.

    Returns how many nodes moved.
    """
    flops: Counter[str] = Counter()
    for _, _, spec, algo in choices:
        flops[algo.provider] += spec.flops
    if len(flops) < 2:
        return 0
    major = max(flops, key=lambda p: flops[p])
    moved = 0
    for i, (n, op, spec, algo) in enumerate(choices):
        if algo.provider == major:
            continue
        alt = next((a for a in candidates(spec, {major}) if a.provider == major), None)  # (exact ones)
        if alt is not None:
            choices[i] = (n, op, spec, alt)
            moved += 1
    return moved


def select_graph(g: Graph, mode: str = "static", single_pool: bool = True,
                 bank: list[int] | None = None) -> tuple[list[Choice], Counter[str], int, int]:
    """Choose for every target node with static shapes and record ``_algo``.

    Returns (choices, skipped counts per op type, nodes moved by the one-pool rule, nodes
    whose ``_algo`` changed).
    """
    choices: list[Choice] = []
    skipped: Counter[str] = Counter()
    banked: dict[int, Algorithm] = {}
    _collect(g, mode, choices, skipped, banked)
    moved = one_pool(choices) if single_pool else 0
    if bank is not None:  # [banked choices found, of them compiled as banked] (atc --log=info says so)
        bank[:] = [len(banked), sum(banked.get(id(n)) == a.algo for n, _, _, a in choices)]
    changed = 0
    for n, _, _, algo in choices:
        if n.attrs.get("_algo") != algo.algo:
            n.attrs = {**n.attrs, "_algo": algo.algo}
            changed += 1
    return choices, skipped, moved, changed


def summarize(choices: list[Choice], skipped: Counter[str], moved: int = 0) -> str:
    """``Conv x53: torch:conv2d 50, numpy:depthwise 3; Gemm x1: numpy:gemm 1``."""
    by_op: dict[str, Counter[str]] = {}
    for _, op, _, algo in choices:
        by_op.setdefault(op, Counter())[algo.key] += 1
    parts = [
        f"{op} x{sum(c.values())}: " + ", ".join(f"{k} {v}" for k, v in c.most_common())
        for op, c in sorted(by_op.items())
    ]
    if skipped:
        parts.append("shapes unknown (chosen at run time): " + ", ".join(f"{k} {v}" for k, v in sorted(skipped.items())))
    if moved:
        parts.append(f"{moved} moved to the majority provider (one spinning thread pool per model)")
    return "; ".join(parts) or "no Conv/ConvTranspose/MatMul/Gemm nodes"


def run(graph: Graph, ctx: PassContext) -> PassResult:
    given = ctx.options.get("kernel_selection")
    mode = str(given).strip().lower() if given else (config.kernel_selection() or "static")
    if mode not in MODES:  # (a misspelt mode compiled with the static table, silently)
        raise config.ConfigError(f"kernel_selection option {given!r}: expected one of {', '.join(MODES)}")
    if mode == "off":
        return PassResult(graph, False, "off")
    bank: list[int] = []
    choices, skipped, moved, changed = select_graph(graph, mode, bank=bank)
    used = f"; knowledge bank: {bank[1]} of {bank[0]} banked choices compiled" if bank and bank[0] else ""
    return PassResult(graph, changed > 0, f"{summarize(choices, skipped, moved)} ({mode}{used}){_provider_note(choices)}{_winograd_note(graph, choices)}")


def _provider_note(choices: list[Choice]) -> str:
    """Which fast kernels were missing, and what to install (issue 23: the numpy path runs silently
    2-3x slower on convs when the oneDNN wheel is absent)."""
    from pycann.kernels.providers import available

    if not choices or available("onednn"):
        return ""
    from pycann import config

    allowed = config.providers_allowed()
    if allowed is not None and "onednn" not in allowed:
        return f"; numpy runs {len(choices)} nodes that have oneDNN kernels (PYCANN_PROVIDERS leaves oneDNN out)"
    import platform

    where = f"{platform.system()} {platform.machine()}"
    return (f"; oneDNN kernels missing for {len(choices)} nodes (numpy runs them): "
            f"pip install onednn-cpu-gomp==2023.2.0 (a wheel exists for Linux x86-64; this is {where})")


def _winograd_note(graph: Graph, choices: list[Choice]) -> str:
    """Why no conv took Winograd when some 3x3 conv could have: the implmode, or the missing library."""
    if any(algo.algo == ONEDNN_CONV_WINOGRAD for *_, algo in choices):
        return ""
    from pycann.kernels.providers import onednn_wino

    convs = [spec for _, op, spec, _ in choices if op in ("Conv", "FusedConv") and isinstance(spec, ConvSpec)
             and spec.n_spatial == 2 and onednn_wino.eligible(spec.x_shape, spec.w_shape, spec.group, spec.win)]
    if not convs:
        return ""
    if not graph.context.approx_allowed("Conv"):
        return f"; Winograd off for {len(convs)} 3x3 convs (op_select_implmode {graph.context.op_select_implmode})"
    if not onednn_wino.available():
        return (f"; Winograd unavailable for {len(convs)} 3x3 convs: oneDNN v2's libdnnl.so.2 not found "
                "(python scripts/fetch_onednn2.py)")
    return ""
