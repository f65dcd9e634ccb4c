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
    ``fmt``, DATA for bytes libjpeg-turbo cannot decode."""
    import simplejpeg

    if fmt not in (PixelFormat.RGB_888, PixelFormat.BGR_888):
        raise DvppError(Fault.FORMAT, f"decode_resize outputs RGB_888 (12) or BGR_888 (13), not {fmt}")
    try:
        img = simplejpeg.decode_jpeg(data, colorspace="BGR" if fmt == PixelFormat.BGR_888 else "RGB",
                                     min_height=height, min_width=width)
    except ValueError as e:
        raise DvppError(Fault.DATA, f"JPEG decode failed: {e}") from None
    return resize(img, height, width, mode)
