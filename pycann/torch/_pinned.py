"""Pinned host memory for the npu: ``Tensor.pin_memory()`` and ``Tensor.is_pinned()``.

Pinned (page-locked) memory exists so that a device can DMA from host memory; pycann's npu
computes *in* host memory, so every host buffer is as good as pinned. PyTorch asks the
accelerator's C++ hooks for a pinned-memory allocator and for ``isPinnedPtr``, which a Python
backend cannot provide (``torch._C._acc.PrivateUse1Hooks`` exposes three methods, none of them
these): ``pin_memory()`` raised or gave a copy whose ``is_pinned()`` was False, so a DataLoader
with ``pin_memory=True`` handed out batches torch_npu users' checks called unpinned.

``pin(t)`` copies a CPU tensor into a fresh host buffer (what pinning returns for any accelerator:
a new tensor, sizes and strides kept) and records that buffer's storage; ``is_pinned`` answers
True for CPU tensors over a recorded storage (views of a pinned tensor included, as CUDA's
``isPinnedPtr`` does for any pointer in a pinned block) and asks PyTorch for everything else, so
CPU tensors that were never pinned stay unpinned. A record goes with its storage (a weakref on
the storage's Python object, which PyTorch keeps exactly as long as the storage).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

# pinned storages: the storage's data pointer -> weakref to its Python object
_pinned: dict[int, weakref.ref[torch.UntypedStorage]] = {}


def _forget(ptr: int, ref: weakref.ref[torch.UntypedStorage]) -> None:
    # the storage died: its memory is no longer pinned (and the pointer may be reused)
    if _pinned.get(ptr) is ref:
        del _pinned[ptr]


def recorded(t: torch.Tensor) -> bool:
    """Whether ``t`` is a CPU tensor over memory ``pin`` made."""
    if not t.is_cpu or not _pinned:
        return False
    storage = t.untyped_storage()
    ref = _pinned.get(storage.data_ptr())
    return ref is not None and ref() is storage


def pin(t: torch.Tensor) -> torch.Tensor:
    """``t`` pinned for the npu: ``t`` itself when it is pinned already (as CUDA's ``pin_memory``),
    else a copy in a new host buffer that ``is_pinned()`` reports as pinned."""
    if recorded(t):
        return t
    out = t.clone(memory_format=torch.preserve_format)
    if out.is_cpu:
        storage = out.untyped_storage()
        ptr = storage.data_ptr()
        if ptr:  # (an empty tensor has no memory to record)
            ref = weakref.ref(storage, functools.partial(_forget, ptr))
            _pinned[ptr] = ref
    return out


def wrap_is_pinned(orig: Callable[..., bool]) -> Callable[..., bool]:
    """``Tensor.is_pinned(device=None)``: True for memory ``pin`` made, PyTorch's answer otherwise."""

    def is_pinned(self: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
        if recorded(self):
            return True
        return orig(self, *args, **kwargs)

    return is_pinned
