"""LayoutSelection: choose NHWC (channels-last) or NCHW per conv chain, after KernelSelection.

A *chain* is a connected set of rank-4 tensors produced by oneDNN convolutions
(``Algorithm.layout`` NHWC: ``onednn:conv_nhwc``, ``torch:conv2d_nhwc``, ...) and by the layout-agnostic
ops whose first input they feed (elementwise, activations, pooling, Concat, nearest Resize:
``AGNOSTIC``, ``MODAL``). Inside an NHWC chain no tensor is ever
converted: each conv reads the previous one's channels-last output directly and the
elementwise/pooling ops run on channels-last arrays (their arena buffers are laid out NHWC).
Where an NHWC tensor leaves the chain (a Reshape, Concat, Resize, a graph output, ...) the
consumer reads a strided array, which costs one transposing copy: a *boundary*.

Cost model: computing a chain in NCHW costs the oneDNN call two layout reorders per conv
(NCHW in and out of its blocked/channels-last kernels); NHWC costs one conversion per chain
entry (an NCHW tensor read by one of its convs) plus one per boundary. A chain is NHWC when
``entries + boundaries <= 2 * convs``; otherwise its convs go back to the NCHW algorithm
(``torch:conv2d_packed`` / ``torch:conv2d``). The ``onednn`` provider has no NCHW algorithm
(its results are always channels-last), so its chains stay NHWC. Depthwise convs gain most: oneDNN's NCHW
depthwise kernels run ~10x slower than its channels-last ones on AVX-512 (bench/RESULTS.md).

The choice is recorded in the .om as the node attribute ``_layout = "NHWC"`` on every node
whose rank-4 outputs are channels-last; the executor lays out their arena buffers so, and the
values (logical NCHW shapes) are the same whichever layout runs. Nodes get new attrs dicts
(never mutated in place). The pass name is usable in ``--fusion_switch_file``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.ir import Graph, Node
from pycann.kernels import algorithm
from pycann.kernels.algorithm import NCHW_TWIN, TORCH_CONV2D, TORCH_CONV2D_PACKED, Algorithm, Layout

name = "LayoutSelection"

# producers: (domain, op type) -> the op family whose channels-last algorithms (``Algorithm.layout``)
# can start a chain
CONV_FAMILY = {("", "Conv"): "Conv", ("pycann", "FusedConv"): "Conv", ("", "ConvTranspose"): "ConvTranspose",
               ("pycann", "FusedConvTranspose"): "ConvTranspose"}
CONV_OPS = set(CONV_FAMILY)
# Ops whose kernels compute the same values on a channels-last array and whose results keep the
# input's layout (numpy ufuncs keep it; pooling allocates like its input: ops/nn/spatial.py).
AGNOSTIC = {
    ("", op) for op in (
        "Relu", "Add", "Sub", "Mul", "Div", "Sigmoid", "HardSigmoid", "HardSwish", "Clip", "LeakyRelu",
        "Tanh", "Elu", "Selu", "Softplus", "Abs", "Neg", "Exp", "Sqrt", "Identity", "MaxPool", "AveragePool",
        "Concat",  # keeps channels-last when all its inputs are (kernels/bind.py)
        # astype keeps the memory order: the bf16 modes' Casts around float32 islands (a DB neck's
        # Resize + Add between bf16 convs) stay inside the chain instead of ending it in NCHW copies
        "Cast",
    )
} | {("pycann", "ElementwiseChain"), ("pycann", "ChannelShuffle"), ("pycann", "SqueezeExcite"),
     ("pycann", "SqueezeExciteProject")}
# (ChannelShuffle: ops/channel_shuffle.py; SqueezeExcite[Project]: ops/squeeze_excite.py, laid out like its X)
# Agnostic only in some modes: Resize keeps the layout for nearest (pure gathers; ops/nn/resize.py)
MODAL = {("", "Resize"): ("mode", "nearest")}


@dataclass
class Chain:
    """One connected group of channels-last candidates."""

    nodes: list[Node] = field(default_factory=list)
    entries: int = 0
    boundaries: list[str] = field(default_factory=list)

    @property
    def conv_nodes(self) -> list[Node]:
        return [n for n in self.nodes if (n.domain, n.op_type) in CONV_OPS]

    @property
    def convs(self) -> int:
        return len(self.conv_nodes)


def _rank4(g: Graph, value: str) -> bool:
    d = g.descs.get(value)
    return d is not None and d.shape is not None and len(d.shape) == 4


def _reads_nhwc(n: Node, nhwc_values: set[str]) -> bool:
    """Concat keeps channels-last only when every input is; the others follow their first input
    (numpy ufuncs lay the result out like their operands; Resize/pooling like their input)."""
    ins = [i for i in n.inputs if i]
    if n.op_type in ("Concat", "ChannelShuffle"):
        return bool(ins) and all(i in nhwc_values for i in ins)
    return n.inputs[0] in nhwc_values


def _candidates(g: Graph) -> dict[int, Node]:
    """Nodes that would produce channels-last outputs if their chain is NHWC (by id)."""
    cand: dict[int, Node] = {}
    nhwc_values: set[str] = set()
    for n in g.nodes:  # topological order
        key = (n.domain, n.op_type)
        modal = MODAL.get(key)
        agnostic = key in AGNOSTIC or (modal is not None and _text(n.attrs.get(modal[0], modal[1])) == modal[1])
        algo = algorithm.of(n.attrs)
        if key in CONV_OPS and algo is not None and algo.layout is Layout.NHWC and algo.op_type == CONV_FAMILY[key] \
                and n.outputs and _rank4(g, n.outputs[0]):
            cand[id(n)] = n
        elif agnostic and n.inputs and n.outputs and all(_rank4(g, o) for o in n.outputs if o) \
                and _reads_nhwc(n, nhwc_values):
            cand[id(n)] = n
        else:
            continue
        nhwc_values.update(o for o in n.outputs if o)
    return cand


def chains(g: Graph) -> list[Chain]:
    """The chains of ``g``'s candidates: union of producer/consumer links between candidates."""
    cand = _candidates(g)
    parent = {k: k for k in cand}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    producers = g.producers()
    for n in cand.values():
        for i in n.inputs:
            p = producers.get(i) if i else None
            if p is not None and id(p) in cand:
                parent[find(id(n))] = find(id(p))
    groups: dict[int, Chain] = {}
    for k, n in cand.items():
        groups.setdefault(find(k), Chain()).nodes.append(n)
    consumers = g.consumers()
    outputs = set(g.outputs)
    for c in groups.values():
        members = {id(n) for n in c.nodes}
        for n in c.nodes:
            if (n.domain, n.op_type) in CONV_OPS and n.inputs and n.inputs[0]:
                p = producers.get(n.inputs[0])
                c.entries += p is None or id(p) not in members
            for o in n.outputs:
                if not o:
                    continue
                if o in outputs:
                    c.boundaries.append(f"graph output {o}")
                for u in consumers.get(o, []):
                    if id(u) not in members:
                        c.boundaries.append(f"{u.op_type} {u.name or u.outputs[0]}")
    return list(groups.values())


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nchw_algo(n: Node) -> Algorithm | None:
    """The same provider's NCHW algorithm, or None (the onednn provider writes channels-last only)."""
    twin = NCHW_TWIN.get(algorithm.of(n.attrs))  # type: ignore[arg-type]
    if twin == TORCH_CONV2D_PACKED and int(n.attrs.get("group", 1) or 1) != 1:
        return TORCH_CONV2D  # the packed one takes group 1 only
    return twin


def run(graph: Graph, ctx: PassContext) -> PassResult:
    found = chains(graph)
    changed = False
    nhwc: list[Chain] = []
    for c in found:
        convs = c.conv_nodes
        if c.entries + len(c.boundaries) <= 2 * c.convs or any(_nchw_algo(n) is None for n in convs):
            nhwc.append(c)
            for n in c.nodes:
                if n.attrs.get("_layout") != "NHWC":
                    n.attrs = {**n.attrs, "_layout": "NHWC"}
                    changed = True
        else:
            for n in convs:
                n.attrs = {k: v for k, v in n.attrs.items() if k != "_layout"} | {"_algo": _nchw_algo(n)}
                changed = True
    if not found:
        return PassResult(graph, False, "no oneDNN conv chains (all NCHW)")
    cross = sum(len(c.boundaries) for c in nhwc)
    report = (f"{len(nhwc)}/{len(found)} conv chains NHWC ({sum(c.convs for c in nhwc)} convs, "
              f"{sum(len(c.nodes) for c in nhwc)} nodes); {sum(c.entries for c in nhwc)} entries and {cross} "
              f"boundary reorders")
    missed = [f"chain of {c.convs} convs stays NCHW: {c.entries} entries + {len(c.boundaries)} boundaries > "
              f"2 x {c.convs} convs" for c in found if all(c is not k for k in nhwc)]
    if ctx.debug:
        for c in nhwc:
            ctx.log(f"[{name}] chain of {c.convs} convs: boundaries " + ", ".join(c.boundaries[:8]))
    return PassResult(graph, changed, report, missed)
