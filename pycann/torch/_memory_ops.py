"""The npu device's memory kernels: allocation (``empty``, ``empty_strided``, the zero tensors of
autograd's formulas), copies between devices (``_to_copy``, ``_copy_from``) and ``resize_``, done
on the host memory npu tensors view (``_alias``), and the device index a call names. Registered by
``_dispatch`` (its ``_SPECIAL`` table); moved out of it unchanged (it was over 600 lines)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from pycann import config
from pycann.torch._alias import to_cpu, to_npu
from pycann.torch._aliasing import host_view

_CPU_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_CPU = torch.device("cpu")
_NPU = "npu"


def _is_npu(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == _NPU


def _to_copy(op: Any, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
    """``aten::_to_copy`` of an npu tensor: PyTorch's composite kernel would allocate pinned
    memory for a ``non_blocking`` copy to the cpu, which needs a C++ hook; the copy is
    synchronous here anyway (the npu computes on the host)."""
    dev = kwargs.get("device")
    target = torch.device(dev) if dev is not None else x.device
    kwargs["device"] = _CPU
    kwargs["non_blocking"] = False
    kwargs["pin_memory"] = None
    res = op._op(to_cpu(x), **kwargs)
    if target.type == _NPU:
        if res.data_ptr() == x.data_ptr():  # no copy was needed: still an npu tensor's memory
            res = res.clone()
        # "npu" without an index is the current device, as for CUDA (its _to_copy allocates under
        # a guard that resolves index -1 to the current device), not x's
        return to_npu(res, _index_of(target))
    return res


def _set_like(dst: torch.Tensor, src_cpu: torch.Tensor) -> None:
    """Make npu tensor ``dst`` take the memory, sizes and strides of CPU tensor ``src_cpu``."""
    index = dst.device.index or 0
    storage = to_npu(src_cpu, index).untyped_storage()
    torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
        _CPU_KEYS, dst, storage, src_cpu.storage_offset(), list(src_cpu.shape), list(src_cpu.stride()))


def _follow(orig: torch.Tensor, new: torch.Tensor) -> None:
    """npu tensor ``orig`` takes the sizes, strides and offset a kernel gave its CPU view ``new``.
    A view the kernel restrided within its own memory (an out= tensor shrunk: ``torch.sum(x, 0,
    out=zeros(2, 5))``) keeps ``orig``'s storage: adopting the view's memory as a new storage left
    the old one without an owner (the view's DLPack capsule holds ``orig``'s TensorImpl, not its
    storage), so it was freed and the result read freed memory. New memory (an out tensor grown
    from empty) is adopted."""
    storage = orig.untyped_storage()
    if new.untyped_storage().data_ptr() == storage.data_ptr():
        torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            _CPU_KEYS, orig, storage, new.storage_offset(), list(new.shape), list(new.stride()))
    else:
        _set_like(orig, new)


def _index_of(dev: torch.device) -> int:
    """The npu index ``dev`` names: its own, or the thread's current device (``torch.npu.set_device``)
    for a device without one (``"npu"``), as CUDA's device guard resolves ``"cuda"``; checked by
    ``_existing``."""
    if dev.index is not None:
        return _existing(dev.index)
    from pycann.torch.npu import current_device

    return current_device()


def _existing(index: int) -> int:
    """``index`` when npu ``index`` exists (0 always does), else CUDA's "invalid device ordinal"
    as a RuntimeError naming the count and the knob (a tensor on a device that does not exist
    would only fail later, at the first op that meets another device)."""
    if index:
        n = config.device_count()
        if not 0 <= index < n:
            raise RuntimeError(f"npu error: invalid device ordinal npu:{index}: there are {n} npu device(s) "
                               "(set PYCANN_DEVICE_COUNT for more)")
    return index


def _empty(op: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    dev = kwargs.get("device")
    index = _index_of(dev) if isinstance(dev, torch.device) else 0
    kwargs["device"] = _CPU
    kwargs.pop("pin_memory", None)
    # torch.empty / empty_strided take the schema's arguments and parse them in C: faster than
    # calling the OpOverload
    fn = torch.empty_strided if len(args) == 2 else torch.empty
    return to_npu(fn(*args, **{k: v for k, v in kwargs.items() if v is not None}), index)


def _zero_tensor(size: Sequence[int], dtype: torch.dtype | None = None, layout: Any = None,
                 device: torch.device | None = None, pin_memory: bool | None = None) -> torch.Tensor:
    """``aten::_efficientzerotensor`` (what autograd formulas return for a zero gradient: ``sgn``
    of a real tensor, ...): zeros in npu memory. The CPU kernel's ZeroTensor has no memory, and
    relabelled as an npu tensor it lost its ZeroTensor key: a tensor over no memory, which gave
    garbage values and killed the process (``torch.sgn(x).sum().backward()``)."""
    index = _index_of(device) if isinstance(device, torch.device) else 0
    return torch.zeros(list(size), dtype=dtype, device=torch.device(_NPU, index))


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if _is_npu(src) and _is_npu(dst) and src.numel() and dst.numel() \
            and src.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr() and src.dtype == dst.dtype:
        # views of one storage (``a[1:].copy_(a[:-1])``): host views of one host storage, so ATen's copy_
        # sees the overlap it refuses (with a host view each, it copied in some order)
        hosts: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        host_view(dst, hosts).copy_(host_view(src, hosts))
        return dst
    s = to_cpu(src) if _is_npu(src) else src
    d = to_cpu(dst) if _is_npu(dst) else dst
    d.copy_(s)
    return dst


def _copy_from_and_resize(src: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != src.shape:
        _resize(dst, list(src.shape))
    return _copy_from(src, dst)


def _resize(self: torch.Tensor, size: Sequence[int], memory_format: Any = None) -> torch.Tensor:
    """ATen's ``resize_``: the same sizes without a memory format leave the tensor as it is (a
    non-contiguous view keeps its strides: ``softmax(x, out=base[::2])`` resizes its out tensor to
    its own sizes, and the npu's made it contiguous, so the result went to the wrong rows); other
    sizes, or a memory format, restride it (contiguous, or that format) in its memory when that
    suffices, else in new memory holding the old contents."""
    if memory_format is None and list(self.shape) == [int(d) for d in size]:
        return self
    cur = to_cpu(self)
    need = int(np.prod(size)) if len(size) else 1
    have = self.untyped_storage().nbytes() // max(1, self.element_size()) - self.storage_offset()
    fmt = memory_format if memory_format not in (None, torch.preserve_format) else torch.contiguous_format
    strides = list(torch.empty(size, device="meta", memory_format=fmt).stride())
    if need <= have:
        torch.ops.aten.set_.source_Storage_storage_offset.redispatch(
            _CPU_KEYS, self, self.untyped_storage(), self.storage_offset(), list(size), strides)
        return self
    # grow: new host memory, the old contents kept (resize_'s contract)
    new = torch.empty(need, dtype=self.dtype)
    flat = cur.reshape(-1) if cur.is_contiguous() else cur.contiguous().reshape(-1)
    new[: flat.numel()].copy_(flat)
    _set_like(self, new.as_strided(list(size), strides))
    return self
