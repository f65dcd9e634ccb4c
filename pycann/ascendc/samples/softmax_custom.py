"""Row softmax in the CANN sample-set style: y = softmax(x, axis=-1), x/y half [64 x 1024] on 8 cores.

Per row: CopyIn (MTE2) -> Cast to float -> ReduceMax -> scalar read (GetValue on PIPE_S, after a
V_S flag) -> Adds(-max) -> Exp -> ReduceSum -> Muls(1/sum) -> Cast to half -> CopyOut (MTE3).
"""

from __future__ import annotations

import sys

import numpy as np

from pycann import ascendc as AscendC

ROWS, COLS, BLOCK_DIM = 64, 1024, 8
ROWS_PER_CORE = ROWS // BLOCK_DIM


class KernelSoftmax:
    def __init__(self):
        self.pipe = AscendC.TPipe()
        self.inQ = AscendC.TQue(AscendC.TPosition.VECIN, 1)
        self.outQ = AscendC.TQue(AscendC.TPosition.VECOUT, 1)
        self.fbuf = AscendC.TBuf(AscendC.TPosition.VECCALC)
        self.work = AscendC.TBuf(AscendC.TPosition.VECCALC)
        self.red = AscendC.TBuf(AscendC.TPosition.VECCALC)
        self.xGm, self.yGm = AscendC.GlobalTensor(AscendC.half), AscendC.GlobalTensor(AscendC.half)

    def Init(self, x, y):
        off = AscendC.GetBlockIdx() * ROWS_PER_CORE * COLS
        self.xGm.SetGlobalBuffer(x.As(AscendC.half) + off, ROWS_PER_CORE * COLS)
        self.yGm.SetGlobalBuffer(y.As(AscendC.half) + off, ROWS_PER_CORE * COLS)
        self.pipe.InitBuffer(self.inQ, 2, COLS * 2)
        self.pipe.InitBuffer(self.outQ, 2, COLS * 2)
        self.pipe.InitBuffer(self.fbuf, COLS * 4)
        self.pipe.InitBuffer(self.work, COLS * 4)
        self.pipe.InitBuffer(self.red, 32)

    def Process(self):
        for r in range(ROWS_PER_CORE):
            x = self.inQ.AllocTensor(AscendC.half)
            AscendC.DataCopy(x, self.xGm[r * COLS], COLS)
            self.inQ.EnQue(x)
            self.Compute()
            y = self.outQ.DeQue(AscendC.half)
            AscendC.DataCopy(self.yGm[r * COLS], y, COLS)
            self.outQ.FreeTensor(y)

    def _scalar(self, red):
        AscendC.SetFlag(AscendC.HardEvent.V_S, 0)
        AscendC.WaitFlag(AscendC.HardEvent.V_S, 0)
        v = float(red.GetValue(0))
        AscendC.SetFlag(AscendC.HardEvent.S_V, 0)
        AscendC.WaitFlag(AscendC.HardEvent.S_V, 0)
        return v

    def Compute(self):
        x = self.inQ.DeQue(AscendC.half)
        f, work, red = self.fbuf.Get(AscendC.float), self.work.Get(AscendC.float), self.red.Get(AscendC.float)
        AscendC.Cast(f, x, AscendC.RoundMode.CAST_NONE, COLS)
        self.inQ.FreeTensor(x)
        AscendC.ReduceMax(red, f, work, COLS)
        AscendC.Adds(f, f, -self._scalar(red), COLS)
        AscendC.Exp(f, f, COLS)
        AscendC.ReduceSum(red, f, work, COLS)
        AscendC.Muls(f, f, 1.0 / self._scalar(red), COLS)
        y = self.outQ.AllocTensor(AscendC.half)
        AscendC.Cast(y, f, AscendC.RoundMode.CAST_RINT, COLS)
        self.outQ.EnQue(y)


@AscendC.kernel
def softmax_custom(x, y):
    op = KernelSoftmax()
    op.Init(x, y)
    op.Process()


def run(soc: str = "Ascend910B1") -> tuple[np.ndarray, np.ndarray]:
    xv = np.random.default_rng(3).normal(0, 2, (ROWS, COLS)).astype(np.float16)
    x, y = AscendC.GmAlloc(xv.nbytes), AscendC.GmAlloc(xv.nbytes)
    x.numpy(np.float16)[:] = xv.reshape(-1)
    AscendC.SetKernelMode(AscendC.KernelMode.AIV_MODE)
    AscendC.ICPU_RUN_KF(softmax_custom, BLOCK_DIM, x, y, soc_version=soc)
    got = y.numpy(np.float16).reshape(ROWS, COLS).copy()
    AscendC.GmFree(x)
    AscendC.GmFree(y)
    e = np.exp(xv.astype(np.float64) - xv.astype(np.float64).max(axis=1, keepdims=True))
    return got, e / e.sum(axis=1, keepdims=True)


def main() -> int:
    got, want = run()
    err = float(np.abs(got.astype(np.float64) - want).max())
    ok = bool(np.allclose(got, want, rtol=2e-3, atol=1e-5))  # fp16 output rounding
    print(f"softmax_custom: {'ok' if ok else 'MISMATCH'} (max abs diff {err:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
