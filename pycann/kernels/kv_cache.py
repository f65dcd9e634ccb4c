"""The plan kernel of ``pycann.CacheAppend``: a KV cache appended in place (ops/cache_append.py).

``present = Concat(past, new, axis)``, computed so that a decode loop does not copy its past:

* ``present`` is a view of a **cache buffer**: an array of ``past``'s shape whose ``axis`` has
  room for more rows than it holds (the capacity). The buffer records how many rows are
  **filled**, i.e. have been handed out in some view.
* When ``past`` is such a view, starting at the buffer's first row with the buffer's strides and
  exactly ``filled`` rows long (the ``present`` a previous step returned, fed back), and ``new``
  fits in the rows left, ``new`` is written into the rows after ``filled`` and ``present`` is the
  longer view: one copy of ``new``, none of the past.
* Any other ``past`` (the caller's own array, an older or trimmed view, a copy, a view of another
  layout) gets a new buffer: ``past`` and ``new`` are copied into it, as Concat would.
* With ``round_to`` (ops/cache_append.py) a new buffer takes ``past`` rounded through that dtype, and
  only a buffer made under the same ``round_to`` is appended to (its rows are rounded already).

Why this is the same as Concat for every caller: a buffer's rows below ``filled`` are never
written again, and every view handed out covers only such rows. Appending writes rows no view
covers (the claim of ``filled`` is atomic, so two threads feeding the same ``past`` cannot both
append: the second copies). Views are read-only, so nothing else writes those rows either: a
caller that writes into a ``present`` gets numpy's "assignment destination is read-only" instead
of silently changing the ``past`` another ``present`` shares (``present.copy()`` is writable).
Unlike ONNX Runtime's outputs, a ``present`` is therefore read-only and, when ``axis`` is not the
outermost dim of size > 1, not C-contiguous (CANN's IncreFlashAttention and ORT GenAI's
``past_present_share_buffer`` hand out a shared cache buffer the same way).

Capacity: ``needed + max(needed // 4, RESERVE_ROWS)`` rows when a buffer is made, so a buffer serves
``RESERVE_ROWS`` decode steps (or a quarter of its length) before the next copy. It holds up to
``RESERVE_ROWS`` rows more than a short cache uses (64 rows of a 6-layer 768-wide GPT-2: 2.4 MB for
its 12 caches; of a 32-layer 4096-wide model, 64 MB against its 28 GB of weights) and 1.25x a long
one.

Released pages: each buffer is larger than the one it replaces, so the C heap cannot reuse the freed
one for the next, and under pycann's allocator policy (``runtime/host_allocator.py``: freed memory is
kept, blocks up to 32 MiB come from the heap) the freed buffers stayed resident: a decode loop's RSS
grew to ~2x its caches (16 caches of 18 MiB: +587 MiB for 299 MiB of buffers). When a buffer of
``RELEASE_BYTES`` or more that was appended to in place dies, the whole pages inside its data are given back to the OS
(``madvise(MADV_DONTNEED)``, Linux) before numpy frees it; the heap's own bookkeeping lives in the
block's first and last bytes, which stay. The next block the heap carves there faults in zeroed pages.

The buffer array itself is read-only too (its one writer, the append below, sets it writable for
the write, under the buffer's lock): so ``present.flags.writeable = True`` raises instead of opening
the shared rows to writes. ``torch.from_numpy(present)`` only warns and gives a writable tensor over
the same memory: an in-place torch op on it changes the presents that share those rows (use
``present.copy()``).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.errors import OperandError
from pycann.kernels.providers import omp_fork
from pycann.ops.cache_append import rounded_past
from pycann.ops.shape_utils import normalize_axis

__all__ = ["RELEASE_BYTES", "RESERVE_ROWS", "cache_view", "k_cache_append", "live_buffers"]

RESERVE_ROWS = 64  # rows a new buffer keeps free past the quarter of its length (decode steps between copies)
RELEASE_BYTES = 64 << 10  # buffers from this size give their pages back when they die (module doc)
_MADV_DONTNEED = 4  # <sys/mman.h> on Linux
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _madvise() -> Any:
    """libc's ``madvise`` (Linux), or None where there is none to call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()


def _release(address: int, nbytes: int) -> None:
    """Drop the resident pages wholly inside ``[address, address + nbytes)``, the data of a buffer
    being freed (its contents are dead; the allocator's headers around it are not touched)."""
    start = -(-address // _PAGE) * _PAGE
    stop = (address + nbytes) // _PAGE * _PAGE
    if _MADVISE is not None and stop > start:
        _MADVISE(start, stop - start, _MADV_DONTNEED)


def _dead() -> None:
    return None


@dataclass
class _Buffer:
    """A cache buffer's bookkeeping: the array (weakly), its axis, how many rows are filled, its
    dims other than ``axis`` and the view handed out last (weakly: the next step's ``past``)."""

    ref: weakref.ref[np.ndarray]
    axis: int
    filled: int
    others: tuple[int, ...]
    last: Any = _dead  # weakref.ref of the last view, or a function answering None
    rounded: int = 0  # CacheAppend's round_to its rows were written under (0: as given)
    # (released in a forked child if a parent thread was appending at the fork: ``omp_fork.fork_safe``)
    lock: threading.Lock = field(default_factory=lambda: omp_fork.fork_safe(threading.Lock()))


_LIVE: dict[int, _Buffer] = {}  # id(buffer array) -> bookkeeping, while the array lives


def _after_fork_in_child() -> None:
    """A parent thread inside ``_write`` at the fork (its lock is released in the child:
    ``omp_fork.fork_safe``) left its buffer writable: read-only again, so no ``present`` of it can
    be made writable in the child (module doc)."""
    for b in list(_LIVE.values()):
        owner = b.ref()
        if owner is not None:
            owner.flags.writeable = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def live_buffers() -> int:
    """How many cache buffers are alive (referenced by some view a caller holds)."""
    return len(_LIVE)


def _buffer_of(a: Any) -> tuple[np.ndarray, _Buffer] | None:
    """``a``'s cache buffer and its bookkeeping when ``a`` is a view of a live one, else None."""
    if a.__class__ is not np.ndarray:
        return None
    owner = a.base
    if owner is None:
        return None
    b = _LIVE.get(id(owner))
    if b is None or b.ref() is not owner:
        return None
    return owner, b


def cache_view(a: Any) -> bool:
    """Whether ``a`` is a view of a live cache buffer (a ``present`` of CacheAppend): read-only by
    design, handed to the caller as is (``ge/run/model.py`` copies other read-only outputs)."""
    return _buffer_of(a) is not None


def _prefix(past: np.ndarray, owner: np.ndarray, axis: int) -> bool:
    """``past`` is ``owner``'s leading rows along ``axis``: same start, strides, dtype and other dims."""
    return (past.dtype == owner.dtype and past.ndim == owner.ndim and past.strides == owner.strides
            and past.__array_interface__["data"][0] == owner.__array_interface__["data"][0]
            and all(p == o for i, (p, o) in enumerate(zip(past.shape, owner.shape)) if i != axis))


def _rows(nd: int, axis: int, start: int, stop: int) -> tuple[slice, ...]:
    idx = [slice(None)] * nd
    idx[axis] = slice(start, stop)
    return tuple(idx)


def _write(owner: np.ndarray, b: _Buffer, rows: tuple[slice, ...], new: np.ndarray) -> None:
    """``owner[rows] = new`` on the read-only buffer: writable only for the write, under its lock
    (another buffer's writes never touch this flag; rows claimed by this call only)."""
    with b.lock:
        owner.flags.writeable = True
        try:
            owner[rows] = new
        finally:
            owner.flags.writeable = False


def _view(owner: np.ndarray, b: _Buffer, rows: int) -> np.ndarray:
    v = owner[_rows(owner.ndim, b.axis, 0, rows)]
    v.flags.writeable = False
    b.last = weakref.ref(v)
    return v


def _check(past: Any, new: Any, axis: int) -> None:
    """Concat's operand rules for two arrays (before any write into a buffer)."""
    if not isinstance(past, np.ndarray) or not isinstance(new, np.ndarray):
        raise OperandError(f"CacheAppend takes two arrays, got {type(past).__name__} and {type(new).__name__}")
    if past.ndim != new.ndim:
        raise OperandError(f"CacheAppend: past {list(past.shape)} and new {list(new.shape)} have different ranks")
    if past.dtype != new.dtype:
        raise OperandError(f"CacheAppend: past is {past.dtype} and new is {new.dtype}; Concat takes one dtype")
    for i, (p, n) in enumerate(zip(past.shape, new.shape)):
        if i != axis and p != n:
            raise OperandError(f"CacheAppend: past {list(past.shape)} and new {list(new.shape)} differ on "
                               f"non-concat axis {i} (concat axis {axis})")


def k_cache_append(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """``[Concat(past, new, axis)]`` as a read-only view of a cache buffer (module doc).

    inputs: ``past`` [..., P, ...] and ``new`` [..., N, ...] (``P``, ``N`` on ``axis``, any dtype,
    equal otherwise); returns ``present`` [..., P + N, ...]. Raises ``OperandError`` on operands
    Concat refuses (rank, dtype or a non-concat dim differ)."""
    past, new = inputs[0], inputs[1]
    round_to = int(attrs.get("round_to", 0))
    base: Any = getattr(past, "base", None)
    b = _LIVE.get(id(base)) if base is not None else None
    buf = b.ref() if b is not None else None
    # (round_to: only a buffer whose rows were rounded the same way holds Concat's values for them)
    if b is not None and buf is not None and buf is base and b.last() is past and b.rounded == round_to:
        # ``past`` is the view this buffer handed out last (a decode loop feeding ``present`` back):
        # its geometry is the buffer's own, only ``new`` needs Concat's checks (one step: ~4 us)
        axis = b.axis
        if new.__class__ is np.ndarray and new.dtype is past.dtype and new.ndim == past.ndim \
                and new.shape[:axis] + new.shape[axis + 1:] == b.others:
            p, n = past.shape[axis], new.shape[axis]
            if p + n <= buf.shape[axis] and int(attrs["axis"]) % past.ndim == axis:
                with b.lock:
                    claimed = b.filled == p
                    if claimed:
                        b.filled = p + n
                if claimed:  # rows p .. p+n are this call's alone: no view covers them yet
                    _write(buf, b, _rows(past.ndim, axis, p, p + n), new)
                    return [_view(buf, b, p + n)]
    nd = getattr(past, "ndim", 0)
    axis = normalize_axis(int(attrs["axis"]), nd, "CacheAppend: ")
    _check(past, new, axis)
    p, n = past.shape[axis], new.shape[axis]
    found = _buffer_of(past)
    if found is not None:
        owner, b = found
        if b.axis == axis and p + n <= owner.shape[axis] and _prefix(past, owner, axis) and b.rounded == round_to:
            with b.lock:
                claimed = b.filled == p
                if claimed:
                    b.filled = p + n
            if claimed:
                _write(owner, b, _rows(nd, axis, p, p + n), new)
                return [_view(owner, b, p + n)]
    need = p + n
    shape = list(past.shape)
    shape[axis] = need + max(need // 4, RESERVE_ROWS)
    owner = np.empty(shape, dtype=past.dtype)
    owner[_rows(nd, axis, 0, p)] = rounded_past(past, round_to) if round_to and p else past
    owner[_rows(nd, axis, p, need)] = new
    owner.flags.writeable = False  # (module doc: no view of it can be made writable)
    b = _Buffer(weakref.ref(owner, _on_death(id(owner), owner, need)), axis, need, past.shape[:axis] + past.shape[axis + 1:],
                rounded=round_to)
    _LIVE[id(owner)] = b
    return [_view(owner, b, need)]


def _on_death(key: int, owner: np.ndarray, made_with: int) -> Any:
    """The callback of a buffer's weak reference: forget its bookkeeping and, for a large buffer that
    was appended to in place, give its pages back (module doc). One never appended to (a caller that
    copies each ``present``, pyACL's path: a buffer a step) is freed as before: the next step's
    buffer reuses its pages, where dropped pages would fault again (2x its step). numpy calls this
    from the array's deallocation, before the data is freed; a plain weakref callback, unlike
    ``weakref.finalize``, never runs at exit while the array lives."""
    address, nbytes = owner.__array_interface__["data"][0], owner.nbytes
    big = nbytes >= RELEASE_BYTES

    def dead(_: Any) -> None:
        b = _LIVE.pop(key, None)
        if big and b is not None and b.filled > made_with:
            _release(address, nbytes)
    return dead
