"""GE's ChannelShuffle: ShuffleNet's Concat -> channel shuffle -> split as one data movement.

``pycann.ChannelShuffle(X_1, ..., X_k; group=g, split=[c_1, ..., c_m]) -> Y_1, ..., Y_m``:
the inputs (rank 4, N x C_i x H x W) are concatenated along the channels (C = sum C_i), the
channels shuffled as ``Reshape(N, g, C/g, H, W) -> Transpose(0, 2, 1, 3, 4) -> Reshape(N, C, H, W)``
(shuffled channel ``j * g + i`` is concatenated channel ``i * C/g + j``; Zhang et al., ShuffleNet,
2018; torchvision's ``channel_shuffle``), and the result split along the channels into outputs of
``split`` sizes (empty: one output of all C). GE's ChannelShuffleFusion (ge/compile/passes/
fuse_channel_shuffle.py) forms it from those ONNX nodes.

Why: exported, a ShuffleNet v2 unit copies its tensor three times between convolutions (the
Concat, the transposing Reshape, and a strided channel slice that the next oneDNN convolution
must make dense again). This kernel writes each output once, straight from the inputs: for each
input and group, one strided copy of a channel range into every ``g``-th channel of an output.
Those copies take any strides, so the same code serves NCHW and channels-last arrays, and each
output is written in the executor's arena view (laid out as GE chose) or, outside a plan, in the
layout of the first input (channels-last in, channels-last out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

DOMAIN = "pycann"


def _plan(sizes: Sequence[int], group: int, split: Sequence[int]) -> list[list[tuple[int, int, int, int]]]:
    """Per output, the copies that fill it: (input index, its first channel, count, first output
    channel); each copy writes every ``group``-th output channel from there."""
    total = sum(sizes)
    per = total // group
    starts = np.cumsum([0, *sizes])
    bounds = np.cumsum([0, *split])
    plan: list[list[tuple[int, int, int, int]]] = []
    for o in range(len(split)):
        lo, hi = int(bounds[o]), int(bounds[o + 1])
        copies = []
        for i in range(group):
            # output channels k = j * group + i in [lo, hi): j in [j0, j1)
            j0, j1 = -(-(lo - i) // group), -(-(hi - i) // group)
            j0, j1 = max(j0, 0), min(j1, per)
            src0, src1 = i * per + j0, i * per + j1  # concatenated channels feeding them
            for x in range(len(sizes)):
                a, b = max(src0, int(starts[x])), min(src1, int(starts[x + 1]))
                if a < b:
                    j = a - i * per
                    copies.append((x, a - int(starts[x]), b - a, j * group + i - lo))
        plan.append(copies)
    return plan


def _check(sizes: Sequence[int], group: int, split: Sequence[int], where: str) -> list[int]:
    total = sum(sizes)
    if group < 1 or total % group:
        raise ValueError(f"{where}: group {group} does not divide the {total} concatenated channels "
                         f"(inputs of {list(sizes)} channels)")
    parts = list(split) or [total]
    if any(p < 0 for p in parts) or sum(parts) != total:
        raise ValueError(f"{where}: split {list(split)} does not add up to the {total} channels")
    return parts


def _layout_like(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An empty array of ``shape``, channels-last when ``x`` is (a GE NHWC chain's array)."""
    if x.ndim == 4 and x.strides[1] == x.itemsize and x.shape[1] > 1 and x.strides[3] > x.itemsize:
        n, c, h, w = shape
        return np.empty((n, h, w, c), x.dtype).transpose(0, 3, 1, 2)
    return np.empty(shape, x.dtype)


def shuffle_into(xs: Sequence[np.ndarray], group: int, split: Sequence[int], outs: Sequence[np.ndarray]) -> None:
    """Write ChannelShuffle's outputs into ``outs`` (any strides, shapes as inferred; an input of
    another dtype than ``outs`` is converted, as Concat's arena kernel does)."""
    sizes = [int(x.shape[1]) for x in xs]
    for out, copies in zip(outs, _plan(sizes, group, list(split) or [sum(sizes)])):
        for x, c0, n, k0 in copies:
            np.copyto(out[:, k0:k0 + (n - 1) * group + 1:group], xs[x][:, c0:c0 + n], casting="unsafe")


def _inputs(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> tuple[list[np.ndarray], int, list[int]]:
    xs = [np.asarray(x) for x in inputs if x is not None]
    # Inputs of several dtypes (GE's precision pass casts only the inputs a --customize_dtypes entry
    # lists, e.g. one written for an absorbed Reshape) are computed in the first one's, as inferred.
    if not xs or any(x.ndim != 4 for x in xs) or len({(x.shape[0],) + x.shape[2:] for x in xs}) != 1:
        raise ValueError(f"ChannelShuffle: inputs {[list(x.shape) for x in xs]} are not rank-4 tensors "
                         "equal in every dim but the channels")
    group = int(attrs["group"])
    parts = _check([int(x.shape[1]) for x in xs], group, [int(s) for s in attrs.get("split") or []], "ChannelShuffle")
    return xs, group, parts


def _k_shuffle(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    xs, group, parts = _inputs(inputs, attrs)
    n, _, h, w = xs[0].shape
    outs = [_layout_like(xs[0], (n, p, h, w)) for p in parts]
    shuffle_into(xs, group, parts, outs)
    return outs


def _out_shuffle(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    xs, group, parts = _inputs(inputs, attrs)
    shuffle_into(xs, group, parts, outs)


def _infer(ctx: InferContext) -> list[TensorDesc]:
    ds = [d for d in ctx.inputs if d is not None]
    if not ds:
        raise ctx.fail("needs at least one input")
    if any(d.shape is None or len(d.shape) != 4 for d in ds):
        raise ctx.fail(f"inputs {[str(d) for d in ds]} must be rank 4")
    chans = [d.shape[1] for d in ds]  # type: ignore[index]
    split = [int(s) for s in ctx.attrs.get("split") or []]
    n_out = max(len(split), 1)
    if any(not isinstance(c, int) for c in chans):
        return [TensorDesc(ds[0].dtype, None) for _ in range(n_out)]
    try:
        parts = _check(chans, int(ctx.attrs["group"]), split, "ChannelShuffle")  # type: ignore[arg-type]
    except ValueError as e:
        raise ctx.fail(str(e).split(": ", 1)[1]) from None
    rest = ds[0].shape[2:]  # type: ignore[index]
    return [TensorDesc(ds[0].dtype, (ds[0].shape[0], p, *rest)) for p in parts]  # type: ignore[index]


OPS: list[OpDef] = [
    OpDef("ChannelShuffle", _infer, _k_shuffle, domain=DOMAIN, attrs={"group": REQUIRED, "split": []},
          out_kernel=_out_shuffle),
]
