"""``torch.nn.parallel.comm`` (what ``nn.DataParallel`` scatters, replicates and gathers with) for
the npu device.

PyTorch implements ``comm.scatter`` / ``gather`` / ``broadcast`` / ``broadcast_coalesced`` with C++
functions (``torch._C._scatter``, ...) that exist in CUDA builds only and move data between CUDA
devices: ``nn.DataParallel`` on the npu raised "module 'torch._C' has no attribute '_scatter'".
npu memory is host memory, so these are plain copies with ``Tensor.to``. ``install()`` wraps the
four ``comm`` functions; tensors of other devices (a CUDA build's) still reach PyTorch's own.
``reduce_add`` / ``reduce_add_coalesced`` (DataParallel's backward) are Python in PyTorch already
and use ``Tensor.to`` / ``add_`` when NCCL is absent.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._utils import _get_device_index

_NPU = "npu"


def _ours(tensors: Sequence[torch.Tensor], name: str) -> bool:
    """True when PyTorch's C++ function cannot serve: it is missing (a CPU build), or an input is
    an npu tensor (a CUDA build's C++ moves CUDA tensors only)."""
    return not hasattr(torch._C, name) or any(t.device.type == _NPU for t in tensors)


def _npu(index: int) -> torch.device:
    return torch.device(_NPU, index)


def _scatter(orig: Callable[..., Any]) -> Callable[..., Any]:
    def scatter(tensor: torch.Tensor, devices: Any = None, chunk_sizes: Any = None, dim: int = 0,
                streams: Any = None, *, out: Any = None) -> Any:
        if out is not None or devices is None or not _ours([tensor], "_scatter"):
            return orig(tensor, devices, chunk_sizes, dim, streams, out=out)
        idx = [_get_device_index(d) for d in devices]
        if chunk_sizes is not None:
            if len(chunk_sizes) != len(idx) or sum(chunk_sizes) != tensor.size(dim):
                raise RuntimeError(f"scatter: chunk_sizes {list(chunk_sizes)} must have one size per device "
                                   f"({len(idx)}) and sum to the size of dim {dim} ({tensor.size(dim)})")
            chunks = tensor.split(list(chunk_sizes), dim)
        else:
            chunks = tensor.chunk(len(idx), dim)
        # (as the C++ one: a chunk already on its device is a view, not a copy)
        return tuple(c.to(_npu(i)) for c, i in zip(chunks, idx))

    return scatter


def _gather(orig: Callable[..., Any]) -> Callable[..., Any]:
    def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None, *, out: Any = None) -> Any:
        tensors = list(tensors)
        if out is not None or not _ours(tensors, "_gather"):
            return orig(tensors, dim, destination, out=out)
        index = _get_device_index(destination, allow_cpu=True, optional=True)
        dev = torch.device("cpu") if index == -1 else _npu(index)
        return torch.cat([t.to(dev) for t in tensors], dim)

    return gather


def _broadcast(orig: Callable[..., Any]) -> Callable[..., Any]:
    def broadcast(tensor: torch.Tensor, devices: Any = None, *, out: Any = None) -> Any:
        if out is not None or devices is None or not _ours([tensor], "_broadcast"):
            return orig(tensor, devices, out=out)
        return tuple(tensor.to(_npu(_get_device_index(d)), copy=True) for d in devices)

    return broadcast


def _broadcast_coalesced(orig: Callable[..., Any]) -> Callable[..., Any]:
    def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Any, buffer_size: int = 10485760) -> Any:
        tensors = list(tensors)
        if not _ours(tensors, "_broadcast_coalesced"):
            return orig(tensors, devices, buffer_size)
        idx = [_get_device_index(d) for d in devices]
        for t in tensors:
            if t.device != _npu(idx[0]):
                raise RuntimeError(f"broadcast_coalesced: all tensors must be on devices[0] (npu:{idx[0]}), "
                                   f"got one on {t.device}")
        # as PyTorch's: the first device's entry is the inputs themselves, the others are copies
        return [tensors] + [[t.to(_npu(i), copy=True) for t in tensors] for i in idx[1:]]

    return broadcast_coalesced


_installed: list[bool] = []


def install() -> None:
    """Wrap ``torch.nn.parallel.comm``'s scatter, gather, broadcast and broadcast_coalesced (once)."""
    if _installed:
        return
    comm: Any = importlib.import_module("torch.nn.parallel.comm")
    comm.scatter = _scatter(comm.scatter)
    comm.gather = _gather(comm.gather)
    comm.broadcast = _broadcast(comm.broadcast)
    comm.broadcast_coalesced = _broadcast_coalesced(comm.broadcast_coalesced)
    _installed.append(True)
