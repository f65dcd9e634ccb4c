"""ChannelShuffleFusion: ``[Concat ->] Reshape -> Transpose -> Reshape [-> Slice/Split]`` over the
channels becomes one ``pycann.ChannelShuffle`` (ops/channel_shuffle.py).

Pattern (torchvision's ``channel_shuffle`` as the TorchScript and dynamo exporters write it, and
ShuffleNet v2's ``x.chunk(2, dim=1)`` of the next unit as two Slices or one Split):
  R1 = Reshape(X, [N, g, C/g, H, W]) with X rank 4 of static shape (N, C, H, W);
  T = Transpose(R1, perm=[0, 2, 1, 3, 4]); R2 = Reshape(T, [N, C, H, W]) (R2's shape equals X's).
Absorbed when they only feed the shuffle: the Concat(axis=1) producing X (its inputs become the
ChannelShuffle's), and the readers of R2 when they are all channel Slices (constant bounds, step 1)
or one channel Split that tile [0, C) exactly (they become its outputs, in channel order).
Checks: R1 and T have one reader each and are not graph outputs; R2, when its readers are absorbed,
is not a graph output. Each check that fails is a missed fusion with its reason (atc --log=info).
"""

from __future__ import annotations

from pycann.ge.compile.passes.base import PassContext, PassResult
from pycann.ge.compile.passes.pattern import GraphIndex, Rewrites, is_op
from pycann.ge.ir import Graph, Node
from pycann.ops.channel_shuffle import DOMAIN

name = "ChannelShuffleFusion"


def _channel_range(ix: GraphIndex, n: Node, c: int) -> tuple[int, int] | None:
    """[start, end) of a Slice of axis 1 only with step 1 and constant bounds, else None."""
    from pycann.ops.indexing import _slice_spec

    if "starts" in n.attrs:  # Slice-1 as given (the importer moves these attributes to inputs)
        starts, ends, axes, steps = n.attrs.get("starts"), n.attrs.get("ends"), n.attrs.get("axes"), None
    else:
        consts = [ix.const(v) if v else None for v in n.inputs[1:5]]
        if any(consts[i] is None for i in (0, 1)) or any(v and ix.const(v) is None for v in n.inputs[3:5]):
            return None
        starts, ends = consts[0], consts[1]
        axes = consts[2] if len(consts) > 2 else None
        steps = consts[3] if len(consts) > 3 else None
    if starts is None or ends is None:
        return None
    shape = ix.static_shape(n.inputs[0])
    if shape is None:
        return None
    try:
        spec = _slice_spec(shape, [int(v) for v in starts], [int(v) for v in ends],
                           None if axes is None else [int(v) for v in axes],
                           None if steps is None else [int(v) for v in steps])
    except (ValueError, TypeError):
        return None
    spec = [s for s in spec if not (s[1] == 0 and s[2] == shape[s[0]] and s[3] == 1)]  # drop whole-axis entries
    if len(spec) != 1 or spec[0][0] != 1 or spec[0][3] != 1 or spec[0][2] <= spec[0][1] or spec[0][2] > c:
        return None
    return spec[0][1], spec[0][2]


def _split_sizes(ix: GraphIndex, n: Node, c: int) -> list[int] | None:
    """The channel sizes of a Split of axis 1 (constant ``split``, or equal parts), else None."""
    if int(n.attrs.get("axis", 0)) % 4 != 1:
        return None
    k = len(n.outputs)
    if len(n.inputs) > 1 and n.inputs[1]:
        s = ix.const(n.inputs[1])
        sizes = None if s is None else [int(v) for v in s.reshape(-1)]
    elif n.attrs.get("split"):
        sizes = [int(v) for v in n.attrs["split"]]
    else:
        sizes = [c // k] * k if c % k == 0 else None
    return sizes if sizes is not None and len(sizes) == k and sum(sizes) == c and min(sizes) > 0 else None


def _readers(ix: GraphIndex, r2: Node, c: int) -> tuple[list[Node], list[str], list[int]] | str:
    """The Slice/Split readers of R2 to absorb: (nodes, outputs in channel order, sizes), or why not."""
    users = ix.consumers.get(r2.outputs[0], [])
    if r2.outputs[0] in ix.outputs or not users:
        return "the shuffled tensor is a graph output or unused"
    if len(users) == 1 and is_op(users[0], "Split") and users[0].inputs[0] == r2.outputs[0]:
        sizes = _split_sizes(ix, users[0], c)
        if sizes is None:
            return "its Split is not a constant split of the channels"
        return [users[0]], list(users[0].outputs), sizes
    pieces = []
    for u in users:
        rng = _channel_range(ix, u, c) if is_op(u, "Slice") and u.inputs[0] == r2.outputs[0] else None
        if rng is None:
            return f"{u.op_type} {u.name or u.outputs[0]} reads the shuffled tensor (not a channel slice)"
        pieces.append((rng, u))
    pieces.sort(key=lambda p: p[0])
    at = 0
    for (a, b), _ in pieces:
        if a != at:
            return "its channel slices do not tile the channels exactly"
        at = b
    if at != c:
        return "its channel slices do not cover every channel"
    return [u for _, u in pieces], [u.outputs[0] for _, u in pieces], [b - a for (a, b), _ in pieces]


def fuse(g: Graph) -> tuple[int, list[str]]:
    ix = GraphIndex(g)
    rw = Rewrites(g)
    for r1 in list(g.nodes):
        if rw.taken(r1) or not is_op(r1, "Reshape"):
            continue
        xs, s1 = ix.static_shape(r1.inputs[0]), ix.static_shape(r1.outputs[0])
        if xs is None or s1 is None or len(xs) != 4 or len(s1) != 5:
            continue
        n, c, h, w = xs
        grp = s1[1]
        if s1 != (n, grp, c // max(grp, 1), h, w) or grp < 2 or c % grp:
            continue
        t = ix.sole_consumer(r1.outputs[0])
        if not is_op(t, "Transpose") or t is None or rw.taken(t) or list(t.attrs.get("perm", [])) != [0, 2, 1, 3, 4]:
            continue
        r2 = ix.sole_consumer(t.outputs[0])
        if not is_op(r2, "Reshape") or r2 is None or rw.taken(r2) or ix.static_shape(r2.outputs[0]) != xs:
            rw.missed.append(f"{r1.name or r1.outputs[0]}: the transposed groups are not reshaped back to {list(xs)}")
            continue
        inputs, absorbed = [r1.inputs[0]], [r1, t, r2]
        cat = ix.producers.get(r1.inputs[0])
        if is_op(cat, "Concat") and cat is not None and not rw.taken(cat) and int(cat.attrs.get("axis", 0)) % 4 == 1 \
                and ix.sole_consumer(cat.outputs[0]) is r1 and all(cat.inputs):
            inputs, absorbed = list(cat.inputs), [cat, *absorbed]
        readers = _readers(ix, r2, c)
        if isinstance(readers, str):
            if r2.outputs[0] not in ix.outputs and not ix.consumers.get(r2.outputs[0]):
                continue
            outputs, split = [r2.outputs[0]], list[int]()
        else:
            nodes, outputs, split = readers
            if any(rw.taken(u) for u in nodes):
                continue
            absorbed += nodes
        fused = Node("ChannelShuffle", inputs, outputs, {"group": grp, "split": split},
                     name=f"{r1.name or r1.outputs[0]}_shuffle", domain=DOMAIN, opset=1)
        fused.origin = [o for m in absorbed for o in m.origin]
        # placed where the first absorbed node was: the slices' readers come after it
        rw.replace([absorbed[0]], [fused])
        rw.removed.update(id(m) for m in absorbed[1:])
    rw.commit()
    return rw.applied, rw.missed


def run(graph: Graph, ctx: PassContext) -> PassResult:
    n, missed = fuse(graph)
    return PassResult(graph, n > 0, f"{n} channel shuffles fused", missed)
