"""Cast's rounding modes (RoundMode) on numpy arrays, for float->float narrowing and float->int.

Directed modes step the round-to-nearest-even result one ulp toward the wanted side where it
landed on the wrong side (bit arithmetic on the target format, so bfloat16 works too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pycann.ascendc.enums import RoundMode


def _step(r: np.ndarray, up: np.ndarray) -> np.ndarray:
    """r moved one representable value up (``up`` True) or down, element-wise."""
    bits = np.dtype(f"u{r.dtype.itemsize}")
    u = r.view(bits).copy()
    sign = (u >> (r.dtype.itemsize * 8 - 1)).astype(bool)
    mag0 = (u << 1) == 0  # +-0
    away = up ^ sign      # moving away from zero in magnitude
    u = np.where(away, u + 1, u - 1).astype(bits)
    # from +-0: up -> smallest positive, down -> smallest negative
    tiny = np.ones_like(u)
    neg_tiny = tiny | np.array(1 << (r.dtype.itemsize * 8 - 1), bits)
    u = np.where(mag0, np.where(up, tiny, neg_tiny), u).astype(bits)
    return u.view(r.dtype)


def _directed(x: np.ndarray, dt: np.dtype, up: bool | np.ndarray) -> np.ndarray:
    r = x.astype(dt)
    back = r.astype(np.float64)
    upm = np.broadcast_to(np.asarray(up), x.shape)
    wrong = np.where(upm, back < x, back > x) & np.isfinite(x)
    if wrong.any():
        r = r.copy()
        r[wrong] = _step(r[wrong], upm[wrong])
    return r


def cast_round(x: np.ndarray, dt: np.dtype, mode: RoundMode) -> np.ndarray:
    """``x`` (float64 or integer values) converted to ``dt`` with Ascend C's ``mode``."""
    dt = np.dtype(dt)
    with np.errstate(over="ignore", invalid="ignore"):  # out-of-range values become inf / saturate, as on the device
        return _cast_round(x, dt, mode)


def _cast_round(x: np.ndarray, dt: np.dtype, mode: RoundMode) -> np.ndarray:
    if dt.kind in "iu":
        if x.dtype.kind in "iu":
            info = np.iinfo(dt)
            return np.clip(x, info.min, info.max).astype(dt)
        f: Any = {RoundMode.CAST_FLOOR: np.floor, RoundMode.CAST_CEIL: np.ceil, RoundMode.CAST_TRUNC: np.trunc,
             RoundMode.CAST_NONE: np.trunc, RoundMode.CAST_RINT: np.rint,
             RoundMode.CAST_ROUND: lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5)}.get(mode, np.rint)
        info = np.iinfo(dt)
        v = np.nan_to_num(f(x), nan=0.0)
        return np.clip(v, info.min, info.max).astype(dt)  # the device saturates
    if mode in (RoundMode.CAST_NONE, RoundMode.CAST_RINT):
        return x.astype(dt)
    if x.dtype.kind in "iu":
        # integer -> float: the directed modes apply too (int32 16777217 -> float is 16777216 with
        # CAST_FLOOR, 16777218 with CAST_CEIL); float64 holds every integer up to 2**53 exactly
        x = x.astype(np.float64)
    if mode == RoundMode.CAST_FLOOR:
        return _directed(x, dt, False)
    if mode == RoundMode.CAST_CEIL:
        return _directed(x, dt, True)
    if mode == RoundMode.CAST_TRUNC:
        return _directed(x, dt, x < 0)
    lo, hi = _directed(x, dt, False), _directed(x, dt, True)
    dlo, dhi = x - lo.astype(np.float64), hi.astype(np.float64) - x
    if mode == RoundMode.CAST_ROUND:
        pick_hi = (dhi < dlo) | ((dhi == dlo) & (x > 0))
        return np.where(pick_hi, hi, lo).astype(dt)
    # CAST_ODD: exact values stay; otherwise the neighbour whose last mantissa bit is 1
    bits = np.dtype(f"u{dt.itemsize}")
    odd_hi = (hi.view(bits) & 1).astype(bool)
    exact = dlo == 0
    return np.where(exact, lo, np.where(odd_hi, hi, lo)).astype(dt)
