"""LocalTensor: a typed view of an on-chip buffer handed out by TQue/TBuf (reference 1.8).

A handle remembers the allocation generation it came from: using it after FreeTensor (or after
the buffer was handed to someone else) is reported as use-after-free.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

import numpy as np

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule
from pycann.ascendc.dtypes import ElemType, elem
from pycann.ascendc.enums import Pipe, TPosition
from pycann.ascendc.trace import Operand

if TYPE_CHECKING:
    from pycann.ascendc.core import MemSpace


class BufState(enum.Enum):
    FREE = "free"
    ALLOCATED = "allocated"    # AllocTensor'ed, held by the kernel
    ENQUEUED = "enqueued"
    DEQUEUED = "dequeued"
    SCRATCH = "scratch"        # TBuf memory: always usable


class Buffer:
    """One of a queue's InitBuffer'ed buffers (or a TBuf's memory)."""

    def __init__(self, mem: MemSpace, offset: int, nbytes: int, position: TPosition, owner: Any) -> None:
        self.mem, self.offset, self.nbytes, self.position, self.owner = mem, offset, nbytes, position, owner
        self.state = BufState.FREE
        self.gen = 0
        self.alloc_where = ""


class LocalTensor:
    """``LocalTensor<T>``: ``size`` elements of ``dtype`` from element ``elem_off`` of ``buf``."""

    __slots__ = ("buf", "dtype", "elem_off", "size", "gen")

    def __init__(self, buf: Buffer, dtype: ElemType, elem_off: int = 0, size: int | None = None) -> None:
        self.buf, self.dtype, self.elem_off = buf, dtype, elem_off
        self.size = (buf.nbytes // dtype.size - elem_off) if size is None else size
        self.gen = buf.gen

    # ---------------------------------------------------------------- Ascend C methods
    def __getitem__(self, offset: int) -> LocalTensor:
        """``tensor[offset]``: the view from element ``offset`` (Ascend C's operator[])."""
        t = LocalTensor(self.buf, self.dtype, self.elem_off + int(offset), self.size - int(offset))
        t.gen = self.gen
        return t

    def GetSize(self) -> int:
        return self.size

    def GetPosition(self) -> TPosition:
        return self.buf.position

    def GetPhyAddr(self) -> int:
        return self.byte_offset

    def ReinterpretCast(self, dtype: ElemType | type) -> LocalTensor:
        """The same bytes as another element type."""
        d = elem(dtype)
        t = LocalTensor(self.buf, d, self.elem_off * self.dtype.size // d.size, self.size * self.dtype.size // d.size)
        t.gen = self.gen
        return t

    def GetValue(self, i: int) -> Any:
        """Scalar read on PIPE_S (needs a sync after a vector/MTE write, e.g. V_S)."""
        c = _core.current()
        sl = self.region(c, "GetValue", int(i), 1, align=False)  # scalar accesses need no alignment
        c.read(self.buf.mem, sl, Pipe.PIPE_S, "GetValue", "GetValue")
        c.issue(Pipe.PIPE_S, "GetValue", self.dtype)
        return self.view(int(i), 1)[0]

    def SetValue(self, i: int, value: Any) -> None:
        """Scalar write on PIPE_S."""
        c = _core.current()
        sl = self.region(c, "SetValue", int(i), 1, write=True, align=False)
        self.view(int(i), 1)[0] = value
        c.write(self.buf.mem, sl, Pipe.PIPE_S, c.issue(Pipe.PIPE_S, "SetValue", self.dtype), "SetValue")

    # ---------------------------------------------------------------- twin helpers
    @property
    def byte_offset(self) -> int:
        return self.buf.offset + self.elem_off * self.dtype.size

    @property
    def position(self) -> TPosition:
        return self.buf.position

    def view(self, start: int = 0, count: int | None = None) -> np.ndarray:
        """numpy view of elements [start, start+count) (no checks)."""
        n = self.size - start if count is None else count
        lo = self.byte_offset + start * self.dtype.size
        return self.buf.mem.data[lo: lo + n * self.dtype.size].view(self.dtype.np_dtype)

    def numpy(self) -> np.ndarray:
        """A copy of the tensor's elements (for printf-style debugging)."""
        return self.view().copy()

    def live(self, c: _core.CoreState, api: str) -> None:
        """USE_FREED when this handle's buffer was freed or reallocated since it was handed out."""
        b = self.buf
        if b.state == BufState.FREE or self.gen != b.gen:
            c.report(Rule.USE_FREED, api, f"uses a {b.position.name} tensor after FreeTensor "
                     f"(allocated at {b.alloc_where or '?'}); the buffer may already hold other data")

    def region(self, c: _core.CoreState, api: str, start: int, count: int, write: bool = False,
               align: bool = True) -> slice:
        """Byte slice of elements [start, start+count) in the memory, after liveness/bounds/alignment checks."""
        self.live(c, api)
        if start < 0 or start + count > self.size:
            c.report(Rule.OUT_OF_BOUNDS, api,
                     f"{'writes' if write else 'reads'} elements [{start}, {start + count}) of a "
                     f"{self.buf.position.name} LocalTensor<{self.dtype.name}> of {self.size} elements")
            count = max(0, min(count, self.size - start))
        lo = self.byte_offset + start * self.dtype.size
        a = c.soc.align.get(self.buf.mem.kind, 32)
        if align and start == 0 and lo % a:
            c.report(Rule.ALIGN_ADDR, api, f"{self.buf.mem.kind.value} address {lo} is not {a}-byte aligned "
                     f"(tensor offset {self.elem_off} x {self.dtype.size} B)")
        hi = min(lo + count * self.dtype.size, self.buf.mem.capacity)
        return slice(lo, hi)

    def operand(self, count: int, out: bool = False) -> Operand:
        return Operand(self.buf.position.name, self.dtype.name, count, count * self.dtype.size, out,
                       self.byte_offset)

    def __repr__(self) -> str:
        return f"LocalTensor<{self.dtype.name}>({self.buf.position.name}, +{self.byte_offset} B, {self.size})"
