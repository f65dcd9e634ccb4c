"""Memory: caching pools and the pointer registry (the "address space").

pyACL passes pointers as plain ``int``s (cann-interfaces.md §1.1). pycann's pointers are handles
into numpy buffers it manages, never raw addresses that anything dereferences:

* ``malloc`` (device) and ``malloc_host`` allocations get *virtual* addresses in regions above
  2**56 (one per device, one for host memory) that no real user-space address reaches. Addresses
  are never reused, so a pointer into a freed allocation is recognised as a use after free.
* Host buffers of the caller (``util.numpy_to_ptr`` / ``util.bytes_to_ptr``) are registered at
  their real address and kept alive by the registry (bounded, least recently used first out).

Every access goes through ``AddressSpace.resolve``: the pointer must lie in a live allocation
(``base + offset`` is fine), the byte range must fit, the memory kind must match and writes need
a writable buffer — or a ``RtError`` subclass says what is wrong. An allocation in use by a copy
is pinned, so freeing it concurrently cannot recycle its block under the copy.

``MemoryPool`` (``memory_pool.py``) is the caching allocator behind the allocations.
"""

from __future__ import annotations

import bisect
import enum
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann import config
from pycann.runtime.errors import (
    DoubleFree,
    InvalidPointer,
    KindMismatch,
    OutOfBounds,
    ReadOnly,
    UseAfterFree,
)

if TYPE_CHECKING:  # (memory_pool imports this module: renewed_in_child)
    from pycann.runtime.memory_pool import MemoryPool

PAGE = 4096
HOST_REGION = 1 << 56
FREED_KEPT = 16384  # freed allocations remembered for "use after free" messages
_NO_BYTES = np.empty(0, np.uint8)  # a freed allocation's ``buf``: its memory is not kept


# runtime objects whose ``_lock`` a forked child renews (with its factory): a thread of the parent
# that held one at the fork is not in the child, whose next malloc / memcpy / free / set_device ...
# then waited for it for ever
_RENEWED: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def renewed_in_child(obj: Any, factory: Any = threading.Lock) -> None:
    """Give ``obj`` a fresh ``_lock = factory()`` in a forked child."""
    _RENEWED[obj] = factory


def _renew_locks_in_child() -> None:
    for obj, factory in list(_RENEWED.items()):
        obj._lock = factory()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks_in_child)


def device_region(device_id: int) -> int:
    """First virtual address of ``device_id``'s memory."""
    return (2 + device_id) << 56


def physical_memory() -> int:
    """Bytes of RAM (``PYCANN_DEVICE_MEMORY`` overrides, e.g. ``8G``); 16 GiB if unknown."""
    given = config.device_memory()
    if given is not None:
        return given
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 << 30


class MemKind(enum.Enum):
    """``DEVICE``: ``malloc``; ``HOST``: ``malloc_host``; ``USER``: a caller's registered buffer."""

    DEVICE = "device"
    HOST = "host"
    USER = "user"


HOST_KINDS = frozenset({MemKind.HOST, MemKind.USER})
DEVICE_KINDS = frozenset({MemKind.DEVICE})
ANY_KIND = frozenset(MemKind)


class CopyKind(enum.IntEnum):
    """``aclrtMemcpyKind`` (cann-interfaces.md §1.7); ``DEFAULT`` infers the direction."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3
    DEFAULT = 4


_COPY_SIDES = {
    CopyKind.HOST_TO_HOST: (HOST_KINDS, HOST_KINDS),
    CopyKind.HOST_TO_DEVICE: (HOST_KINDS, DEVICE_KINDS),
    CopyKind.DEVICE_TO_HOST: (DEVICE_KINDS, HOST_KINDS),
    CopyKind.DEVICE_TO_DEVICE: (DEVICE_KINDS, DEVICE_KINDS),
    CopyKind.DEFAULT: (ANY_KIND, ANY_KIND),
}


@dataclass(eq=False)
class Allocation:
    """One live (or freed) range of the address space."""

    base: int
    size: int
    kind: MemKind
    buf: np.ndarray  # uint8, exactly ``size`` bytes
    device: int = -1
    pool: MemoryPool | None = None
    block: np.ndarray | None = None
    owner: Any = None  # the caller's object for USER ranges (kept alive)
    writable: bool = True
    site: str = ""
    freed: bool = False
    pins: int = 0
    exported: bool = False  # a zero-copy view was handed out: never recycle the block

    @property
    def end(self) -> int:
        return self.base + self.size

    def describe(self) -> str:
        where = f" (allocated at {self.site})" if self.site else ""
        return f"{self.kind.value} allocation 0x{self.base:x}+{self.size}{where}"


def _flat_bytes(obj: Any) -> tuple[np.ndarray, Any]:
    """(uint8 view of the whole memory behind ``obj``, object to keep alive). Raises ``TypeError``."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise TypeError("an object-dtype array has no raw data to point to")
        root = obj
        while isinstance(root.base, np.ndarray):
            root = root.base
        if root.flags.c_contiguous or root.flags.f_contiguous:
            return root.reshape(-1, order="A").view(np.uint8), root
        if root.base is not None:
            return np.frombuffer(root.base, dtype=np.uint8), root.base
        raise TypeError("cannot take the address of a non-contiguous array without a base buffer")
    try:
        return np.frombuffer(obj, dtype=np.uint8), obj
    except (TypeError, ValueError, BufferError) as e:
        raise TypeError(f"expected a numpy array or a bytes-like object, got {type(obj).__name__}: {e}") from None


class AddressSpace:
    """Process-wide map from pointer ints to allocations. Thread-safe."""

    def __init__(self, user_cap_bytes: int = 512 << 20, user_cap_count: int = 65536) -> None:
        self._lock = threading.RLock()
        renewed_in_child(self, threading.RLock)
        self._starts: list[int] = []
        self._live: dict[int, Allocation] = {}
        self._freed_starts: list[int] = []
        self._freed: OrderedDict[int, Allocation] = OrderedDict()
        self._user: OrderedDict[int, Allocation] = OrderedDict()  # LRU of registered host buffers
        self._user_bytes = 0
        self.user_cap_bytes, self.user_cap_count = user_cap_bytes, user_cap_count
        self._next: dict[int, int] = {}

    # ------------------------------------------------------------------ bookkeeping
    def _insert(self, a: Allocation) -> None:
        bisect.insort(self._starts, a.base)
        self._live[a.base] = a

    def _remove(self, a: Allocation) -> None:
        i = bisect.bisect_left(self._starts, a.base)
        del self._starts[i]
        del self._live[a.base]

    def _bury(self, a: Allocation) -> None:
        """Remember a freed (or evicted) allocation for "use after free" messages, without its memory:
        the record keeps no view of the block (which goes back to the pool, ``_recycle``) nor the
        caller's registered object (else up to ``FREED_KEPT`` dead buffers stayed alive: numpy_to_ptr
        per request grew the process past the registry's 512 MiB by each evicted buffer)."""
        a.buf, a.owner = _NO_BYTES, None
        if a.base in self._freed:
            self._freed_starts.remove(a.base)
        bisect.insort(self._freed_starts, a.base)
        self._freed[a.base] = a
        while len(self._freed) > FREED_KEPT:
            old, _ = self._freed.popitem(last=False)
            self._freed_starts.remove(old)

    def _find(self, starts: list[int], table: dict[int, Allocation], ptr: int) -> Allocation | None:
        i = bisect.bisect_right(starts, ptr) - 1
        if i < 0:
            return None
        a = table[starts[i]]
        return a if ptr < a.end or (ptr == a.base) else None

    # ------------------------------------------------------------------ allocation
    def allocate(self, pool: MemoryPool, nbytes: int, kind: MemKind, device: int = -1, site: str = "") -> Allocation:
        """A new allocation of ``nbytes`` (> 0) from ``pool``. Raises ``OutOfMemory``."""
        block = pool.take(nbytes)
        region = HOST_REGION if kind is MemKind.HOST else device_region(device)
        with self._lock:
            base = self._next.get(region, region + PAGE)
            self._next[region] = base + (-(-nbytes // PAGE) + 1) * PAGE  # one guard page between ranges
            a = Allocation(base, nbytes, kind, block[:nbytes], device, pool, block, site=site)
            self._insert(a)
        return a

    def free(self, ptr: int, kinds: frozenset[MemKind]) -> Allocation:
        """Free the allocation starting at ``ptr``. Raises ``InvalidPointer``, ``DoubleFree``, ``KindMismatch``."""
        with self._lock:
            a = self._live.get(ptr)
            if a is None:
                dead = self._freed.get(ptr)
                if dead is not None:
                    raise DoubleFree(f"0x{ptr:x} was already freed: {dead.describe()}")
                inside = self._find(self._starts, self._live, ptr)
                if inside is not None:
                    raise InvalidPointer(f"0x{ptr:x} is inside {inside.describe()}, not its start")
                raise InvalidPointer(f"0x{ptr:x} is not an allocated pointer")
            if a.kind not in kinds:
                want = "/".join(sorted(k.value for k in kinds))
                raise KindMismatch(f"0x{ptr:x} is {a.describe()}; this call frees {want} memory")
            a.freed = True
            self._remove(a)
            self._bury(a)
            if a.pins == 0:
                self._recycle(a)
        return a

    def _recycle(self, a: Allocation) -> None:
        if a.pool is not None and a.block is not None:
            a.pool.give(a.block, a.size, cache=not a.exported)
            a.block = None

    def register_user(self, obj: Any) -> int:
        """Register a caller's host buffer (ndarray or bytes-like); returns its real address."""
        flat, owner = _flat_bytes(obj)
        base, size = int(flat.ctypes.data), int(flat.nbytes)
        ptr = int(obj.ctypes.data) if isinstance(obj, np.ndarray) else base
        writable = bool(flat.flags.writeable)
        with self._lock:
            hit = self._find(self._starts, self._live, base)
            if hit is not None and hit.kind is MemKind.USER and hit.base <= base and base + size <= hit.end:
                self._user.move_to_end(hit.base)
                return ptr
            # drop registrations this one overlaps (older views of the same memory)
            i = bisect.bisect_left(self._starts, base)
            j = max(0, i - 1)
            while j < len(self._starts) and self._starts[j] < base + max(size, 1):
                other = self._live[self._starts[j]]
                if other.kind is MemKind.USER and other.end > base:
                    self._drop_user(other)
                else:
                    j += 1
            a = Allocation(base, size, MemKind.USER, flat, owner=owner, writable=writable)
            self._insert(a)
            self._user[base] = a
            self._user_bytes += size
            while (self._user_bytes > self.user_cap_bytes or len(self._user) > self.user_cap_count) and len(self._user) > 1:
                oldest = next(iter(self._user.values()))
                if oldest.pins:
                    break
                self._drop_user(oldest)
        return ptr

    def _drop_user(self, a: Allocation) -> None:
        self._remove(a)
        self._user.pop(a.base, None)
        self._user_bytes -= a.size
        a.freed = True
        a.site = "a host buffer registered by numpy_to_ptr/bytes_to_ptr and since evicted"
        self._bury(a)

    # ------------------------------------------------------------------ access
    def resolve(self, ptr: int, nbytes: int, kinds: frozenset[MemKind] = ANY_KIND, write: bool = False,
                what: str = "pointer") -> tuple[Allocation, int]:
        """(allocation, offset) for the byte range ``[ptr, ptr + nbytes)``; raises an ``RtError``."""
        if not isinstance(ptr, int) or ptr <= 0:
            raise InvalidPointer(f"{what} 0x{ptr:x} is null" if ptr == 0 else f"{what} {ptr!r} is not a pointer")
        if nbytes < 0:
            raise OutOfBounds(f"negative size {nbytes} for {what} 0x{ptr:x}")
        with self._lock:
            a = self._find(self._starts, self._live, ptr)
            if a is None:
                dead = self._find(self._freed_starts, self._freed, ptr)
                if dead is not None:
                    raise UseAfterFree(f"{what} 0x{ptr:x} points into freed memory: {dead.describe()}")
                raise InvalidPointer(f"{what} 0x{ptr:x} is not in any allocation")
            off = ptr - a.base
            if off + nbytes > a.size:
                raise OutOfBounds(
                    f"{what} 0x{ptr:x}: {nbytes} bytes at offset {off} run past the end of {a.describe()}"
                )
            if a.kind not in kinds:
                want = " or ".join(sorted(k.value for k in kinds))
                raise KindMismatch(f"{what} 0x{ptr:x} is {a.describe()}; expected {want} memory")
            if write and not a.writable:
                raise ReadOnly(f"{what} 0x{ptr:x} is a read-only host buffer (bytes); use a bytearray, "
                               "a numpy array or malloc_host memory as the destination")
            if a.kind is MemKind.USER:
                self._user.move_to_end(a.base)
            return a, off

    @contextmanager
    def access(self, ptr: int, nbytes: int, kinds: frozenset[MemKind] = ANY_KIND, write: bool = False,
               what: str = "pointer") -> Iterator[np.ndarray]:
        """A pinned uint8 view of ``[ptr, ptr + nbytes)`` for the duration of the block."""
        with self._lock:
            a, off = self.resolve(ptr, nbytes, kinds, write, what)
            a.pins += 1
            v = a.buf[off : off + nbytes]  # (taken under the lock: a free meanwhile buries ``a.buf``)
        try:
            yield v
        finally:
            with self._lock:
                a.pins -= 1
                if a.freed and a.pins == 0:
                    self._recycle(a)

    def check_copy(self, dst: int, dst_max: int, src: int, count: int, kind: CopyKind) -> None:
        """Every check ``copy`` makes, without copying (for ``memcpy_async`` at enqueue time)."""
        if count < 0 or dst_max < 0:
            raise OutOfBounds(f"negative size (count {count}, destMax {dst_max})")
        if count > dst_max:
            raise OutOfBounds(f"count {count} exceeds destMax {dst_max}")
        src_kinds, dst_kinds = _COPY_SIDES[CopyKind(kind)]
        self.resolve(src, count, src_kinds, False, "source")
        self.resolve(dst, count, dst_kinds, True, "destination")

    def copy(self, dst: int, dst_max: int, src: int, count: int, kind: CopyKind) -> None:
        """``memcpy`` semantics with every check (cann-interfaces.md §1.3)."""
        self.check_copy(dst, dst_max, src, count, kind)
        src_kinds, dst_kinds = _COPY_SIDES[CopyKind(kind)]
        with self.access(src, count, src_kinds, False, "source") as s, \
                self.access(dst, count, dst_kinds, True, "destination") as d:
            np.copyto(d, s)

    def check_fill(self, ptr: int, max_size: int, count: int) -> None:
        """Every check ``fill`` makes, without writing."""
        if count < 0 or max_size < 0:
            raise OutOfBounds(f"negative size (count {count}, maxCount {max_size})")
        if count > max_size:
            raise OutOfBounds(f"count {count} exceeds maxCount {max_size}")
        self.resolve(ptr, count, ANY_KIND, True, "pointer")

    def fill(self, ptr: int, max_size: int, value: int, count: int) -> None:
        """``memset``: ``count`` bytes at ``ptr`` (``count <= max_size``) set to ``value``'s low byte."""
        self.check_fill(ptr, max_size, count)
        with self.access(ptr, count, ANY_KIND, True, "pointer") as d:
            d.fill(value & 0xFF)

    def read(self, ptr: int, nbytes: int, kinds: frozenset[MemKind] = ANY_KIND, what: str = "pointer") -> np.ndarray:
        """A copy of ``nbytes`` at ``ptr`` as a uint8 array."""
        with self.access(ptr, nbytes, kinds, False, what) as v:
            return v.copy()

    def write(self, ptr: int, data: np.ndarray, kinds: frozenset[MemKind] = ANY_KIND, what: str = "pointer") -> None:
        """Write ``data``'s bytes at ``ptr``."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        with self.access(ptr, raw.size, kinds, True, what) as v:
            np.copyto(v, raw)

    def view(self, ptr: int, nbytes: int, kinds: frozenset[MemKind] = HOST_KINDS) -> np.ndarray:
        """A zero-copy uint8 view (``ptr_to_numpy``); the block is then never recycled."""
        with self._lock:
            a, off = self.resolve(ptr, nbytes, kinds, False)
            a.exported = True
            v = a.buf[off : off + nbytes]
            if not a.writable:
                v = v.view()
                v.flags.writeable = False
            return v

    def kind_of(self, ptr: int) -> MemKind | None:
        """The memory kind of a live pointer, or ``None``."""
        with self._lock:
            a = self._find(self._starts, self._live, ptr) if ptr > 0 else None
            return None if a is None else a.kind

    def live(self, kinds: frozenset[MemKind] = frozenset({MemKind.DEVICE, MemKind.HOST})) -> list[Allocation]:
        """Live allocations of ``kinds`` (for leak reports)."""
        with self._lock:
            return [a for a in self._live.values() if a.kind in kinds]

    def release_all(self) -> list[Allocation]:
        """Free everything (``finalize``); returns the device/host allocations that were still live."""
        with self._lock:
            leaked = self.live()
            for a in list(self._live.values()):
                if a.kind is MemKind.USER:
                    self._drop_user(a)
                else:
                    a.freed = True
                    self._remove(a)
                    self._bury(a)
                    if a.pins == 0:
                        self._recycle(a)
            return leaked
