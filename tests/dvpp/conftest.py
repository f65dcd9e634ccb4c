"""Shared images for the DVPP tests: JPEGs and PNGs made with Pillow (libjpeg-turbo / zlib)."""

from __future__ import annotations

import io

import numpy as np
import pytest

PIL = pytest.importorskip("PIL.Image")
pytest.importorskip("simplejpeg")


def scene(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A smooth colour picture with some texture (JPEG-friendly, not constant)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    rng = np.random.default_rng(seed)
    base = np.stack([128 + 100 * np.sin(xx / 23 + seed), 128 + 90 * np.cos(yy / 17), (xx + yy) * 0.3 % 256], -1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def jpeg_bytes(img: np.ndarray, quality: int = 90, subsampling: int = 2, **kw: object) -> bytes:
    """Pillow JPEG (subsampling 0 = 4:4:4, 1 = 4:2:2, 2 = 4:2:0)."""
    bio = io.BytesIO()
    PIL.fromarray(img).save(bio, "JPEG", quality=quality, subsampling=subsampling, **kw)
    return bio.getvalue()


def png_bytes(img: np.ndarray) -> bytes:
    bio = io.BytesIO()
    PIL.fromarray(img).save(bio, "PNG")
    return bio.getvalue()
