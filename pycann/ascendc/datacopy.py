"""DataCopy and DataCopyPad between GM and on-chip buffers (reference 1.9).

Device behaviour the twin keeps: a DataCopy length that is not a multiple of 32 bytes is rounded
DOWN to 32 bytes (the tail is silently not copied; the twin copies the same and reports it);
UB addresses must be 32-byte aligned; DataCopyPad (A2/A3 only) copies any byte length and pads
each block to 32 bytes in UB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule
from pycann.ascendc.dtypes import ElemType, elem
from pycann.ascendc.enums import Memory, Pipe, TPosition
from pycann.ascendc.gm import GlobalTensor, record_gm_write
from pycann.ascendc.local import LocalTensor
from pycann.ascendc.trace import Operand

BLK = 32
# UB positions all allow GM copies (TQueBind<VECIN, VECOUT> copies straight through); L0A/L0B/L0C
# have no DataCopy from or to GM on the twin's SoCs (LoadData / Fixpipe move them).
_GM_TO_LOCAL_OK = {TPosition.VECIN, TPosition.VECOUT, TPosition.VECCALC, TPosition.CO2, TPosition.A1,
                   TPosition.B1, TPosition.C1}
_LOCAL_TO_GM_OK = _GM_TO_LOCAL_OK


@dataclass
class DataCopyParams:
    """Strided copy: ``blockCount`` blocks of ``blockLen`` x 32 B; gaps ``srcStride``/``dstStride`` in 32 B."""

    blockCount: int = 1
    blockLen: int = 0
    srcStride: int = 0
    dstStride: int = 0


@dataclass
class DataCopyExtParams:
    """DataCopyPad: ``blockLen`` in BYTES; GM-side gap in bytes, UB-side gap in 32 B blocks."""

    blockCount: int = 1
    blockLen: int = 0
    srcStride: int = 0
    dstStride: int = 0
    rsv: int = 0


@dataclass(init=False)
class DataCopyPadExtParams:
    """DataCopyPad padding: ``leftPadding``/``rightPadding`` elements set to ``paddingValue`` when ``isPad``.

    Ascend C's ``DataCopyPadExtParams<T>{isPad, leftPadding, rightPadding, paddingValue}`` is a
    template; as ``GlobalTensor(AscendC.half)`` spells ``GlobalTensor<half>``, the element type may
    come first: ``DataCopyPadExtParams(AscendC.float, True, 0, 6, 0.0)`` or
    ``DataCopyPadExtParams(True, 0, 6, 0.0)``. Without this, the type would silently become ``isPad``
    and every field after it shift by one (a left padding of 1 element, the value as right padding).
    """

    isPad: bool
    leftPadding: int
    rightPadding: int
    paddingValue: Any
    dtype: ElemType | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dtype = kwargs.pop("dtype", None)
        if args and isinstance(args[0], ElemType):
            dtype, args = args[0], args[1:]
        names = ("isPad", "leftPadding", "rightPadding", "paddingValue")
        if len(args) > len(names):
            raise TypeError(f"DataCopyPadExtParams takes [T,] isPad, leftPadding, rightPadding, paddingValue; "
                            f"got {len(args)} values after the type")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise TypeError(f"DataCopyPadExtParams has no field {k!r} (fields: {', '.join(names)}, dtype)")
            if k in given:
                raise TypeError(f"DataCopyPadExtParams got {k!r} twice")
            given[k] = v
        is_pad = given.get("isPad", False)
        if not isinstance(is_pad, (bool, int, np.bool_)):
            raise TypeError(f"DataCopyPadExtParams: isPad must be a bool, got {is_pad!r} (the element type, "
                            "when given, comes first: DataCopyPadExtParams(AscendC.half, True, 0, 2, 0))")
        for k in ("leftPadding", "rightPadding"):
            v = given.get(k, 0)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise TypeError(f"DataCopyPadExtParams: {k} must be an element count >= 0, got {v!r}")
        self.isPad = bool(is_pad)
        self.leftPadding = int(given.get("leftPadding", 0))
        self.rightPadding = int(given.get("rightPadding", 0))
        self.paddingValue = given.get("paddingValue", 0)
        self.dtype = elem(dtype) if dtype is not None else None


def _gm_operand(g: GlobalTensor, n: int, out: bool = False) -> Operand:
    return Operand("GM", g.dtype.name, n // g.dtype.size, n, out, g.byte_offset(), id(g.addr.buf))  # type: ignore[union-attr]


def DataCopy(dst: Any, src: Any, arg: Any) -> None:
    """``DataCopy(dst, src, count)`` or ``DataCopy(dst, src, DataCopyParams)``; GM<->UB/L1 or UB->UB.

    ``Nd2NzParams`` as the third argument selects the GM->L1 ND-to-NZ copy of the cube path.
    """
    c = _core.current()
    from pycann.ascendc.cube import Nd2NzParams, data_copy_nd2nz

    if isinstance(arg, Nd2NzParams):
        data_copy_nd2nz(c, dst, src, arg)
        return
    if isinstance(arg, DataCopyParams):
        blocks = (arg.blockCount, arg.blockLen * BLK, arg.srcStride * BLK, arg.dstStride * BLK)
        _strided(c, dst, src, blocks, "DataCopy")
        return
    count = int(arg)
    size = _elem_size(dst, src)
    nbytes = count * size
    eff = nbytes // BLK * BLK
    if nbytes % BLK:
        c.report(Rule.ALIGN_LEN, "DataCopy", f"{count} x {size} B = {nbytes} B is not a multiple of 32 B: the "
                 f"device copies only {eff} B and drops the last {nbytes - eff} B (use DataCopyPad or pad the tile)")
    _strided(c, dst, src, (1, eff, 0, 0), "DataCopy", logical=count)


def _elem_size(dst: Any, src: Any) -> int:
    for name, t in (("dst", dst), ("src", src)):
        if not isinstance(t, (LocalTensor, GlobalTensor)):
            raise TypeError(f"DataCopy: {name} must be a LocalTensor or GlobalTensor, got {type(t).__name__} "
                            "(bind GM_ADDR arguments with GlobalTensor.SetGlobalBuffer)")
    if dst.dtype != src.dtype:
        raise TypeError(f"DataCopy: dst is {dst.dtype.name}, src is {src.dtype.name}")
    return int(dst.dtype.size)


def _block_index(count: int, length: int, gap: int, base: int) -> np.ndarray:
    starts = base + np.arange(count, dtype=np.int64) * (length + gap)
    return (starts[:, None] + np.arange(length, dtype=np.int64)[None, :]).reshape(-1)


def _strided(c: _core.CoreState, dst: Any, src: Any, blocks: tuple[int, int, int, int], api: str,
             logical: int | None = None) -> None:
    """Copy ``count`` blocks of ``length`` bytes with byte gaps (src_gap, dst_gap)."""
    count, length, sgap, dgap = blocks
    if count < 0 or count > 4095:
        c.report(Rule.BAD_PARAM, api, f"blockCount {count} outside [0, 4095]")
    span_src = count * length + max(count - 1, 0) * sgap
    span_dst = count * length + max(count - 1, 0) * dgap
    size = _elem_size(dst, src)
    if isinstance(src, GlobalTensor) and isinstance(dst, LocalTensor):
        c.check_pipe(Pipe.PIPE_MTE2, api)
        if dst.position not in _GM_TO_LOCAL_OK:
            c.report(Rule.WRONG_POSITION, api, f"GM -> {dst.position.name}: DataCopy from GM goes to UB or L1 "
                     "(L0A/L0B are filled by LoadData)", abort=True)
        src._bounds(c, 0, -(-span_src // size), api, write=False)
        dsl = dst.region(c, api, 0, -(-span_dst // size), write=True)
        lo, g0 = dsl.start, src.byte_offset()
        if count == 1 or (sgap == 0 and dgap == 0):
            dst.buf.mem.data[lo: lo + count * length] = src.addr.buf.data[g0: g0 + count * length]  # type: ignore[union-attr]
            widx: slice | np.ndarray = slice(lo, lo + count * length)
        else:
            si = _block_index(count, length, sgap, g0)
            widx = _block_index(count, length, dgap, lo)
            dst.buf.mem.data[widx] = src.addr.buf.data[si]  # type: ignore[union-attr]
        seq = c.issue(Pipe.PIPE_MTE2, api, dst.dtype, (_gm_operand(src, count * length),
                                                       dst.operand(count * length // size, True)))
        c.write(dst.buf.mem, widx, Pipe.PIPE_MTE2, seq, api)
    elif isinstance(src, LocalTensor) and isinstance(dst, GlobalTensor):
        c.check_pipe(Pipe.PIPE_MTE3, api)
        if src.position not in _LOCAL_TO_GM_OK:
            c.report(Rule.WRONG_POSITION, api, f"{src.position.name} -> GM: DataCopy to GM comes from UB or L1 "
                     "(L0C leaves through Fixpipe)", abort=True)
        dst._bounds(c, 0, -(-span_dst // size), api, write=True)
        ssl = src.region(c, api, 0, -(-span_src // size))
        lo, g0 = ssl.start, dst.byte_offset()
        ridx = slice(lo, lo + count * length) if count == 1 or sgap == 0 else _block_index(count, length, sgap, lo)
        gidx = slice(g0, g0 + count * length) if count == 1 or dgap == 0 else _block_index(count, length, dgap, g0)
        c.read(src.buf.mem, ridx, Pipe.PIPE_MTE3, api, f"{api} {src.position.name}->GM")
        gm = dst.addr.buf  # type: ignore[union-attr]
        data = src.buf.mem.data[ridx]
        if c.atomic is not None:
            t = c.atomic.np_dtype
            cur = gm.data[gidx].view(t).astype(np.float32 if dst.dtype.is_float else np.int64)
            gm.data[gidx] = (cur + data.view(t)).astype(t).view(np.uint8)
        else:
            gm.data[gidx] = data
        c.issue(Pipe.PIPE_MTE3, api, src.dtype, (src.operand(count * length // size), _gm_operand(dst, count * length, True)))
        if isinstance(gidx, slice):
            record_gm_write(c, gm, g0, count * length, api)
        else:
            for i in range(count):
                record_gm_write(c, gm, g0 + i * (length + dgap), length, api)
    elif isinstance(src, LocalTensor) and isinstance(dst, LocalTensor):
        _local_to_local(c, dst, src, blocks, api)
    else:
        raise TypeError(f"{api}: unsupported operands {type(dst).__name__} <- {type(src).__name__}")


def _local_to_local(c: _core.CoreState, dst: LocalTensor, src: LocalTensor, blocks: tuple[int, int, int, int],
                    api: str) -> None:
    count, length, sgap, dgap = blocks
    km = (src.buf.mem.kind, dst.buf.mem.kind)
    pipe = {(Memory.UB, Memory.UB): Pipe.PIPE_V, (Memory.UB, Memory.L1): Pipe.PIPE_MTE3,
            (Memory.L1, Memory.UB): Pipe.PIPE_MTE2}.get(km)
    if pipe is None:
        c.report(Rule.UNSUPPORTED, api, f"DataCopy {km[0].value} -> {km[1].value} does not exist "
                 "(L1 -> L0A/L0B is LoadData, L0C -> GM is Fixpipe)", abort=True)
        return
    c.check_pipe(pipe, api)
    size = src.dtype.size
    ssl = src.region(c, api, 0, -(-(count * (length + sgap)) // size) if count else 0)
    dsl = dst.region(c, api, 0, -(-(count * (length + dgap) - dgap) // size) if count else 0, write=True)
    ridx = _block_index(count, length, sgap, ssl.start)
    widx = _block_index(count, length, dgap, dsl.start)
    c.read(src.buf.mem, ridx, pipe, api, f"{api} {src.position.name}->{dst.position.name}")
    dst.buf.mem.data[widx] = src.buf.mem.data[ridx]
    seq = c.issue(pipe, api, dst.dtype, (src.operand(count * length // size), dst.operand(count * length // size, True)))
    c.write(dst.buf.mem, widx, pipe, seq, api)


def DataCopyPad(dst: Any, src: Any, params: DataCopyExtParams,
                padParams: DataCopyPadExtParams | None = None) -> None:
    """Non-aligned copy GM->UB (each block padded to 32 B in UB) or UB->GM (only valid bytes written)."""
    c = _core.current()
    api = "DataCopyPad"
    if not c.soc.data_copy_pad:
        c.report(Rule.UNSUPPORTED, api, f"DataCopyPad does not exist on {c.soc.name} (A2/A3 only); "
                 "use 32-byte-aligned DataCopy", abort=True)
    n, blen = int(params.blockCount), int(params.blockLen)
    if not 0 <= n <= 4095 or not 0 <= blen <= 2097151:
        c.report(Rule.BAD_PARAM, api, f"blockCount {n} / blockLen {blen} outside [0,4095] / [0,2097151]", abort=True)
    size = _elem_size(dst, src)
    pad = padParams or DataCopyPadExtParams()
    if pad.dtype is not None and pad.dtype.size != size:
        c.report(Rule.BAD_PARAM, api, f"DataCopyPadExtParams<{pad.dtype}> does not match the copy's "
                 f"{size}-byte elements (T must be the tensors' element type)", abort=True)
    for side, count in (("leftPadding", pad.leftPadding), ("rightPadding", pad.rightPadding)):
        if pad.isPad and count * size > BLK:  # each side pads within one 32-byte block (CANN's api_check)
            c.report(Rule.BAD_PARAM, api, f"{side} {count} is outside its valid range 0 ~ {BLK // size} "
                     f"(at most 32 B of {size}-byte elements)", abort=True)
    if isinstance(src, GlobalTensor) and isinstance(dst, LocalTensor):
        left, right = (pad.leftPadding, pad.rightPadding) if pad.isPad else (0, 0)
        ub_block = -(-(blen + (left + right) * size) // BLK) * BLK
        ub_gap = int(params.dstStride) * BLK
        c.check_pipe(Pipe.PIPE_MTE2, api)
        src._bounds(c, 0, -(-(n * blen + max(n - 1, 0) * params.srcStride) // size), api, write=False)
        dsl = dst.region(c, api, 0, (n * (ub_block + ub_gap) - ub_gap) // size, write=True)
        mem, g = dst.buf.mem, src.addr.buf.data  # type: ignore[union-attr]
        for i in range(n):  # one slice copy per block (blocks are few; each is a numpy copy)
            ub0 = dsl.start + i * (ub_block + ub_gap)
            gs = src.byte_offset() + i * (blen + int(params.srcStride))
            if pad.isPad:
                fill = np.full(ub_block // size, pad.paddingValue, dst.dtype.np_dtype).view(np.uint8)
                mem.data[ub0: ub0 + ub_block] = fill
            mem.data[ub0 + left * size: ub0 + left * size + blen] = g[gs: gs + blen]
        total = slice(dsl.start, dsl.start + n * (ub_block + ub_gap) - ub_gap)
        seq = c.issue(Pipe.PIPE_MTE2, api, dst.dtype, (_gm_operand(src, n * blen), dst.operand(n * ub_block // size, True)))
        c.write(mem, total, Pipe.PIPE_MTE2, seq, api)  # padding bytes count as written (their value is undefined)
    elif isinstance(src, LocalTensor) and isinstance(dst, GlobalTensor):
        ub_block = -(-blen // BLK) * BLK
        ub_gap = int(params.srcStride) * BLK
        c.check_pipe(Pipe.PIPE_MTE3, api)
        dst._bounds(c, 0, -(-(n * blen + max(n - 1, 0) * params.dstStride) // size), api, write=True)
        ssl = src.region(c, api, 0, max(0, (n * (ub_block + ub_gap) - ub_gap) // size))
        gm = dst.addr.buf  # type: ignore[union-attr]
        for i in range(n):
            ub0 = ssl.start + i * (ub_block + ub_gap)
            gs = dst.byte_offset() + i * (blen + int(params.dstStride))
            c.read(src.buf.mem, slice(ub0, ub0 + blen), Pipe.PIPE_MTE3, api, f"{api} UB->GM")
            gm.data[gs: gs + blen] = src.buf.mem.data[ub0: ub0 + blen]
            record_gm_write(c, gm, gs, blen, api)
        c.issue(Pipe.PIPE_MTE3, api, src.dtype, (src.operand(n * blen // size), _gm_operand(dst, n * blen, True)))
    else:
        raise TypeError(f"{api}: GM->UB or UB->GM only")
