"""Decode + resize in one step for input pipelines: libjpeg-turbo's DCT scaling (decoding at 1/2,
1/4 or 1/8 of the size, as libjpeg-turbo's ``scale_num / scale_denom``) to the smallest size that
is still at least the target, then VPC's bilinear (``cv2.resize`` when OpenCV is installed). The
result is byte-identical to OpenCV's ``imdecode(IMREAD_REDUCED_COLOR_<n>)`` + ``INTER_LINEAR``.
Not what the device's JPEGD + VPC compute (they decode at full size): results differ by the scaled
IDCT's smoothing, which is why this is a separate call and not a path of ``acl.media``. Both
libraries release the GIL, so threads decode in parallel.
"""

from __future__ import annotations

import numpy as np

from pycann.dvpp.formats import DvppError, Fault, PixelFormat
from pycann.dvpp.resize import resize


def decode_resize(data: bytes, width: int, height: int, fmt: int = PixelFormat.RGB_888, mode: int = 1) -> np.ndarray:
    """JPEG bytes -> ``(height, width, 3)`` uint8 in RGB_888 (12) or BGR_888 (13), resized with VPC
    interpolation ``mode`` (``pycann.dvpp.resize``). Raises ``DvppError``: FORMAT for another
    ``fmt``, DATA for bytes libjpeg-turbo cannot decode, PARAM for a width or height below 1."""
    import simplejpeg

    if fmt not in (PixelFormat.RGB_888, PixelFormat.BGR_888):
        raise DvppError(Fault.FORMAT, f"decode_resize outputs RGB_888 (12) or BGR_888 (13), not {fmt}")
    if width < 1 or height < 1:
        raise DvppError(Fault.PARAM, f"decode_resize to {width}x{height}: width and height must be >= 1")
    cs = "BGR" if fmt == PixelFormat.BGR_888 else "RGB"
    try:
        h, w = simplejpeg.decode_jpeg_header(data)[:2]
        # the smallest of 1/2, 1/4, 1/8 that still covers the target (OpenCV's IMREAD_REDUCED_*):
        # simplejpeg's own choice among libjpeg-turbo's M/8 factors would take 3/8 for 800x600 -> 224
        scale = next((k for k in (8, 4, 2) if -(-h // k) >= height and -(-w // k) >= width), 1)
        sh, sw = -(-h // scale), -(-w // scale)
        img = simplejpeg.decode_jpeg(data, colorspace=cs, min_height=sh, min_width=sw)
        if img.shape[:2] != (sh, sw):  # a tiny picture where an M/8 factor gives the same size: full decode
            img = simplejpeg.decode_jpeg(data, colorspace=cs)
    except ValueError as e:
        raise DvppError(Fault.DATA, f"JPEG decode failed: {e}") from None
    return resize(img, height, width, mode)
