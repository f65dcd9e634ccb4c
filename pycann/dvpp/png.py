"""PNGD: PNG decode with Pillow (libpng-compatible zlib decoding; nothing is decoded here).

PNGD outputs RGB_888 or RGBA_8888 (8-bit; 16-bit samples are reduced to 8 as Pillow does, grey
and palette images are expanded to RGB), width stride ``ALIGN(w * bpp, 128)``, height stride
``ALIGN(h, 16)``, at most 4096x4096 (the device's range) and at least 32x32.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import numpy as np

from pycann.dvpp.formats import DvppError, Fault, PicDesc, PixelFormat, align_up, buffer_size, row_bytes
from pycann.dvpp.picture import plane_views

MIN_SIDE, MAX_SIDE = 32, 4096
DECODE_FORMATS = (PixelFormat.RGB_888, PixelFormat.RGBA_8888)
_SIG = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class PngInfo:
    """``width``, ``height``; ``components``: 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA (palette: 3, or 4
    with a transparency chunk)."""

    width: int
    height: int
    components: int


def _open(data: bytes):  # type: ignore[no-untyped-def]
    from PIL import Image

    if not data.startswith(_SIG):
        raise DvppError(Fault.DATA, "not a PNG stream: it does not start with the PNG signature")
    try:
        im = Image.open(io.BytesIO(data))
        if im.format != "PNG":
            raise DvppError(Fault.DATA, f"not a PNG stream ({im.format})")
        return im
    except Image.DecompressionBombError as e:  # > 179M pixels: Pillow's guard, an Exception of its own
        raise DvppError(Fault.UNSUPPORTED, f"PNG too large to decode: {e}") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise DvppError(Fault.DATA, f"corrupt PNG: {e}") from None


_COMPONENTS = {0: 1, 2: 3, 3: 3, 4: 2, 6: 4}  # IHDR colour type -> components (palette: 3, 4 with tRNS)


def get_image_info(data: bytes) -> PngInfo:
    """Width, height and components of a PNG, read from its chunks (IHDR, and tRNS for a palette)
    without Pillow, whose decompression-bomb guard refuses a header over 179M pixels that PNGD
    only has to call too large. Raises ``DvppError(DATA)``."""
    if not data.startswith(_SIG):
        raise DvppError(Fault.DATA, "not a PNG stream: it does not start with the PNG signature")
    if len(data) < 33 or data[12:16] != b"IHDR":
        raise DvppError(Fault.DATA, "corrupt PNG: the first chunk is not a complete IHDR")
    width, height = struct.unpack(">II", data[16:24])
    color_type = data[25]
    if not width or not height or color_type not in _COMPONENTS:
        raise DvppError(Fault.DATA, f"corrupt PNG header: {width}x{height}, colour type {color_type}")
    comps = _COMPONENTS[color_type]
    if color_type == 3:  # a palette with a transparency chunk (before the image data) decodes as RGBA
        i = 8
        while i + 8 <= len(data):
            n, kind = struct.unpack(">I", data[i:i + 4])[0], data[i + 4:i + 8]
            if kind in (b"IDAT", b"IEND"):
                break
            if kind == b"tRNS":
                comps = 4
                break
            i += 12 + n
    return PngInfo(int(width), int(height), comps)


def check_decodable(width: int, height: int) -> None:
    """Raise ``DvppError(UNSUPPORTED)`` for a size outside PNGD's range (as JPEGD's ``check_decodable``:
    ``dvpp_png_predict_dec_size`` refuses it up front, not only the decode at the stream's sync)."""
    if not (MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE):
        raise DvppError(Fault.UNSUPPORTED, f"{width}x{height} is outside PNGD's range "
                                           f"{MIN_SIDE}x{MIN_SIDE}..{MAX_SIDE}x{MAX_SIDE}")


def output_layout(width: int, height: int, fmt: int) -> tuple[int, int, int]:
    """(width stride, height stride, bytes) of PNGD's output."""
    pf = decode_format(fmt)
    ws, hs = align_up(row_bytes(pf, width), 128), align_up(height, 16)
    return ws, hs, buffer_size(pf, ws, hs)


def decode_format(fmt: int) -> PixelFormat:
    if fmt not in (int(f) for f in DECODE_FORMATS):
        raise DvppError(Fault.FORMAT, f"PNGD outputs RGB_888 (12) or RGBA_8888 (16), not {fmt}")
    return PixelFormat(fmt)


def decode_array(data: bytes, fmt: int, device_range: bool = True) -> np.ndarray:
    """``(h, w, 3|4)`` uint8 of a PNG. ``device_range=False`` (host applications such as the OCR
    pipeline, which scale any size themselves) skips PNGD's 32..4096 size range. Raises ``DvppError``."""
    pf = decode_format(fmt)
    if device_range:
        info = get_image_info(data)
        check_decodable(info.width, info.height)  # before Pillow opens it (its size guard is no PNGD rule)
    im = _open(data)
    try:
        if im.mode.startswith("I"):
            # 16-bit grey opens as "I;16"; Pillow's convert would clip it to 255 instead of reducing
            # it to 8 bits: keep the high byte as libpng's png_set_strip_16 (OpenCV, and Pillow's
            # own 16-bit RGB unpacking) does
            g = (np.asarray(im).astype(np.uint32) >> 8).astype(np.uint8)
            out = np.repeat(g[..., None], 4 if pf is PixelFormat.RGBA_8888 else 3, axis=-1)
            if pf is PixelFormat.RGBA_8888:
                out[..., 3] = 255
            return out
        return np.asarray(im.convert("RGBA" if pf is PixelFormat.RGBA_8888 else "RGB"))
    except (OSError, SyntaxError, ValueError) as e:
        raise DvppError(Fault.DATA, f"PNG decode failed: {e}") from None


def decode_into(data: bytes, out_buf: np.ndarray, out: PicDesc) -> None:
    """Decode ``data`` into ``out`` (strides and size checked); sets ``out.width`` / ``out.height``."""
    img = decode_array(data, out.format)
    h, w = img.shape[:2]
    ws, hs, size = output_layout(w, h, out.format)
    if out.width_stride % 128 or out.width_stride < ws or out.height_stride % 16 or out.height_stride < hs:
        raise DvppError(Fault.PARAM, f"PNGD output strides {out.width_stride}x{out.height_stride} must be "
                                     f"multiples of 128x16 and at least {ws}x{hs} for a {w}x{h} image")
    need = buffer_size(out.format, out.width_stride, out.height_stride)
    if out.size < need or out_buf.size < need:
        raise DvppError(Fault.PARAM, f"PNGD output buffer {out.size} bytes is smaller than {need} "
                                     f"(dvpp_png_predict_dec_size gives {size})")
    plane_views(out_buf, out.format, w, h, out.width_stride, out.height_stride)[0][...] = img.reshape(h, -1)
    out.width, out.height = w, h
