"""Which values the executor's arena holds, and which outputs may reuse an input's buffer.

``arena_candidates``: values whose producer can write into a given buffer (an ``out_kernel`` and
static shapes), never graph outputs. ``inplace_candidates``: output -> input pairs, from the
``INPLACE`` table, that ``memory.plan_memory(share=...)`` may give one buffer. Both read the op
registry and the providers' ``arena_ok``; the plan itself is ``memory.plan_memory``.
"""

from __future__ import annotations

from pycann.ge.ir import Graph
from pycann.kernels import algorithm
from pycann.kernels.providers import arena_ok
from pycann.kernels.table import into_kernel
from pycann.ops.registry import lookup

# Ops whose prepared kernel can write output ``o`` over input ``i`` (``kernel.inplace``):
# (domain, op_type) -> (o, i). FusedConv's residual: oneDNN's "sum" post-op accumulates into the
# destination, so the residual is read where the result is written (one tensor less of traffic).
# SqueezeExcite's X: read whole for the channel means, then gated element by element into the
# output (its writes land in cache lines the block's conv just wrote, not in a cold buffer).
INPLACE: dict[tuple[str, str], tuple[int, int]] = {("pycann", "FusedConv"): (0, 3), ("pycann", "SqueezeExcite"): (0, 0)}


def inplace_candidates(g: Graph) -> dict[str, str]:
    """Output -> input pairs that ``plan_memory`` may give one buffer (``INPLACE``); the planner
    keeps only those whose input dies at that node, and the plan only binds them to a kernel
    that says ``inplace``. An input that the node also reads through another slot never shares."""
    out: dict[str, str] = {}
    for n in g.nodes:
        pair = INPLACE.get((n.domain, n.op_type))
        if pair is None:
            continue
        o, i = pair
        if len(n.outputs) > o and len(n.inputs) > i and n.outputs[o] and n.inputs[i] \
                and n.inputs.count(n.inputs[i]) == 1:
            out[n.outputs[o]] = n.inputs[i]
    return out


def arena_candidates(g: Graph) -> set[str]:
    """Values whose producer can write into the arena: an ``out_kernel`` and static descs; never
    a graph output."""
    out: set[str] = set()
    for n in g.nodes:
        op = lookup(n.op_type, n.domain, n.opset)
        if into_kernel(op) is None or op.scoped or not arena_ok(algorithm.of(n.attrs)):
            continue
        descs = [g.descs.get(o) for o in n.outputs if o]
        if descs and all(d is not None and d.is_static for d in descs):
            out.update(o for o in n.outputs if o)
    # a graph output written into the arena would have to be copied out after every run (the
    # next run reuses that memory): its producer allocates it instead (GPT-2's 25 MB logits: 3 ms)
    return out - set(g.outputs)
