"""CANN's MatmulCustom sample: the Matmul high-level API with host MultiCoreMatmulTiling.

C[M, N] (float) = A[M, K] (half) x B[K, N] (half) on ``blockDim`` cube cores; each core takes a
singleCoreM x singleCoreN block chosen by the host tiling. ``run()`` returns (C, numpy golden).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from pycann import ascendc as AscendC
from pycann.ascendc import matmul_tiling

M, N, K = 256, 384, 192
BLOCK_DIM = 4
TilingData = AscendC.BEGIN_TILING_DATA_DEF(
    "MatmulCustomTilingData", AscendC.TILING_DATA_FIELD_DEF_STRUCT(AscendC.TCubeTiling, "cubeTilingData"))


def host_tiling(soc: str = "Ascend910B1") -> Any:
    """TilingFunc: MultiCoreMatmulTiling over BLOCK_DIM cores, serialised into TilingData."""
    t = matmul_tiling.MultiCoreMatmulTiling(soc)
    t.SetDim(BLOCK_DIM)
    t.SetAType(AscendC.TPosition.GM, AscendC.CubeFormat.ND, matmul_tiling.DataType.DT_FLOAT16)
    t.SetBType(AscendC.TPosition.GM, AscendC.CubeFormat.ND, matmul_tiling.DataType.DT_FLOAT16)
    t.SetCType(AscendC.TPosition.GM, AscendC.CubeFormat.ND, matmul_tiling.DataType.DT_FLOAT)
    t.SetShape(M, N, K)
    t.SetOrgShape(M, N, K)
    t.SetBufferSpace(-1, -1, -1)
    data = TilingData()
    if t.GetTiling(data.cubeTilingData) != 0:
        raise RuntimeError("matmul tiling failed")
    return data


@AscendC.kernel
def matmul_custom(a, b, c, workspace, tiling):
    td = AscendC.GET_TILING_DATA(TilingData, tiling)
    tc = td.cubeTilingData
    aGm, bGm, cGm = AscendC.GlobalTensor(AscendC.half), AscendC.GlobalTensor(AscendC.half), AscendC.GlobalTensor(AscendC.float)
    aGm.SetGlobalBuffer(a.As(AscendC.half), tc.M * tc.Ka)
    bGm.SetGlobalBuffer(b.As(AscendC.half), tc.Ka * tc.N)
    cGm.SetGlobalBuffer(c.As(AscendC.float), tc.M * tc.N)
    n_blocks = -(-tc.N // tc.singleCoreN)
    mi, ni = AscendC.GetBlockIdx() // n_blocks, AscendC.GetBlockIdx() % n_blocks
    offA, offB, offC = mi * tc.singleCoreM * tc.Ka, ni * tc.singleCoreN, mi * tc.singleCoreM * tc.N + ni * tc.singleCoreN
    pipe = AscendC.TPipe()
    mm = AscendC.Matmul(AscendC.MatmulType(AscendC.TPosition.GM, AscendC.CubeFormat.ND, AscendC.half),
                        AscendC.MatmulType(AscendC.TPosition.GM, AscendC.CubeFormat.ND, AscendC.half),
                        AscendC.MatmulType(AscendC.TPosition.GM, AscendC.CubeFormat.ND, AscendC.float))
    AscendC.REGIST_MATMUL_OBJ(pipe, AscendC.GetSysWorkSpacePtr(), mm, tc)
    tailM = min(tc.singleCoreM, tc.M - mi * tc.singleCoreM)
    tailN = min(tc.singleCoreN, tc.N - ni * tc.singleCoreN)
    mm.SetTail(tailM, tailN, tc.Ka)
    mm.SetTensorA(aGm[offA])
    mm.SetTensorB(bGm[offB])
    mm.IterateAll(cGm[offC])
    mm.End()


def run(soc: str = "Ascend910B1") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    av = rng.uniform(-1, 1, (M, K)).astype(np.float16)
    bv = rng.uniform(-1, 1, (K, N)).astype(np.float16)
    a, b = AscendC.GmAlloc(av.nbytes), AscendC.GmAlloc(bv.nbytes)
    c = AscendC.GmAlloc(M * N * 4)
    a.numpy(np.float16)[:] = av.reshape(-1)
    b.numpy(np.float16)[:] = bv.reshape(-1)
    td = host_tiling(soc)
    tiling = AscendC.GmAlloc(td.GetDataSize())
    td.SaveToBuffer(tiling)
    used = td.cubeTilingData.usedCoreNum
    AscendC.SetKernelMode(AscendC.KernelMode.AIC_MODE)
    AscendC.ICPU_RUN_KF(matmul_custom, used, a, b, c, None, tiling, soc_version=soc)
    got = c.numpy(np.float32)[: M * N].reshape(M, N).copy()
    for buf in (a, b, c, tiling):
        AscendC.GmFree(buf)
    return got, av.astype(np.float32) @ bv.astype(np.float32)


def main() -> int:
    got, want = run()
    err = float(np.abs(got - want).max())
    ok = err < 1e-3
    print(f"matmul_custom: {'ok' if ok else 'MISMATCH'} (max abs diff {err:.2e})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
