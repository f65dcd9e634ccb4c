"""The caching allocator behind pyACL's device and host allocations (``acl.rt.malloc`` & co.).

``MemoryPool`` is a caching allocator: freed blocks are kept per size class and handed out again
(the address is still fresh), with statistics for the profiler (``MemoryPool.stats``). The cached
blocks are bounded by the most the app ever had in use at once (at least ``CACHE_FLOOR``), the
least recently freed dropped first: a service allocating a new size class per request (images of
any size) keeps at most twice its peak, not a block of every size it ever saw.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from pycann.runtime.errors import OutOfMemory
from pycann.runtime.memory import renewed_in_child

__all__ = ["CACHE_FLOOR", "MemoryPool", "round_size"]

CACHE_FLOOR = 64 << 20  # the pool may always cache this many bytes of free blocks
SMALL_GRANULE = 512
SMALL_LIMIT = 1 << 20
LARGE_GRANULE = 2 << 20


def round_size(nbytes: int) -> int:
    """The pool's size class for a request: 512-byte steps up to 1 MiB, then 2 MiB steps."""
    if nbytes <= SMALL_LIMIT:
        return max(SMALL_GRANULE, -(-nbytes // SMALL_GRANULE) * SMALL_GRANULE)
    return -(-nbytes // LARGE_GRANULE) * LARGE_GRANULE


class MemoryPool:
    """A caching allocator over numpy ``uint8`` blocks, bounded by ``capacity`` bytes. Thread-safe."""

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = capacity
        self._free: dict[int, list[np.ndarray]] = {}
        self._lru: OrderedDict[int, np.ndarray] = OrderedDict()  # cached blocks by id, least recently freed first
        self._cached = 0
        self._lock = threading.Lock()
        renewed_in_child(self)
        self.reserved = self.in_use = self.requested = 0
        self.peak_reserved = self.peak_in_use = self.peak_requested = 0
        self.n_alloc = self.n_free = self.cache_hits = self.cache_misses = self.n_oom = 0

    def take(self, nbytes: int) -> np.ndarray:
        """A block of at least ``nbytes``. Raises ``OutOfMemory``."""
        size = round_size(nbytes)
        with self._lock:
            cached = self._free.get(size)
            if cached:
                block = cached.pop()
                del self._lru[id(block)]
                self._cached -= size
                self.cache_hits += 1
            else:
                if self.reserved + size > self.capacity:
                    self._drop_cached()
                if self.reserved + size > self.capacity:
                    self.n_oom += 1
                    raise OutOfMemory(
                        f"{self.name}: cannot allocate {nbytes} bytes: {self.in_use} of {self.capacity} "
                        "bytes are in use"
                    )
                block = np.empty(size, dtype=np.uint8)
                self.reserved += size
                self.cache_misses += 1
                self.peak_reserved = max(self.peak_reserved, self.reserved)
            self.in_use += size
            self.requested += nbytes
            self.n_alloc += 1
            self.peak_in_use = max(self.peak_in_use, self.in_use)
            self.peak_requested = max(self.peak_requested, self.requested)
        return block

    def give(self, block: np.ndarray, nbytes: int, cache: bool = True) -> None:
        """Return a block taken for ``nbytes``; ``cache=False`` releases it to the system."""
        with self._lock:
            self.in_use -= block.size
            self.requested -= nbytes
            self.n_free += 1
            if cache:
                self._free.setdefault(block.size, []).append(block)
                self._lru[id(block)] = block
                self._cached += block.size
                self._trim()
            else:
                self.reserved -= block.size

    def _trim(self) -> None:
        """Drop the least recently freed cached blocks beyond ``max(peak_in_use, CACHE_FLOOR)``."""
        limit = max(self.peak_in_use, CACHE_FLOOR)
        while self._cached > limit and self._lru:
            _, old = self._lru.popitem(last=False)
            blocks = self._free[old.size]
            del blocks[next(i for i, b in enumerate(blocks) if b is old)]
            if not blocks:
                del self._free[old.size]
            self._cached -= old.size
            self.reserved -= old.size

    def _drop_cached(self) -> None:
        self.reserved -= self._cached
        self._free.clear()
        self._lru.clear()
        self._cached = 0

    def empty_cache(self) -> None:
        """Release every cached (free) block."""
        with self._lock:
            self._drop_cached()

    @property
    def free_bytes(self) -> int:
        """Capacity not held by live allocations (cached blocks count as free)."""
        return max(0, self.capacity - self.in_use)

    def stats(self) -> dict[str, int]:
        """Counters for the profiler: bytes (current and peak) and event counts."""
        with self._lock:
            cached = self._cached
            return {
                "capacity": self.capacity, "reserved_bytes": self.reserved, "in_use_bytes": self.in_use,
                "requested_bytes": self.requested, "cached_bytes": cached,
                "peak_reserved_bytes": self.peak_reserved, "peak_in_use_bytes": self.peak_in_use,
                "peak_requested_bytes": self.peak_requested, "allocs": self.n_alloc, "frees": self.n_free,
                "cache_hits": self.cache_hits, "cache_misses": self.cache_misses, "oom": self.n_oom,
            }
