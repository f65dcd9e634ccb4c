"""Ascend C enumerations, with Ascend C's names (namespace AscendC; ascendc-davinci.md 1.7, 1.13, 1.18).

Members keep CANN's spelling (``TPosition.VECIN``, ``HardEvent.MTE2_V``, ``RoundMode.CAST_RINT``)
so kernels read like their C++ originals.
"""

from __future__ import annotations

import enum


class TPosition(enum.Enum):
    """Logical buffer positions; ``physical`` names the memory each maps to (reference 1.7)."""

    GM = "GM"
    VECIN = "VECIN"
    VECOUT = "VECOUT"
    VECCALC = "VECCALC"
    A1 = "A1"
    B1 = "B1"
    C1 = "C1"
    A2 = "A2"
    B2 = "B2"
    C2 = "C2"
    CO1 = "CO1"
    CO2 = "CO2"

    @property
    def physical(self) -> Memory:
        return _PHYSICAL[self]


QuePosition = TPosition  # the older Ascend C name for the same enum


class Memory(enum.Enum):
    """Physical memories of one AI Core (reference 1.7, 3.3)."""

    GM = "GM"
    UB = "UB"
    L1 = "L1"
    L0A = "L0A"
    L0B = "L0B"
    L0C = "L0C"


_PHYSICAL = {
    TPosition.GM: Memory.GM, TPosition.VECIN: Memory.UB, TPosition.VECOUT: Memory.UB,
    TPosition.VECCALC: Memory.UB, TPosition.A1: Memory.L1, TPosition.B1: Memory.L1,
    TPosition.C1: Memory.L1, TPosition.A2: Memory.L0A, TPosition.B2: Memory.L0B,
    TPosition.C2: Memory.L0C, TPosition.CO1: Memory.L0C, TPosition.CO2: Memory.UB,
}


class Pipe(enum.IntEnum):
    """Instruction queues of an AI Core (reference 1.13, 3.6)."""

    PIPE_S = 0
    PIPE_V = 1
    PIPE_M = 2
    PIPE_MTE1 = 3
    PIPE_MTE2 = 4
    PIPE_MTE3 = 5
    PIPE_FIX = 6
    PIPE_ALL = 7


PIPE_S, PIPE_V, PIPE_M = Pipe.PIPE_S, Pipe.PIPE_V, Pipe.PIPE_M
PIPE_MTE1, PIPE_MTE2, PIPE_MTE3 = Pipe.PIPE_MTE1, Pipe.PIPE_MTE2, Pipe.PIPE_MTE3
PIPE_FIX, PIPE_ALL = Pipe.PIPE_FIX, Pipe.PIPE_ALL
N_PIPES = 7  # real pipes, PIPE_ALL excluded


class HardEvent(enum.Enum):
    """Source_destination pipe pairs of SetFlag/WaitFlag (kernel_event.h)."""

    MTE2_MTE1 = "MTE2_MTE1"
    MTE1_MTE2 = "MTE1_MTE2"
    MTE1_M = "MTE1_M"
    M_MTE1 = "M_MTE1"
    MTE2_V = "MTE2_V"
    V_MTE2 = "V_MTE2"
    MTE3_V = "MTE3_V"
    V_MTE3 = "V_MTE3"
    M_V = "M_V"
    V_M = "V_M"
    V_V = "V_V"
    MTE3_MTE1 = "MTE3_MTE1"
    MTE1_MTE3 = "MTE1_MTE3"
    MTE1_V = "MTE1_V"
    MTE2_M = "MTE2_M"
    M_MTE2 = "M_MTE2"
    V_MTE1 = "V_MTE1"
    M_FIX = "M_FIX"
    FIX_M = "FIX_M"
    MTE3_MTE2 = "MTE3_MTE2"
    MTE2_MTE3 = "MTE2_MTE3"
    S_V = "S_V"
    V_S = "V_S"
    S_MTE2 = "S_MTE2"
    MTE2_S = "MTE2_S"
    S_MTE3 = "S_MTE3"
    MTE3_S = "MTE3_S"
    MTE2_FIX = "MTE2_FIX"
    FIX_MTE2 = "FIX_MTE2"
    FIX_S = "FIX_S"
    M_S = "M_S"
    FIX_MTE3 = "FIX_MTE3"
    MTE1_FIX = "MTE1_FIX"
    FIX_MTE1 = "FIX_MTE1"
    FIX_FIX = "FIX_FIX"

    @property
    def pipes(self) -> tuple[Pipe, Pipe]:
        """(source pipe, destination pipe)."""
        src, dst = self.value.split("_")
        return Pipe["PIPE_" + src], Pipe["PIPE_" + dst]


class KernelMode(enum.IntEnum):
    """SetKernelMode's argument (CPU debug, reference 1.18)."""

    MIX_MODE = 0
    AIC_MODE = 1
    AIV_MODE = 2


class RoundMode(enum.Enum):
    """Cast rounding modes (Cast API)."""

    CAST_NONE = "CAST_NONE"    # the conversion's default: rint for float->float, truncation for float->int
    CAST_RINT = "CAST_RINT"    # round half to even
    CAST_FLOOR = "CAST_FLOOR"
    CAST_CEIL = "CAST_CEIL"
    CAST_ROUND = "CAST_ROUND"  # round half away from zero
    CAST_TRUNC = "CAST_TRUNC"
    CAST_ODD = "CAST_ODD"      # von Neumann rounding (fp32 -> fp16 only)


class CMPMODE(enum.Enum):
    """Compare modes."""

    LT = "LT"
    GT = "GT"
    EQ = "EQ"
    LE = "LE"
    GE = "GE"
    NE = "NE"


class SELMODE(enum.Enum):
    """Select modes: mode 0 = two tensors with a mask; mode 1 = tensor and scalar; mode 2 = two tensors."""

    VSEL_CMPMASK_SPR = 0
    VSEL_TENSOR_SCALAR_MODE = 1
    VSEL_TENSOR_TENSOR_MODE = 2


class CubeFormat(enum.Enum):
    """Matrix layouts of the Matmul API."""

    ND = "ND"
    NZ = "NZ"
    ND_ALIGN = "ND_ALIGN"
    SCALAR = "SCALAR"
    VECTOR = "VECTOR"
