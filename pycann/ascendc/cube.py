"""The cube path: GM -(DataCopy ND2NZ)-> L1 -(LoadData)-> L0A/L0B -(Mmad)-> L0C -(Fixpipe)-> GM.

Layouts (reference 3.9): L1 holds NZ (column-major grid of 16 x C0 fractals, rows inside),
L0A holds ZZ (row-major grid of 16 x K0 fractals), L0B holds ZN (row-major grid, each fractal
stored as N0 rows of K0, i.e. transposed), L0C holds NZ with 16 x 16 fp32/int32 fractals.
C0 = K0 = 32 B / sizeof(T). Mmad multiplies in float32 (int32 for int8) and accumulates there,
as the cube does; Fixpipe rounds once to the output type.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule
from pycann.ascendc.enums import Memory, Pipe, RoundMode
from pycann.ascendc.gm import GlobalTensor, record_gm_write
from pycann.ascendc.local import LocalTensor
from pycann.ascendc.rounding import cast_round
from pycann.ascendc.trace import Operand

FRACTAL_BYTES = 512
BLOCK_CUBE = 16


@dataclass
class Nd2NzParams:
    """GM ND (nValue x dValue, row stride srcDValue elements) -> L1 NZ (column blocks dstNzC0Stride rows apart)."""

    ndNum: int = 1
    nValue: int = 0
    dValue: int = 0
    srcNdMatrixStride: int = 0
    srcDValue: int = 0
    dstNzC0Stride: int = 0
    dstNzNStride: int = 1
    dstNzMatrixStride: int = 0


@dataclass
class LoadData2DParams:
    """L1 -> L0A/L0B: ``repeatTimes`` 512-B fractals from ``startIndex``, ``srcStride`` fractals apart."""

    startIndex: int = 0
    repeatTimes: int = 1
    srcStride: int = 0
    sid: int = 0
    dstGap: int = 0
    ifTranspose: bool = False
    addrMode: int = 0


@dataclass
class MmadParams:
    """C[m x n] (+)= A[m x k] B[k x n]; ``cmatrixInitVal`` True starts C from zero."""

    m: int = 0
    n: int = 0
    k: int = 0
    isBias: bool = False
    fmOffset: int = 0
    enSsparse: bool = False
    enWinogradA: bool = False
    enWinogradB: bool = False
    unitFlag: int = 0
    kDirectionAlign: bool = False
    cmatrixSource: bool = False
    cmatrixInitVal: bool = True


class QuantMode_t(enum.Enum):
    NoQuant = "NoQuant"
    F322F16 = "F322F16"
    F322BF16 = "F322BF16"


@dataclass
class FixpipeParamsV220:
    """L0C (NZ, srcStride rows per 16-column block) -> GM ND (row stride dstStride elements)."""

    nSize: int = 0
    mSize: int = 0
    srcStride: int = 0
    dstStride: int = 0
    quantPre: QuantMode_t = QuantMode_t.NoQuant
    reluEn: bool = False
    ndNum: int = 1


FixpipeParams = FixpipeParamsV220


def _c0(t: Any) -> int:
    return 32 // t.dtype.size


def data_copy_nd2nz(c: _core.CoreState, dst: LocalTensor, src: GlobalTensor, p: Nd2NzParams) -> None:
    """DataCopy(L1 tensor, GM tensor, Nd2NzParams) on PIPE_MTE2."""
    api = "DataCopy(ND2NZ)"
    c.check_pipe(Pipe.PIPE_MTE2, api)
    if dst.buf.mem.kind != Memory.L1:
        c.report(Rule.WRONG_POSITION, api, f"ND2NZ copies go to A1/B1 (L1), not {dst.position.name}", abort=True)
    c0 = _c0(dst)
    n, d, sd = int(p.nValue), int(p.dValue), int(p.srcDValue) or int(p.dValue)
    stride = int(p.dstNzC0Stride) or -(-n // BLOCK_CUBE) * BLOCK_CUBE
    d1 = -(-d // c0)
    src._bounds(c, 0, (n - 1) * sd + d if n and d else 0, api, write=False)
    total = (d1 - 1) * stride * c0 + (n - 1) * int(p.dstNzNStride) * c0 + c0 if n and d else 0
    dsl = dst.region(c, api, 0, total, write=True)
    rows = np.arange(n, dtype=np.int64)
    g0 = src.byte_offset() // src.dtype.size
    gm = src.addr.buf.data.view(np.uint8)  # type: ignore[union-attr]
    gview = gm[: gm.size // src.dtype.size * src.dtype.size].view(src.dtype.np_dtype)
    padded = np.zeros((n, d1 * c0), src.dtype.np_dtype)
    padded[:, :d] = gview[g0 + rows[:, None] * sd + np.arange(d)[None, :]]
    blocks = padded.reshape(n, d1, c0)
    dst_idx = (np.arange(d1)[None, :] * stride + rows[:, None] * int(p.dstNzNStride)) * c0  # (n, d1) element starts
    flat = (dst_idx[:, :, None] + np.arange(c0)[None, None, :]).reshape(-1)
    dst.view()[flat] = blocks.reshape(-1)
    seq = c.issue(Pipe.PIPE_MTE2, api, dst.dtype, (Operand("GM", src.dtype.name, n * d, n * d * src.dtype.size, False,
                                                           src.byte_offset(), id(src.addr.buf)),  # type: ignore[union-attr]
                                                   dst.operand(n * d1 * c0, True)), (("n", n), ("d", d)))
    bidx = (dst.byte_offset + flat[:, None] * dst.dtype.size + np.arange(dst.dtype.size)).reshape(-1)
    c.write(dst.buf.mem, bidx, Pipe.PIPE_MTE2, seq, api)
    _ = dsl


def LoadData(dst: LocalTensor, src: LocalTensor, params: LoadData2DParams) -> None:
    """``LoadData(dst A2/B2, src A1/B1, LoadData2DParams)`` on PIPE_MTE1 (2D form)."""
    c = _core.current()
    api = "LoadData"
    c.check_pipe(Pipe.PIPE_MTE1, api)
    if src.buf.mem.kind != Memory.L1 or dst.buf.mem.kind not in (Memory.L0A, Memory.L0B):
        c.report(Rule.WRONG_POSITION, api, f"LoadData moves A1/B1 (L1) -> A2/B2 (L0A/L0B), got "
                 f"{src.position.name} -> {dst.position.name}", abort=True)
    if dst.dtype != src.dtype:
        raise TypeError("LoadData: dst and src dtypes differ")
    fe = FRACTAL_BYTES // src.dtype.size
    rep = int(params.repeatTimes)
    if not 0 <= rep <= 255:
        c.report(Rule.BAD_PARAM, api, f"repeatTimes {rep} outside [0, 255]")
    s_fr = int(params.startIndex) + np.arange(rep) * int(params.srcStride)
    d_fr = np.arange(rep) * (1 + int(params.dstGap))
    sidx = (s_fr[:, None] * fe + np.arange(fe)[None, :]).reshape(-1)
    didx = (d_fr[:, None] * fe + np.arange(fe)[None, :]).reshape(-1)
    if rep and (int(sidx.max()) >= src.size):
        c.report(Rule.OUT_OF_BOUNDS, api, f"reads fractal {int(s_fr.max())} past a {src.size}-element L1 tensor",
                 abort=True)
    if rep and int(didx.max()) >= dst.size:
        c.report(Rule.OUT_OF_BOUNDS, api, f"writes {rep} fractals into a {dst.size}-element {dst.position.name} "
                 "tensor", abort=True)
    src.region(c, api, 0, 0)
    dst.region(c, api, 0, 0, write=True)
    sb = (src.byte_offset + sidx[:, None] * src.dtype.size + np.arange(src.dtype.size)).reshape(-1)
    c.read(src.buf.mem, sb, Pipe.PIPE_MTE1, api, api)
    vals = src.view()[sidx].reshape(rep, 16, fe // 16)
    if params.ifTranspose:
        if src.dtype.size != 2:
            c.report(Rule.UNSUPPORTED, api, "2D LoadData transpose supports 16-bit types only", abort=True)
        vals = vals.transpose(0, 2, 1)
    dst.view()[didx] = vals.reshape(-1)
    seq = c.issue(Pipe.PIPE_MTE1, api, dst.dtype, (src.operand(rep * fe), dst.operand(rep * fe, True)),
                  (("repeat", rep),))
    db = (dst.byte_offset + didx[:, None] * dst.dtype.size + np.arange(dst.dtype.size)).reshape(-1)
    c.write(dst.buf.mem, db, Pipe.PIPE_MTE1, seq, api)


def Mmad(dst: LocalTensor, fm: LocalTensor, filter: LocalTensor, params: MmadParams) -> None:  # noqa: A002
    """``Mmad(c CO1, a A2, b B2, MmadParams)`` on PIPE_M: C (+)= A x B, accumulated in fp32 / int32."""
    c = _core.current()
    api = "Mmad"
    c.check_pipe(Pipe.PIPE_M, api)
    if fm.buf.mem.kind != Memory.L0A or filter.buf.mem.kind != Memory.L0B or dst.buf.mem.kind != Memory.L0C:
        c.report(Rule.WRONG_POSITION, api, f"Mmad takes A2 (L0A), B2 (L0B) -> CO1 (L0C); got {fm.position.name}, "
                 f"{filter.position.name} -> {dst.position.name}", abort=True)
    pair = (fm.dtype.name, dst.dtype.name)
    if pair not in c.soc.mmad_dtypes:
        c.report(Rule.UNSUPPORTED, api, f"Mmad {pair[0]} x {pair[0]} -> {pair[1]} does not exist on {c.soc.name}",
                 abort=True)
    m, n, k = int(params.m), int(params.n), int(params.k)
    if not (0 <= m <= 4095 and 0 <= n <= 4095 and 0 <= k <= 4095):
        c.report(Rule.BAD_PARAM, api, f"m/n/k = {m}/{n}/{k} outside [0, 4095]", abort=True)
    k0 = _c0(fm)
    m1, n1, k1 = -(-m // 16), -(-n // 16), -(-k // k0)
    for t, need, name in ((fm, m1 * k1 * 16 * k0, "A"), (filter, k1 * n1 * 16 * k0, "B"), (dst, n1 * m1 * 256, "C")):
        sl = t.region(c, api, 0, need, write=(name == "C"))
        if name != "C":
            c.read(t.buf.mem, sl, Pipe.PIPE_M, api, f"Mmad operand {name}")
    a = fm.view(0, m1 * k1 * 16 * k0).reshape(m1, k1, 16, k0).transpose(0, 2, 1, 3).reshape(m1 * 16, k1 * k0)
    b = filter.view(0, k1 * n1 * 16 * k0).reshape(k1, n1, 16, k0).transpose(0, 3, 1, 2).reshape(k1 * k0, n1 * 16)
    acc = np.float32 if dst.dtype.is_float else np.int64
    # contiguous float32 copies: numpy's matmul on strided views skips BLAS (1000x slower)
    prod = np.ascontiguousarray(a[:m, :k], dtype=acc) @ np.ascontiguousarray(b[:k, :n], dtype=acc)
    cv = dst.view(0, n1 * m1 * 256).reshape(n1, m1 * 16, 16)
    full = np.zeros((m1 * 16, n1 * 16), acc)
    full[:m, :n] = prod
    csl = slice(dst.byte_offset, dst.byte_offset + n1 * m1 * 256 * dst.dtype.size)
    if not params.cmatrixInitVal:
        c.read(dst.buf.mem, csl, Pipe.PIPE_M, api, "Mmad accumulate (cmatrixInitVal=False)")
        full = full + cv.transpose(1, 0, 2).reshape(m1 * 16, n1 * 16).astype(acc)
    cv[:] = full.reshape(m1 * 16, n1, 16).transpose(1, 0, 2).astype(dst.dtype.np_dtype)
    seq = c.issue(Pipe.PIPE_M, api, fm.dtype, (fm.operand(m * k), filter.operand(k * n), dst.operand(m * n, True)),
                  (("m", m), ("n", n), ("k", k)))
    c.write(dst.buf.mem, csl, Pipe.PIPE_M, seq, api)


def Fixpipe(dst: GlobalTensor, src: LocalTensor, params: FixpipeParamsV220) -> None:
    """``Fixpipe(gm, co1, FixpipeParamsV220)`` on PIPE_FIX: L0C NZ -> GM ND, rounding to the GM type once."""
    c = _core.current()
    api = "Fixpipe"
    if not c.soc.split:
        c.report(Rule.UNSUPPORTED, api, f"{c.soc.name} has no FixPipe: L0C goes to UB through the vector unit",
                 abort=True)
    c.check_pipe(Pipe.PIPE_FIX, api)
    if src.buf.mem.kind != Memory.L0C:
        c.report(Rule.WRONG_POSITION, api, f"Fixpipe reads CO1 (L0C), got {src.position.name}", abort=True)
    m, n = int(params.mSize), int(params.nSize)
    ms = int(params.srcStride) or -(-m // 16) * 16
    n1 = -(-n // 16)
    sl = src.region(c, api, 0, n1 * ms * 16)
    c.read(src.buf.mem, sl, Pipe.PIPE_FIX, api, "Fixpipe")
    ds = int(params.dstStride) or n
    dst._bounds(c, 0, (m - 1) * ds + n if m and n else 0, api, write=True)
    cv = src.view(0, n1 * ms * 16).reshape(n1, ms, 16).transpose(1, 0, 2).reshape(ms, n1 * 16)[:m, :n]
    if params.reluEn:
        cv = np.maximum(cv, 0)
    out = cast_round(cv.astype(np.float64), dst.dtype.np_dtype, RoundMode.CAST_RINT) if src.dtype.is_float \
        else cast_round(cv, dst.dtype.np_dtype, RoundMode.CAST_NONE)
    gm = dst.addr.buf  # type: ignore[union-attr]
    g0 = dst.byte_offset()
    rb = n * dst.dtype.size
    rows = g0 + np.arange(m, dtype=np.int64) * ds * dst.dtype.size
    gidx = (rows[:, None] + np.arange(rb)[None, :]).reshape(-1)
    gm.data[gidx] = np.ascontiguousarray(out).view(np.uint8).reshape(-1)
    c.issue(Pipe.PIPE_FIX, api, dst.dtype, (src.operand(m * n), Operand("GM", dst.dtype.name, m * n, m * rb, True)),
            (("m", m), ("n", n)))
    if ds == n:
        record_gm_write(c, gm, g0, m * rb, api)
    else:
        for r in rows:
            record_gm_write(c, gm, int(r), rb, api)


