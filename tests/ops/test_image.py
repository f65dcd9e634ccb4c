"""ImageDecoder: decoded pixels against Pillow's own decode of the same stream, all pixel formats."""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from pycann.ops.registry import lookup
from tests.ops.oracle import check_op

Image = pytest.importorskip("PIL.Image")

RNG = np.random.default_rng(5)
PIXELS = RNG.integers(0, 256, (6, 5, 3), dtype=np.uint8)


def _encode(fmt, mode="RGB"):
    buf = io.BytesIO()
    Image.fromarray(PIXELS).convert(mode).save(buf, format=fmt)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8).copy()


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "JPEG", "TIFF", "PPM"])
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "Grayscale"])
def test_decode(fmt, pixel_format):
    data = _encode(fmt)
    img = Image.open(io.BytesIO(data.tobytes()))
    if pixel_format == "Grayscale":
        want = np.asarray(img.convert("L"))[:, :, None]
    else:
        want = np.asarray(img.convert("RGB"))
        want = want[:, :, ::-1] if pixel_format == "BGR" else want
    check_op("ImageDecoder", [data], {"pixel_format": pixel_format}, opset=20, expected=[want])


def test_palette_and_gray_sources_become_rgb():
    for mode in ("P", "L", "RGBA"):
        out = lookup("ImageDecoder", "", 20).kernel([_encode("PNG", mode)], {"pixel_format": "RGB"})[0]
        assert out.shape == (6, 5, 3) and out.dtype == np.uint8


def test_garbage_stream_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot decode"):
        lookup("ImageDecoder", "", 20).kernel([np.arange(10, dtype=np.uint8)], {"pixel_format": "RGB"})


def test_missing_pillow_says_how_to_install(monkeypatch):
    data = _encode("PNG")
    monkeypatch.setitem(sys.modules, "PIL", None)  # makes `from PIL import Image` fail
    with pytest.raises(RuntimeError, match="pip install pillow"):
        lookup("ImageDecoder", "", 20).kernel([data], {"pixel_format": "RGB"})
