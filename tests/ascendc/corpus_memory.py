"""Seeded-bug kernels, memory classes: capacity, alignment, never-written reads, use after free, bounds.

Each kernel carries '# BUG: <name>' on the line the twin must point at.
"""

from __future__ import annotations

import numpy as np

from pycann import ascendc as A
from pycann.ascendc.diagnostics import Rule
from tests.ascendc.kit import BugCase, f32, half, launch

P = A.TPosition
CASES: list[BugCase] = []


def case(name: str, rule: Rule, *arrays: np.ndarray, n: int = 1, soc: str = "Ascend910B1",
         mode: A.KernelMode = A.KernelMode.AIV_MODE):
    def deco(fn):
        CASES.append(BugCase(name, rule, lambda: launch(fn, n, *arrays, soc=soc, mode=mode)[0], fn))
        return fn
    return deco


# ----------------------------------------------------------------- capacity
@case("ub_overflow_big_tile", Rule.CAPACITY, half(16))
def k_ub_overflow(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 2, 100 * 1024)  # BUG: ub_overflow_big_tile


@case("ub_overflow_many_queues", Rule.CAPACITY, half(16))
def k_ub_many(x):
    pipe = A.TPipe()
    qs = [A.TQue(P.VECIN, 1), A.TQue(P.VECOUT, 1), A.TQue(P.VECIN, 1)]
    pipe.InitBuffer(qs[0], 2, 64 * 1024)
    pipe.InitBuffer(qs[1], 1, 50 * 1024)
    pipe.InitBuffer(qs[2], 1, 8 * 1024)  # BUG: ub_overflow_many_queues


@case("ub_overflow_910b_fits_310p", Rule.CAPACITY, half(16), soc="Ascend910B1")
def k_ub_910b(x):
    pipe = A.TPipe()
    t = A.TBuf(P.VECCALC)
    pipe.InitBuffer(t, 200 * 1024)  # BUG: ub_overflow_910b_fits_310p


@case("l0c_overflow", Rule.CAPACITY, half(16), mode=A.KernelMode.AIC_MODE)
def k_l0c(x):
    pipe = A.TPipe()
    q = A.TQue(P.CO1, 1)
    pipe.InitBuffer(q, 2, 128 * 256 * 4)  # BUG: l0c_overflow


@case("l0a_overflow", Rule.CAPACITY, half(16), mode=A.KernelMode.AIC_MODE)
def k_l0a(x):
    pipe = A.TPipe()
    q = A.TQue(P.A2, 1)
    pipe.InitBuffer(q, 2, 128 * 256 * 2)  # BUG: l0a_overflow


# ----------------------------------------------------------------- alignment
@case("datacopy_len_not_32B", Rule.ALIGN_LEN, half(100))
def k_len(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 1, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 100)
    t = q.AllocTensor(A.half)
    A.DataCopy(t, g, 100)  # BUG: datacopy_len_not_32B
    q.FreeTensor(t)


@case("datacopy_out_len_tail", Rule.ALIGN_LEN, f32(24))
def k_len_out(y):
    pipe = A.TPipe()
    q = A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(q, 1, 128)
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(y.As(A.float), 24)
    t = q.AllocTensor(A.float)
    A.Duplicate(t, 1.0, 32)
    q.EnQue(t)
    t = q.DeQue(A.float)
    A.DataCopy(g, t, 20)  # BUG: datacopy_out_len_tail
    q.FreeTensor(t)


@case("ub_addr_unaligned_offset", Rule.ALIGN_ADDR, half(256))
def k_addr(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 1, 1024)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 256)
    t = q.AllocTensor(A.half)
    A.DataCopy(t[3], g, 128)  # BUG: ub_addr_unaligned_offset
    q.FreeTensor(t)


@case("vector_operand_unaligned", Rule.ALIGN_ADDR, half(16))
def k_vaddr(x):
    pipe = A.TPipe()
    b = A.TBuf(P.VECCALC)
    pipe.InitBuffer(b, 1024)
    t = b.Get(A.half)
    A.Duplicate(t, 1.0, 256)
    A.Adds(t[8], t, 1.0, 128)  # BUG: vector_operand_unaligned


@case("gm_addr_unaligned", Rule.ALIGN_GM, half(64))
def k_gm_align(x):
    g = A.GlobalTensor(A.float)
    g.SetGlobalBuffer(x.As(A.half) + 1, 8)  # BUG: gm_addr_unaligned


# ----------------------------------------------------------------- never-written reads
@case("read_uninit_after_short_copy", Rule.READ_UNINIT, half(128), half(128))
def k_uninit(x, y):
    pipe = A.TPipe()
    qi, qo = A.TQue(P.VECIN, 1), A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(qi, 1, 256)
    pipe.InitBuffer(qo, 1, 256)
    gx, gy = A.GlobalTensor(A.half), A.GlobalTensor(A.half)
    gx.SetGlobalBuffer(x.As(A.half), 128)
    gy.SetGlobalBuffer(y.As(A.half), 128)
    t = qi.AllocTensor(A.half)
    A.DataCopy(t, gx, 64)
    qi.EnQue(t)
    t = qi.DeQue(A.half)
    o = qo.AllocTensor(A.half)
    A.Muls(o, t, 2.0, 128)  # BUG: read_uninit_after_short_copy
    qo.EnQue(o)
    qi.FreeTensor(t)
    o = qo.DeQue(A.half)
    A.DataCopy(gy, o, 128)
    qo.FreeTensor(o)


@case("read_uninit_output_tail", Rule.READ_UNINIT, half(256), half(256))
def k_uninit_out(x, y):
    pipe = A.TPipe()
    qo = A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(qo, 1, 512)
    gy = A.GlobalTensor(A.half)
    gy.SetGlobalBuffer(y.As(A.half), 256)
    o = qo.AllocTensor(A.half)
    A.Duplicate(o, 0.5, 128)
    qo.EnQue(o)
    o = qo.DeQue(A.half)
    A.DataCopy(gy, o, 256)  # BUG: read_uninit_output_tail
    qo.FreeTensor(o)


@case("read_uninit_tbuf", Rule.READ_UNINIT, f32(64))
def k_uninit_tbuf(x):
    pipe = A.TPipe()
    b = A.TBuf(P.VECCALC)
    pipe.InitBuffer(b, 512)
    t = b.Get(A.float)
    A.Exp(t[64], t, 64)  # BUG: read_uninit_tbuf


@case("read_uninit_mask_form", Rule.READ_UNINIT, half(16))
def k_uninit_mask(x):
    pipe = A.TPipe()
    b = A.TBuf(P.VECCALC)
    pipe.InitBuffer(b, 2048)
    t = b.Get(A.half)
    A.Duplicate(t, 1.0, 128)
    A.Add(t[512], t, t, 128, 2, A.BinaryRepeatParams())  # BUG: read_uninit_mask_form


# ----------------------------------------------------------------- use after free
@case("use_after_free_vector", Rule.USE_FREED, half(128))
def k_uaf(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 1, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 128)
    t = q.AllocTensor(A.half)
    A.DataCopy(t, g, 128)
    q.EnQue(t)
    t = q.DeQue(A.half)
    q.FreeTensor(t)
    A.Muls(t, t, 2.0, 128)  # BUG: use_after_free_vector


@case("use_after_free_copy_out", Rule.USE_FREED, half(128))
def k_uaf2(y):
    pipe = A.TPipe()
    q = A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(q, 1, 256)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(y.As(A.half), 128)
    t = q.AllocTensor(A.half)
    A.Duplicate(t, 1.0, 128)
    q.EnQue(t)
    t = q.DeQue(A.half)
    q.FreeTensor(t)
    A.DataCopy(g, t, 128)  # BUG: use_after_free_copy_out


# ----------------------------------------------------------------- bounds
@case("gm_write_past_block", Rule.OUT_OF_BOUNDS, half(256), n=2)
def k_oob_gm(y):
    pipe = A.TPipe()
    q = A.TQue(P.VECOUT, 1)
    pipe.InitBuffer(q, 1, 512)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(y.As(A.half) + 128 * A.GetBlockIdx(), 128)
    t = q.AllocTensor(A.half)
    A.Duplicate(t, 1.0, 256)
    q.EnQue(t)
    t = q.DeQue(A.half)
    A.DataCopy(g[16], t, 128)  # BUG: gm_write_past_block
    q.FreeTensor(t)


@case("vector_count_past_tensor", Rule.OUT_OF_BOUNDS, half(16))
def k_oob_vec(x):
    pipe = A.TPipe()
    b = A.TBuf(P.VECCALC)
    pipe.InitBuffer(b, 256)
    t = b.Get(A.half)
    A.Duplicate(t, 0.0, 256)  # BUG: vector_count_past_tensor


@case("copy_in_past_local", Rule.OUT_OF_BOUNDS, half(512))
def k_oob_local(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 1, 512)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half), 512)
    t = q.AllocTensor(A.half)
    A.DataCopy(t, g, 512)  # BUG: copy_in_past_local
    q.FreeTensor(t)


@case("mask_repeat_past_tensor", Rule.OUT_OF_BOUNDS, half(16))
def k_oob_rep(x):
    pipe = A.TPipe()
    b = A.TBuf(P.VECCALC)
    pipe.InitBuffer(b, 512)
    t = b.Get(A.half)
    A.Duplicate(t, 1.0, 128, 3, 1, 8)  # BUG: mask_repeat_past_tensor


@case("gm_read_past_alloc", Rule.OUT_OF_BOUNDS, half(64))
def k_oob_alloc(x):
    pipe = A.TPipe()
    q = A.TQue(P.VECIN, 1)
    pipe.InitBuffer(q, 1, 512)
    g = A.GlobalTensor(A.half)
    g.SetGlobalBuffer(x.As(A.half))
    t = q.AllocTensor(A.half)
    A.DataCopy(t, g, 256)  # BUG: gm_read_past_alloc
    q.FreeTensor(t)
