"""Constant weights reordered once per model into the layouts oneDNN primitives ask for.

A model re-planned for many input shapes binds a new conv or matmul primitive per shape; each
asks for its weight in a blocked layout (``dnnl_format_tag_any`` resolved by the primitive).
That layout rarely depends on the activation shape, so the packed copy is shared: keyed by the
weight's memory (address, shape, strides) and by the source and destination descriptors
(``dnnl_memory_desc_equal``), not by the plan that first asked for it.

An entry lives as long as the array that owns the weight's memory (``weakref.finalize`` on
the last ndarray of its ``.base`` chain), so a freed weight's address can never hand out a
stale packing, and evicting one shape's plan never drops weights other plans still read.
``forget`` (a kernel that moved its weight to another layout) lets the cache's own reference go,
not the packing: while a primitive bound to it lives (another plan of the model over the same
weight), a later ``packed`` of that weight and layout is served that same memory again, never a
second copy. ``stats()`` reports packings made, reuses and the bytes of the packings alive now
(held by the cache or by a primitive; counted until the memory is freed; docs/dynamic-shapes.md).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.kernels.providers import onednn_capi as capi
from pycann.kernels.providers import onednn_capi_ops as capi_ops

__all__ = ["PackedStats", "forget", "owner", "packed", "stats", "weight_key"]

_Key = tuple[int, tuple[int, ...], tuple[int, ...], str]
_lock = threading.Lock()


class _Packing:
    """One packed layout of a weight: the source and packed descriptors and the memory, held by the
    cache (``strong``) until ``forget``, then only reachable while a primitive holds it (``ref``)."""

    __slots__ = ("ref", "src", "strong", "want")

    def __init__(self, src: Any, want: Any, mem: Any) -> None:
        self.src, self.want, self.strong = src, want, mem
        self.ref = weakref.ref(mem)

    def memory(self) -> Any:
        """The packed memory, or None once it was forgotten and freed."""
        m = self.strong
        return m if m is not None else self.ref()


# weight memory -> its packings
_entries: dict[_Key, list[_Packing]] = {}
_counts = {"packed": 0, "reused": 0, "bytes": 0}


@dataclass(frozen=True)
class PackedStats:
    """Packings made (``packed``), packings served again (``reused``), bytes of the packings alive now
    (cached, or forgotten but still bound to a primitive), weights with a packing alive."""

    packed: int
    reused: int
    bytes_held: int
    weights: int


def owner(a: np.ndarray) -> np.ndarray:
    """The last ndarray of ``a``'s ``.base`` chain: it keeps the memory alive."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


# Keys whose weight died while the lock was held. A weight's finalizer can run inside a locked
# section of this very thread (a garbage collection that an allocation there triggered): taking the
# lock there deadlocked the thread (a CI run hung in ``_lookup``), so the drop is left here and
# done by the next locked section (``_locked``).
_pending: list[_Key] = []
# bytes of packed memories freed while the lock was held (``_freed``), subtracted at the next locked section
_pending_freed: list[int] = []


def _drop_now(key: _Key) -> None:
    _entries.pop(key, None)  # (their bytes go when the memories are freed: ``_freed``)


def _freed(n: int) -> None:
    """The finalizer of a packed memory: its ``n`` bytes are no longer held (now, or at the next
    locked section, as ``_drop``)."""
    if not _lock.acquire(blocking=False):
        _pending_freed.append(n)
        return
    try:
        _counts["bytes"] -= n
    finally:
        _lock.release()


def _drop(key: _Key) -> None:
    """The finalizer of a weight's owner: its packings go (now, or at the next locked section)."""
    if not _lock.acquire(blocking=False):
        _pending.append(key)  # (held: by this thread, or another that settles it when it next locks)
        return
    try:
        _drop_now(key)
    finally:
        _lock.release()


@contextmanager
def _locked() -> Iterator[None]:
    """``_lock`` held, the drops left pending done first."""
    with _lock:
        while _pending:
            _drop_now(_pending.pop())
        while _pending_freed:
            _counts["bytes"] -= _pending_freed.pop()
        yield


def _failed(mem: Any) -> bool:
    """True when ``mem``'s packing ran on a plan build's helper thread and raised."""
    t = getattr(mem, "ticket", None)
    return t is not None and t.done() and t.error is not None


def _lookup(key: _Key, user_md: Any, want_md: Any) -> Any:
    """The cached packing of ``key`` in that layout, or None; a failed one is dropped, and so are
    forgotten ones freed since (call with ``_lock`` held). A forgotten packing still alive (bound
    to a primitive) is the cache's again: served, not packed a second time."""
    found = _entries.get(key, [])
    for i, p in enumerate(found):
        mem = p.memory()
        if mem is None:
            del found[i]  # forgotten and freed
            return _lookup(key, user_md, want_md)
        if p.want.equals(want_md) and p.src.equals(user_md):
            if _failed(mem):  # its reorder (queued by a plan build) failed: the memory holds no weights
                del found[i]
                return None
            if key in _pending:
                return None  # (a finalizer that ran meanwhile for this key: the packing of a dead array here)
            p.strong = mem
            return mem
    return None


def weight_key(w: np.ndarray) -> _Key:
    """The cache key of a weight's memory: (address, shape, strides, dtype)."""
    return (capi.ptr(w), tuple(w.shape), tuple(w.strides), w.dtype.str)


def packed(w: np.ndarray, user_md: Any, want_md: Any, source: tuple[np.ndarray, Any] | None = None) -> Any:
    """A library-owned ``capi.Memory`` of layout ``want_md`` holding ``w`` (described by
    ``user_md``): made by one reorder the first time, the same memory for every later primitive
    asking for that layout of the same weight memory. The caller must not write to it.
    ``source``: (array, its descriptor) holding exactly ``w``'s values in another layout, read by
    that reorder instead of ``w`` (whose mapped .om pages the loader dropped from memory: reading
    them would fault them back in); the entry is still ``w``'s."""
    key = weight_key(w)
    while True:
        with _locked():
            mem = _lookup(key, user_md, want_md)
            ticket = None if mem is None else mem.ticket
            if mem is not None and (ticket is None or ticket.done() or ticket.owner == threading.get_ident()):
                _counts["reused"] += 1
                return mem  # (one this thread's block queued: the block's end reports its failure)
        if mem is None or ticket is None:
            break
        # queued by another thread's plan build: wait for it here, and pack it again if it failed
        # (a primitive bound to it would raise that build's error at every run of this one)
        ticket.settle()
    src, src_md = source if source is not None else (w, user_md)
    mem = capi_ops.reorder(src_md, capi.ptr(src), want_md, keep=src)  # (queued while a plan builds)
    with _locked():
        lst = _entries.get(key)
        if lst is None:
            lst = _entries[key] = []
            weakref.finalize(owner(w), _drop, key)
        lst.append(_Packing(user_md, want_md, mem))
        _counts["packed"] += 1
        n = want_md.size()
        _counts["bytes"] += n
        weakref.finalize(mem, _freed, n)
    return mem


def forget(w: np.ndarray) -> None:
    """Let the cache's references to the packings of ``w``'s memory (as ``packed`` keyed it) go: a
    kernel that moved the weight to another layout lets the packed copy go once the last primitive
    bound to it goes. Until then (another plan's primitive still reads it) a later ``packed`` of ``w``
    in that layout is served the same memory; after, it reorders ``w`` again. Bytes held count a
    packing until it is freed."""
    key = weight_key(w)
    with _locked():
        lst = _entries.get(key)
        if lst:
            # (weakened, the key kept: the owner's finalizer stays the key's only one; a removed key got
            # a new finalizer at every repack, one more per layout switch for the weight's lifetime)
            for p in lst:
                p.strong = None
            lst[:] = [p for p in lst if p.ref() is not None]


def invalidate(w: np.ndarray) -> None:
    """``w``'s memory now holds other values (an npu parameter written in place: same address): no
    later ``packed`` of it is served a packing made before, which stays alive (and counted in bytes
    held) only while a primitive bound to it does. ``forget`` is for a layout switch of unchanged
    values, whose packing may still be shared."""
    key = weight_key(w)
    with _locked():
        lst = _entries.get(key)
        if lst:
            lst.clear()  # (the key and its owner's finalizer stay: one finalizer per weight memory)


def _after_fork_in_child() -> None:
    """A packing another thread's plan build had queued at the fork never runs here (its helper
    thread is not in the child): forget it, so the child packs that weight again instead of
    waiting for it for ever. The lock may have been held by such a thread too."""
    global _lock
    _lock = threading.Lock()
    while _pending:
        _drop_now(_pending.pop())
    while _pending_freed:
        _counts["bytes"] -= _pending_freed.pop()
    for key in list(_entries):
        kept = []
        for p in _entries[key]:
            t = getattr(p.memory(), "ticket", None)
            if t is None or t.done():
                kept.append(p)
        _entries[key] = kept


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def stats() -> PackedStats:
    """Counters over the process (every model)."""
    with _locked():
        return PackedStats(_counts["packed"], _counts["reused"], _counts["bytes"],
                           sum(1 for v in _entries.values() if any(p.memory() is not None for p in v)))
