"""The Matmul high-level API with host MultiCoreMatmulTiling: tails, core splits, capacities."""

from __future__ import annotations

import numpy as np
import pytest

from pycann import ascendc as A
from pycann.ascendc import matmul_tiling
from pycann.ascendc.enums import Memory
from pycann.ascendc.samples import matmul_custom as mc


def _tiling(m: int, n: int, k: int, dim: int, soc: str = "Ascend910B1"):
    t = matmul_tiling.MultiCoreMatmulTiling(soc)
    t.SetDim(dim)
    for f in (t.SetAType, t.SetBType):
        f(A.TPosition.GM, A.CubeFormat.ND, matmul_tiling.DataType.DT_FLOAT16)
    t.SetCType(A.TPosition.GM, A.CubeFormat.ND, matmul_tiling.DataType.DT_FLOAT)
    t.SetShape(m, n, k)
    t.SetOrgShape(m, n, k)
    td = mc.TilingData()
    assert t.GetTiling(td.cubeTilingData) == 0
    return td


@pytest.mark.parametrize("m,n,k,dim", [(100, 200, 72, 3), (33, 17, 40, 2), (512, 512, 512, 8), (16, 1024, 16, 4)])
def test_matmul_api_matches_numpy_with_tails(m: int, n: int, k: int, dim: int) -> None:
    td = _tiling(m, n, k, dim)
    tc = td.cubeTilingData
    soc = A.get_soc("Ascend910B1")
    assert tc.usedCoreNum <= dim
    assert tc.baseM * tc.baseK * 2 * tc.dbL0A <= soc.capacity[Memory.L0A]
    assert tc.baseK * tc.baseN * 2 * tc.dbL0B <= soc.capacity[Memory.L0B]
    assert tc.baseM * tc.baseN * 4 <= soc.capacity[Memory.L0C]
    rng = np.random.default_rng(m + n + k)
    av, bv = rng.uniform(-1, 1, (m, k)).astype(np.float16), rng.uniform(-1, 1, (k, n)).astype(np.float16)
    a, b, c = A.GmAlloc(av.nbytes), A.GmAlloc(bv.nbytes), A.GmAlloc(m * n * 4)
    a.numpy(np.float16)[:] = av.ravel()
    b.numpy(np.float16)[:] = bv.ravel()
    tg = A.GmAlloc(td.GetDataSize())
    td.SaveToBuffer(tg)
    res = A.run_kernel(mc.matmul_custom, tc.usedCoreNum, (a, b, c, None, tg), mode=A.KernelMode.AIC_MODE)
    assert not res.findings, [str(f) for f in res.findings]
    got = c.numpy(np.float32)[: m * n].reshape(m, n)
    # float32 accumulation in K-block order vs BLAS order: |error| <~ K * 2^-24 * sum|a||b|
    np.testing.assert_allclose(got, av.astype(np.float64) @ bv.astype(np.float64), rtol=1e-5, atol=k * 2e-7)


def test_tiling_rejects_unset_shape_and_round_trips() -> None:
    t = matmul_tiling.MatmulApiTiling()
    assert t.GetTiling(A.TCubeTiling()) == -1
    td = _tiling(64, 64, 64, 1)
    back = mc.TilingData.from_bytes(td.to_bytes())
    assert back.cubeTilingData.baseM == td.cubeTilingData.baseM == 64
    assert td.GetDataSize() == 27 * 4


def test_matmul_in_aiv_mode_is_unsupported() -> None:
    td = _tiling(32, 32, 32, 1)
    tg = A.GmAlloc(td.GetDataSize())
    td.SaveToBuffer(tg)
    bufs = [A.GmAlloc(32 * 32 * 4) for _ in range(3)]
    res = A.run_kernel(mc.matmul_custom, 1, (*bufs, None, tg), mode=A.KernelMode.AIV_MODE)
    assert A.Rule.UNSUPPORTED in res.rules() and res.aborted_cores == [0]
