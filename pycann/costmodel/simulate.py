"""List scheduling of a twin trace on a Da Vinci core's pipes (reference 3.6, 3.10, 7.4).

Per core: the scalar unit dispatches instructions in program order (``issue_cycles`` each); every
pipe executes its own instructions in order; an instruction starts when its pipe is free, it has
been dispatched, and its dependencies are met:

* ``WaitFlag<src_dst>(id)`` waits for the matching ``SetFlag`` (which completes after all earlier
  work of the source pipe); ``PipeBarrier<PIPE_ALL>`` waits for every pipe;
* data hazards on on-chip memory (32-byte granules): a read waits for the last write (RAW, what
  a TQue EnQue/DeQue pair guarantees), a write waits for earlier reads and writes (WAR/WAW, what
  AllocTensor of a freed queue buffer guarantees). A correct kernel synchronises every such
  hazard (the twin checks), so this is the queue's ordering, per buffer.

GM: an MTE2 read of a (buffer, offset, size) already read in this launch hits L2 (``l2_read_rate``)
while the launch's unique reads fit in L2; otherwise it gets the core's HBM share,
min(ddr_rate, HBM bandwidth / active cores). A range that several cores read (the launch's records
show it, or the record's ``sharers`` param says how many cores read it when only one core's records
are simulated) gets its HBM share / (1 + ``same_address_loss``) for the part that misses L2: same-address
GM accesses from many cores are serialised at the memory; an L2 hit is served from the cache. ``blockDim`` above the core count runs in waves.

Mix kernels (Atlas A2 cube + vector, e.g. FlashAttention, ``fa_trace.py``): a record's ``side``
param (0 = the AIC, 1/2 = its two AIVs) gives it its own set of pipes, so one simulated "core" is an
AIC with its AIV pair; a cross-core ``WaitFlag`` carries a ``latency`` param (cycles after the
matching ``SetFlag`` fires). A GM access with the ``l2ws`` param touches an L2-resident workspace
(written and read back in the launch): reads at ``l2_read_rate``, writes at ``l2_write_rate``.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from pycann.ascendc.enums import N_PIPES, Pipe, TPosition
from pycann.ascendc.trace import InstrRecord
from pycann.costmodel.costs import gm_bytes, instr_cycles, param, pipelined_latency
from pycann.costmodel.socs import CostSoc

GRANULE = 32  # bytes: UB/L1 DataBlock (reference 3.7)
CUBE_PIPES = frozenset({Pipe.PIPE_M, Pipe.PIPE_MTE1, Pipe.PIPE_FIX})
MAX_SIDES = 3  # AIC + 2 AIV of one Atlas A2 mix pair


@dataclass(frozen=True)
class SimEvent:
    """One instruction placed on the timeline (cycles from the core's start)."""

    pipe: Pipe
    api: str
    start: int
    end: int
    where: str
    nbytes: int = 0
    # share of this GM access priced at the L2 rate: a range read r times in the launch comes from HBM once
    # and from L2 r - 1 times, and every read pays that average ((r - 1) / r; 0 for a range read once or an
    # L2 that cannot hold the launch's reads; 1 for an L2 workspace). Not "this read hit": order is not modelled.
    l2_share: float = 0.0
    gm_reads: int = 0  # how many times this launch reads the range (MTE2 GM reads; 0 otherwise)


@dataclass
class CoreTimeline:
    """One core's simulated run."""

    core: int
    cycles: int = 0
    busy: dict[Pipe, int] = field(default_factory=lambda: {Pipe(p): 0 for p in range(N_PIPES)})
    events: list[SimEvent] = field(default_factory=list)
    wave: int = 0


class _Hazards:
    """Last write end / last read end per 32-byte granule of each on-chip memory."""

    def __init__(self) -> None:
        self.w: dict[str, np.ndarray] = {}
        self.r: dict[str, np.ndarray] = {}

    def _arrays(self, mem: str, hi: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.w.get(mem)
        if w is None or w.size < hi:
            n = max(hi, 2 * (0 if w is None else w.size), 1024)
            nw, nr = np.zeros(n, np.int64), np.zeros(n, np.int64)
            if w is not None:
                nw[: w.size], nr[: w.size] = w, self.r[mem]
            self.w[mem], self.r[mem] = nw, nr
        return self.w[mem], self.r[mem]

    @staticmethod
    def _span(addr: int, nbytes: int) -> tuple[int, int]:
        return addr // GRANULE, max(addr // GRANULE + 1, math.ceil((addr + nbytes) / GRANULE))

    def ready(self, mem: str, addr: int, nbytes: int, write: bool) -> int:
        lo, hi = self._span(addr, nbytes)
        w, r = self._arrays(mem, hi)
        t = int(w[lo:hi].max())
        return max(t, int(r[lo:hi].max())) if write else t

    def record(self, mem: str, addr: int, nbytes: int, write: bool, end: int) -> None:
        lo, hi = self._span(addr, nbytes)
        w, r = self._arrays(mem, hi)
        arr = w if write else r
        np.maximum(arr[lo:hi], end, out=arr[lo:hi])


def _memory(position: str) -> str:
    try:
        return TPosition[position].physical.value
    except KeyError:
        return position


def core_kind(records: Iterable[InstrRecord], soc: CostSoc) -> tuple[str, int]:
    """('AIC'|'AIV'|'AICore', core count) the kernel runs on: cube pipes used -> AIC."""
    if soc.aiv == 0:
        return "AICore", soc.aic
    if any(r.pipe in CUBE_PIPES for r in records):
        return "AIC", soc.aic
    return "AIV", soc.aiv


class L2State:
    """GM read rates with L2 reuse. A GM range (buffer, offset, size) read ``r`` times in this launch
    (by any core) comes from HBM once and from L2 ``r - 1`` times; every read pays the average,
    so the result does not depend on the order the twin ran the cores in. Reads are all misses when
    the launch's unique read footprint exceeds L2."""

    def __init__(self, soc: CostSoc, records: Iterable[InstrRecord]) -> None:
        self.soc = soc
        self.count: dict[tuple[int, int, int], int] = defaultdict(int)
        readers: dict[tuple[int, int, int], set[int]] = defaultdict(set)
        for r in records:
            if r.pipe == Pipe.PIPE_MTE2:
                for o in r.operands:
                    if o.position == "GM" and not o.is_output:
                        self.count[(o.space, o.addr, o.nbytes)] += 1
                        readers[(o.space, o.addr, o.nbytes)].add(r.core)
        self.readers = {k: len(v) for k, v in readers.items()}
        self.fits = sum(k[2] for k in self.count) <= soc.l2_mib << 20

    def rate(self, space: int, addr: int, nbytes: int, hbm: float, sharers: int = 0) -> tuple[float, float, int]:
        """(bytes/cycle for this read, the share of it priced at the L2 rate, reads of the range in the
        launch). ``sharers``: cores reading this range in the launch when the records here are one
        core's only (0: count them in the records)."""
        key = (space, addr, nbytes)
        if max(sharers, self.readers.get(key, 1)) > 1:  # the HBM side of a shared range is serialised
            hbm /= 1.0 + self.soc.same_address_loss
        r = self.count.get(key, 1)
        if not self.fits or r <= 1:
            return hbm, 0.0, r
        miss = 1.0 / r
        return 1.0 / (miss / hbm + (1.0 - miss) / self.soc.l2_read_rate), 1.0 - miss, r


def simulate_core(core: int, records: list[InstrRecord], soc: CostSoc, active: int, l2: L2State) -> CoreTimeline:
    """Schedule one core's instructions (program order) on its pipes; see the module docstring."""
    tl = CoreTimeline(core)
    lanes = N_PIPES * MAX_SIDES
    free = [0] * lanes   # when each pipe (per side of a mix kernel) can start its next instruction
    done = [0] * lanes   # when each pipe's last instruction completes (GM latency included)
    scalar_t = 0
    haz = _Hazards()
    flags: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)
    hbm = soc.hbm_share(active)
    for rec in records:
        dispatch = scalar_t
        scalar_t += soc.issue_cycles
        if rec.pipe == Pipe.PIPE_ALL:  # PipeBarrier<PIPE_ALL>: everything before it completes
            t = max(max(done), scalar_t)
            free = [t] * lanes
            done = [t] * lanes
            scalar_t = t
            tl.events.append(SimEvent(rec.pipe, rec.api, t, t, rec.where))
            continue
        p = int(rec.pipe) + N_PIPES * param(rec, "side")
        start = max(dispatch, free[p])
        if rec.api == "WaitFlag":
            q = flags[(param(rec, "src", -1), param(rec, "dst", -1), param(rec, "event_id"))]
            if q:
                start = max(start, q.popleft() + param(rec, "latency"))
        for o in rec.operands:
            if o.position != "GM" and o.addr >= 0:
                start = max(start, haz.ready(_memory(o.position), o.addr, o.nbytes, o.is_output))
        rate, share, reads = hbm, 0.0, 0
        if param(rec, "l2ws"):
            rate, share = float(soc.l2_read_rate if rec.pipe == Pipe.PIPE_MTE2 else soc.l2_write_rate), 1.0
        elif rec.pipe == Pipe.PIPE_MTE2:
            src = next((o for o in rec.operands if o.position == "GM" and not o.is_output), None)
            if src is not None:
                rate, share, reads = l2.rate(src.space, src.addr, src.nbytes, hbm, param(rec, "sharers"))
        dur = instr_cycles(rec, soc, rate)
        end = start + dur
        busy = dur - pipelined_latency(rec, soc)
        free[p] = start + busy
        if rec.api == "SetFlag":  # fires when all earlier work of the source pipe has completed
            end = max(end, done[p])
        done[p] = max(done[p], end)
        if rec.pipe == Pipe.PIPE_S:
            scalar_t = max(scalar_t, end)
        if rec.api == "SetFlag":
            flags[(param(rec, "src", -1), param(rec, "dst", -1), param(rec, "event_id"))].append(end)
        else:
            tl.busy[rec.pipe] += busy
        for o in rec.operands:
            if o.position != "GM" and o.addr >= 0:
                haz.record(_memory(o.position), o.addr, o.nbytes, o.is_output, end)
        tl.events.append(SimEvent(rec.pipe, rec.api, start, end, rec.where, gm_bytes(rec), share, reads))
    tl.cycles = max([scalar_t, *done])
    return tl


def simulate(records: list[InstrRecord], soc: CostSoc, block_dim: int) -> tuple[list[CoreTimeline], str, int]:
    """Simulate every core of one launch; returns (timelines, core kind, cores per wave)."""
    kind, ncores = core_kind(records, soc)
    per_core: dict[int, list[InstrRecord]] = defaultdict(list)
    for r in records:
        per_core[r.core].append(r)
    active = max(1, min(block_dim, ncores))
    l2 = L2State(soc, records)
    out = []
    for i in range(block_dim):
        tl = simulate_core(i, per_core.get(i, []), soc, active, l2)
        tl.wave = i // ncores
        out.append(tl)
    return out, kind, ncores
