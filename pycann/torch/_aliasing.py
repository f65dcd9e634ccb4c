"""ATen's overlap rules for npu writes whose operands share the written tensor's memory.

Each npu argument reaches torch's CPU kernel as its own host view (``_alias.to_cpu``: a DLPack
import, so a storage of its own). ATen's overlap checks (``assert_no_partial_overlap``,
``assert_no_overlap``) compare storages, so they never saw that ``torch.add(a, a[0], out=a)``,
``torch.where(c, a.t(), a, out=a)`` or ``torch.clamp(x.t(), -1, 1, out=x)`` read memory the op writes:
CPU torch refuses them ("some elements of the input tensor and the written-to tensor refer to a
single memory location"), the npu computed an order-dependent result (found by the torch op
fuzzer). ``rebase`` gives the arguments that share a written tensor's storage host views of one
host storage, so the kernel sees what CPU torch sees. ``internal_overlap``: a written tensor whose
elements share memory (an expanded out), which pycann's own ops must leave to torch's check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pycann.torch._alias import to_cpu


def internal_overlap(t: Any) -> bool:
    """Whether tensor ``t`` has elements sharing memory (a dim of size > 1 with stride 0)."""
    return isinstance(t, torch.Tensor) and any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride()))


def _npu(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_cpu and not x.is_meta and x.numel() > 0


def rebase(written: Sequence[int], names: Sequence[str], args: Sequence[Any], kwargs: dict[str, Any],
           cargs: list[Any], ckw: dict[str, Any]) -> None:
    """When a written npu argument (``written``: argument indices; ``names``: the schema's names)
    shares its storage with another npu argument, replace the host views (``cargs`` / ``ckw``) of
    every npu argument of that storage by views of one host alias of the whole storage."""
    def get(i: int, seq: Sequence[Any], kw: dict[str, Any]) -> Any:
        return seq[i] if i < len(seq) else kw.get(names[i])

    tensors = [(i, get(i, args, kwargs)) for i in range(len(names))]
    tensors = [(i, t) for i, t in tensors if _npu(t)]
    if len(tensors) < 2:
        return
    ptrs = {i: t.untyped_storage().data_ptr() for i, t in tensors}
    targets = {ptrs[i] for i in written if i in ptrs}
    shared = {p for p in targets if sum(1 for q in ptrs.values() if q == p) > 1}
    if not shared:
        return
    hosts: dict[tuple[int, torch.dtype], torch.Tensor] = {}
    for i, t in tensors:
        if ptrs[i] in shared:
            view = host_view(t, hosts)
            if i < len(cargs):
                cargs[i] = view
            else:
                ckw[names[i]] = view


def host_view(t: torch.Tensor, hosts: dict[tuple[int, torch.dtype], torch.Tensor]) -> torch.Tensor:
    """A host view of npu tensor ``t`` over one host alias of its whole storage, shared through
    ``hosts`` with the other tensors of that storage and dtype."""
    storage = t.untyped_storage()
    key = (storage.data_ptr(), t.dtype)
    host = hosts.get(key)
    if host is None:
        full = torch.empty(0, dtype=t.dtype, device=t.device)
        full.set_(storage, 0, (storage.nbytes() // t.element_size(),), (1,))
        host = hosts[key] = to_cpu(full)
    return host.as_strided(t.shape, t.stride(), t.storage_offset())
