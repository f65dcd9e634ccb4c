"""The mask/repeat ("high-dimensional slicing") form of vector instructions (reference 1.10).

One repeat covers 8 DataBlocks of 32 B (256 B: 128 halves, 64 floats). ``mask`` selects lanes:
an int is the continuous mode (first ``mask`` lanes), a two-element list ``[hi, lo]`` is the bit
mode (bit p of lo = lane p, bit p of hi = lane 64 + p). Block strides count 32-B blocks between a
repeat's blocks, repeat strides count 32-B blocks between repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLK = 32
REPEAT_BYTES = 256
MAX_REPEAT_TIMES = 255
DEFAULT_BLK_NUM = 8
DEFAULT_REPEAT_STRIDE = 8
ONE_BLK_SIZE = 32
ONE_REPEAT_BYTE_SIZE = 256


@dataclass
class BinaryRepeatParams:
    """Strides of a binary instruction's three operands (blocks of 32 B)."""

    dstBlkStride: int = 1
    src0BlkStride: int = 1
    src1BlkStride: int = 1
    dstRepStride: int = 8
    src0RepStride: int = 8
    src1RepStride: int = 8


@dataclass
class UnaryRepeatParams:
    """Strides of a unary / tensor-scalar instruction's two operands (blocks of 32 B)."""

    dstBlkStride: int = 1
    srcBlkStride: int = 1
    dstRepStride: int = 8
    srcRepStride: int = 8


def lanes(size: int) -> int:
    """Elements per repeat for an element of ``size`` bytes."""
    return REPEAT_BYTES // size


def mask_lanes(mask: int | list[int] | tuple[int, int], size: int) -> tuple[np.ndarray, str | None]:
    """Active lane positions of one repeat, and an error text when ``mask`` is out of range."""
    n = lanes(size)
    if isinstance(mask, (list, tuple)):
        hi, lo = (int(mask[0]), int(mask[1])) if len(mask) == 2 else (0, int(mask[0]))
        bits = np.array([(lo >> p) & 1 for p in range(64)] + [(hi >> p) & 1 for p in range(64)], bool)[:n]
        err = None if (n > 64 or hi == 0) else f"bit-mask high word {hi:#x} must be 0 for {size * 8}-bit types"
        return np.nonzero(bits)[0], err
    m = int(mask)
    if not 1 <= m <= n:
        return np.arange(max(0, min(m, n))), f"mask {m} outside [1, {n}] for {size * 8}-bit types"
    return np.arange(m), None


def element_index(pos: np.ndarray, repeat: int, blk_stride: int, rep_stride: int, size: int) -> np.ndarray:
    """Element offsets touched by ``repeat`` repeats over lanes ``pos``."""
    epb = BLK // size
    per = (pos // epb) * blk_stride * epb + pos % epb
    reps = np.arange(repeat, dtype=np.int64)[:, None] * (rep_stride * epb)
    return (reps + per[None, :]).reshape(-1)
