"""A tiled, double-buffered fp16 MatMul kernel with its tiling as parameters (for calibration and aoe).

C[M x N] = A[M x K] · B[K x N], fp16 in, fp32 accumulation in L0C, fp16 out. The C grid of
``bm x bn`` tiles is dealt round-robin to ``block_dim`` cube cores; each tile walks K in ``bk``
steps: DataCopy ND2NZ GM->L1 (MTE2), LoadData L1->L0A/L0B (MTE1), Mmad (M), Fixpipe L0C->GM (FIX).
``bufnum`` = 2 double-buffers every stage. Same structure as pycann/ascendc/samples/matmul_tiled.py,
with the tile sizes free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pycann import ascendc as AscendC

K0 = 16            # fp16 elements per 32-byte fractal row
FRACTAL = 16 * K0  # elements per 512-byte fractal
L0AB_BYTES, L0C_BYTES, L1_BYTES = 64 << 10, 128 << 10, 512 << 10  # arch 2201 (reference 3.3)


@dataclass(frozen=True)
class MatmulTiling:
    """Tile sizes (multiples of 16), cores and buffer count of one MatMul launch."""

    bm: int
    bn: int
    bk: int
    block_dim: int
    bufnum: int = 2

    def check(self, m: int, k: int, n: int) -> str | None:
        """None when the tiling is legal for (m, k, n), else the reason (capacity or divisibility)."""
        if m % self.bm or n % self.bn or k % self.bk or min(self.bm, self.bn, self.bk) % 16:
            return f"tiles {self.bm}x{self.bn}x{self.bk} must be multiples of 16 dividing {m}x{n}x{k}"
        b = self.bufnum
        if b * self.bm * self.bk * 2 > L0AB_BYTES or b * self.bk * self.bn * 2 > L0AB_BYTES:
            return "L0A/L0B overflow (bufnum x tile x 2 B > 64 KiB)"
        if b * self.bm * self.bn * 4 > L0C_BYTES:
            return "L0C overflow (bufnum x bm x bn x 4 B > 128 KiB)"
        if b * (self.bm + self.bn) * self.bk * 2 > L1_BYTES:
            return "L1 overflow"
        return None


def matmul_kernel(m: int, k: int, n: int, t: MatmulTiling):
    """The kernel function (a, b, c GM addresses) for shape (m, k, n) and tiling ``t``."""
    bm, bn, bk, nb = t.bm, t.bn, t.bk, t.bufnum
    h, f = AscendC.half, AscendC.float
    P = AscendC.TPosition
    tiles_n = n // bn
    n_tiles = (m // bm) * tiles_n

    def kern(a, b, c):
        pipe = AscendC.TPipe()
        qa1, qb1, qa2, qb2 = (AscendC.TQue(p, 1) for p in (P.A1, P.B1, P.A2, P.B2))
        qc = AscendC.TQue(P.CO1, 1)
        ag, bg, cg = AscendC.GlobalTensor(h), AscendC.GlobalTensor(h), AscendC.GlobalTensor(h)
        ag.SetGlobalBuffer(a.As(h), m * k)
        bg.SetGlobalBuffer(b.As(h), k * n)
        cg.SetGlobalBuffer(c.As(h), m * n)
        for q, size in ((qa1, bm * bk * 2), (qb1, bk * bn * 2), (qa2, bm * bk * 2), (qb2, bk * bn * 2),
                        (qc, bm * bn * 4)):
            pipe.InitBuffer(q, nb, size)
        for tile in range(AscendC.GetBlockIdx(), n_tiles, AscendC.GetBlockNum()):
            mt, nt = divmod(tile, tiles_n)
            co1 = qc.AllocTensor(f)
            for kt in range(k // bk):
                a1, b1 = qa1.AllocTensor(h), qb1.AllocTensor(h)
                AscendC.DataCopy(a1, ag[mt * bm * k + kt * bk], AscendC.Nd2NzParams(1, bm, bk, 0, k, bm, 1, 0))
                AscendC.DataCopy(b1, bg[kt * bk * n + nt * bn], AscendC.Nd2NzParams(1, bk, bn, 0, n, bk, 1, 0))
                qa1.EnQue(a1)
                qb1.EnQue(b1)
                a1, b1 = qa1.DeQue(h), qb1.DeQue(h)
                a2, b2 = qa2.AllocTensor(h), qb2.AllocTensor(h)
                for mi in range(bm // 16):
                    AscendC.LoadData(a2[mi * (bk // K0) * FRACTAL], a1, AscendC.LoadData2DParams(mi, bk // K0, bm // 16))
                for ki in range(bk // K0):
                    AscendC.LoadData(b2[ki * (bn // 16) * FRACTAL], b1,
                                     AscendC.LoadData2DParams(ki, bn // 16, bk // K0, ifTranspose=True))
                qa2.EnQue(a2)
                qb2.EnQue(b2)
                qa1.FreeTensor(a1)
                qb1.FreeTensor(b1)
                a2, b2 = qa2.DeQue(h), qb2.DeQue(h)
                AscendC.Mmad(co1, a2, b2, AscendC.MmadParams(m=bm, n=bn, k=bk, cmatrixInitVal=(kt == 0)))
                qa2.FreeTensor(a2)
                qb2.FreeTensor(b2)
            qc.EnQue(co1)
            co1 = qc.DeQue(f)
            AscendC.Fixpipe(cg[mt * bm * n + nt * bn], co1, AscendC.FixpipeParamsV220(
                nSize=bn, mSize=bm, srcStride=bm, dstStride=n, quantPre=AscendC.QuantMode_t.F322F16))
            qc.FreeTensor(co1)
    return kern


def run_matmul(m: int, k: int, n: int, t: MatmulTiling, soc_version: str = "Ascend910B2",
               seed: int = 0) -> tuple[np.ndarray, np.ndarray, list]:
    """Run on the twin with a trace; returns (C fp16, float64 golden, trace records).
    ``ValueError`` for an illegal tiling."""
    why = t.check(m, k, n)
    if why:
        raise ValueError(f"MatMul {m}x{k} x {k}x{n}: {why}")
    from pycann.ascendc.soc import SOCS
    from pycann.ascendc.twin import run_kernel
    rng = np.random.default_rng(seed)
    av = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    bv = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    a, b, c = AscendC.GmAlloc(av.nbytes), AscendC.GmAlloc(bv.nbytes), AscendC.GmAlloc(m * n * 2)
    a.numpy(np.float16)[:] = av.reshape(-1)
    b.numpy(np.float16)[:] = bv.reshape(-1)
    recs: list = []
    AscendC.SetKernelMode(AscendC.KernelMode.AIC_MODE)
    res = run_kernel(matmul_kernel(m, k, n, t), t.block_dim, (a, b, c),
                     soc_version=soc_version if soc_version in SOCS else "Ascend910B1", trace=recs.append)
    if res.errors:
        raise RuntimeError(f"twin rejected the MatMul tiling {t}: {res.errors[0]}")
    got = c.numpy(np.float16).reshape(m, n).copy()
    for g in (a, b, c):
        AscendC.GmFree(g)
    return got, av.astype(np.float64) @ bv.astype(np.float64), recs
