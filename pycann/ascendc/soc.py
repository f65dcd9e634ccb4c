"""Per-SoC capacities, alignment rules and instruction sets for the CPU twin.

Numbers from ascendc-davinci.md 3.1-3.3, 3.7 and 1.6/1.9/1.12/1.13 (CANN 8.1 platform .ini files
and the Ascend C devkit constants). ``ub_usable`` is what vector APIs may use
(``TMP_UB_OFFSET`` keeps the rest); the twin's TPipe allocator enforces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pycann.ascendc.dtypes import ElemType, float32, half, int8_t, int16_t, int32_t, uint8_t, uint16_t
from pycann.ascendc.enums import Memory, Pipe

KIB = 1024

# Vector instruction dtype sets (from [AICoreintrinsicDtypeMap] of the .ini files, grouped).
_ARITH = frozenset({half, float32, int16_t, int32_t})
_FLOATS = frozenset({half, float32})
_ALL_DUP = frozenset({half, float32, int16_t, int32_t, uint8_t, int8_t})


@dataclass(frozen=True)
class SocSpec:
    """What the twin needs to know about one chip."""

    name: str
    arch: int                      # __NPU_ARCH__
    split: bool                    # separate AIC / AIV cores (A2/A3) vs coupled AI Cores
    aic_num: int
    aiv_num: int
    capacity: dict[Memory, int]    # bytes per core (UB per AIV on split parts)
    ub_usable: int
    align: dict[Memory, int]       # address alignment in bytes (reference 3.7)
    event_ids: int                 # hardware event ids per pipe pair / per TPosition
    data_copy_pad: bool            # DataCopyPad exists (A2/A3 yes, 310P and 910 no)
    vector_dtypes: dict[str, frozenset[ElemType]] = field(default_factory=dict)
    cast_pairs: frozenset[tuple[str, str]] = frozenset()
    mmad_dtypes: frozenset[tuple[str, str]] = frozenset()  # (input, accumulator)
    aiv_pipes: frozenset[Pipe] = frozenset()   # pipes a vector core has (split parts)
    aic_pipes: frozenset[Pipe] = frozenset()

    def supports(self, api: str, dtype: ElemType) -> bool:
        """Whether vector instruction family ``api`` accepts ``dtype`` on this chip."""
        allowed = self.vector_dtypes.get(api)
        return allowed is None or dtype in allowed


_VEC_COMMON = {
    "Add": _ARITH, "Sub": _ARITH, "Mul": _ARITH, "Max": _ARITH, "Min": _ARITH, "Div": _FLOATS,
    "Adds": _ARITH, "Muls": _ARITH, "Maxs": _ARITH, "Mins": _ARITH,
    "Exp": _FLOATS, "Ln": _FLOATS, "Sqrt": _FLOATS, "Rsqrt": _FLOATS, "Reciprocal": _FLOATS,
    "Abs": frozenset({half, float32, int16_t, int32_t}), "Relu": frozenset({half, float32, int32_t}),
    "LeakyRelu": _FLOATS, "Duplicate": _ALL_DUP, "Axpy": _FLOATS,
    "And": frozenset({int16_t, uint16_t}), "Or": frozenset({int16_t, uint16_t}), "Not": frozenset({int16_t, uint16_t}),
    "ReduceSum": _FLOATS, "ReduceMax": _FLOATS, "ReduceMin": _FLOATS,
    "WholeReduceSum": _FLOATS, "WholeReduceMax": _FLOATS, "WholeReduceMin": _FLOATS,
    "Compare": _FLOATS | {int32_t}, "Compares": _FLOATS | {int32_t}, "Select": _FLOATS,
}
_CAST_BASE = frozenset({
    ("half", "float"), ("float", "half"), ("half", "int32_t"), ("int32_t", "half"), ("float", "int32_t"),
    ("int32_t", "float"), ("half", "int8_t"), ("int8_t", "half"), ("half", "uint8_t"), ("uint8_t", "half"),
    ("half", "int16_t"), ("int16_t", "half"), ("float", "float"), ("half", "half"),
})
_CAST_BF16 = frozenset({("float", "bfloat16_t"), ("bfloat16_t", "float"), ("bfloat16_t", "int32_t")})

_AIV = frozenset({Pipe.PIPE_S, Pipe.PIPE_V, Pipe.PIPE_MTE2, Pipe.PIPE_MTE3})
_AIC = frozenset({Pipe.PIPE_S, Pipe.PIPE_M, Pipe.PIPE_MTE1, Pipe.PIPE_MTE2, Pipe.PIPE_MTE3, Pipe.PIPE_FIX})
_COUPLED = frozenset(p for p in Pipe if p != Pipe.PIPE_ALL)


def _a2(name: str, aic: int) -> SocSpec:
    return SocSpec(
        name=name, arch=2201, split=True, aic_num=aic, aiv_num=2 * aic,
        capacity={Memory.UB: 192 * KIB, Memory.L1: 512 * KIB, Memory.L0A: 64 * KIB,
                  Memory.L0B: 64 * KIB, Memory.L0C: 128 * KIB},
        ub_usable=184 * KIB,
        align={Memory.UB: 32, Memory.L1: 32, Memory.L0A: 512, Memory.L0B: 512, Memory.L0C: 64},
        event_ids=8, data_copy_pad=True,
        vector_dtypes=dict(_VEC_COMMON), cast_pairs=_CAST_BASE | _CAST_BF16,
        mmad_dtypes=frozenset({("half", "float"), ("bfloat16_t", "float"), ("int8_t", "int32_t"),
                               ("float", "float")}),
        aiv_pipes=_AIV, aic_pipes=_AIC,
    )


def _coupled(name: str, arch: int, cores: int, events: int) -> SocSpec:
    return SocSpec(
        name=name, arch=arch, split=False, aic_num=cores, aiv_num=cores,
        capacity={Memory.UB: 256 * KIB, Memory.L1: 1024 * KIB, Memory.L0A: 64 * KIB,
                  Memory.L0B: 64 * KIB, Memory.L0C: 256 * KIB},
        ub_usable=248 * KIB,
        align={Memory.UB: 32, Memory.L1: 32, Memory.L0A: 512, Memory.L0B: 512, Memory.L0C: 64},
        event_ids=events, data_copy_pad=False,
        vector_dtypes=dict(_VEC_COMMON), cast_pairs=_CAST_BASE,
        mmad_dtypes=frozenset({("half", "float"), ("int8_t", "int32_t")}),
        aiv_pipes=_COUPLED, aic_pipes=_COUPLED,
    )


SOCS: dict[str, SocSpec] = {
    "Ascend310P3": _coupled("Ascend310P3", 2002, 8, 8),
    "Ascend910A": _coupled("Ascend910A", 1001, 32, 4),
    "Ascend910B1": _a2("Ascend910B1", 24),
    "Ascend910B2": _a2("Ascend910B2", 24),
    "Ascend910B3": _a2("Ascend910B3", 20),
    "Ascend910B4": _a2("Ascend910B4", 20),
    "Ascend910_9391": _a2("Ascend910_9391", 24),
}
SOCS["Ascend910_93"] = SOCS["Ascend910_9391"]  # the A3 family name used by ai_core-<soc>


def get_soc(name: str) -> SocSpec:
    """The spec for ``name`` (e.g. 'Ascend910B1'); ``ValueError`` listing the known SoCs."""
    try:
        return SOCS[name]
    except KeyError:
        raise ValueError(f"unknown soc_version {name!r}; the twin knows {', '.join(sorted(SOCS))}") from None

