"""Tiled fp16 MatMul with the cube instructions and double buffering: C = A[1024x512] x B[512x2048].

Each of 8 cube cores owns 128 rows of C and walks N in 128-column tiles and K in 64-deep steps.
Every stage has two buffers (InitBuffer(que, 2, ...)): GM->L1 (DataCopy ND2NZ, MTE2), L1->L0A/L0B
(LoadData, MTE1; B transposed into ZN), Mmad into L0C (fp32 accumulation), Fixpipe L0C->GM
rounding to fp16 once. Buffers: L1 2x16 KB (A) + 2x16 KB (B), L0A 2x16 KB, L0B 2x16 KB, L0C 2x64 KB.
"""

from __future__ import annotations

import sys

import numpy as np

from pycann import ascendc as AscendC

M, K, N = 1024, 512, 2048
BLOCK_DIM = 8
BM, BN, BK = M // BLOCK_DIM, 128, 64
BUFFER_NUM = 2
K0 = 16                       # fp16 elements per 32-byte fractal row
FRACTAL = 16 * K0             # elements per 512-byte fractal


class KernelMatmul:
    def __init__(self):
        self.pipe = AscendC.TPipe()
        P = AscendC.TPosition
        self.qA1, self.qB1 = AscendC.TQue(P.A1, 1), AscendC.TQue(P.B1, 1)
        self.qA2, self.qB2 = AscendC.TQue(P.A2, 1), AscendC.TQue(P.B2, 1)
        self.qCO1 = AscendC.TQue(P.CO1, 1)
        self.aGm, self.bGm = AscendC.GlobalTensor(AscendC.half), AscendC.GlobalTensor(AscendC.half)
        self.cGm = AscendC.GlobalTensor(AscendC.half)

    def Init(self, a, b, c):
        row0 = BM * AscendC.GetBlockIdx()
        self.aGm.SetGlobalBuffer(a.As(AscendC.half) + row0 * K, BM * K)
        self.bGm.SetGlobalBuffer(b.As(AscendC.half), K * N)
        self.cGm.SetGlobalBuffer(c.As(AscendC.half) + row0 * N, BM * N)
        h = AscendC.sizeof(AscendC.half)
        self.pipe.InitBuffer(self.qA1, BUFFER_NUM, BM * BK * h)
        self.pipe.InitBuffer(self.qB1, BUFFER_NUM, BK * BN * h)
        self.pipe.InitBuffer(self.qA2, BUFFER_NUM, BM * BK * h)
        self.pipe.InitBuffer(self.qB2, BUFFER_NUM, BK * BN * h)
        self.pipe.InitBuffer(self.qCO1, BUFFER_NUM, BM * BN * AscendC.sizeof(AscendC.float))

    def Process(self):
        for nt in range(N // BN):
            co1 = self.qCO1.AllocTensor(AscendC.float)
            for kt in range(K // BK):
                self.CopyIn(nt, kt)
                self.SplitAB()
                self.Compute(co1, kt)
            self.qCO1.EnQue(co1)
            self.CopyOut(nt)

    def CopyIn(self, nt, kt):
        a1 = self.qA1.AllocTensor(AscendC.half)
        b1 = self.qB1.AllocTensor(AscendC.half)
        AscendC.DataCopy(a1, self.aGm[kt * BK], AscendC.Nd2NzParams(1, BM, BK, 0, K, BM, 1, 0))
        AscendC.DataCopy(b1, self.bGm[kt * BK * N + nt * BN], AscendC.Nd2NzParams(1, BK, BN, 0, N, BK, 1, 0))
        self.qA1.EnQue(a1)
        self.qB1.EnQue(b1)

    def SplitAB(self):
        a1, b1 = self.qA1.DeQue(AscendC.half), self.qB1.DeQue(AscendC.half)
        a2, b2 = self.qA2.AllocTensor(AscendC.half), self.qB2.AllocTensor(AscendC.half)
        for mi in range(BM // 16):       # A: NZ (k1, m1) -> ZZ (m1, k1)
            AscendC.LoadData(a2[mi * (BK // K0) * FRACTAL], a1, AscendC.LoadData2DParams(mi, BK // K0, BM // 16))
        for ki in range(BK // K0):       # B: NZ (n1, k1) -> ZN (k1, n1), each fractal transposed
            AscendC.LoadData(b2[ki * (BN // 16) * FRACTAL], b1,
                             AscendC.LoadData2DParams(ki, BN // 16, BK // K0, ifTranspose=True))
        self.qA2.EnQue(a2)
        self.qB2.EnQue(b2)
        self.qA1.FreeTensor(a1)
        self.qB1.FreeTensor(b1)

    def Compute(self, co1, kt):
        a2, b2 = self.qA2.DeQue(AscendC.half), self.qB2.DeQue(AscendC.half)
        AscendC.Mmad(co1, a2, b2, AscendC.MmadParams(m=BM, n=BN, k=BK, cmatrixInitVal=(kt == 0)))
        self.qA2.FreeTensor(a2)
        self.qB2.FreeTensor(b2)

    def CopyOut(self, nt):
        co1 = self.qCO1.DeQue(AscendC.float)
        AscendC.Fixpipe(self.cGm[nt * BN], co1, AscendC.FixpipeParamsV220(nSize=BN, mSize=BM, srcStride=BM, dstStride=N,
                                                                         quantPre=AscendC.QuantMode_t.F322F16))
        self.qCO1.FreeTensor(co1)


@AscendC.kernel
def matmul_tiled(a, b, c):
    op = KernelMatmul()
    op.Init(a, b, c)
    op.Process()


def run(soc: str = "Ascend910B1", trace=None) -> tuple[np.ndarray, np.ndarray]:
    """Run on the twin; returns (C from the kernel as fp16, float64 golden)."""
    rng = np.random.default_rng(2)
    av = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    bv = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    a, b, c = AscendC.GmAlloc(av.nbytes), AscendC.GmAlloc(bv.nbytes), AscendC.GmAlloc(M * N * 2)
    a.numpy(np.float16)[:] = av.reshape(-1)
    b.numpy(np.float16)[:] = bv.reshape(-1)
    AscendC.SetKernelMode(AscendC.KernelMode.AIC_MODE)
    AscendC.ICPU_RUN_KF(matmul_tiled, BLOCK_DIM, a, b, c, soc_version=soc, trace=trace)
    got = c.numpy(np.float16).reshape(M, N).copy()
    for buf in (a, b, c):
        AscendC.GmFree(buf)
    return got, av.astype(np.float64) @ bv.astype(np.float64)


def main() -> int:
    got, want = run()
    # fp16 output rounding (relative 2^-11) plus fp32 accumulation over K=512 in the cube's order
    ok = bool(np.allclose(got.astype(np.float64), want, rtol=1e-3, atol=1e-3))
    exact = int((got == want.astype(np.float16)).sum())
    print(f"matmul_tiled: {'ok' if ok else 'MISMATCH'} (max abs diff {np.abs(got - want).max():.2e}; "
          f"{exact} of {got.size} equal to the correctly rounded fp16 result)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
