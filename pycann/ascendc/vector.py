"""Vector instructions on UB tensors: one numpy call per instruction over the whole tile.

Count form ``Add(dst, a, b, count)`` and mask/repeat form ``Add(dst, a, b, mask, repeatTime,
BinaryRepeatParams(...))`` (reference 1.10). Numerics: half and bfloat16 compute in float32 and
round to the destination type once per instruction (ml_dtypes for bf16), as the device's vector
unit rounds each instruction's result; integer types wrap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.ascendc import core as _core
from pycann.ascendc.diagnostics import Rule
from pycann.ascendc.dtypes import ElemType
from pycann.ascendc.enums import CMPMODE, SELMODE, Pipe, RoundMode
from pycann.ascendc.local import LocalTensor
from pycann.ascendc.repeat import (
    MAX_REPEAT_TIMES,
    BinaryRepeatParams,
    UnaryRepeatParams,
    element_index,
    mask_lanes,
)
from pycann.ascendc.rounding import cast_round

F32 = np.dtype(np.float32)


def _wide(dt: ElemType) -> np.dtype:
    return F32 if dt.is_float else np.dtype(np.int64)


class _Access:
    """The elements one operand of one instruction touches: a slice (count form) or an index array."""

    def __init__(self, t: LocalTensor, idx: np.ndarray | None, count: int) -> None:
        self.t, self.idx, self.count = t, idx, count

    def values(self) -> np.ndarray:
        v = self.t.view(0, self.t.size if self.idx is not None else self.count)
        return v[self.idx] if self.idx is not None else v

    def byte_index(self) -> slice | np.ndarray:
        t = self.t
        if self.idx is None:
            lo = t.byte_offset
            return slice(lo, lo + self.count * t.dtype.size)
        return (t.byte_offset + self.idx[:, None] * t.dtype.size + np.arange(t.dtype.size)).reshape(-1)


def _need_local(api: str, tensors: list[Any]) -> None:
    for k, t in enumerate(tensors):
        if not isinstance(t, LocalTensor):
            what = "dst" if k == 0 else f"src{k - 1}"
            raise TypeError(f"{api}: {what} must be a LocalTensor (a UB tensor from AllocTensor/DeQue/TBuf.Get), "
                            f"got {type(t).__name__}; GM data goes through DataCopy first")


def _accesses(c: _core.CoreState, api: str, tensors: list[LocalTensor], args: tuple[Any, ...],
              strides: list[tuple[int, int]]) -> tuple[list[_Access], int]:
    """Resolve count form (args=(count,)) or mask form (args=(mask, repeatTime, params))."""
    _need_local(api, tensors)
    if len(args) not in (1, 3):
        raise TypeError(f"{api}: expected (..., count) or (..., mask, repeatTime, repeatParams), got {len(args)} "
                        "trailing arguments")
    if len(args) == 1:
        n = int(args[0])
        if n < 0:
            c.report(Rule.BAD_PARAM, api, f"count {n} is negative", abort=True)
        out = []
        for k, t in enumerate(tensors):
            sl = t.region(c, api, 0, n, write=(k == 0))
            out.append(_Access(t, None, (sl.stop - sl.start) // t.dtype.size))
        m = min(a.count for a in out)
        for a in out:
            a.count = m
        return out, n
    mask, rep = args[0], int(args[1])
    if not 0 <= rep <= MAX_REPEAT_TIMES:
        c.report(Rule.BAD_PARAM, api, f"repeatTime {rep} outside [0, {MAX_REPEAT_TIMES}]")
        rep = max(0, min(rep, MAX_REPEAT_TIMES))
    size = max(t.dtype.size for t in tensors)
    pos, err = mask_lanes(mask, size)
    if err:
        c.report(Rule.BAD_PARAM, api, err)
    out = []
    for k, (t, (blk, rstride)) in enumerate(zip(tensors, strides)):
        idx = element_index(pos, rep, blk, rstride, t.dtype.size)
        t.region(c, api, 0, 0, write=(k == 0))  # liveness + alignment
        if idx.size and int(idx.max()) >= t.size:
            c.report(Rule.OUT_OF_BOUNDS, api, f"{'writes' if k == 0 else 'reads'} element {int(idx.max())} of a "
                     f"{t.position.name} LocalTensor<{t.dtype.name}> of {t.size} (mask/repeat/stride too large)")
            idx = idx[idx < t.size]
        out.append(_Access(t, idx, int(idx.size)))
    m = min(a.count for a in out)
    for a in out:
        if a.idx is not None:
            a.idx = a.idx[:m]
        a.count = m
    return out, m


def _run(api: str, dst: LocalTensor, srcs: list[LocalTensor], args: tuple[Any, ...],
         strides: list[tuple[int, int]], fn: Callable[..., np.ndarray], check_dtype: ElemType | None = None,
         out_cast: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
    c = _core.current()
    _need_local(api, [dst, *srcs])
    c.check_pipe(Pipe.PIPE_V, api)
    dt = check_dtype or dst.dtype
    if not c.soc.supports(api, dt):
        c.report(Rule.UNSUPPORTED, api, f"{api} has no {dt.name} form on {c.soc.name}")
    for s in srcs:
        if s.dtype != dst.dtype and out_cast is None:
            raise TypeError(f"{api}: operand dtypes differ ({s.dtype.name} vs {dst.dtype.name})")
    acc, n = _accesses(c, api, [dst, *srcs], args, strides)
    for a in acc[1:]:
        c.read(a.t.buf.mem, a.byte_index(), Pipe.PIPE_V, api, api)
    vals = [a.values().astype(_wide(a.t.dtype)) for a in acc[1:]]
    with np.errstate(all="ignore"):  # inf/NaN results are the device's too
        res = fn(*vals)
        res = out_cast(res) if out_cast is not None else res.astype(dst.dtype.np_dtype)
    d = acc[0]
    if d.idx is None:
        dst.view(0, d.count)[:] = res
    else:
        dst.view()[d.idx] = res
    ops = tuple(a.t.operand(a.count, k == 0) for k, a in enumerate(acc))
    seq = c.issue(Pipe.PIPE_V, api, dst.dtype, ops, (("elements", n),) if len(args) == 1 else
                  (("repeat", int(args[1])),))
    c.write(dst.buf.mem, d.byte_index(), Pipe.PIPE_V, seq, api)


def _bin_strides(args: tuple[Any, ...]) -> list[tuple[int, int]]:
    p = args[2] if len(args) == 3 else BinaryRepeatParams()
    return [(p.dstBlkStride, p.dstRepStride), (p.src0BlkStride, p.src0RepStride), (p.src1BlkStride, p.src1RepStride)]


def _un_strides(args: tuple[Any, ...]) -> list[tuple[int, int]]:
    p = args[2] if len(args) == 3 else UnaryRepeatParams()
    return [(p.dstBlkStride, p.dstRepStride), (p.srcBlkStride, p.srcRepStride)]


def _binary(api: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., None]:
    def op(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, *args: Any) -> None:
        _run(api, dst, [src0, src1], args, _bin_strides(args), fn)
    op.__name__ = op.__qualname__ = api
    op.__doc__ = f"``{api}(dst, src0, src1, count)`` or ``{api}(dst, src0, src1, mask, repeatTime, BinaryRepeatParams)``."
    return op


def _unary(api: str, fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., None]:
    def op(dst: LocalTensor, src: LocalTensor, *args: Any) -> None:
        _run(api, dst, [src], args, _un_strides(args), fn)
    op.__name__ = op.__qualname__ = api
    op.__doc__ = f"``{api}(dst, src, count)`` or ``{api}(dst, src, mask, repeatTime, UnaryRepeatParams)``."
    return op


def _scalar(api: str, fn: Callable[[np.ndarray, Any], np.ndarray]) -> Callable[..., None]:
    def op(dst: LocalTensor, src: LocalTensor, scalar: Any, *args: Any) -> None:
        s = np.asarray(scalar, dst.dtype.np_dtype).astype(_wide(dst.dtype))  # the scalar register holds a T
        _run(api, dst, [src], args, _un_strides(args), lambda x: fn(x, s))
    op.__name__ = op.__qualname__ = api
    op.__doc__ = f"``{api}(dst, src, scalar, count)`` or ``{api}(dst, src, scalar, mask, repeatTime, UnaryRepeatParams)``."
    return op


Add = _binary("Add", np.add)
Sub = _binary("Sub", np.subtract)
Mul = _binary("Mul", np.multiply)
Div = _binary("Div", np.divide)
Max = _binary("Max", np.maximum)
Min = _binary("Min", np.minimum)

And = _binary("And", np.bitwise_and)
Or = _binary("Or", np.bitwise_or)

Exp = _unary("Exp", np.exp)
Ln = _unary("Ln", np.log)
Abs = _unary("Abs", np.abs)
Relu = _unary("Relu", lambda x: np.maximum(x, 0))
Sqrt = _unary("Sqrt", np.sqrt)
Rsqrt = _unary("Rsqrt", lambda x: 1 / np.sqrt(x))
Reciprocal = _unary("Reciprocal", lambda x: 1 / x)
Not = _unary("Not", np.bitwise_not)

Adds = _scalar("Adds", lambda x, s: x + s)
Muls = _scalar("Muls", lambda x, s: x * s)
Maxs = _scalar("Maxs", np.maximum)
Mins = _scalar("Mins", np.minimum)
LeakyRelu = _scalar("LeakyRelu", lambda x, s: np.where(x >= 0, x, x * s))


def Axpy(dst: LocalTensor, src: LocalTensor, scalar: Any, *args: Any) -> None:
    """``Axpy(dst, src, scalar, count)``: dst = src * scalar + dst (dst is read too), rounded once."""
    s = np.asarray(scalar, src.dtype.np_dtype).astype(_wide(src.dtype))
    _run("Axpy", dst, [src, dst], args, _un_strides(args) + [_un_strides(args)[0]], lambda x, d: x * s + d)


def Duplicate(dst: LocalTensor, scalar: Any, *args: Any) -> None:
    """``Duplicate(dst, scalar, count)`` or ``Duplicate(dst, scalar, mask, repeatTime, dstBlockStride, dstRepeatStride)``."""
    if len(args) == 4:
        args = (args[0], args[1], UnaryRepeatParams(args[2], 1, args[3], 8))
    v = np.asarray(scalar, dst.dtype.np_dtype)
    c = _core.current()
    c.check_pipe(Pipe.PIPE_V, "Duplicate")
    if not c.soc.supports("Duplicate", dst.dtype):
        c.report(Rule.UNSUPPORTED, "Duplicate", f"Duplicate has no {dst.dtype.name} form on {c.soc.name}")
    acc, n = _accesses(c, "Duplicate", [dst], args, _un_strides(args)[:1])
    d = acc[0]
    if d.idx is None:
        dst.view(0, d.count)[:] = v
    else:
        dst.view()[d.idx] = v
    seq = c.issue(Pipe.PIPE_V, "Duplicate", dst.dtype, (dst.operand(d.count, True),))
    c.write(dst.buf.mem, d.byte_index(), Pipe.PIPE_V, seq, "Duplicate")


def Cast(dst: LocalTensor, src: LocalTensor, round_mode: RoundMode, *args: Any) -> None:
    """``Cast(dst, src, RoundMode, count)`` (or the mask form): convert with the given rounding."""
    c = _core.current()
    pair = (src.dtype.name, dst.dtype.name)
    if pair not in c.soc.cast_pairs:
        c.report(Rule.UNSUPPORTED, "Cast", f"Cast {pair[0]} -> {pair[1]} does not exist on {c.soc.name}")
    if not isinstance(round_mode, RoundMode):
        raise TypeError(f"Cast: round mode must be a RoundMode, got {round_mode!r}")
    if round_mode == RoundMode.CAST_ODD and pair != ("float", "half"):
        c.report(Rule.BAD_PARAM, "Cast", "CAST_ODD exists only for float -> half")

    def conv(x: np.ndarray) -> np.ndarray:
        return x

    _run("Cast", dst, [src], args, _un_strides(args), conv, check_dtype=src.dtype,
         out_cast=lambda r: cast_round(r.astype(np.float64) if src.dtype.is_float else r, dst.dtype.np_dtype,
                                       round_mode))


def _reduce(api: str, fn: Callable[[np.ndarray], Any], arg: Callable[[np.ndarray], int] | None) -> Callable[..., None]:
    def op(dst: LocalTensor, src: LocalTensor, workLocal: LocalTensor, count: int, calIndex: bool = False) -> None:
        c = _core.current()
        c.check_pipe(Pipe.PIPE_V, api)
        if not c.soc.supports(api, src.dtype):
            c.report(Rule.UNSUPPORTED, api, f"{api} has no {src.dtype.name} form on {c.soc.name}")
        n = int(count)
        ssl = src.region(c, api, 0, n)
        n = (ssl.stop - ssl.start) // src.dtype.size
        workLocal.live(c, api)
        c.read(src.buf.mem, ssl, Pipe.PIPE_V, api, api)
        x = src.view(0, n).astype(F32)
        k = 2 if (calIndex and arg is not None) else 1
        dsl = dst.region(c, api, 0, k, write=True)
        v = dst.view(0, k)
        v[0] = np.asarray(fn(x) if n else np.nan, np.float32).astype(dst.dtype.np_dtype)
        if k == 2:
            v.view(np.dtype(f"u{dst.dtype.size}"))[1] = arg(x) if (n and arg is not None) else 0  # index, in T bits
        seq = c.issue(Pipe.PIPE_V, api, src.dtype, (src.operand(n), dst.operand(k, True)),
                      (("elements", n),))
        c.write(dst.buf.mem, dsl, Pipe.PIPE_V, seq, api)
        wsl = slice(workLocal.byte_offset, workLocal.byte_offset + workLocal.size * workLocal.dtype.size)
        c.write(workLocal.buf.mem, wsl, Pipe.PIPE_V, seq, api)  # scratch: clobbered
    op.__name__ = op.__qualname__ = api
    op.__doc__ = f"``{api}(dst, src, workLocal, count[, calIndex])``: dst[0] = result (fp32 accumulation)."
    return op


ReduceSum = _reduce("ReduceSum", lambda x: x.sum(dtype=np.float32), None)
ReduceMax = _reduce("ReduceMax", lambda x: x.max(), lambda x: int(np.argmax(x)))
ReduceMin = _reduce("ReduceMin", lambda x: x.min(), lambda x: int(np.argmin(x)))


def _whole(api: str, fn: Callable[[np.ndarray], np.ndarray]) -> Callable[..., None]:
    def op(dst: LocalTensor, src: LocalTensor, mask: Any, repeatTime: int, dstRepStride: int = 1,
           srcBlkStride: int = 1, srcRepStride: int = 8) -> None:
        c = _core.current()
        c.check_pipe(Pipe.PIPE_V, api)
        if not c.soc.supports(api, src.dtype):
            c.report(Rule.UNSUPPORTED, api, f"{api} has no {src.dtype.name} form on {c.soc.name}")
        rep = int(repeatTime)
        if not 0 <= rep <= MAX_REPEAT_TIMES:
            c.report(Rule.BAD_PARAM, api, f"repeatTime {rep} outside [0, {MAX_REPEAT_TIMES}]", abort=True)
        pos, err = mask_lanes(mask, src.dtype.size)
        if err:
            c.report(Rule.BAD_PARAM, api, err)
        idx = element_index(pos, rep, srcBlkStride, srcRepStride, src.dtype.size)
        src.region(c, api, 0, 0)
        if idx.size and int(idx.max()) >= src.size:
            c.report(Rule.OUT_OF_BOUNDS, api, f"reads element {int(idx.max())} of a {src.size}-element tensor",
                     abort=True)
        acc = _Access(src, idx, int(idx.size))
        c.read(src.buf.mem, acc.byte_index(), Pipe.PIPE_V, api, api)
        x = src.view()[idx].astype(F32).reshape(rep, pos.size)
        res = fn(x).astype(dst.dtype.np_dtype)
        didx = np.arange(rep, dtype=np.int64) * int(dstRepStride)
        dst.region(c, api, 0, 0, write=True)
        if rep and int(didx.max()) >= dst.size:
            c.report(Rule.OUT_OF_BOUNDS, api, f"writes element {int(didx.max())} of a {dst.size}-element tensor",
                     abort=True)
        dst.view()[didx] = res
        seq = c.issue(Pipe.PIPE_V, api, src.dtype, (src.operand(int(idx.size)), dst.operand(rep, True)),
                      (("repeat", rep),))
        c.write(dst.buf.mem, _Access(dst, didx, rep).byte_index(), Pipe.PIPE_V, seq, api)
    op.__name__ = op.__qualname__ = api
    op.__doc__ = f"``{api}(dst, src, mask, repeatTime, dstRepStride, srcBlkStride, srcRepStride)``: one result per repeat."
    return op


WholeReduceSum = _whole("WholeReduceSum", lambda x: x.sum(axis=1, dtype=np.float32))
WholeReduceMax = _whole("WholeReduceMax", lambda x: x.max(axis=1))
WholeReduceMin = _whole("WholeReduceMin", lambda x: x.min(axis=1))

_CMP = {CMPMODE.LT: np.less, CMPMODE.GT: np.greater, CMPMODE.EQ: np.equal, CMPMODE.LE: np.less_equal,
        CMPMODE.GE: np.greater_equal, CMPMODE.NE: np.not_equal}


def _bits(c: _core.CoreState, api: str, dst: LocalTensor, res: np.ndarray, seq_ops: tuple[Any, ...]) -> None:
    packed = np.packbits(res, bitorder="little")
    dm = dst.ReinterpretCast(dst.dtype if dst.dtype.size == 1 else dst.dtype)
    nb = packed.size
    sl = dm.region(c, api, 0, -(-nb // dm.dtype.size), write=True)
    dst.buf.mem.data[sl.start: sl.start + nb] = packed
    seq = c.issue(Pipe.PIPE_V, api, None, seq_ops)
    c.write(dst.buf.mem, slice(sl.start, sl.start + nb), Pipe.PIPE_V, seq, api)


def Compare(dst: LocalTensor, src0: LocalTensor, src1: LocalTensor, cmpMode: CMPMODE, count: int) -> None:
    """``Compare(dstMask, src0, src1, CMPMODE, count)``: one bit per element (LSB first) into a uint8 tensor."""
    c = _core.current()
    _cmp_common(c, "Compare", src0, count)
    a = _read_count(c, "Compare", src0, count)
    b = _read_count(c, "Compare", src1, count)
    _bits(c, "Compare", dst, _CMP[cmpMode](a, b), (src0.operand(count), src1.operand(count)))


def Compares(dst: LocalTensor, src: LocalTensor, scalar: Any, cmpMode: CMPMODE, count: int) -> None:
    """``Compares(dstMask, src, scalar, CMPMODE, count)``."""
    c = _core.current()
    _cmp_common(c, "Compares", src, count)
    a = _read_count(c, "Compares", src, count)
    s = np.asarray(scalar, src.dtype.np_dtype).astype(_wide(src.dtype))
    _bits(c, "Compares", dst, _CMP[cmpMode](a, s), (src.operand(count),))


def _cmp_common(c: _core.CoreState, api: str, src: LocalTensor, count: int) -> None:
    c.check_pipe(Pipe.PIPE_V, api)
    if not c.soc.supports(api, src.dtype):
        c.report(Rule.UNSUPPORTED, api, f"{api} has no {src.dtype.name} form on {c.soc.name}")
    if (int(count) * src.dtype.size) % 256:
        c.report(Rule.BAD_PARAM, api, f"count {count} x {src.dtype.size} B is not a multiple of 256 B (one repeat)")


def _read_count(c: _core.CoreState, api: str, t: LocalTensor, count: int) -> np.ndarray:
    sl = t.region(c, api, 0, int(count))
    c.read(t.buf.mem, sl, Pipe.PIPE_V, api, api)
    return t.view(0, (sl.stop - sl.start) // t.dtype.size).astype(_wide(t.dtype))


def Select(dst: LocalTensor, selMask: LocalTensor, src0: LocalTensor, src1: Any, selMode: SELMODE,
           count: int) -> None:
    """``Select(dst, selMask, src0, src1 | scalar, SELMODE, count)``: bit i set -> src0[i], else src1[i]."""
    c = _core.current()
    api = "Select"
    c.check_pipe(Pipe.PIPE_V, api)
    if not c.soc.supports(api, dst.dtype):
        c.report(Rule.UNSUPPORTED, api, f"Select has no {dst.dtype.name} form on {c.soc.name}")
    n = int(count)
    a = _read_count(c, api, src0, n)
    nb = -(-n // 8)
    msl = selMask.region(c, api, 0, -(-nb // selMask.dtype.size))
    c.read(selMask.buf.mem, slice(msl.start, msl.start + nb), Pipe.PIPE_V, api, api)
    bits = np.unpackbits(selMask.buf.mem.data[msl.start: msl.start + nb], bitorder="little")[:n].astype(bool)
    if selMode == SELMODE.VSEL_TENSOR_SCALAR_MODE:
        b: Any = np.asarray(src1, dst.dtype.np_dtype).astype(_wide(dst.dtype))
    else:
        b = _read_count(c, api, src1, n)
    bits = bits[: a.size]
    res = np.where(bits, a, b if np.ndim(b) == 0 else b[: a.size]).astype(dst.dtype.np_dtype)
    dsl = dst.region(c, api, 0, res.size, write=True)
    dst.view(0, res.size)[:] = res
    seq = c.issue(Pipe.PIPE_V, api, dst.dtype, (src0.operand(n), dst.operand(n, True)))
    c.write(dst.buf.mem, dsl, Pipe.PIPE_V, seq, api)
