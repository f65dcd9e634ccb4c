"""The Matmul high-level API (kernel side): ``Matmul<aType, bType, cType>`` over a TCubeTiling.

Built on the kit's own cube instructions (DataCopy ND2NZ -> LoadData -> Mmad -> Fixpipe) with
TQue hand-over between stages, so the twin's checks and trace cover it like user code
(reference 1.12). One ``Iterate`` computes one baseM x baseN block of this core's
singleCoreM x singleCoreN part; ``IterateAll`` all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pycann.ascendc import core as _core
from pycann.ascendc.cube import (
    Fixpipe,
    FixpipeParamsV220,
    LoadData,
    LoadData2DParams,
    Mmad,
    MmadParams,
    Nd2NzParams,
)
from pycann.ascendc.datacopy import DataCopy
from pycann.ascendc.diagnostics import Rule
from pycann.ascendc.dtypes import elem, float32
from pycann.ascendc.enums import CubeFormat, Pipe, TPosition
from pycann.ascendc.gm import GlobalTensor
from pycann.ascendc.pipe import TPipe, TQue


@dataclass(frozen=True)
class MatmulType:
    """``MatmulType<POSITION, FORMAT, T, ISTRANS>``."""

    pos: TPosition
    fmt: CubeFormat
    dtype: Any
    isTrans: bool = False


class Matmul:
    """``Matmul<A, B, C[, Bias]>``: C = A x B (+ bias) for this core's block."""

    def __init__(self, aType: MatmulType, bType: MatmulType, cType: MatmulType, biasType: MatmulType | None = None) -> None:
        self.a_t, self.b_t, self.c_t = elem(aType.dtype), elem(bType.dtype), elem(cType.dtype)
        self.tiling: Any = None
        self.a: GlobalTensor | None = None
        self.b: GlobalTensor | None = None
        self.tail: tuple[int, int, int] | None = None
        self.it = 0

    def Init(self, tiling: Any, pipe: TPipe | None = None) -> None:
        """Bind the TCubeTiling and reserve L1 / L0 buffers from ``pipe``."""
        c = _core.current()
        self.tiling = tiling
        self.pipe = pipe or TPipe()
        t, s = tiling, self.a_t.size
        bm, bn, bk = t.baseM, t.baseN, t.baseK
        if min(bm, bn, bk) <= 0:
            c.report(Rule.BAD_PARAM, "Matmul.Init", "TCubeTiling has no base block sizes (call GetTiling on the host)",
                     abort=True)
        self.qa1, self.qb1 = TQue(TPosition.A1, 1), TQue(TPosition.B1, 1)
        self.qa2, self.qb2 = TQue(TPosition.A2, 1), TQue(TPosition.B2, 1)
        self.qc = TQue(TPosition.CO1, 1)
        self.pipe.InitBuffer(self.qa1, 1, bm * bk * s)
        self.pipe.InitBuffer(self.qb1, 1, bk * bn * s)
        self.pipe.InitBuffer(self.qa2, 1, bm * bk * s)
        self.pipe.InitBuffer(self.qb2, 1, bk * bn * s)
        self.pipe.InitBuffer(self.qc, 1, bm * bn * float32.size)

    def SetTensorA(self, gm: GlobalTensor, isTransposeA: bool = False) -> None:
        if isTransposeA:
            _core.current().report(Rule.UNSUPPORTED, "SetTensorA", "transposed A is not modelled by the twin",
                                   abort=True)
        self.a = gm

    def SetTensorB(self, gm: GlobalTensor, isTransposeB: bool = False) -> None:
        if isTransposeB:
            _core.current().report(Rule.UNSUPPORTED, "SetTensorB", "transposed B is not modelled by the twin",
                                   abort=True)
        self.b = gm

    def SetBias(self, gm: GlobalTensor) -> None:
        _core.current().report(Rule.UNSUPPORTED, "SetBias", "bias is not modelled by the twin's Matmul API",
                               abort=True)

    def SetTail(self, tailM: int = -1, tailN: int = -1, tailK: int = -1) -> None:
        """This core's actual block when it is smaller than singleCoreM/N/K (the edge cores)."""
        t = self.tiling
        self.tail = (t.singleCoreM if tailM < 0 else tailM, t.singleCoreN if tailN < 0 else tailN,
                     t.singleCoreK if tailK < 0 else tailK)

    def _shape(self) -> tuple[int, int, int]:
        t = self.tiling
        return self.tail or (t.singleCoreM, t.singleCoreN, t.singleCoreK)

    def _blocks(self) -> list[tuple[int, int]]:
        t = self.tiling
        m, n, _ = self._shape()
        return [(i, j) for i in range(0, m, t.baseM) for j in range(0, n, t.baseN)]

    def Iterate(self) -> bool:
        """Compute the next baseM x baseN block into L0C; False when all are done."""
        blocks = self._blocks()
        if self.it >= len(blocks):
            return False
        self.cur = blocks[self.it]
        self.it += 1
        self._compute(*self.cur)
        return True

    def GetTensorC(self, gm: GlobalTensor) -> None:
        """Write the block Iterate computed into ``gm`` (this core's C, at the block's place)."""
        co1 = self.qc.DeQue(float32)
        i, j = self.cur
        m, n, _ = self._shape()
        bm, bn = min(self.tiling.baseM, m - i), min(self.tiling.baseN, n - j)
        Fixpipe(gm[i * self.tiling.N + j], co1, FixpipeParamsV220(nSize=bn, mSize=bm, srcStride=-(-bm // 16) * 16,
                                                                  dstStride=self.tiling.N))
        self.qc.FreeTensor(co1)

    def IterateAll(self, gm: GlobalTensor) -> None:
        """All blocks of this core: C[singleCoreM x singleCoreN] into ``gm``."""
        while self.Iterate():
            self.GetTensorC(gm)

    def End(self) -> None:
        self.it = 0

    def _compute(self, i: int, j: int) -> None:
        t = self.tiling
        m, n, k = self._shape()
        bm, bn = min(t.baseM, m - i), min(t.baseN, n - j)
        m16, n16 = -(-bm // 16) * 16, -(-bn // 16) * 16
        k0 = 32 // self.a_t.size
        co1 = self.qc.AllocTensor(float32)
        assert self.a is not None and self.b is not None
        for kk in range(0, k, t.baseK):
            bk = min(t.baseK, k - kk)
            k16 = -(-bk // k0) * k0
            a1 = self.qa1.AllocTensor(self.a_t)
            _zero(a1, m16 * k16)
            DataCopy(a1, self.a[i * t.Ka + kk], Nd2NzParams(1, bm, bk, 0, t.Ka, m16, 1, 0))
            self.qa1.EnQue(a1)
            b1 = self.qb1.AllocTensor(self.b_t)
            _zero(b1, k16 * n16)
            DataCopy(b1, self.b[kk * t.N + j], Nd2NzParams(1, bk, bn, 0, t.N, k16, 1, 0))
            self.qb1.EnQue(b1)
            a1, b1 = self.qa1.DeQue(self.a_t), self.qb1.DeQue(self.b_t)
            a2, b2 = self.qa2.AllocTensor(self.a_t), self.qb2.AllocTensor(self.b_t)
            fr = 16 * k0
            for mi in range(m16 // 16):
                LoadData(a2[mi * (k16 // k0) * fr], a1, LoadData2DParams(mi, k16 // k0, m16 // 16))
            for ki in range(k16 // k0):
                LoadData(b2[ki * (n16 // 16) * fr], b1, LoadData2DParams(ki, n16 // 16, k16 // k0, ifTranspose=True))
            self.qa2.EnQue(a2)
            self.qb2.EnQue(b2)
            self.qa1.FreeTensor(a1)
            self.qb1.FreeTensor(b1)
            a2, b2 = self.qa2.DeQue(self.a_t), self.qb2.DeQue(self.b_t)
            Mmad(co1, a2, b2, MmadParams(m=m16, n=n16, k=k16, cmatrixInitVal=(kk == 0)))
            self.qa2.FreeTensor(a2)
            self.qb2.FreeTensor(b2)
        self.qc.EnQue(co1)


def _zero(t: Any, count: int) -> None:
    """The API's own zero padding of an L1 tile (rows / K tail beyond the matrix), not an instruction."""
    c = _core.current()
    sl = slice(t.byte_offset, t.byte_offset + count * t.dtype.size)
    t.buf.mem.data[sl] = 0
    c.write(t.buf.mem, sl, Pipe.PIPE_MTE2, c.seq)


def REGIST_MATMUL_OBJ(pipe: TPipe, workspace: Any, mm: Matmul, tiling: Any) -> None:
    """``REGIST_MATMUL_OBJ(&pipe, GetSysWorkSpacePtr(), mm, &tiling)``."""
    mm.Init(tiling, pipe)


def GetSysWorkSpacePtr() -> None:
    """The system workspace (unused by the twin's Matmul API)."""
    return None

