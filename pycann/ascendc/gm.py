"""Global memory: GmAlloc/GmFree, the GM_ADDR pointer and GlobalTensor (reference 1.2, 1.8, 1.18).

A ``GmAddr`` is a typed pointer: ``x.As(half) + n`` moves by n halves, as ``(__gm__ half*)x + n``
does in C. Each GM buffer remembers which core last wrote each byte during a launch, so the twin
can report cores writing over each other.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule, user_location
from pycann.ascendc.dtypes import ElemType, elem, uint8_t

ATOMIC = -2  # writer mark of atomic-add writes


class GmBuffer:
    """One GmAlloc'ed block of global memory."""

    def __init__(self, nbytes: int) -> None:
        if nbytes <= 0:
            raise ValueError(f"GmAlloc({nbytes}): size must be positive")
        self.nbytes = nbytes
        self.data = np.zeros(nbytes, np.uint8)
        self.writer = np.full(nbytes, -1, np.int16)
        self.freed = False
        self.where = user_location()


class GmAddr:
    """``__gm__ T*``: a GM buffer, a byte offset and the element type T (uint8_t for GM_ADDR)."""

    __slots__ = ("buf", "offset", "dtype")

    def __init__(self, buf: GmBuffer, offset: int = 0, dtype: ElemType = uint8_t) -> None:
        self.buf, self.offset, self.dtype = buf, offset, dtype

    def As(self, dtype: ElemType | type) -> GmAddr:
        """``(__gm__ T*)ptr``: the same address read as ``dtype`` elements."""
        return GmAddr(self.buf, self.offset, elem(dtype))

    def __add__(self, n: int) -> GmAddr:
        return GmAddr(self.buf, self.offset + int(n) * self.dtype.size, self.dtype)

    def numpy(self, dtype: np.dtype | type | ElemType | None = None) -> np.ndarray:
        """Host view of the buffer from this address on, as ``dtype`` (default: this pointer's type)."""
        d = elem(dtype).np_dtype if dtype is not None else self.dtype.np_dtype
        raw = self.buf.data[self.offset:]
        return raw[: raw.size // d.itemsize * d.itemsize].view(d)

    def __repr__(self) -> str:
        return f"GmAddr({self.dtype.name}*, +{self.offset} of {self.buf.nbytes} B)"


GM_ADDR = GmAddr


def GmAlloc(nbytes: int) -> GmAddr:
    """Allocate ``nbytes`` of global memory (zero-filled); returns a GM_ADDR (uint8_t pointer)."""
    return GmAddr(GmBuffer(int(nbytes)))


def GmFree(addr: GmAddr) -> None:
    """Release a GmAlloc'ed buffer; a second GmFree raises ``ValueError``."""
    if addr.buf.freed:
        raise ValueError(f"GmFree: buffer allocated at {addr.buf.where} is already free")
    addr.buf.freed = True


class GlobalTensor:
    """``GlobalTensor<T>``: a typed view of GM bound by SetGlobalBuffer; ``gm[i]`` views from element i."""

    def __init__(self, dtype: ElemType | type = uint8_t) -> None:
        self.dtype = elem(dtype)
        self.addr: GmAddr | None = None
        self.size: int | None = None   # elements, from SetGlobalBuffer
        self.elem_off = 0

    def SetGlobalBuffer(self, addr: GmAddr, bufferSize: int | None = None) -> None:
        """Bind to ``addr`` (any pointer type; read as T) holding ``bufferSize`` elements."""
        if not isinstance(addr, GmAddr):
            raise TypeError(f"SetGlobalBuffer expects a GM address (GM_ADDR), got {type(addr).__name__}")
        self.addr = GmAddr(addr.buf, addr.offset, self.dtype)
        self.size = None if bufferSize is None else int(bufferSize)
        self.elem_off = 0
        c = _core._CURRENT.get()
        if c is not None and addr.offset % self.dtype.size:
            c.report(Rule.ALIGN_GM, "SetGlobalBuffer",
                     f"GM address +{addr.offset} B is not aligned to sizeof({self.dtype.name})={self.dtype.size}")

    def __getitem__(self, offset: int) -> GlobalTensor:
        g = GlobalTensor(self.dtype)
        g.addr, g.size, g.elem_off = self.addr, self.size, self.elem_off + int(offset)
        return g

    def GetSize(self) -> int:
        return (self.size or 0) - self.elem_off

    def byte_offset(self) -> int:
        if self.addr is None:
            raise RuntimeError("GlobalTensor used before SetGlobalBuffer")
        return self.addr.offset + self.elem_off * self.dtype.size

    def GetValue(self, i: int) -> Any:
        """Scalar read (PIPE_S)."""
        c = _core.current()
        self._bounds(c, i, 1, "GetValue", write=False)
        off = self.byte_offset() + int(i) * self.dtype.size
        return self.addr.buf.data[off: off + self.dtype.size].view(self.dtype.np_dtype)[0]  # type: ignore[union-attr]

    def SetValue(self, i: int, value: object) -> None:
        """Scalar write (PIPE_S)."""
        c = _core.current()
        self._bounds(c, i, 1, "SetValue", write=True)
        off = self.byte_offset() + int(i) * self.dtype.size
        buf = self.addr.buf  # type: ignore[union-attr]
        buf.data[off: off + self.dtype.size].view(self.dtype.np_dtype)[0] = value
        record_gm_write(c, buf, off, self.dtype.size, "SetValue")

    def _bounds(self, c: _core.CoreState, start: int, count: int, api: str, write: bool) -> None:
        """Checks an access of elements [start, start+count) of this view (raises on a GM fault)."""
        if self.addr is None:
            c.report(Rule.NO_INIT_BUFFER, api, "GlobalTensor used before SetGlobalBuffer", abort=True)
        first = self.elem_off + int(start)
        if self.size is not None and (first < 0 or first + count > self.size):
            c.report(Rule.OUT_OF_BOUNDS, api,
                     f"{'writes' if write else 'reads'} GM elements [{first}, {first + count}) of a "
                     f"GlobalTensor<{self.dtype.name}> of {self.size} (SetGlobalBuffer size)")
        lo = self.addr.offset + first * self.dtype.size  # type: ignore[union-attr]
        hi = lo + count * self.dtype.size
        if lo < 0 or hi > self.addr.buf.nbytes:  # type: ignore[union-attr]
            c.report(Rule.OUT_OF_BOUNDS, api, f"GM bytes [{lo}, {hi}) outside the {self.addr.buf.nbytes}-byte "  # type: ignore[union-attr]
                     "GmAlloc buffer (a device fault)", abort=True)
        if self.addr.buf.freed:  # type: ignore[union-attr]
            c.report(Rule.USE_FREED, api, "GM buffer already GmFree'd", abort=True)


def record_gm_write(c: _core.CoreState, buf: GmBuffer, off: int, nbytes: int, api: str) -> None:
    """Remember core ``c`` wrote GM bytes [off, off+nbytes); report bytes another core wrote."""
    w = buf.writer[off: off + nbytes]
    me = ATOMIC if c.atomic is not None else c.idx
    clash = (w != -1) & (w != me)
    if me == ATOMIC:
        clash &= w != ATOMIC
    if clash.any():
        other = int(w[clash][0])
        who = "an atomic write" if other == ATOMIC else f"core {other}"
        c.report(Rule.CROSS_CORE_OVERLAP, api, f"writes GM bytes {off}..{off + nbytes} that {who} also wrote "
                 "in this launch (split the output per GetBlockIdx(), or use SetAtomicAdd)")
    w[:] = me
