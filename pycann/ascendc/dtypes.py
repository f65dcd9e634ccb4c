"""Ascend C element types (``half``, ``float``, ``bfloat16_t``, ``int32_t`` ...) as numpy dtypes.

fp16 is numpy's float16; bf16 is ml_dtypes' bfloat16 (the bit layouts the device uses).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class ElemType:
    """One Ascend C scalar type: its C name and numpy dtype."""

    name: str
    np_dtype: np.dtype

    @property
    def size(self) -> int:
        return int(self.np_dtype.itemsize)

    @property
    def is_float(self) -> bool:
        return self.name in ("half", "float", "bfloat16_t")

    def __repr__(self) -> str:
        return self.name


half = ElemType("half", np.dtype(np.float16))
float32 = ElemType("float", np.dtype(np.float32))
bfloat16_t = ElemType("bfloat16_t", np.dtype(ml_dtypes.bfloat16))
int8_t = ElemType("int8_t", np.dtype(np.int8))
uint8_t = ElemType("uint8_t", np.dtype(np.uint8))
int16_t = ElemType("int16_t", np.dtype(np.int16))
uint16_t = ElemType("uint16_t", np.dtype(np.uint16))
int32_t = ElemType("int32_t", np.dtype(np.int32))
uint32_t = ElemType("uint32_t", np.dtype(np.uint32))
int64_t = ElemType("int64_t", np.dtype(np.int64))
uint64_t = ElemType("uint64_t", np.dtype(np.uint64))

ALL: tuple[ElemType, ...] = (half, float32, bfloat16_t, int8_t, uint8_t, int16_t, uint16_t, int32_t,
                             uint32_t, int64_t, uint64_t)
_BY_NP = {t.np_dtype: t for t in ALL}


def elem(t: ElemType | np.dtype | type) -> ElemType:
    """The ElemType for an ElemType, numpy dtype or numpy scalar type; ``TypeError`` otherwise."""
    if isinstance(t, ElemType):
        return t
    try:
        return _BY_NP[np.dtype(t)]
    except (TypeError, KeyError):
        raise TypeError(f"{t!r} is not an Ascend C element type (use AscendC.half, AscendC.float, ...)") from None


def sizeof(t: ElemType | np.dtype | type) -> int:
    """``sizeof(T)`` in bytes."""
    return elem(t).size
