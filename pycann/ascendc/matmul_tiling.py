"""Host-side Matmul tiling: matmul_tiling::MatmulApiTiling / MultiCoreMatmulTiling -> TCubeTiling.

The base block sizes are chosen to fit the SoC's L0A/L0B (double-buffered) and L0C, as CANN's
tiling does (reference 1.12, 3.3); CANN's exact heuristics are not public, so the numbers can
differ from the toolkit's while respecting the same capacities.
"""

from __future__ import annotations

import enum
from typing import Any

from pycann.ascendc.dtypes import ElemType, elem, float32, half, int32_t
from pycann.ascendc.enums import CubeFormat, Memory, TPosition
from pycann.ascendc.soc import get_soc
from pycann.ascendc.tiling import BEGIN_TILING_DATA_DEF, TILING_DATA_FIELD_DEF

_F = [
    "usedCoreNum", "M", "N", "Ka", "Kb", "singleCoreM", "singleCoreN", "singleCoreK", "baseM", "baseN", "baseK",
    "depthA1", "depthB1", "stepM", "stepN", "isBias", "transLength", "iterateOrder", "shareMode", "shareL1Size",
    "shareL0CSize", "shareUbSize", "stepKa", "stepKb", "dbL0A", "dbL0B", "dbL0C",
]
TCubeTiling = BEGIN_TILING_DATA_DEF("TCubeTiling", *(TILING_DATA_FIELD_DEF(int32_t, f) for f in _F))


class DataType(enum.Enum):
    """matmul_tiling::DataType."""

    DT_FLOAT16 = "half"
    DT_FLOAT = "float"
    DT_BF16 = "bfloat16_t"
    DT_INT8 = "int8_t"
    DT_INT32 = "int32_t"


def _dtype(t: DataType | ElemType | Any) -> ElemType:
    if isinstance(t, DataType):
        from pycann.ascendc import dtypes

        return next(d for d in dtypes.ALL if d.name == t.value)
    return elem(t)


def _ceil(a: int, b: int) -> int:
    return -(-a // b) * b


class MatmulApiTiling:
    """Single-core Matmul tiling."""

    def __init__(self, soc_version: str = "Ascend910B1") -> None:
        self.soc = get_soc(soc_version)
        self.a_type: ElemType = half
        self.c_type: ElemType = float32
        self.M = self.N = self.K = 0
        self.org: tuple[int, int, int] | None = None
        self.bias = False
        self.trans_a = self.trans_b = False
        self.dim = 1

    def SetAType(self, pos: TPosition, fmt: CubeFormat, dtype: DataType | ElemType, isTrans: bool = False) -> None:
        self.a_type, self.trans_a = _dtype(dtype), isTrans

    def SetBType(self, pos: TPosition, fmt: CubeFormat, dtype: DataType | ElemType, isTrans: bool = False) -> None:
        self.trans_b = isTrans

    def SetCType(self, pos: TPosition, fmt: CubeFormat, dtype: DataType | ElemType) -> None:
        self.c_type = _dtype(dtype)

    def SetBiasType(self, pos: TPosition, fmt: CubeFormat, dtype: DataType | ElemType) -> None:
        pass

    def SetShape(self, m: int, n: int, k: int) -> None:
        self.M, self.N, self.K = int(m), int(n), int(k)

    def SetOrgShape(self, m: int, n: int, k: int, kb: int | None = None) -> None:
        self.org = (int(m), int(n), int(k))

    def SetBias(self, isBias: bool = True) -> None:
        self.bias = bool(isBias)

    EnableBias = SetBias

    def SetBufferSpace(self, l1: int = -1, l0c: int = -1, ub: int = -1) -> None:
        pass

    def _single(self) -> tuple[int, int, int, int]:
        return self.M, self.N, self.K, 1

    def GetTiling(self, tiling: Any) -> int:
        """Fill ``tiling`` (a TCubeTiling); returns 0, or -1 when the shape is unset or impossible."""
        if min(self.M, self.N, self.K) <= 0:
            return -1
        sm, sn, sk, used = self._single()
        k0 = 32 // self.a_type.size
        l0ab = self.soc.capacity[Memory.L0A] // 2 // self.a_type.size  # elements per buffer, double-buffered
        l0c = self.soc.capacity[Memory.L0C] // 4
        base_m = min(128, _ceil(sm, 16))
        base_n = min(256, _ceil(sn, 16))
        while base_m * base_n > l0c:
            base_n //= 2
        base_k = min(_ceil(sk, k0), max(k0, (min(l0ab // base_m, l0ab // base_n)) // k0 * k0), 256)
        om, on, ok = self.org or (self.M, self.N, self.K)
        vals = dict(usedCoreNum=used, M=om, N=on, Ka=ok, Kb=ok, singleCoreM=sm, singleCoreN=sn, singleCoreK=sk,
                    baseM=base_m, baseN=base_n, baseK=base_k, depthA1=1, depthB1=1, stepM=1, stepN=1,
                    isBias=int(self.bias), transLength=0, iterateOrder=0, shareMode=0,
                    shareL1Size=0, shareL0CSize=base_m * base_n * 4, shareUbSize=0, stepKa=1, stepKb=1,
                    dbL0A=2, dbL0B=2, dbL0C=1)
        for k, v in vals.items():
            setattr(tiling, k, int(v))
        return 0


class MultiCoreMatmulTiling(MatmulApiTiling):
    """Matmul tiling over ``SetDim(n)`` cores: M and N are split into single-core blocks."""

    def SetDim(self, dim: int) -> None:
        self.dim = max(1, int(dim))

    def _single(self) -> tuple[int, int, int, int]:
        best: tuple[int, int, int] | None = None
        for md in range(1, self.dim + 1):
            nd = self.dim // md
            sm, sn = _ceil(-(-self.M // md), 16), _ceil(-(-self.N // nd), 16)
            cost = sm * sn * 10 + (sm + sn)  # biggest block first, then squarer
            if best is None or cost < best[0]:
                best = (cost, sm, sn)
        assert best is not None
        _, sm, sn = best
        used = -(-self.M // sm) * -(-self.N // sn)
        return sm, sn, self.K, used
