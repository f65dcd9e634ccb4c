"""Correct kernels: the twin must report nothing, and their results must match numpy.

Each case returns (TwinResult, got, want, exact): ``exact`` asks for bit equality.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from pycann import ascendc as A
from tests.ascendc.kit import f32, half, launch

P = A.TPosition
E = A.HardEvent


@dataclass
class GoodCase:
    name: str
    run: Callable[[], tuple[A.TwinResult, np.ndarray, np.ndarray, bool]]


CASES: list[GoodCase] = []


def good(name: str):
    def deco(fn):
        CASES.append(GoodCase(name, fn))
        return fn
    return deco


def _elementwise(op, dtype, n_cores, total, tile, xs, ys, soc="Ascend910B1", depth=1):
    """The add_custom shape with instruction ``op`` and element type ``dtype``."""
    block = total // n_cores

    def kern(x, y, z):
        pipe = A.TPipe()
        qx, qy, qz = A.TQue(P.VECIN, depth), A.TQue(P.VECIN, depth), A.TQue(P.VECOUT, depth)
        gx, gy, gz = A.GlobalTensor(dtype), A.GlobalTensor(dtype), A.GlobalTensor(dtype)
        off = block * A.GetBlockIdx()
        gx.SetGlobalBuffer(x.As(dtype) + off, block)
        gy.SetGlobalBuffer(y.As(dtype) + off, block)
        gz.SetGlobalBuffer(z.As(dtype) + off, block)
        for q in (qx, qy, qz):
            pipe.InitBuffer(q, 2, tile * dtype.size)
        for i in range(block // tile):
            a, b = qx.AllocTensor(dtype), qy.AllocTensor(dtype)
            A.DataCopy(a, gx[i * tile], tile)
            A.DataCopy(b, gy[i * tile], tile)
            qx.EnQue(a)
            qy.EnQue(b)
            a, b = qx.DeQue(dtype), qy.DeQue(dtype)
            c = qz.AllocTensor(dtype)
            op(c, a, b, tile)
            qz.EnQue(c)
            qx.FreeTensor(a)
            qy.FreeTensor(b)
            c = qz.DeQue(dtype)
            A.DataCopy(gz[i * tile], c, tile)
            qz.FreeTensor(c)

    res, bufs = launch(kern, n_cores, xs, ys, np.zeros_like(xs), soc=soc)
    return res, bufs[2].numpy(xs.dtype)[:total].copy()


def _bin(name, op, npop, dtype, npdt, soc="Ascend910B1"):
    @good(name)
    def run():
        xs = np.random.default_rng(1).uniform(0.5, 8, 4096).astype(npdt)
        ys = np.random.default_rng(2).uniform(0.5, 8, 4096).astype(npdt)
        res, got = _elementwise(op, dtype, 4, 4096, 256, xs, ys, soc=soc)
        want = npop(xs.astype(np.float32), ys.astype(np.float32)).astype(npdt) if npdt != np.int32 \
            else npop(xs, ys).astype(npdt)
        return res, got, want, True


_bin("add_half_8core", A.Add, np.add, A.half, np.float16)
_bin("sub_float", A.Sub, np.subtract, A.float, np.float32)
_bin("mul_half_310p", A.Mul, np.multiply, A.half, np.float16, soc="Ascend310P3")
_bin("div_float_910b4", A.Div, np.divide, A.float, np.float32, soc="Ascend910B4")
_bin("max_half_910_93", A.Max, np.maximum, A.half, np.float16, soc="Ascend910_93")
_bin("min_float_910a", A.Min, np.minimum, A.float, np.float32, soc="Ascend910A")


@good("add_int32")
def _add_int():
    xs = np.random.default_rng(3).integers(-1000, 1000, 2048).astype(np.int32)
    ys = np.random.default_rng(4).integers(-1000, 1000, 2048).astype(np.int32)
    res, got = _elementwise(A.Add, A.int32_t, 2, 2048, 512, xs, ys)
    return res, got, xs + ys, True


def _tbuf_kernel(body, n_in, nbytes=8192):
    """A one-core kernel: inputs copied to a TBuf with MTE2_V flags, ``body(t)`` computes, the result goes out."""

    def kern(*gms):
        pipe = A.TPipe()
        b = A.TBuf(P.VECCALC)
        pipe.InitBuffer(b, nbytes)
        body(b, gms)

    return kern


def _copy_in(t, g_addr, dtype, n):
    g = A.GlobalTensor(dtype)
    g.SetGlobalBuffer(g_addr.As(dtype), n)
    A.DataCopy(t, g, n)


def _copy_out(g_addr, t, dtype, n):
    g = A.GlobalTensor(dtype)
    g.SetGlobalBuffer(g_addr.As(dtype), n)
    A.SetFlag(E.V_MTE3, 0)
    A.WaitFlag(E.V_MTE3, 0)
    A.DataCopy(g, t, n)


def _unary(name, op, npop, lo=0.1, hi=4.0):
    @good(name)
    def run():
        xs = f32(256, lo, hi, seed=5)

        def body(b, gms):
            t = b.Get(A.float)
            _copy_in(t, gms[0], A.float, 256)
            A.SetFlag(E.MTE2_V, 0)
            A.WaitFlag(E.MTE2_V, 0)
            op(t[256], t, 256)
            _copy_out(gms[1], t[256], A.float, 256)

        res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros_like(xs))
        return res, bufs[1].numpy(np.float32)[:256].copy(), npop(xs).astype(np.float32), False


_unary("exp_float", A.Exp, np.exp, -3, 3)
_unary("ln_float", A.Ln, np.log)
_unary("sqrt_rsqrt", A.Rsqrt, lambda x: 1 / np.sqrt(x))
_unary("relu_abs", A.Relu, lambda x: np.maximum(x, 0), -2, 2)


@good("mask_form_strided_add")
def _mask_add():
    xs = f32(512, seed=6)

    def body(b, gms):
        t = b.Get(A.float)
        _copy_in(t, gms[0], A.float, 512)
        A.PipeBarrier(A.PIPE_ALL)
        # every other 32-byte block of the first 2 x 128 floats, added to itself, into a dense dst
        A.Add(t[1024], t, t, 64, 2, A.BinaryRepeatParams(1, 2, 2, 8, 16, 16))
        _copy_out(gms[1], t[1024], A.float, 128)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(128, np.float32))
    src = xs.reshape(-1, 8)[::2].reshape(-1)[:128]
    return res, bufs[1].numpy(np.float32)[:128].copy(), src + src, True


@good("bitmask_muls_half")
def _bitmask():
    xs = half(128, seed=7)

    def body(b, gms):
        t = b.Get(A.half)
        _copy_in(t, gms[0], A.half, 128)
        A.SetFlag(E.MTE2_V, 1)
        A.WaitFlag(E.MTE2_V, 1)
        A.Duplicate(t[128], 0.0, 128)
        A.PipeBarrier(A.PIPE_V)
        A.Muls(t[128], t, 3.0, [0, 0x5555555555555555], 1, A.UnaryRepeatParams())  # even lanes < 64
        _copy_out(gms[1], t[128], A.half, 128)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(128, np.float16))
    want = np.zeros(128, np.float16)
    want[0:64:2] = (xs[0:64:2].astype(np.float32) * np.float32(3)).astype(np.float16)
    return res, bufs[1].numpy(np.float16)[:128].copy(), want, True


@good("cast_round_modes")
def _cast():
    xs = np.array([1.5, 2.5, -1.5, -2.5, 0.3, -0.7, 7.9999, 1e5] * 8, np.float32)

    def body(b, gms):
        f = b.Get(A.float)
        _copy_in(f, gms[0], A.float, 64)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        i = b.Get(A.int32_t)
        for k, mode in enumerate((A.RoundMode.CAST_RINT, A.RoundMode.CAST_FLOOR, A.RoundMode.CAST_CEIL,
                                  A.RoundMode.CAST_ROUND, A.RoundMode.CAST_TRUNC)):
            A.Cast(i[64 * (k + 1)], f, mode, 64)
        _copy_out(gms[1], i[64], A.int32_t, 320)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(320, np.int32))
    x = xs.astype(np.float64)
    want = np.concatenate([np.rint(x), np.floor(x), np.ceil(x), np.sign(x) * np.floor(np.abs(x) + 0.5),
                           np.trunc(x)]).astype(np.int32)
    return res, bufs[1].numpy(np.int32)[:320].copy(), want, True


@good("cast_float_to_half_floor_ceil")
def _cast_h():
    xs = f32(64, -100, 100, seed=8)

    def body(b, gms):
        f = b.Get(A.float)
        _copy_in(f, gms[0], A.float, 64)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        h = b.Get(A.half)
        A.Cast(h[256], f, A.RoundMode.CAST_FLOOR, 64)
        A.Cast(h[320], f, A.RoundMode.CAST_CEIL, 64)
        _copy_out(gms[1], h[256], A.half, 128)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(128, np.float16))
    got = bufs[1].numpy(np.float16)[:128].copy()
    lo, hi = got[:64].astype(np.float64), got[64:].astype(np.float64)
    x = xs.astype(np.float64)
    ok = (lo <= x).all() and (hi >= x).all() and ((hi - lo) <= np.spacing(np.abs(got[:64]).astype(np.float16)) * 1.0001).all()
    return res, np.array([ok]), np.array([True]), True


@good("compare_select")
def _cmpsel():
    xs, ys = f32(128, seed=9), f32(128, seed=10)

    def body(b, gms):
        t = b.Get(A.float)
        _copy_in(t, gms[0], A.float, 128)
        _copy_in(t[128], gms[1], A.float, 128)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        m = b.Get(A.uint8_t)
        A.Compare(m[2048], t, t[128], A.CMPMODE.LT, 128)
        A.PipeBarrier(A.PIPE_V)
        A.Select(t[256], m[2048], t, t[128], A.SELMODE.VSEL_TENSOR_TENSOR_MODE, 128)  # min
        _copy_out(gms[2], t[256], A.float, 128)

    res, bufs = launch(_tbuf_kernel(body, 2), 1, xs, ys, np.zeros(128, np.float32))
    return res, bufs[2].numpy(np.float32)[:128].copy(), np.where(xs < ys, xs, ys), True


@good("reduce_sum_max_getvalue")
def _reduce():
    xs = f32(512, seed=11)

    def body(b, gms):
        t = b.Get(A.float)
        _copy_in(t, gms[0], A.float, 512)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        A.ReduceSum(t[1024], t, t[512], 512)
        A.ReduceMax(t[1032], t, t[512], 512, True)
        A.SetFlag(E.V_S, 0)
        A.WaitFlag(E.V_S, 0)
        s, mx = t[1024].GetValue(0), t[1032].GetValue(0)
        idx = t[1032].ReinterpretCast(A.uint32_t).GetValue(1)
        t[1040].SetValue(0, s)
        t[1040].SetValue(1, mx)
        t[1040].SetValue(2, float(idx))
        t[1040].SetValue(3, 0.0)
        for k in range(4, 8):
            t[1040].SetValue(k, 0.0)
        A.SetFlag(E.S_MTE3, 0)
        A.WaitFlag(E.S_MTE3, 0)
        g = A.GlobalTensor(A.float)
        g.SetGlobalBuffer(gms[1].As(A.float), 8)
        A.DataCopy(g, t[1040], 8)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(8, np.float32))
    got = bufs[1].numpy(np.float32)[:3].copy()
    want = np.array([xs.sum(dtype=np.float32), xs.max(), float(np.argmax(xs))], np.float32)
    return res, got, want, False


@good("whole_reduce_sum_rows")
def _whole():
    xs = f32(64 * 4, seed=12)

    def body(b, gms):
        t = b.Get(A.float)
        _copy_in(t, gms[0], A.float, 256)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        A.Duplicate(t[512], 0.0, 8)
        A.WholeReduceSum(t[512], t, 64, 4, 1, 1, 8)
        _copy_out(gms[1], t[512], A.float, 8)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(8, np.float32))
    return res, bufs[1].numpy(np.float32)[:4].copy(), xs.reshape(4, 64).sum(axis=1, dtype=np.float32), False


@good("datacopypad_tail_100_halves")
def _pad():
    xs = half(100, seed=13)

    def kern(x, y):
        pipe = A.TPipe()
        qi, qo = A.TQue(P.VECIN, 1), A.TQue(P.VECOUT, 1)
        pipe.InitBuffer(qi, 1, 256)
        pipe.InitBuffer(qo, 1, 256)
        gx, gy = A.GlobalTensor(A.half), A.GlobalTensor(A.half)
        gx.SetGlobalBuffer(x.As(A.half), 100)
        gy.SetGlobalBuffer(y.As(A.half), 100)
        t = qi.AllocTensor(A.half)
        A.DataCopyPad(t, gx, A.DataCopyExtParams(1, 200, 0, 0, 0), A.DataCopyPadExtParams(True, 0, 12, 0))
        qi.EnQue(t)
        t = qi.DeQue(A.half)
        o = qo.AllocTensor(A.half)
        A.Adds(o, t, 1.0, 112)           # 100 values + 12 padded lanes (224 B = the 32-B aligned block)
        qo.EnQue(o)
        qi.FreeTensor(t)
        o = qo.DeQue(A.half)
        A.DataCopyPad(gy, o, A.DataCopyExtParams(1, 200, 0, 0, 0))
        qo.FreeTensor(o)

    res, bufs = launch(kern, 1, xs, np.zeros(128, np.float16))
    got = bufs[1].numpy(np.float16)[:128].copy()
    want = np.zeros(128, np.float16)
    want[:100] = (xs.astype(np.float32) + 1).astype(np.float16)  # UB->GM DataCopyPad writes only 200 B
    return res, got, want, True


@good("strided_datacopy_params")
def _strided():
    xs = f32(256, seed=14)  # 8 rows of 32 floats; take the first 16 floats (2 blocks) of each row

    def kern(x, y):
        pipe = A.TPipe()
        q = A.TQue(P.VECIN, 1)
        pipe.InitBuffer(q, 1, 512)
        gx, gy = A.GlobalTensor(A.float), A.GlobalTensor(A.float)
        gx.SetGlobalBuffer(x.As(A.float), 256)
        gy.SetGlobalBuffer(y.As(A.float), 128)
        t = q.AllocTensor(A.float)
        A.DataCopy(t, gx, A.DataCopyParams(8, 2, 2, 0))
        q.EnQue(t)
        t = q.DeQue(A.float)
        A.DataCopy(gy, t, 128)
        q.FreeTensor(t)

    res, bufs = launch(kern, 1, xs, np.zeros(128, np.float32))
    return res, bufs[1].numpy(np.float32)[:128].copy(), xs.reshape(8, 32)[:, :16].reshape(-1), True


@good("atomic_add_all_cores")
def _atomic():
    def kern(y):
        pipe = A.TPipe()
        q = A.TQue(P.VECOUT, 1)
        pipe.InitBuffer(q, 1, 256)
        g = A.GlobalTensor(A.float)
        g.SetGlobalBuffer(y.As(A.float), 64)
        t = q.AllocTensor(A.float)
        A.Duplicate(t, float(A.GetBlockIdx() + 1), 64)
        q.EnQue(t)
        t = q.DeQue(A.float)
        A.SetAtomicAdd(A.float)
        A.DataCopy(g, t, 64)
        A.SetAtomicNone()
        q.FreeTensor(t)

    res, bufs = launch(kern, 4, np.zeros(64, np.float32))
    return res, bufs[0].numpy(np.float32)[:64].copy(), np.full(64, 10.0, np.float32), True


@good("big_tbuf_on_310p")
def _310p():
    def kern(y):
        pipe = A.TPipe()
        b = A.TBuf(P.VECCALC)
        pipe.InitBuffer(b, 200 * 1024)
        t = b.Get(A.half)
        A.Duplicate(t, 2.0, 1024)
        _copy_out(y, t, A.half, 1024)

    res, bufs = launch(kern, 1, np.zeros(1024, np.float16), soc="Ascend310P3")
    return res, bufs[0].numpy(np.float16)[:1024].copy(), np.full(1024, 2.0, np.float16), True


@good("event_pool_alloc_release")
def _events():
    xs = f32(64, seed=15)

    def body(b, gms):
        pipe = A.GetTPipePtr()
        t = b.Get(A.float)
        ev = pipe.AllocEventID(E.MTE2_V)
        _copy_in(t, gms[0], A.float, 64)
        A.SetFlag(E.MTE2_V, ev)
        A.WaitFlag(E.MTE2_V, ev)
        pipe.ReleaseEventID(E.MTE2_V, ev)
        A.LeakyRelu(t[64], t, 0.1, 64)
        _copy_out(gms[1], t[64], A.float, 64)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(64, np.float32))
    want = np.where(xs >= 0, xs, xs * np.float32(0.1)).astype(np.float32)
    return res, bufs[1].numpy(np.float32)[:64].copy(), want, True


@good("tiling_data_roundtrip")
def _tiling():
    T = A.BEGIN_TILING_DATA_DEF("T", A.TILING_DATA_FIELD_DEF(A.uint32_t, "totalLength"),
                                A.TILING_DATA_FIELD_DEF(A.uint32_t, "tileNum"),
                                A.TILING_DATA_FIELD_DEF_ARR(A.float, 2, "scale"))
    td = T()
    td.set_totalLength(2048)
    td.set_tileNum(4)
    td.scale = [0.5, 3.0]
    xs = f32(2048, seed=16)

    def kern(x, y, tiling):
        d = A.GET_TILING_DATA(T, tiling)
        block = d.totalLength // A.GetBlockNum()
        tile = block // d.tileNum
        pipe = A.TPipe()
        qi, qo = A.TQue(P.VECIN, 1), A.TQue(P.VECOUT, 1)
        pipe.InitBuffer(qi, 2, tile * 4)
        pipe.InitBuffer(qo, 2, tile * 4)
        gx, gy = A.GlobalTensor(A.float), A.GlobalTensor(A.float)
        gx.SetGlobalBuffer(x.As(A.float) + block * A.GetBlockIdx(), block)
        gy.SetGlobalBuffer(y.As(A.float) + block * A.GetBlockIdx(), block)
        for i in range(d.tileNum):
            t = qi.AllocTensor(A.float)
            A.DataCopy(t, gx[i * tile], tile)
            qi.EnQue(t)
            t = qi.DeQue(A.float)
            o = qo.AllocTensor(A.float)
            A.Muls(o, t, float(d.scale[0]), tile)
            A.PipeBarrier(A.PIPE_V)
            A.Adds(o, o, float(d.scale[1]), tile)
            qo.EnQue(o)
            qi.FreeTensor(t)
            o = qo.DeQue(A.float)
            A.DataCopy(gy[i * tile], o, tile)
            qo.FreeTensor(o)

    tg = A.GmAlloc(td.GetDataSize())
    td.SaveToBuffer(tg)
    res, bufs = launch(kern, 4, xs, np.zeros_like(xs), extra=(tg,))
    return res, bufs[1].numpy(np.float32)[:2048].copy(), xs * np.float32(0.5) + np.float32(3.0), True


@good("bf16_cast_roundtrip_910b")
def _bf16():
    xs = f32(64, seed=17)

    def body(b, gms):
        f = b.Get(A.float)
        _copy_in(f, gms[0], A.float, 64)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        h = b.Get(A.bfloat16_t)
        A.Cast(h[256], f, A.RoundMode.CAST_RINT, 64)
        A.PipeBarrier(A.PIPE_V)
        A.Cast(f[256], h[256], A.RoundMode.CAST_NONE, 64)
        _copy_out(gms[1], f[256], A.float, 64)

    import ml_dtypes

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(64, np.float32))
    return res, bufs[1].numpy(np.float32)[:64].copy(), xs.astype(ml_dtypes.bfloat16).astype(np.float32), True


@good("tbuf_reload_with_v_mte2_flag")
def _reload():
    xs = f32(256, seed=18)

    def body(b, gms):
        t = b.Get(A.float)
        g = A.GlobalTensor(A.float)
        g.SetGlobalBuffer(gms[0].As(A.float), 256)
        for i in range(4):          # one TBuf slot reused per chunk: MTE2 -> V, then V -> MTE2 before reloading
            A.DataCopy(t, g[i * 64], 64)
            A.SetFlag(E.MTE2_V, 0)
            A.WaitFlag(E.MTE2_V, 0)
            A.Muls(t[64 + 64 * i], t, 2.0, 64)
            A.SetFlag(E.V_MTE2, 0)
            A.WaitFlag(E.V_MTE2, 0)
        _copy_out(gms[1], t[64], A.float, 256)

    res, bufs = launch(_tbuf_kernel(body, 1), 1, xs, np.zeros(256, np.float32))
    return res, bufs[1].numpy(np.float32)[:256].copy(), xs * np.float32(2), True


@good("axpy_and_bitwise")
def _axpy():
    xs, ys = f32(64, seed=19), f32(64, seed=20)
    bits = np.random.default_rng(21).integers(0, 1 << 15, 128).astype(np.int16)

    def body(b, gms):
        t = b.Get(A.float)
        _copy_in(t, gms[0], A.float, 64)
        _copy_in(t[64], gms[1], A.float, 64)
        i = b.Get(A.int16_t)
        _copy_in(i[512], gms[2], A.int16_t, 128)
        A.SetFlag(E.MTE2_V, 0)
        A.WaitFlag(E.MTE2_V, 0)
        A.Axpy(t[64], t, 0.5, 64)                      # y = 0.5 x + y
        A.Not(i[640], i[512], 128)
        A.And(i[768], i[640], i[512], 128)             # ~a & a = 0
        A.Or(i[768], i[768], i[640], 128)              # 0 | ~a = ~a
        _copy_out(gms[3], t[64], A.float, 64)
        g = A.GlobalTensor(A.int16_t)
        g.SetGlobalBuffer(gms[4].As(A.int16_t), 128)
        A.DataCopy(g, i[768], 128)

    res, bufs = launch(_tbuf_kernel(body, 3), 1, xs, ys, bits, np.zeros(64, np.float32), np.zeros(128, np.int16))
    got = np.concatenate([bufs[3].numpy(np.float32)[:64], bufs[4].numpy(np.int16)[:128].astype(np.float32)])
    want = np.concatenate([xs * np.float32(0.5) + ys, (~bits).astype(np.float32)])
    return res, got, want, True


def _sample(name, modname):
    @good(name)
    def run():
        import importlib

        mod = importlib.import_module(f"pycann.ascendc.samples.{modname}")
        got, want = mod.run()
        return A.TwinResult("Ascend910B1", 1), got.astype(np.float64), want.astype(np.float64), False


_sample("sample_matmul_custom", "matmul_custom")
_sample("sample_softmax", "softmax_custom")
_sample("sample_layernorm", "layernorm_custom")
