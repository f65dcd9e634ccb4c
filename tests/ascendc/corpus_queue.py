"""Seeded-bug kernels, queue classes: DeQue without EnQue, double free, leaks, depth, exhaustion,
wrong position or queue, use before InitBuffer."""

from __future__ import annotations

import numpy as np

from pycann import ascendc as A
from pycann.ascendc.diagnostics import Rule
from tests.ascendc.kit import BugCase, half, launch

P = A.TPosition
CASES: list[BugCase] = []


def case(name: str, rule: Rule, *arrays: np.ndarray, n: int = 1, soc: str = "Ascend910B1",
         mode: A.KernelMode = A.KernelMode.AIV_MODE):
    def deco(fn):
        CASES.append(BugCase(name, rule, lambda: launch(fn, n, *arrays, soc=soc, mode=mode)[0], fn))
        return fn
    return deco


def _setup(x, n=128, depth=1, num=1):
    pipe = A.TPipe()
    qi, qo = A.TQue(P.VECIN, depth), A.TQue(P.VECOUT, depth)
    pipe.InitBuffer(qi, num, n * 2)
    pipe.InitBuffer(qo, num, n * 2)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), n)
    return pipe, qi, qo, g


@case("deque_without_enque", Rule.DEQUE_EMPTY, half(128))
def k_deq(x):
    _, qi, _, g = _setup(x)
    t = qi.AllocTensor(A.half)
    A.DataCopy(t, g, 128)
    t2 = qi.DeQue(A.half)  # BUG: deque_without_enque
    qi.FreeTensor(t2)


@case("deque_twice", Rule.DEQUE_EMPTY, half(128))
def k_deq2(x):
    _, qi, _, g = _setup(x, num=2, depth=2)
    t = qi.AllocTensor(A.half)
    A.DataCopy(t, g, 128)
    qi.EnQue(t)
    a = qi.DeQue(A.half)
    b = qi.DeQue(A.half)  # BUG: deque_twice
    qi.FreeTensor(a)
    qi.FreeTensor(b)


@case("double_free", Rule.DOUBLE_FREE, half(128))
def k_df(x):
    _, qi, _, g = _setup(x)
    t = qi.AllocTensor(A.half)
    A.DataCopy(t, g, 128)
    qi.EnQue(t)
    t = qi.DeQue(A.half)
    qi.FreeTensor(t)
    qi.FreeTensor(t)  # BUG: double_free


@case("double_free_stale_handle", Rule.DOUBLE_FREE, half(128))
def k_df2(x):
    _, qi, _, g = _setup(x)
    t = qi.AllocTensor(A.half)
    qi.FreeTensor(t)
    t2 = qi.AllocTensor(A.half)
    qi.FreeTensor(t)  # BUG: double_free_stale_handle
    qi.FreeTensor(t2)


@case("leak_never_freed", Rule.LEAK, half(128))
def k_leak(x):
    _, qi, _, g = _setup(x)
    t = qi.AllocTensor(A.half)  # BUG: leak_never_freed
    A.DataCopy(t, g, 128)
    qi.EnQue(t)
    qi.DeQue(A.half)


@case("leak_enqueued_never_dequeued", Rule.LEAK, half(128))
def k_leak2(x):
    _, _, qo, g = _setup(x)
    o = qo.AllocTensor(A.half)  # BUG: leak_enqueued_never_dequeued
    A.Duplicate(o, 1.0, 128)
    qo.EnQue(o)


@case("leak_in_loop_tail", Rule.LEAK, half(512))
def k_leak3(x):
    pipe = A.TPipe()
    qi = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(qi, 2, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 512)
    for i in range(4):
        t = qi.AllocTensor(A.half)  # BUG: leak_in_loop_tail
        A.DataCopy(t, g[i * 128], 128)
        qi.EnQue(t)
        t = qi.DeQue(A.half)
        if i < 3:
            qi.FreeTensor(t)


@case("enque_past_depth", Rule.DEPTH_EXCEEDED, half(256))
def k_depth(x):
    _, qi, _, g = _setup(x, num=2, depth=1)
    a = qi.AllocTensor(A.half)
    b = qi.AllocTensor(A.half)
    A.DataCopy(a, g, 128)
    A.DataCopy(b, g, 128)
    qi.EnQue(a)
    qi.EnQue(b)  # BUG: enque_past_depth
    qi.FreeTensor(qi.DeQue(A.half))
    qi.FreeTensor(qi.DeQue(A.half))


@case("enque_same_tensor_twice", Rule.DEPTH_EXCEEDED, half(128))
def k_depth2(x):
    _, qi, _, g = _setup(x, num=1, depth=2)
    a = qi.AllocTensor(A.half)
    A.DataCopy(a, g, 128)
    qi.EnQue(a)
    qi.EnQue(a)  # BUG: enque_same_tensor_twice
    qi.FreeTensor(qi.DeQue(A.half))


@case("alloc_without_free", Rule.ALLOC_EXHAUSTED, half(128))
def k_exh(x):
    _, qi, _, g = _setup(x, num=2, depth=2)
    qi.AllocTensor(A.half)
    qi.AllocTensor(A.half)
    qi.AllocTensor(A.half)  # BUG: alloc_without_free


@case("alloc_exhausted_double_buffer", Rule.ALLOC_EXHAUSTED, half(1024))
def k_exh2(x):
    pipe = A.TPipe()
    qi = A.TQue(P.VECIN, 2)
    pipe.InitBuffer(qi, 2, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 1024)
    for i in range(8):
        t = qi.AllocTensor(A.half)  # BUG: alloc_exhausted_double_buffer
        A.DataCopy(t, g[i * 128], 128)
        qi.EnQue(t)
        qi.DeQue(A.half)  # forgot FreeTensor


@case("enque_into_other_queue", Rule.WRONG_POSITION, half(128))
def k_wrongq(x):
    _, qi, qo, g = _setup(x)
    t = qi.AllocTensor(A.half)
    A.DataCopy(t, g, 128)
    qo.EnQue(t)  # BUG: enque_into_other_queue


@case("free_into_other_queue", Rule.WRONG_POSITION, half(128))
def k_wrongq2(x):
    _, qi, qo, g = _setup(x)
    t = qi.AllocTensor(A.half)
    A.DataCopy(t, g, 128)
    qi.EnQue(t)
    t = qi.DeQue(A.half)
    qo.FreeTensor(t)  # BUG: free_into_other_queue
    qi.FreeTensor(t)


@case("mmad_operand_in_ub", Rule.WRONG_POSITION, half(16), mode=A.KernelMode.MIX_MODE)
def k_wrongpos(x):
    pipe = A.TPipe()
    qa, qb, qc = A.TQue(P.VECIN, 1), A.TQue(P.B2, 1), A.TQue(P.CO1, 1)
    pipe.InitBuffer(qa, 1, 512)
    pipe.InitBuffer(qb, 1, 512)
    pipe.InitBuffer(qc, 1, 1024)
    a, b, c = qa.AllocTensor(A.half), qb.AllocTensor(A.half), qc.AllocTensor(A.float)
    A.Mmad(c, a, b, A.MmadParams(16, 16, 16))  # BUG: mmad_operand_in_ub


@case("loaddata_from_gm_position", Rule.WRONG_POSITION, half(16), mode=A.KernelMode.AIC_MODE)
def k_wrongpos2(x):
    pipe = A.TPipe()
    qa2, qb2 = A.TQue(P.A2, 1), A.TQue(P.B2, 1)
    pipe.InitBuffer(qa2, 1, 512)
    pipe.InitBuffer(qb2, 1, 512)
    a, b = qa2.AllocTensor(A.half), qb2.AllocTensor(A.half)
    A.LoadData(a, b, A.LoadData2DParams(0, 1, 0))  # BUG: loaddata_from_gm_position


@case("alloc_before_initbuffer", Rule.NO_INIT_BUFFER, half(16))
def k_noinit(x):
    A.TPipe()
    q = A.TQue(P.VECIN, 1)
    q.AllocTensor(A.half)  # BUG: alloc_before_initbuffer


@case("tbuf_get_before_initbuffer", Rule.NO_INIT_BUFFER, half(16))
def k_noinit2(x):
    A.TPipe()
    b = A.TBuf(P.VECCALC)
    b.Get(A.float)  # BUG: tbuf_get_before_initbuffer
