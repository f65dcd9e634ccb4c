"""Busy cycles of one traced instruction on its pipe (reference 7: the cost-model cheat sheet).

``instr_cycles(rec, soc, gm_rate)`` is the time an instruction occupies its pipe: a fixed latency
(pipeline fill / GM round trip, [A] in socs.py) plus its bytes over the path's rate, or its
fractal count for the cube. ``gm_rate`` is the bytes/cycle this core gets from GM at that moment
(HBM share or L2 hit), chosen by the simulator.
"""

from __future__ import annotations

import math

from pycann.ascendc.enums import Pipe
from pycann.ascendc.trace import InstrRecord
from pycann.costmodel.socs import CostSoc

SYNC_APIS = frozenset({"SetFlag", "WaitFlag", "PipeBarrier"})
SLOW_VECTOR = frozenset({"Exp", "Ln", "Log", "Div", "Sqrt", "Rsqrt", "Reciprocal", "Power", "Tanh", "Sigmoid"})
# Mmad's K step per cycle by input dtype: one 32-byte K0 row of a fractal (reference 3.4, 7.1)
_K0 = {"half": 16, "bfloat16_t": 16, "float": 8, "int8_t": 32, "uint8_t": 32}


def param(rec: InstrRecord, name: str, default: int = 0) -> int:
    """``rec.params[name]`` or ``default``."""
    for k, v in rec.params:
        if k == name:
            return int(v)
    return default


def gm_bytes(rec: InstrRecord) -> int:
    """Bytes the instruction moves to or from GM (0 when it touches no GM)."""
    return sum(o.nbytes for o in rec.operands if o.position == "GM")


def mmad_cycles(m: int, n: int, k: int, dtype: str, soc: CostSoc) -> int:
    """ceil(m/16)·ceil(n/16)·ceil(k/K0) fractal products, one per cycle (K0 = 16 fp16, 32 int8, 8 fp32)."""
    k0 = _K0.get(dtype, 16)
    fr = math.ceil(m / 16) * math.ceil(n / 16) * math.ceil(k / k0)
    if dtype == "float":  # fp32 runs at 1/4 of fp16's MAC rate [U]: K0 = 8 halves it, the rest here
        fr *= 2
    return fr + soc.cube_latency


def vector_cycles(rec: InstrRecord, soc: CostSoc) -> int:
    """Repeats of 256 bytes (fp16 128 / fp32 64 lanes), 1 per cycle, x4 for transcendental ops."""
    rep = param(rec, "repeat", 0)
    if rep <= 0:
        nb = max((o.nbytes for o in rec.operands), default=0)
        rep = math.ceil(nb / soc.vec_bytes_per_cycle)
    if rec.api in SLOW_VECTOR:
        rep *= soc.slow_vec_factor
    return rep + soc.vec_latency


def pipelined_latency(rec: InstrRecord, soc: CostSoc) -> int:
    """The part of ``instr_cycles`` that does not occupy the pipe: the GM round trip of a transfer
    engine, which keeps several requests in flight [A]."""
    if rec.api in SYNC_APIS or rec.pipe not in (Pipe.PIPE_MTE2, Pipe.PIPE_MTE3, Pipe.PIPE_FIX):
        return 0
    return soc.gm_latency if gm_bytes(rec) else 0


def instr_cycles(rec: InstrRecord, soc: CostSoc, gm_rate: float) -> int:
    """Busy cycles of ``rec`` on ``rec.pipe``; ``gm_rate`` = GM bytes/cycle available to this core now."""
    if rec.api in SYNC_APIS:
        return 1
    pipe = rec.pipe
    if pipe == Pipe.PIPE_S:
        return soc.scalar_cycles
    if pipe == Pipe.PIPE_M:
        return mmad_cycles(param(rec, "m", 16), param(rec, "n", 16), param(rec, "k", 16), rec.dtype or "half", soc)
    if pipe == Pipe.PIPE_V:
        return vector_cycles(rec, soc)
    gmb = gm_bytes(rec)
    if pipe == Pipe.PIPE_FIX:
        src = sum(o.nbytes for o in rec.operands if not o.is_output)
        return soc.gm_latency + math.ceil(max(src / soc.l0c_to_out_rate, gmb / gm_rate if gmb else 0.0))
    if pipe == Pipe.PIPE_MTE1:
        dst = next((o for o in rec.operands if o.is_output), None)
        nb = dst.nbytes if dst is not None else 0
        rate = soc.l1_to_l0b_rate if dst is not None and dst.position == "B2" else soc.l1_to_l0a_rate
        return soc.local_latency + math.ceil(nb / rate)
    if gmb:  # MTE2 GM->UB/L1, MTE3 UB->GM
        grate = min(gm_rate, float(soc.ub_to_ddr_rate)) if pipe == Pipe.PIPE_MTE3 else gm_rate
        return soc.gm_latency + math.ceil(gmb / grate)
    nb = max((o.nbytes for o in rec.operands), default=0)  # UB<->L1 on MTE2/MTE3
    return soc.local_latency + math.ceil(nb / soc.ub_to_l1_rate)
