"""Seeded-bug kernels, sync and SoC classes: missing SetFlag/WaitFlag, unpaired flags, deadlocks,
duplicate and out-of-range event ids, cores overlapping in GM, instructions the SoC lacks, bad params."""

from __future__ import annotations

import numpy as np

from pycann import ascendc as A
from pycann.ascendc.diagnostics import Rule
from tests.ascendc.kit import BugCase, f32, half, launch

P = A.TPosition
E = A.HardEvent
CASES: list[BugCase] = []


def case(name: str, rule: Rule, *arrays: np.ndarray, n: int = 1, soc: str = "Ascend910B1",
         mode: A.KernelMode = A.KernelMode.AIV_MODE):
    def deco(fn):
        CASES.append(BugCase(name, rule, lambda: launch(fn, n, *arrays, soc=soc, mode=mode)[0], fn))
        return fn
    return deco


def _tbuf(nbytes=1024):
    pipe = A.TPipe()
    b = A.TBuf(P.VECCALC)
    pipe.InitBuffer(b, nbytes)
    return pipe, b


@case("tbuf_copy_in_no_flag", Rule.MISSING_SYNC, f32(64))
def k_nosync(x):
    _, b = _tbuf()
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(x.As(A.float), 64)
    t = b.Get(A.float)
    A.DataCopy(t, g, 64)
    A.Exp(t[64], t, 64)  # BUG: tbuf_copy_in_no_flag


@case("tbuf_copy_out_no_flag", Rule.MISSING_SYNC, f32(64))
def k_nosync2(y):
    _, b = _tbuf()
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(y.As(A.float), 64)
    t = b.Get(A.float)
    A.Duplicate(t, 2.0, 64)
    A.DataCopy(g, t, 64)  # BUG: tbuf_copy_out_no_flag


@case("getvalue_after_reduce_no_flag", Rule.MISSING_SYNC, f32(64))
def k_nosync3(x):
    _, b = _tbuf()
    t = b.Get(A.float)
    A.Duplicate(t, 1.0, 128)
    A.ReduceSum(t[128], t, t[64], 64)
    t[128].GetValue(0)  # BUG: getvalue_after_reduce_no_flag


@case("wrong_event_pair", Rule.MISSING_SYNC, f32(64))
def k_nosync4(x):
    _, b = _tbuf()
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(x.As(A.float), 64)
    t = b.Get(A.float)
    A.DataCopy(t, g, 64)
    A.SetFlag(E.V_MTE3, 0)
    A.WaitFlag(E.V_MTE3, 0)
    A.Muls(t[64], t, 3.0, 64)  # BUG: wrong_event_pair


@case("flag_set_before_copy", Rule.MISSING_SYNC, f32(64))
def k_nosync5(x):
    _, b = _tbuf()
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(x.As(A.float), 64)
    t = b.Get(A.float)
    A.SetFlag(E.MTE2_V, 0)
    A.DataCopy(t, g, 64)
    A.WaitFlag(E.MTE2_V, 0)
    A.Relu(t[64], t, 64)  # BUG: flag_set_before_copy


@case("tbuf_reload_while_vector_reads", Rule.MISSING_SYNC, f32(128))
def k_war(x):
    _, b = _tbuf()
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(x.As(A.float), 128)
    t = b.Get(A.float)
    A.DataCopy(t, g, 64)
    A.SetFlag(E.MTE2_V, 0)
    A.WaitFlag(E.MTE2_V, 0)
    A.Exp(t[64], t, 64)
    A.DataCopy(t, g[64], 64)  # BUG: tbuf_reload_while_vector_reads


@case("vector_overwrites_scalar_read", Rule.MISSING_SYNC, f32(64))
def k_war2(x):
    _, b = _tbuf()
    t = b.Get(A.float)
    A.Duplicate(t, 1.0, 64)
    A.ReduceSum(t[64], t, t[128], 64)
    A.SetFlag(E.V_S, 0)
    A.WaitFlag(E.V_S, 0)
    t[64].GetValue(0)
    A.ReduceMax(t[64], t, t[128], 64)  # BUG: vector_overwrites_scalar_read


@case("setflag_never_waited", Rule.UNPAIRED_FLAG, f32(64))
def k_unpaired(x):
    _, b = _tbuf()
    t = b.Get(A.float)
    A.Duplicate(t, 1.0, 64)
    A.SetFlag(E.V_MTE3, 1)  # BUG: setflag_never_waited


@case("setflag_extra_in_loop", Rule.UNPAIRED_FLAG, f32(256))
def k_unpaired2(x):
    _, b = _tbuf()
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(x.As(A.float), 256)
    t = b.Get(A.float)
    for i in range(4):
        A.DataCopy(t, g[i * 64], 64)
        A.SetFlag(E.MTE2_V, i % 2)  # BUG: setflag_extra_in_loop
        if i < 2:
            A.WaitFlag(E.MTE2_V, i % 2)


@case("waitflag_without_set", Rule.DEADLOCK, f32(64))
def k_dead(x):
    _, b = _tbuf()
    A.WaitFlag(E.MTE2_V, 0)  # BUG: waitflag_without_set


@case("waitflag_wrong_id", Rule.DEADLOCK, f32(64))
def k_dead2(x):
    _, b = _tbuf()
    A.SetFlag(E.MTE3_MTE2, 0)
    A.WaitFlag(E.MTE3_MTE2, 1)  # BUG: waitflag_wrong_id


@case("set_same_event_twice", Rule.DUPLICATE_EVENT, f32(64))
def k_dup(x):
    _, b = _tbuf()
    A.SetFlag(E.V_MTE3, 2)
    A.SetFlag(E.V_MTE3, 2)  # BUG: set_same_event_twice
    A.WaitFlag(E.V_MTE3, 2)


@case("event_id_8", Rule.EVENT_ID_LIMIT, f32(64))
def k_evid(x):
    _, b = _tbuf()
    A.SetFlag(E.MTE2_V, 8)  # BUG: event_id_8


@case("event_id_4_on_910a", Rule.EVENT_ID_LIMIT, f32(64), soc="Ascend910A")
def k_evid2(x):
    _, b = _tbuf()
    A.SetFlag(E.MTE2_V, 5)  # BUG: event_id_4_on_910a


@case("too_many_queue_buffers", Rule.EVENT_ID_LIMIT, f32(64))
def k_evq(x):
    pipe = A.TPipe()
    qs = [A.TQue(P.VECIN, 1) for _ in range(5)]
    for q in qs[:4]:
        pipe.InitBuffer(q, 2, 256)
    pipe.InitBuffer(qs[4], 2, 256)  # BUG: too_many_queue_buffers


@case("cores_overlap_in_gm", Rule.CROSS_CORE_OVERLAP, half(256), n=4)
def k_overlap(y):
    pipe = A.TPipe()
    q = A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(q, 1, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(y.As(A.half) + 64 * A.GetBlockIdx(), 128)  # 128 per core, stride 64
    t = q.AllocTensor(A.half)
    A.Duplicate(t, 1.0, 128)
    q.EnQue(t)
    t = q.DeQue(A.half)
    A.DataCopy(g, t, 128)  # BUG: cores_overlap_in_gm
    q.FreeTensor(t)


@case("all_cores_write_block0", Rule.CROSS_CORE_OVERLAP, f32(64), n=2)
def k_overlap2(y):
    pipe = A.TPipe()
    q = A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(q, 1, 256)
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(y.As(A.float), 64)  # offset by GetBlockIdx() forgotten
    t = q.AllocTensor(A.float)
    A.Duplicate(t, float(A.GetBlockIdx()), 64)
    q.EnQue(t)
    t = q.DeQue(A.float)
    A.DataCopy(g, t, 64)  # BUG: all_cores_write_block0
    q.FreeTensor(t)


@case("datacopypad_on_310p", Rule.UNSUPPORTED, half(100), soc="Ascend310P3")
def k_unsup(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 1, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 100)
    t = q.AllocTensor(A.half)
    A.DataCopyPad(t, g, A.DataCopyExtParams(1, 200, 0, 0, 0))  # BUG: datacopypad_on_310p
    q.FreeTensor(t)


@case("bf16_cast_on_310p", Rule.UNSUPPORTED, f32(64), soc="Ascend310P3")
def k_unsup2(x):
    _, b = _tbuf()
    f = b.Get(A.float)
    A.Duplicate(f, 1.5, 64)
    h = b.Get(A.bfloat16_t)
    A.Cast(h[256], f, A.RoundMode.CAST_RINT, 64)  # BUG: bf16_cast_on_310p


@case("mmad_in_aiv_mode", Rule.UNSUPPORTED, half(16))
def k_unsup3(x):
    pipe = A.TPipe()
    qa, qb, qc = A.TQue(P.A2, 1), A.TQue(P.B2, 1), A.TQue(P.CO1, 1)
    pipe.InitBuffer(qa, 1, 512)
    pipe.InitBuffer(qb, 1, 512)
    pipe.InitBuffer(qc, 1, 1024)
    a, b, c = qa.AllocTensor(A.half), qb.AllocTensor(A.half), qc.AllocTensor(A.float)
    A.Mmad(c, a, b, A.MmadParams(16, 16, 16))  # BUG: mmad_in_aiv_mode


@case("exp_on_int32", Rule.UNSUPPORTED, f32(16))
def k_unsup4(x):
    _, b = _tbuf()
    t = b.Get(A.int32_t)
    A.Duplicate(t, 1, 64)
    A.Exp(t[64], t, 64)  # BUG: exp_on_int32


@case("vector_in_aic_mode", Rule.UNSUPPORTED, f32(16), mode=A.KernelMode.AIC_MODE)
def k_unsup5(x):
    _, b = _tbuf()
    A.Duplicate(b.Get(A.float), 1.0, 64)  # BUG: vector_in_aic_mode


@case("repeat_times_256", Rule.BAD_PARAM, f32(16))
def k_bad(x):
    _, b = _tbuf(256 * 256 + 256)
    t = b.Get(A.float)
    A.Duplicate(t, 1.0, 64, 256, 1, 8)  # BUG: repeat_times_256


@case("mask_past_lanes", Rule.BAD_PARAM, f32(16))
def k_bad2(x):
    _, b = _tbuf(2048)
    t = b.Get(A.float)
    A.Duplicate(t, 1.0, 64)
    A.Adds(t[256], t, 1.0, 128, 1, A.UnaryRepeatParams())  # BUG: mask_past_lanes


@case("compare_count_not_repeat", Rule.BAD_PARAM, f32(16))
def k_bad3(x):
    _, b = _tbuf(2048)
    t = b.Get(A.float)
    A.Duplicate(t, 1.0, 128)
    m = b.Get(A.uint8_t)
    A.Compares(m[1024], t, 0.5, A.CMPMODE.GT, 40)  # BUG: compare_count_not_repeat
