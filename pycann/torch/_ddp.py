"""DDP's unused-parameter search on npu parameters, and FSDP's sharded strategies (refused clearly).

**DDP** (``find_unused_parameters=True``, ``static_graph=True``).

DDP's C++ reducer (``Reducer::all_reduce_local_used_map``, ``torch/csrc/distributed/c10d/reducer.cpp``)
copies its map of locally used parameters to the parameters' device through a *pinned* host tensor
whenever that device is CUDA or PrivateUse1, and asserts the tensor is pinned. Pinned memory comes
from the PrivateUse1 hooks' ``getPinnedMemoryAllocator``, which a backend registered from Python
(``torch._C._acc.PrivateUse1Hooks``) cannot provide: every backward pass of such a DDP model on the
npu failed with "You should register `PrivateUse1HooksInterface` ... and implement
`getPinnedMemoryAllocator`" (``find_unused_parameters=True`` on every step, ``static_graph=True`` on
its first one).

Pinning buys a device an asynchronous copy; npu memory is host memory and every npu copy is
synchronous, so an ordinary host tensor is what pinned memory would be here. While a backward pass
runs and a DDP model that needs the map is alive, a dispatch mode turns the reducer's pinned
allocations (``empty`` / ``empty_strided`` with ``pin_memory=True``) into ordinary ones and answers
``is_pinned`` for them with True. The mode is captured with the backward pass's thread-local state,
so it reaches the reducer's hooks on the engine's threads. Its cost: one Python call per op of
those backward passes, only for such models (other models' backward passes do not see it).

**FSDP.** Its sharded strategies (``FULL_SHARD``, ``SHARD_GRAD_OP``, ``HYBRID_SHARD``; FSDP2's
``fully_shard``) and its ``MixedPrecision(param_dtype=...)`` (a low-precision copy of the parameters) free and re-allocate parameter memory by resizing a storage in place
(``UntypedStorage.resize_``), which for PrivateUse1 needs the C++ hook ``resizePrivateUse1Bytes``: a
backend registered from Python cannot give it (the npu's memory is DLPack-imported host memory), and
the call raised "... implement `resizePrivateUse1Bytes`", naming neither FSDP nor a way out. A
resize of an npu storage to its own size is a no-op (nothing to do); any other now raises
``NotImplementedError`` naming what is missing and what works (``ShardingStrategy.NO_SHARD``, DDP).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
_ALLOC = (_aten.empty.memory_format, _aten.empty_strided.default)
_models: weakref.WeakSet[Any] = weakref.WeakSet()  # live DDP models on the npu that need the map
_installed: list[Any] = []


class PinnedAsPageable(TorchDispatchMode):
    """Serves pinned host allocations with ordinary host memory (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.pinned: set[int] = set()  # data pointers allocated "pinned" during this pass

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _ALLOC and kwargs.get("pin_memory"):
            out = func(*args, **dict(kwargs, pin_memory=False))
            self.pinned.add(out.data_ptr())
            return out
        if func is _aten.is_pinned.default and args[0].device.type == "cpu" and args[0].data_ptr() in self.pinned:
            return True
        return func(*args, **kwargs)


def _needs_map(ddp: Any) -> bool:
    """Whether ``ddp``'s reducer builds the used-parameter map on an npu device."""
    if not (getattr(ddp, "find_unused_parameters", False) or getattr(ddp, "static_graph", False)):
        return False
    return any(p.device.type == "npu" for p in ddp.module.parameters())


RESIZE_MSG = ("pycann: an npu storage cannot be resized in place (UntypedStorage.resize_ from {old} to {new} "
              "bytes): PyTorch needs the C++ PrivateUse1 hook resizePrivateUse1Bytes, which a backend registered "
              "from Python cannot provide. torch.distributed.fsdp's sharded strategies (FULL_SHARD, SHARD_GRAD_OP, "
              "HYBRID_SHARD), its MixedPrecision(param_dtype=...) and fully_shard free and re-allocate "
              "parameters this way: on the npu use FullyShardedDataParallel(..., "
              "sharding_strategy=ShardingStrategy.NO_SHARD) without param_dtype (torch.autocast for low "
              "precision) or DistributedDataParallel; to grow a tensor use Tensor.resize_ (it works)")


def _storage_resize(orig: Any) -> Any:
    """``UntypedStorage.resize_`` with npu storages refused clearly (see the module docstring)."""

    def resize_(self: Any, size: int) -> Any:
        if self.device.type == "npu":
            if int(size) == self.nbytes():
                return self
            raise NotImplementedError(RESIZE_MSG.format(old=self.nbytes(), new=int(size)))
        return orig(self, size)

    return resize_


def install() -> None:
    """Wrap ``DistributedDataParallel.__init__`` (to note npu models that need the map), the
    autograd engine's entry (to run their backward passes under ``PinnedAsPageable``) and
    ``UntypedStorage.resize_`` (npu storages refused clearly); once."""
    if _installed:
        return
    torch.UntypedStorage.resize_ = _storage_resize(torch.UntypedStorage.resize_)  # type: ignore[method-assign]
    from torch.nn.parallel import DistributedDataParallel as DDP

    init = DDP.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807 - DDP's own name
        init(self, *args, **kwargs)
        if _needs_map(self):
            _models.add(self)

    DDP.__init__ = __init__  # type: ignore[method-assign]
    run = torch.autograd.graph._engine_run_backward

    def _engine_run_backward(t_outputs: Any, *args: Any, **kwargs: Any) -> Any:
        if not _models:
            return run(t_outputs, *args, **kwargs)
        with PinnedAsPageable():
            return run(t_outputs, *args, **kwargs)

    torch.autograd.graph._engine_run_backward = _engine_run_backward
    torch.autograd._engine_run_backward = _engine_run_backward  # type: ignore[attr-defined]
    _installed.append((init, run))
