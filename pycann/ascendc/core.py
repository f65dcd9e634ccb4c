"""Per-core state of the CPU twin: on-chip memories, the pipes' progress and the checks' bookkeeping.

Cores run one after another; ``current()`` is the core executing now. Every on-chip byte has
three shadow arrays: written (for never-written reads), the pipe that last wrote it and that
write's sequence number (for missing SetFlag/WaitFlag between pipes). A read by pipe Q of bytes
pipe P wrote at seq w is synchronised when Q has waited on a P->Q flag set at or after w, a
PipeBarrier<PIPE_ALL> came after w, or a TQue handed the buffer over (EnQue/DeQue).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pycann.ascendc.diagnostics import Finding, KernelAbort, Rule, Severity, user_location
from pycann.ascendc.enums import N_PIPES, HardEvent, KernelMode, Memory, Pipe
from pycann.ascendc.soc import SocSpec
from pycann.ascendc.trace import InstrRecord, Operand, TraceHook

NAN_FILL = 0xFF  # fresh buffers: all-ones bytes = NaN for half/float/bf16, -1 for ints


class MemSpace:
    """One physical on-chip memory of one core, with its shadow arrays."""

    def __init__(self, kind: Memory, capacity: int) -> None:
        self.kind = kind
        self.capacity = capacity
        self.data = np.full(capacity, NAN_FILL, np.uint8)
        self.written = np.zeros(capacity, bool)
        self.wpipe = np.full(capacity, -1, np.int8)
        self.wseq = np.zeros(capacity, np.int64)
        self.rpipe = np.full(capacity, -1, np.int8)   # last reader, for write-after-read hazards
        self.rseq = np.zeros(capacity, np.int64)
        self.top = 0  # TPipe's bump allocator


@dataclass
class RunState:
    """State shared by every core of one launch."""

    soc: SocSpec
    block_dim: int
    mode: KernelMode
    findings: list[Finding] = field(default_factory=list)
    seen: set[tuple[Rule, str, str]] = field(default_factory=set)
    trace: TraceHook | None = None
    gm_buffers: list[Any] = field(default_factory=list)


class CoreState:
    """One simulated core (AI Core, or AIV/AIC of split parts)."""

    def __init__(self, run: RunState, idx: int) -> None:
        self.run = run
        self.idx = idx
        self.soc = run.soc
        self.mems: dict[Memory, MemSpace] = {}
        self.seq = 0
        self.horizon = np.full((N_PIPES, N_PIPES), -1, np.int64)  # [src, dst]: src progress dst has seen
        self.flags: dict[tuple[HardEvent, int], tuple[int, str]] = {}
        self.queues: list[Any] = []
        self.pipes: list[Any] = []
        self.atomic: Any = None  # ElemType of SetAtomicAdd, or None
        self.log: list[str] = []
        self.where_override: str | None = None  # set by code generators (tbe) to blame the DSL line

    def mem(self, kind: Memory) -> MemSpace:
        m = self.mems.get(kind)
        if m is None:
            m = self.mems[kind] = MemSpace(kind, self.soc.capacity[kind])
        return m

    # ------------------------------------------------------------------ reporting
    def report(self, rule: Rule, api: str, message: str, severity: Severity = Severity.ERROR,
               abort: bool = False, where: str | None = None) -> None:
        """Record a finding at the kernel's current line; ``abort`` stops this core (device hang/fault)."""
        where = where or self.where_override or user_location()
        f = Finding(rule, api, where, self.idx, message, severity)
        key = (rule, where, api)
        if key not in self.run.seen:
            self.run.seen.add(key)
            self.run.findings.append(f)
        if abort:
            raise KernelAbort(f)

    # ------------------------------------------------------------------ instructions
    def issue(self, pipe: Pipe, api: str, dtype: Any, operands: tuple[Operand, ...] = (),
              params: tuple[tuple[str, int], ...] = ()) -> int:
        """Count one instruction on ``pipe`` (and trace it); returns its sequence number."""
        self.seq += 1
        hook = self.run.trace
        if hook is not None:
            hook(InstrRecord(self.idx, self.seq, pipe, api, getattr(dtype, "name", dtype), operands,
                             self.where_override or user_location(), params))
        return self.seq

    def check_pipe(self, pipe: Pipe, api: str) -> None:
        """UNSUPPORTED when the kernel mode's core has no such pipe (e.g. Mmad on an AIV)."""
        soc, mode = self.soc, self.run.mode
        if not soc.split or mode == KernelMode.MIX_MODE:
            return
        have = soc.aiv_pipes if mode == KernelMode.AIV_MODE else soc.aic_pipes
        if pipe not in have:
            core = "vector core (AIV_MODE)" if mode == KernelMode.AIV_MODE else "cube core (AIC_MODE)"
            self.report(Rule.UNSUPPORTED, api, f"{pipe.name} does not exist on a {soc.name} {core}; "
                        "use SetKernelMode(KernelMode.MIX_MODE) or move the work to the other core type",
                        abort=True)

    def read(self, mem: MemSpace, idx: slice | np.ndarray, pipe: Pipe, api: str, what: str) -> None:
        """Checks for a read of ``mem[idx]`` by ``pipe``: never-written bytes and missing sync."""
        w = mem.written[idx]
        if not w.all():
            n = int(w.size - np.count_nonzero(w))
            self.report(Rule.READ_UNINIT, api, f"{what} reads {n} byte(s) of {mem.kind.value} never written "
                        "since AllocTensor (the twin fills them with NaN)")
        wp = mem.wpipe[idx]
        other = (wp >= 0) & (wp != int(pipe))
        if other.any():
            ws = mem.wseq[idx][other]
            src = wp[other].astype(np.int64)
            late = ws > self.horizon[src, int(pipe)]
            if late.any():
                p = Pipe(int(src[late][0]))
                ev = f"{p.name[5:]}_{pipe.name[5:]}"
                self.report(Rule.MISSING_SYNC, api, f"{what} on {pipe.name} reads data {p.name} wrote without "
                            f"synchronisation: add SetFlag/WaitFlag<HardEvent::{ev}> (or pass it through a TQue)")
        mem.rpipe[idx] = int(pipe)
        mem.rseq[idx] = self.seq + 1  # the instruction about to issue

    def write(self, mem: MemSpace, idx: slice | np.ndarray, pipe: Pipe, seq: int, api: str = "") -> None:
        """Record a write by ``pipe``; a write over bytes another pipe still reads needs a flag (WAR)."""
        rp = mem.rpipe[idx]
        other = (rp >= 0) & (rp != int(pipe))
        if other.any():
            rs = mem.rseq[idx][other]
            src = rp[other].astype(np.int64)
            late = rs > self.horizon[src, int(pipe)]
            if late.any():
                p = Pipe(int(src[late][0]))
                ev = f"{p.name[5:]}_{pipe.name[5:]}"
                self.report(Rule.MISSING_SYNC, api or "write", f"{pipe.name} overwrites data {p.name} reads without "
                            f"synchronisation (write after read): add SetFlag/WaitFlag<HardEvent::{ev}> before it")
            mem.rpipe[idx] = np.where(other, -1, rp)
        mem.written[idx] = True
        mem.wpipe[idx] = int(pipe)
        mem.wseq[idx] = seq

    def handover(self, mem: MemSpace, idx: slice) -> None:
        """A TQue EnQue/DeQue synchronised this buffer for every pipe."""
        mem.wpipe[idx] = -1

    def fresh(self, mem: MemSpace, idx: slice) -> None:
        """A buffer (re)allocated: NaN sentinel, nothing written."""
        mem.data[idx] = NAN_FILL
        mem.written[idx] = False
        mem.wpipe[idx] = -1
        mem.rpipe[idx] = -1  # AllocTensor waited for the buffer's readers


_CURRENT: contextvars.ContextVar[CoreState | None] = contextvars.ContextVar("ascendc_core", default=None)


def current() -> CoreState:
    """The core now executing; ``RuntimeError`` outside a twin launch."""
    c = _CURRENT.get()
    if c is None:
        raise RuntimeError("Ascend C kernel APIs run inside a launch: call the kernel through "
                           "AscendC.ICPU_RUN_KF(kernel, blockDim, *args) (or run_kernel)")
    return c


def enter(core: CoreState | None) -> contextvars.Token:
    return _CURRENT.set(core)


def leave(token: contextvars.Token) -> None:
    _CURRENT.reset(token)


def GetBlockIdx() -> int:
    """The index of the core running this kernel instance, in [0, GetBlockNum())."""
    return current().idx


def GetBlockNum() -> int:
    """blockDim of the launch."""
    return current().run.block_dim
