"""Colour-space conversion between full-range YUV (BT.601 as JPEG/JFIF defines it) and RGB, and
chroma resampling between 4:4:4, 4:2:2 and 4:2:0.

The fixed-point constants are libjpeg's (jccolor.c / jdcolor.c: 16 fraction bits, round half up),
so ``yuv_to_rgb`` of a 4:4:4 JPEG's YCbCr is byte-identical to libjpeg-turbo's RGB output, and
``rgb_to_yuv`` is within one LSB of OpenCV's ``COLOR_RGB2YCrCb``. Chroma is subsampled by the mean
of each 2x2 (4:2:0) or 1x2 (4:2:2) block, rounded half up, and upsampled by replication.
"""

from __future__ import annotations

import numpy as np

_SCALE = 16
_HALF = 1 << (_SCALE - 1)


def _fix(x: float) -> int:
    return int(x * (1 << _SCALE) + 0.5)


_Y_R, _Y_G, _Y_B = _fix(0.29900), _fix(0.58700), _fix(0.11400)
_CB_R, _CB_G, _CB_B = -_fix(0.16874), -_fix(0.33126), _fix(0.5)
_CR_R, _CR_G, _CR_B = _fix(0.5), -_fix(0.41869), -_fix(0.08131)
_R_CR, _B_CB = _fix(1.40200), _fix(1.77200)
_G_CB, _G_CR = -_fix(0.34414), -_fix(0.71414)

# jdcolor.c builds these as tables indexed by the chroma byte; tables keep the exact rounding
_X = np.arange(256, dtype=np.int64) - 128
_TAB_R = ((_R_CR * _X + _HALF) >> _SCALE).astype(np.int16)
_TAB_B = ((_B_CB * _X + _HALF) >> _SCALE).astype(np.int16)
_TAB_G_CB = (_G_CB * _X).astype(np.int32)
_TAB_G_CR = (_G_CR * _X + _HALF).astype(np.int32)


def rgb_to_yuv(rgb: np.ndarray) -> np.ndarray:
    """``(..., 3)`` uint8 R,G,B -> ``(..., 3)`` uint8 Y,Cb,Cr (full range, BT.601/JFIF)."""
    r, g, b = (rgb[..., i].astype(np.int32) for i in range(3))
    out = np.empty(rgb.shape, np.uint8)
    out[..., 0] = (_Y_R * r + _Y_G * g + _Y_B * b + _HALF) >> _SCALE
    off = (128 << _SCALE) + _HALF - 1  # libjpeg's CBCR_OFFSET + ONE_HALF - 1: never reaches 256
    out[..., 1] = (_CB_R * r + _CB_G * g + _CB_B * b + off) >> _SCALE
    out[..., 2] = (_CR_R * r + _CR_G * g + _CR_B * b + off) >> _SCALE
    return out


def yuv_to_rgb(yuv: np.ndarray) -> np.ndarray:
    """``(..., 3)`` uint8 Y,Cb,Cr -> ``(..., 3)`` uint8 R,G,B (libjpeg's full-range conversion)."""
    y = yuv[..., 0].astype(np.int16)
    cb, cr = yuv[..., 1], yuv[..., 2]
    out = np.empty(yuv.shape, np.uint8)
    out[..., 0] = np.clip(y + _TAB_R[cr], 0, 255)
    out[..., 1] = np.clip(y + ((_TAB_G_CB[cb] + _TAB_G_CR[cr]) >> _SCALE), 0, 255)
    out[..., 2] = np.clip(y + _TAB_B[cb], 0, 255)
    return out


def subsample(chroma: np.ndarray, sx: int, sy: int) -> np.ndarray:
    """``(h, w, c)`` full-resolution chroma -> ``(h/sy, w/sx, c)`` by block means (h, w divisible)."""
    if sx == 1 and sy == 1:
        return chroma
    total = np.zeros((chroma.shape[0] // sy, chroma.shape[1] // sx, chroma.shape[2]), np.uint16)
    for dy in range(sy):  # strided adds: far faster than a sum over a 5-D reshaped view
        for dx in range(sx):
            total += chroma[dy::sy, dx::sx]
    n = sx * sy
    return ((total + n // 2) // n).astype(np.uint8)


def upsample(chroma: np.ndarray, sx: int, sy: int) -> np.ndarray:
    """``(h, w, c)`` subsampled chroma -> ``(h*sy, w*sx, c)`` by replication."""
    if sx == 1 and sy == 1:
        return chroma
    return np.repeat(np.repeat(chroma, sy, axis=0), sx, axis=1)
