"""LayerNorm in the CANN sample-set style: y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis.

x, y float [128 x 512] on 8 cores; gamma/beta loaded once per core into a TBuf (MTE2 then a
MTE2_V flag, since a TBuf has no queue hand-over).
"""

from __future__ import annotations

import sys

import numpy as np

from pycann import ascendc as AscendC

ROWS, H, BLOCK_DIM, EPS = 128, 512, 8, 1e-5
ROWS_PER_CORE = ROWS // BLOCK_DIM


class KernelLayerNorm:
    def __init__(self):
        self.pipe = AscendC.TPipe()
        self.inQ = AscendC.TQue(AscendC.TPosition.VECIN, 1)
        self.outQ = AscendC.TQue(AscendC.TPosition.VECOUT, 1)
        self.params = AscendC.TBuf(AscendC.TPosition.VECCALC)
        self.tmp = AscendC.TBuf(AscendC.TPosition.VECCALC)
        self.gms = [AscendC.GlobalTensor(AscendC.float) for _ in range(4)]

    def Init(self, x, gamma, beta, y):
        off = AscendC.GetBlockIdx() * ROWS_PER_CORE * H
        xg, gg, bg, yg = self.gms
        xg.SetGlobalBuffer(x.As(AscendC.float) + off, ROWS_PER_CORE * H)
        gg.SetGlobalBuffer(gamma.As(AscendC.float), H)
        bg.SetGlobalBuffer(beta.As(AscendC.float), H)
        yg.SetGlobalBuffer(y.As(AscendC.float) + off, ROWS_PER_CORE * H)
        self.pipe.InitBuffer(self.inQ, 2, H * 4)
        self.pipe.InitBuffer(self.outQ, 2, H * 4)
        self.pipe.InitBuffer(self.params, 2 * H * 4)
        self.pipe.InitBuffer(self.tmp, 2 * H * 4 + 32)

    def Process(self):
        xg, gg, bg, yg = self.gms
        p = self.params.Get(AscendC.float)
        AscendC.DataCopy(p, gg, H)
        AscendC.DataCopy(p[H], bg, H)
        AscendC.SetFlag(AscendC.HardEvent.MTE2_V, 0)
        AscendC.WaitFlag(AscendC.HardEvent.MTE2_V, 0)
        for r in range(ROWS_PER_CORE):
            x = self.inQ.AllocTensor(AscendC.float)
            AscendC.DataCopy(x, xg[r * H], H)
            self.inQ.EnQue(x)
            self.Compute(p)
            y = self.outQ.DeQue(AscendC.float)
            AscendC.DataCopy(yg[r * H], y, H)
            self.outQ.FreeTensor(y)

    def _scalar(self, t):
        AscendC.SetFlag(AscendC.HardEvent.V_S, 0)
        AscendC.WaitFlag(AscendC.HardEvent.V_S, 0)
        v = float(t.GetValue(0))
        AscendC.SetFlag(AscendC.HardEvent.S_V, 0)
        AscendC.WaitFlag(AscendC.HardEvent.S_V, 0)
        return v

    def Compute(self, p):
        x = self.inQ.DeQue(AscendC.float)
        y = self.outQ.AllocTensor(AscendC.float)
        t = self.tmp.Get(AscendC.float)
        sq, work, red = t, t[H], t[2 * H]
        AscendC.ReduceSum(red, x, work, H)
        mean = self._scalar(red) / H
        AscendC.Adds(y, x, -mean, H)                 # y = x - mean
        self.inQ.FreeTensor(x)
        AscendC.Mul(sq, y, y, H)
        AscendC.ReduceSum(red, sq, work, H)
        rstd = 1.0 / np.sqrt(self._scalar(red) / H + EPS)
        AscendC.Muls(y, y, rstd, H)
        AscendC.Mul(y, y, p, H)                      # * gamma
        AscendC.Add(y, y, p[H], H)                   # + beta
        self.outQ.EnQue(y)


@AscendC.kernel
def layernorm_custom(x, gamma, beta, y):
    op = KernelLayerNorm()
    op.Init(x, gamma, beta, y)
    op.Process()


def run(soc: str = "Ascend910B1") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    xv = rng.normal(1, 3, (ROWS, H)).astype(np.float32)
    gv, bv = rng.normal(1, 0.2, H).astype(np.float32), rng.normal(0, 0.2, H).astype(np.float32)
    bufs = [AscendC.GmAlloc(n) for n in (xv.nbytes, gv.nbytes, bv.nbytes, xv.nbytes)]
    for buf, v in zip(bufs, (xv, gv, bv)):
        buf.numpy(np.float32)[:] = v.reshape(-1)
    AscendC.SetKernelMode(AscendC.KernelMode.AIV_MODE)
    AscendC.ICPU_RUN_KF(layernorm_custom, BLOCK_DIM, *bufs, soc_version=soc)
    got = bufs[3].numpy(np.float32).reshape(ROWS, H).copy()
    for buf in bufs:
        AscendC.GmFree(buf)
    x64 = xv.astype(np.float64)
    mu, var = x64.mean(axis=1, keepdims=True), x64.var(axis=1, keepdims=True)
    return got, (x64 - mu) / np.sqrt(var + EPS) * gv + bv


def main() -> int:
    got, want = run()
    err = float(np.abs(got - want).max())
    ok = err < 1e-4
    print(f"layernorm_custom: {'ok' if ok else 'MISMATCH'} (max abs diff {err:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
