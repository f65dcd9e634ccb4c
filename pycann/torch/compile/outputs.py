"""What eager PyTorch would return from a graph, so a GE plan's results can be made to match.

A plan returns host arrays; eager returns each output on the device its op put it on, with the
strides its op chose. Dynamo records both per node (``node.meta["example_value"]``, a fake
tensor computed by the op's meta kernel; AOTAutograd's graphs: ``node.meta["val"]``), so the
backends read them at compile time and ``place`` each result on the recorded device with the
recorded strides. Before: a graph whose inputs were all CPU tensors but which moved them with
``.npu()`` returned CPU tensors, one that moved npu tensors to the CPU returned npu tensors, and
``(x * 2).t()`` or an elementwise op on a channels_last input came back contiguous.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from pycann.torch._alias import to_npu


class OutSpec(NamedTuple):
    """One graph output as eager gives it: its npu index (-1: the CPU), sizes, strides, dtype."""

    npu: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype


def output_values(gm: torch.fx.GraphModule, key: str = "example_value") -> list[Any] | None:
    """The recorded values of ``gm``'s outputs, flattened; None when the output is not a flat
    tuple/list (or a single value) or a value is missing."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    args = out.args[0]
    items = list(args) if isinstance(args, (tuple, list)) else [args]
    vals = []
    for a in items:
        if not isinstance(a, torch.fx.Node) or key not in a.meta:
            return None
        vals.append(a.meta[key])
    return vals


def spec(v: Any) -> OutSpec | None:
    """``v``'s device, sizes, strides and dtype; None for a non-tensor, a device other than the
    CPU and the npu, or symbolic sizes (AOTAutograd's graphs: a plan per concrete shape)."""
    if not isinstance(v, torch.Tensor) or v.device.type not in ("cpu", "npu") or v.layout != torch.strided:
        return None
    shape, stride = tuple(v.shape), tuple(v.stride())
    if not all(type(d) is int for d in shape + stride):  # symbolic: keep the plan's layout
        shape = stride = ()
    index = -1 if v.device.type == "cpu" else (v.device.index or 0)
    return OutSpec(index, shape, stride, v.dtype)


def host_layouts(host_gm: torch.fx.GraphModule, args: Sequence[Any]) -> list[Any] | None:
    """The outputs of ``host_gm`` (a graph whose npu devices were mapped to the CPU) run on fake
    CPU copies of ``args``: the sizes and strides torch's CPU kernels give. Why not the npu fakes
    Dynamo recorded: ATen's meta convolution propagates channels_last only for CPU/CUDA inputs, so
    an npu fake conv of a channels_last input is contiguous where eager (CPU, and the npu) gives
    channels_last. None when the fake run fails."""
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    from pycann.torch._alias import to_cpu

    def fake(a: Any) -> Any:
        if isinstance(a, FakeTensor):  # another mode's fake: a CPU one of its layout in this mode
            return torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device="cpu")
        return mode.from_tensor(a) if isinstance(a, torch.Tensor) else a

    # the npu tensors' CPU views made before the fake mode starts: inside it ``detach()`` gives
    # a FakeTensor, and a DLPack relabel of that reads its data pointer (PyTorch's "Accessing the
    # data pointer of FakeTensor is deprecated ... almost definitely a bug in your code" warning)
    hosts = [to_cpu(a.detach()) if isinstance(a, torch.Tensor) and a.device.type == "npu"
             and not isinstance(a, FakeTensor) else a for a in args]
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            outs = host_gm(*[fake(a) for a in hosts])
    except Exception:  # noqa: BLE001 - the recorded npu layouts then
        return None
    return list(outs) if isinstance(outs, (tuple, list)) else [outs]


def with_host_layouts(specs: list[OutSpec | None], host: list[Any] | None) -> list[OutSpec | None]:
    """``specs`` (devices and layouts recorded on the npu) with the CPU fake run's strides where
    it gives the same sizes."""
    if host is None or len(host) != len(specs):
        return specs
    out = []
    for sp, h in zip(specs, host):
        if sp is not None and isinstance(h, torch.Tensor) and sp.shape and tuple(h.shape) == sp.shape:
            stride = tuple(h.stride())
            if all(type(d) is int for d in stride):
                sp = sp._replace(stride=stride)
        out.append(sp)
    return out


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def _may_overlap(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """False when no two indices of ``shape`` reach one element through ``stride`` (each dim's
    stride, smallest first, passes the extent of the smaller ones); True when they may."""
    extent = 1
    for s, n in sorted((s, n) for n, s in zip(shape, stride) if n > 1):
        if s < extent:
            return True
        extent += s * (n - 1)
    return False


def _restride(t: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...]) -> torch.Tensor:
    """``t`` (a contiguous host tensor) laid out with ``stride``: broadcast dims (stride 0) as an
    expand of one slice, the rest copied into ``empty_strided``; as it is when the layout cannot
    be made (sizes differ, internal overlap other than broadcasting)."""
    if tuple(t.shape) != shape or len(stride) != len(shape) or t.numel() <= 1:
        return t
    if t.stride() == stride or stride == _contiguous_strides(shape):
        return t
    zero = [i for i, (n, s) in enumerate(zip(shape, stride)) if s == 0 and n > 1]
    base = t
    for i in zero:
        base = base.narrow(i, 0, 1)
    bshape = tuple(base.shape)
    bstride = tuple(1 if i in zero else s for i, s in enumerate(stride))
    if _may_overlap(bshape, bstride):
        return t
    out = torch.empty_strided(bshape, bstride, dtype=t.dtype)
    out.copy_(base)
    return out.expand(shape) if zero else out


def place(t: torch.Tensor, s: OutSpec | None, index: int) -> torch.Tensor:
    """A plan's host result ``t`` as eager returns it: with ``s``'s strides, on ``s``'s device
    (without ``s``: on ``npu:index``, or the CPU for ``index`` -1, as the plan's inputs were)."""
    if s is None:
        return to_npu(t, index) if index >= 0 else t
    if s.shape and s.stride:
        t = _restride(t, s.shape, s.stride)
    return to_npu(t, s.npu) if s.npu >= 0 else t
