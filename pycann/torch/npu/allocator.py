"""torch.npu's allocator API: ``caching_allocator_alloc`` / ``caching_allocator_delete``,
``memory_snapshot``, ``memory_stats_as_nested_dict``, ``MemPool`` / ``use_mem_pool``,
``NPUPluggableAllocator`` / ``change_current_allocator`` (torch.cuda's signatures).

pycann's npu memory is host memory from torch's CPU allocator, counted per npu storage
(``pycann.torch._alias``). There is no caching layer: a segment is one live npu storage, of
exactly its size, with one active block. ``caching_allocator_alloc`` makes real npu memory (an
npu uint8 storage of ``size`` bytes, counted in ``memory_allocated``) and returns its address;
``caching_allocator_delete`` frees it. A ``MemPool`` collects the npu storages allocated inside
``use_mem_pool`` (by any thread) and lists the live ones in ``snapshot()``; pooling has no other
effect (host memory is not partitioned). Custom allocators cannot be installed: pycann does not
allocate through one, so ``change_current_allocator`` and ``MemPool(allocator=...)`` raise.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from pycann.torch import _alias
from pycann.torch.npu.memory import memory_stats

_raw: dict[int, torch.Tensor] = {}  # caching_allocator_alloc's blocks: address -> npu tensor owning it
_raw_lock = threading.Lock()


def caching_allocator_alloc(size: int, device: int | str | torch.device | None = None, stream: Any = None) -> int:
    """Allocate ``size`` bytes of npu memory; returns its address (an int; 0 for size 0).
    ``stream`` must be a ``torch.npu.Stream`` or an int (torch's TypeError otherwise)."""
    from pycann.torch.npu import _device_index
    from pycann.torch.npu.streams import Stream

    if stream is not None and not isinstance(stream, (Stream, int)):
        raise TypeError("Invalid type for stream argument, must be `torch.npu.Stream` or `int` representing a "
                        "pointer to an existing stream")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ValueError(f"caching_allocator_alloc: size must be a non-negative int, not {size!r}")
    if size == 0:
        return 0
    t = torch.empty(size, dtype=torch.uint8, device=torch.device("npu", _device_index(device)))
    ptr = int(t.data_ptr())
    with _raw_lock:
        _raw[ptr] = t
    return ptr


def caching_allocator_delete(mem_ptr: int) -> None:
    """Free memory ``caching_allocator_alloc`` returned (0 is a no-op, as a null free). Raises
    ``RuntimeError`` for an address it did not return or already freed."""
    if mem_ptr == 0:
        return
    with _raw_lock:
        t = _raw.pop(int(mem_ptr), None)
    if t is None:
        raise RuntimeError(f"invalid device pointer: {int(mem_ptr):#x} (not allocated by "
                           "torch.npu.caching_allocator_alloc, or already freed)")
    del t


def memory_stats_as_nested_dict(device: int | str | torch.device | None = None) -> dict[str, Any]:
    """``memory_stats`` as a nested dict ("allocated_bytes.all.current" -> d["allocated_bytes"]["all"]["current"])."""
    out: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        node = out
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


_pool_ids = itertools.count(1)
# id(_live weakref) -> (that weakref, id of the pool it was allocated in)
_pool_of: dict[int, tuple[weakref.ref[torch.UntypedStorage], tuple[int, int]]] = {}


def _pool(key: int, ref: weakref.ref[torch.UntypedStorage]) -> tuple[int, int]:
    entry = _pool_of.get(key)
    return entry[1] if entry is not None and entry[0] is ref else (0, 0)


def _segment(ref: weakref.ref[torch.UntypedStorage], nbytes: int) -> dict[str, Any] | None:
    s = ref()
    if s is None:
        return None
    addr = int(s.data_ptr())
    block = {"address": addr, "size": nbytes, "requested_size": nbytes, "state": "active_allocated", "frames": []}
    return {"device": s.device.index or 0, "address": addr, "total_size": nbytes, "allocated_size": nbytes,
            "active_size": nbytes, "requested_size": nbytes, "stream": 0,
            "segment_type": "large" if nbytes > (1 << 20) else "small",
            "segment_pool_id": _pool(id(ref), ref), "is_expandable": False, "frames": [],
            "blocks": [block]}


def memory_snapshot(mempool_id: tuple[int, int] | None = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """The live npu segments (torch.cuda's segment dicts: device, address, total_size,
    allocated_size, active_size, segment_type, segment_pool_id, blocks, ...), sorted by address;
    only those of the pool ``mempool_id`` if given. No allocation traces are recorded (``frames``
    are empty)."""
    out = []
    for key, (ref, nbytes) in list(_alias._live.items()):
        if mempool_id is not None and _pool(key, ref) != tuple(mempool_id):
            continue
        seg = _segment(ref, nbytes)
        if seg is not None:
            out.append(seg)
    out.sort(key=lambda s: s["address"])
    return out


class NPUPluggableAllocator:
    """``NPUPluggableAllocator(path_to_so_file, alloc_fn_name, free_fn_name)``: loads the .so and
    checks both functions exist (ctypes, as torch.cuda's does). It cannot be installed:
    ``change_current_allocator`` raises (pycann does not allocate through an allocator object)."""

    def __init__(self, path_to_so_file: str, alloc_fn_name: str, free_fn_name: str) -> None:
        lib = ctypes.CDLL(path_to_so_file)
        self.alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        self.free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        self.path = path_to_so_file

    def allocator(self) -> NPUPluggableAllocator:
        return self


_NO_ALLOCATOR = ("pycann's npu memory is host memory from torch's CPU allocator (the npu device computes on "
                 "the host): a custom npu allocator cannot be installed")


def change_current_allocator(allocator: Any) -> None:
    """Not supported: raises ``RuntimeError`` (pycann does not allocate through an allocator object)."""
    raise RuntimeError(f"torch.npu.change_current_allocator: {_NO_ALLOCATOR}")


class MemPool:
    """``MemPool(allocator=None, use_on_oom=False, no_split=False)``: an id (a tuple of two ints)
    naming the npu storages allocated inside ``use_mem_pool(pool)``; ``snapshot()`` lists the live
    ones. ``allocator`` other than None raises ``RuntimeError`` (see ``change_current_allocator``)."""

    def __init__(self, allocator: Any = None, use_on_oom: bool = False, no_split: bool = False) -> None:
        if allocator is not None:
            raise RuntimeError(f"torch.npu.MemPool(allocator=...): {_NO_ALLOCATOR}")
        self._id = (0, next(_pool_ids))
        self._uses = 0
        self.allocator = None
        self.use_on_oom = bool(use_on_oom)
        self.no_split = bool(no_split)

    @property
    def id(self) -> tuple[int, int]:
        return self._id

    def use_count(self) -> int:
        """1 for the pool itself plus the ``use_mem_pool`` blocks using it now."""
        return 1 + self._uses

    def snapshot(self, include_traces: bool = True) -> list[dict[str, Any]]:
        """``memory_snapshot(self.id)``."""
        return memory_snapshot(self._id, include_traces)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: int | str | torch.device | None = None) -> Iterator[None]:
    """Count the npu storages allocated inside the block (by any thread) as ``pool``'s."""
    if not isinstance(pool, MemPool):
        raise TypeError(f"use_mem_pool: expected a torch.npu.MemPool, got {type(pool).__name__}")
    before = set(_alias._live)
    pool._uses += 1
    try:
        yield
    finally:
        pool._uses -= 1
        live = dict(_alias._live)
        for key in [k for k, (ref, _) in _pool_of.items() if k not in live or live[k][0] is not ref]:
            del _pool_of[key]  # freed: forget it (its id may be reused)
        for key in live.keys() - before:
            _pool_of.setdefault(key, (live[key][0], pool.id))
