"""TPipe, TQue and TBuf: on-chip buffer management and the queue hand-over (reference 1.6).

``pipe.InitBuffer(que, num, len)`` carves ``num`` buffers of ``len`` bytes (rounded up to 32 B,
or the position's alignment) out of the position's physical memory; the twin checks the total
against the SoC's capacity and the per-position buffer count against its hardware event ids.
EnQue/DeQue are the producer/consumer hand-over (a set/wait pair on the device): after DeQue
every pipe may read the buffer.
"""

from __future__ import annotations

from collections import deque

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule, user_location
from pycann.ascendc.dtypes import ElemType, elem, uint8_t
from pycann.ascendc.enums import HardEvent, Memory, TPosition
from pycann.ascendc.local import Buffer, BufState, LocalTensor


def _round_up(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class TQue:
    """``TQue<pos, depth>``: a queue of ``num`` buffers between two pipeline stages."""

    def __init__(self, pos: TPosition, depth: int = 1) -> None:
        if not isinstance(pos, TPosition):
            raise TypeError(f"TQue position must be a TPosition, got {pos!r}")
        self.pos, self.depth = pos, int(depth)
        self.buffers: list[Buffer] = []
        self.fifo: deque[Buffer] = deque()
        self.core: _core.CoreState | None = None
        self._next = 0

    def _ready(self, api: str) -> _core.CoreState:
        c = _core.current()
        if not self.buffers:
            c.report(Rule.NO_INIT_BUFFER, api, f"{self.pos.name} queue used before pipe.InitBuffer", abort=True)
        return c

    def AllocTensor(self, dtype: ElemType | type = uint8_t) -> LocalTensor:
        """A free buffer of this queue as ``LocalTensor<dtype>`` (NaN-filled until written)."""
        c = self._ready("AllocTensor")
        n = len(self.buffers)  # round-robin from the last allocation: the device's ping-pong
        for b in (self.buffers[(self._next + j) % n] for j in range(n)):
            if b.state == BufState.FREE:
                self._next = (self.buffers.index(b) + 1) % n
                b.state, b.gen = BufState.ALLOCATED, b.gen + 1
                b.alloc_where = user_location()
                c.fresh(b.mem, slice(b.offset, b.offset + b.nbytes))
                return LocalTensor(b, elem(dtype))
        c.report(Rule.ALLOC_EXHAUSTED, "AllocTensor",
                 f"all {len(self.buffers)} {self.pos.name} buffers are in use (FreeTensor missing?); "
                 "the device waits forever", abort=True)
        raise AssertionError  # unreachable: report(abort=True) raises

    def EnQue(self, t: LocalTensor) -> bool:
        """Hand ``t`` to the consumer stage."""
        c = self._ready("EnQue")
        t.live(c, "EnQue")
        if t.buf.owner is not self:
            c.report(Rule.WRONG_POSITION, "EnQue", f"EnQue of a {t.buf.position.name} tensor into a "
                     f"{self.pos.name} queue it was not allocated from", abort=True)
        if t.buf.state == BufState.ENQUEUED:
            c.report(Rule.DEPTH_EXCEEDED, "EnQue", "tensor is already in the queue")
            return False
        if self.depth >= 1 and len(self.fifo) >= self.depth:
            c.report(Rule.DEPTH_EXCEEDED, "EnQue", f"EnQue #{len(self.fifo) + 1} on a depth-{self.depth} "
                     f"{self.pos.name} queue without DeQue (raise TQue's depth or DeQue first)")
        t.buf.state = BufState.ENQUEUED
        self.fifo.append(t.buf)
        return True

    def DeQue(self, dtype: ElemType | type = uint8_t) -> LocalTensor:
        """The oldest EnQue'd tensor, as ``LocalTensor<dtype>``; readable by every pipe."""
        c = self._ready("DeQue")
        if not self.fifo:
            c.report(Rule.DEQUE_EMPTY, "DeQue", f"DeQue on an empty {self.pos.name} queue (no EnQue before it); "
                     "the device waits forever", abort=True)
        b = self.fifo.popleft()
        b.state = BufState.DEQUEUED
        c.handover(b.mem, slice(b.offset, b.offset + b.nbytes))
        return LocalTensor(b, elem(dtype))

    def FreeTensor(self, t: LocalTensor) -> None:
        """Give ``t``'s buffer back to the queue."""
        c = self._ready("FreeTensor")
        b = t.buf
        if b.owner is not self:
            c.report(Rule.WRONG_POSITION, "FreeTensor", f"FreeTensor of a {b.position.name} tensor into a "
                     f"{self.pos.name} queue it was not allocated from")
            return
        if b.state == BufState.FREE or t.gen != b.gen:
            c.report(Rule.DOUBLE_FREE, "FreeTensor", f"{self.pos.name} buffer is already free "
                     f"(allocated at {b.alloc_where or '?'})")
            return
        if b.state == BufState.ENQUEUED:
            self.fifo.remove(b)
            c.report(Rule.WRONG_POSITION, "FreeTensor", "FreeTensor of a tensor still in the queue (DeQue it first)")
        b.state = BufState.FREE

    def VacantInQue(self) -> bool:
        return self.depth < 1 or len(self.fifo) < self.depth

    def HasTensorInQue(self) -> bool:
        return bool(self.fifo)

    def GetTensorCountInQue(self) -> int:
        return len(self.fifo)

    def HasIdleBuffer(self) -> bool:
        return any(b.state == BufState.FREE for b in self.buffers)


TQueBind = TQue


class TBuf:
    """``TBuf<pos>``: plain scratch memory (no queue); ``Get<T>()`` views it."""

    def __init__(self, pos: TPosition = TPosition.VECCALC) -> None:
        self.pos = pos
        self.buffer: Buffer | None = None

    def Get(self, dtype: ElemType | type = uint8_t, count: int | None = None) -> LocalTensor:
        """The whole buffer (or its first ``count`` elements) as ``LocalTensor<dtype>``."""
        c = _core.current()
        if self.buffer is None:
            c.report(Rule.NO_INIT_BUFFER, "TBuf.Get", "TBuf used before pipe.InitBuffer", abort=True)
        t = LocalTensor(self.buffer, elem(dtype))  # type: ignore[arg-type]
        if count is not None:
            if count > t.size:
                c.report(Rule.OUT_OF_BOUNDS, "TBuf.Get", f"Get of {count} elements from a {t.size}-element TBuf")
            t.size = int(count)
        return t

    def GetWithOffset(self, dtype: ElemType | type, size: int, offset: int) -> LocalTensor:
        """``size`` elements starting ``offset`` bytes into the buffer."""
        d = elem(dtype)
        t = self.Get(uint8_t)
        out = LocalTensor(t.buf, d, int(offset) // d.size, int(size))
        return out

    # CANN names the method the same; kernels call it as tbuf.Get<T>()


class TPipe:
    """The buffer and event manager of one core (``GetTPipePtr()`` returns it)."""

    def __init__(self) -> None:
        self.core = _core.current()
        self.core.pipes.append(self)
        self.per_position: dict[TPosition, int] = {}
        self.event_pool: dict[HardEvent, list[int]] = {}

    def InitBuffer(self, que: TQue | TBuf, num: int, length: int | None = None) -> bool:
        """``InitBuffer(que, num, len)`` or ``InitBuffer(tbuf, len)``: reserve on-chip memory."""
        c = self.core
        if isinstance(que, TBuf):
            nbytes, count = int(num), 1
        else:
            if length is None:
                raise TypeError("InitBuffer(que, num, len): len missing")
            nbytes, count = int(length), int(num)
        if nbytes <= 0 or count <= 0:
            c.report(Rule.BAD_PARAM, "InitBuffer", f"num={count}, len={nbytes}: both must be positive", abort=True)
        kind = que.pos.physical
        if kind == Memory.GM:
            c.report(Rule.WRONG_POSITION, "InitBuffer", "GM is not an on-chip position", abort=True)
        mem = c.mem(kind)
        a = max(32, c.soc.align.get(kind, 32))
        size = _round_up(nbytes, a)
        limit = c.soc.ub_usable if kind == Memory.UB else mem.capacity
        start = _round_up(mem.top, a)
        if start + size * count > limit:
            c.report(Rule.CAPACITY, "InitBuffer",
                     f"{que.pos.name} needs {count} x {size} B at offset {start}: {start + size * count} B > "
                     f"{limit} B of {kind.value} on {c.soc.name}; shrink the tile or the buffer count", abort=True)
        mem.top = start + size * count
        if isinstance(que, TBuf):
            if que.buffer is not None:
                c.report(Rule.BAD_PARAM, "InitBuffer", "TBuf initialised twice")
            que.buffer = Buffer(mem, start, size, que.pos, que)
            que.buffer.state = BufState.SCRATCH
            return True
        if que.buffers:
            c.report(Rule.BAD_PARAM, "InitBuffer", f"{que.pos.name} queue initialised twice")
        que.buffers = [Buffer(mem, start + i * size, size, que.pos, que) for i in range(count)]
        que.core = c
        c.queues.append(que)
        used = self.per_position.get(que.pos, 0) + count
        self.per_position[que.pos] = used
        if used > c.soc.event_ids:
            c.report(Rule.EVENT_ID_LIMIT, "InitBuffer", f"{used} {que.pos.name} queue buffers; {c.soc.name} has "
                     f"{c.soc.event_ids} hardware events per position (each TQue buffer takes one)")
        return True

    def AllocEventID(self, event: HardEvent) -> int:
        """A free event id for ``event`` (``ReleaseEventID`` gives it back)."""
        used = self.event_pool.setdefault(event, [])
        for i in range(self.core.soc.event_ids):
            if i not in used:
                used.append(i)
                return i
        self.core.report(Rule.EVENT_ID_LIMIT, "AllocEventID", f"all {self.core.soc.event_ids} {event.name} "
                         "event ids are taken", abort=True)
        raise AssertionError

    FetchEventID = AllocEventID

    def ReleaseEventID(self, event: HardEvent, eid: int) -> None:
        used = self.event_pool.get(event, [])
        if eid in used:
            used.remove(eid)

    def Destroy(self) -> None:
        """Release the pipe's buffers (CANN: end of kernel)."""

    def Reset(self) -> None:
        for m in self.core.mems.values():
            m.top = 0
        self.per_position.clear()


def GetTPipePtr() -> TPipe:
    """The core's (first) TPipe."""
    c = _core.current()
    if not c.pipes:
        c.report(Rule.NO_INIT_BUFFER, "GetTPipePtr", "no TPipe constructed on this core", abort=True)
    return c.pipes[0]


def end_of_core_checks(c: _core.CoreState) -> None:
    """Leaks: every queue buffer must be free when the kernel returns."""
    for q in c.queues:
        for b in q.buffers:
            if b.state != BufState.FREE:
                how = {BufState.ENQUEUED: "EnQue'd and never DeQue'd",
                       BufState.ALLOCATED: "allocated and never freed",
                       BufState.DEQUEUED: "DeQue'd and never freed"}.get(b.state, b.state.value)
                c.report(Rule.LEAK, "FreeTensor", f"{q.pos.name} tensor {how} when the kernel returned",
                         where=b.alloc_where or None)
