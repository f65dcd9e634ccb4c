"""Instruction records of a tiled FlashAttention forward on Atlas A2 mix cores, without a twin run.

The kernel follows the structure of CANN's FlashAttentionScore / PromptFlashAttention on arch 2201,
where the cube (AIC) and its two vector cores (AIV) hand tiles over through an L2-resident GM
workspace and cross-core flags. Per Q block (``br`` rows of one (batch, head)):

* AIC: MTE2 Q -> L1, MTE1 Q -> L0A; for every KV block j (``bc`` rows): MTE2 K_j -> L1, MTE1 -> L0B,
  Mmad S = Q·K_jᵀ, FixPipe S -> workspace, flag to both AIVs; then (one block later, software
  pipelined as CANN's kernel does) wait for P_j, MTE2 P_j -> L1 -> L0A, MTE2 V_j -> L1 -> L0B,
  Mmad O_j = P_j·V_j, FixPipe O_j -> workspace, flag to both AIVs.
* each AIV (``br/2`` rows): wait S_j, MTE2 S_j -> UB, Muls(scale), ReduceMax, running max/alpha,
  Sub, Exp, ReduceSum, running sum, Cast -> fp16 P_j, MTE3 P_j -> workspace, flag to the AIC; wait
  O_j, MTE2 O_j -> UB, O = O·alpha + O_j; after the last block O / l, Cast, MTE3 O -> GM.

Work items (batch, head, q block) go round-robin over ``block_dim`` AIC/AIV pairs. Records carry the
``side`` param (0 AIC, 1/2 AIV) and cross-core ``WaitFlag`` records a ``latency`` param
(``CROSS_CORE_LATENCY``), see simulate.py. Assumptions are listed in docs/costmodel.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pycann.ascendc.enums import N_PIPES, Pipe
from pycann.ascendc.trace import InstrRecord, Operand

CROSS_CORE_LATENCY = 100  # cycles from CrossCoreSetFlag firing to the other core's wait returning [A]
L0C_BYTES, L1_BYTES, UB_BYTES = 128 << 10, 512 << 10, 184 << 10  # arch 2201 (reference 3.3)
_Q, _K, _V, _OUT, _WS = 1, 2, 3, 4, 5  # GM buffer ids
_UB_SIDE = 1 << 20  # UB address offset of the second AIV, so the two AIVs' UBs never alias
_WHERE = "pycann/costmodel/fa_trace.py"


@dataclass(frozen=True)
class FaShape:
    """Attention forward O = softmax(Q·Kᵀ·scale)·V, fp16 in/out, no mask; Q (b, h, sq, d), K/V (b, h, sk, d)."""

    batch: int
    heads: int
    sq: int
    sk: int
    d: int = 128

    @property
    def flops(self) -> float:
        """4·b·h·sq·sk·d: the two matmuls (the convention of the published TFLOP/s figures)."""
        return 4.0 * self.batch * self.heads * self.sq * self.sk * self.d


@dataclass(frozen=True)
class FaTiling:
    """Q rows per block (``br``), KV rows per step (``bc``), AIC/AIV pairs launched (``block_dim``)."""

    br: int = 128
    bc: int = 128
    block_dim: int = 24

    def check(self, s: FaShape) -> str:
        """Why this tiling is illegal for ``s`` ('' when legal)."""
        if min(self.br, self.bc, s.d) % 16 or self.br % 32:
            return f"br={self.br}, bc={self.bc}, d={s.d} must be multiples of 16 (br of 32: two AIVs)"
        if s.sq % self.br or s.sk % self.bc:
            return f"sq={s.sq} / sk={s.sk} must be multiples of br={self.br} / bc={self.bc} (no tail blocks)"
        if (self.br * self.bc + self.br * s.d) * 4 > L0C_BYTES:
            return f"L0C overflow: S {self.br}x{self.bc} + O {self.br}x{s.d} fp32 > {L0C_BYTES} B"
        if (self.br * s.d + 4 * self.bc * s.d + 2 * self.br * self.bc) * 2 > L1_BYTES:
            return "L1 overflow: Q + 2xK + 2xV + 2xP fp16"
        r = self.br // 2
        if (2 * r * self.bc * 4 + 2 * r * self.bc * 2 + 2 * r * s.d * 4 + 8 * r * 4) > UB_BYTES:
            return "UB overflow: 2xS fp32 + 2xP fp16 + O, O_j fp32 per AIV"
        if self.block_dim < 1:
            return "block_dim must be >= 1"
        return ""


def _gm(space: int, nbytes: int, addr: int, out: bool = False, dtype: str = "half") -> Operand:
    return Operand("GM", dtype, nbytes // (2 if dtype == "half" else 4), nbytes, out, addr, space)


def _loc(pos: str, nbytes: int, addr: int, out: bool = False, dtype: str = "float") -> Operand:
    return Operand(pos, dtype, nbytes // (2 if dtype == "half" else 4), nbytes, out, addr)


class _Emitter:
    """Appends one core's records in an order where every SetFlag precedes its WaitFlag."""

    def __init__(self, core: int, out: list[InstrRecord]) -> None:
        self.core, self.out, self.seq = core, out, 0

    def rec(self, side: int, pipe: Pipe, api: str, dtype: str, ops: tuple[Operand, ...],
            params: tuple[tuple[str, int], ...] = ()) -> None:
        self.seq += 1
        self.out.append(InstrRecord(self.core, self.seq, pipe, api, dtype, ops, _WHERE, (("side", side), *params)))

    def set_flag(self, side: int, pipe: Pipe, to_side: int, to_pipe: Pipe, event: int) -> None:
        key = (("src", int(pipe) + N_PIPES * side), ("dst", int(to_pipe) + N_PIPES * to_side), ("event_id", event))
        self.rec(side, pipe, "SetFlag", "", (), key)

    def wait_flag(self, side: int, pipe: Pipe, from_side: int, from_pipe: Pipe, event: int) -> None:
        key = (("src", int(from_pipe) + N_PIPES * from_side), ("dst", int(pipe) + N_PIPES * side), ("event_id", event))
        self.rec(side, pipe, "WaitFlag", "", (), (*key, ("latency", CROSS_CORE_LATENCY)))


def fa_records(s: FaShape, t: FaTiling = FaTiling(), cores: Sequence[int] | None = None) -> list[InstrRecord]:
    """Records of the FlashAttention forward ``s`` with tiling ``t`` for the listed cores (default all
    ``t.block_dim``); ``ValueError`` if the tiling does not fit ``s`` or the buffers."""
    why = t.check(s)
    if why:
        raise ValueError(f"FlashAttention b={s.batch} h={s.heads} sq={s.sq} sk={s.sk} d={s.d}: {why}")
    out: list[InstrRecord] = []
    nq = s.sq // t.br
    items = s.batch * s.heads * nq
    for core in cores if cores is not None else range(t.block_dim):
        em = _Emitter(core, out)
        ws = core * (1 << 24)  # this pair's workspace region
        for item in range(core, items, t.block_dim):
            bh, qi = divmod(item, nq)
            _q_block(em, s, t, bh, qi, ws)
    return out


def _q_block(em: _Emitter, s: FaShape, t: FaTiling, bh: int, qi: int, ws: int) -> None:
    br, bc, d = t.br, t.bc, s.d
    r = br // 2
    nk = s.sk // bc
    q_sz, kv_sz, s_sz, p_sz, o_sz = br * d * 2, bc * d * 2, br * bc * 4, br * bc * 2, br * d * 4
    l1_k = [q_sz + i * kv_sz for i in range(2)]
    l1_v = [q_sz + 2 * kv_sz + i * kv_sz for i in range(2)]
    l1_p = [q_sz + 4 * kv_sz + i * p_sz for i in range(2)]
    ws_s = [ws + i * s_sz for i in range(2)]
    ws_p = [ws + 2 * s_sz + i * p_sz for i in range(2)]
    ws_o = [ws + 2 * s_sz + 2 * p_sz + i * o_sz for i in range(2)]
    kv_base = bh * s.sk * d * 2
    ub_s = [i * r * bc * 4 for i in range(2)]
    ub_p = [2 * r * bc * 4 + i * r * bc * 2 for i in range(2)]
    ub_o = 2 * r * bc * 4 + 2 * r * bc * 2
    ub_oj = ub_o + r * d * 4
    ub_vec = ub_oj + r * d * 4  # row vectors: m, l, rowmax, rowsum, alpha x2 (r fp32 each)
    aic, pf = 0, Pipe.PIPE_FIX
    l2 = (("l2ws", 1),)
    # the pairs that read this head's K and V (its Q blocks go round-robin): same-address reads (simulate.py)
    kv = (("sharers", min(s.sq // br, t.block_dim)),)

    em.rec(aic, Pipe.PIPE_MTE2, "DataCopy(ND2NZ)", "half",
           (_gm(_Q, q_sz, (bh * s.sq + qi * br) * d * 2), _loc("A1", q_sz, 0, True, "half")))
    em.rec(aic, Pipe.PIPE_MTE1, "LoadData", "half", (_loc("A1", q_sz, 0, dtype="half"), _loc("A2", q_sz, 0, True, "half")))

    def qk(j: int) -> None:
        b = j % 2
        em.rec(aic, Pipe.PIPE_MTE2, "DataCopy(ND2NZ)", "half",
               (_gm(_K, kv_sz, kv_base + j * kv_sz), _loc("B1", kv_sz, l1_k[b], True, "half")), kv)
        em.rec(aic, Pipe.PIPE_MTE1, "LoadData", "half",
               (_loc("B1", kv_sz, l1_k[b], dtype="half"), _loc("B2", kv_sz, 0, True, "half")))
        em.rec(aic, Pipe.PIPE_M, "Mmad", "half", (_loc("A2", q_sz, 0, dtype="half"), _loc("B2", kv_sz, 0, dtype="half"),
                                                  _loc("CO1", s_sz, 0, True)), (("m", br), ("n", bc), ("k", d)))
        em.rec(aic, pf, "Fixpipe", "float", (_loc("CO1", s_sz, 0), _gm(_WS, s_sz, ws_s[b], True, "float")), l2)
        for v in (1, 2):
            em.set_flag(aic, pf, v, Pipe.PIPE_MTE2, 0)

    def softmax(j: int) -> None:
        b = j % 2
        for v in (1, 2):
            u = (v - 1) * _UB_SIDE
            sb, pb, vec = u + ub_s[b], u + ub_p[b], u + ub_vec
            blk, row = r * bc * 4, r * 4
            em.wait_flag(v, Pipe.PIPE_MTE2, aic, pf, 0)
            em.rec(v, Pipe.PIPE_MTE2, "DataCopy", "float",
                   (_gm(_WS, blk, ws_s[b] + (v - 1) * blk, dtype="float"), _loc("VECIN", blk, sb, True)), l2)
            em.rec(v, Pipe.PIPE_V, "Muls", "float", (_loc("VECIN", blk, sb), _loc("VECIN", blk, sb, True)))
            em.rec(v, Pipe.PIPE_V, "ReduceMax", "float", (_loc("VECIN", blk, sb), _loc("VECCALC", row, vec + 2 * row, True)))
            em.rec(v, Pipe.PIPE_V, "Max", "float", (_loc("VECCALC", row, vec), _loc("VECCALC", row, vec + 2 * row),
                                                    _loc("VECCALC", row, vec, True)))
            alpha = vec + (4 + b) * row
            em.rec(v, Pipe.PIPE_V, "Sub", "float", (_loc("VECCALC", row, vec), _loc("VECCALC", row, alpha, True)))
            em.rec(v, Pipe.PIPE_V, "Exp", "float", (_loc("VECCALC", row, alpha), _loc("VECCALC", row, alpha, True)))
            em.rec(v, Pipe.PIPE_V, "Sub", "float", (_loc("VECIN", blk, sb), _loc("VECCALC", row, vec),
                                                    _loc("VECIN", blk, sb, True)))
            em.rec(v, Pipe.PIPE_V, "Exp", "float", (_loc("VECIN", blk, sb), _loc("VECIN", blk, sb, True)))
            em.rec(v, Pipe.PIPE_V, "ReduceSum", "float", (_loc("VECIN", blk, sb), _loc("VECCALC", row, vec + 3 * row, True)))
            em.rec(v, Pipe.PIPE_V, "Mul", "float", (_loc("VECCALC", row, vec + row), _loc("VECCALC", row, alpha),
                                                    _loc("VECCALC", row, vec + row, True)))
            em.rec(v, Pipe.PIPE_V, "Add", "float", (_loc("VECCALC", row, vec + row), _loc("VECCALC", row, vec + 3 * row),
                                                    _loc("VECCALC", row, vec + row, True)))
            em.rec(v, Pipe.PIPE_V, "Cast", "half", (_loc("VECIN", blk, sb), _loc("VECOUT", r * bc * 2, pb, True, "half")))
            em.rec(v, Pipe.PIPE_MTE3, "DataCopy", "half", (_loc("VECOUT", r * bc * 2, pb, dtype="half"),
                                                           _gm(_WS, r * bc * 2, ws_p[b] + (v - 1) * r * bc * 2, True)), l2)
            em.set_flag(v, Pipe.PIPE_MTE3, aic, Pipe.PIPE_MTE2, 1)

    def pv(j: int) -> None:
        b = j % 2
        for v in (1, 2):
            em.wait_flag(aic, Pipe.PIPE_MTE2, v, Pipe.PIPE_MTE3, 1)
        em.rec(aic, Pipe.PIPE_MTE2, "DataCopy(ND2NZ)", "half",
               (_gm(_WS, p_sz, ws_p[b]), _loc("A1", p_sz, l1_p[b], True, "half")), l2)
        em.rec(aic, Pipe.PIPE_MTE1, "LoadData", "half",
               (_loc("A1", p_sz, l1_p[b], dtype="half"), _loc("A2", p_sz, q_sz, True, "half")))
        em.rec(aic, Pipe.PIPE_MTE2, "DataCopy(ND2NZ)", "half",
               (_gm(_V, kv_sz, kv_base + j * kv_sz), _loc("B1", kv_sz, l1_v[b], True, "half")), kv)
        em.rec(aic, Pipe.PIPE_MTE1, "LoadData", "half",
               (_loc("B1", kv_sz, l1_v[b], dtype="half"), _loc("B2", kv_sz, kv_sz, True, "half")))
        em.rec(aic, Pipe.PIPE_M, "Mmad", "half", (_loc("A2", p_sz, q_sz, dtype="half"),
                                                  _loc("B2", kv_sz, kv_sz, dtype="half"),
                                                  _loc("CO1", o_sz, s_sz, True)), (("m", br), ("n", d), ("k", bc)))
        em.rec(aic, pf, "Fixpipe", "float", (_loc("CO1", o_sz, s_sz), _gm(_WS, o_sz, ws_o[b], True, "float")), l2)
        for v in (1, 2):
            em.set_flag(aic, pf, v, Pipe.PIPE_MTE2, 2)

    def o_update(j: int) -> None:
        b = j % 2
        for v in (1, 2):
            u = (v - 1) * _UB_SIDE
            blk = r * d * 4
            em.wait_flag(v, Pipe.PIPE_MTE2, aic, pf, 2)
            em.rec(v, Pipe.PIPE_MTE2, "DataCopy", "float",
                   (_gm(_WS, blk, ws_o[b] + (v - 1) * blk, dtype="float"), _loc("VECIN", blk, u + ub_oj, True)), l2)
            if j:
                em.rec(v, Pipe.PIPE_V, "Mul", "float", (_loc("VECCALC", blk, u + ub_o),
                                                        _loc("VECCALC", r * 4, u + ub_vec + (4 + b) * r * 4),
                                                        _loc("VECCALC", blk, u + ub_o, True)))
            em.rec(v, Pipe.PIPE_V, "Add", "float", (_loc("VECCALC", blk, u + ub_o), _loc("VECIN", blk, u + ub_oj),
                                                    _loc("VECCALC", blk, u + ub_o, True)))

    qk(0)
    softmax(0)
    for j in range(nk):
        if j + 1 < nk:
            qk(j + 1)
            softmax(j + 1)
        pv(j)
        o_update(j)
    for v in (1, 2):
        u, blk = (v - 1) * _UB_SIDE, r * d * 4
        em.rec(v, Pipe.PIPE_V, "Div", "float", (_loc("VECCALC", blk, u + ub_o), _loc("VECCALC", r * 4, u + ub_vec + r * 4),
                                                _loc("VECCALC", blk, u + ub_o, True)))
        em.rec(v, Pipe.PIPE_V, "Cast", "half", (_loc("VECCALC", blk, u + ub_o), _loc("VECOUT", r * d * 2, u + ub_oj, True, "half")))
        em.rec(v, Pipe.PIPE_MTE3, "DataCopy", "half",
               (_loc("VECOUT", r * d * 2, u + ub_oj, dtype="half"),
                _gm(_OUT, r * d * 2, ((bh * s.sq + qi * br) + (v - 1) * r) * d * 2, True)))
