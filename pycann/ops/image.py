"""ImageDecoder (ONNX spec, Operators.md, opset 20): an encoded image byte stream -> uint8 pixels.

Decoding uses Pillow, an optional dependency imported when the kernel first runs (``pip install
pillow``; it is part of pycann's ``test`` extra). Every format Pillow reads is accepted (the
spec lists BMP, JPEG, JPEG 2000, TIFF, PNG, WebP and PNM).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.ops.opdef import InferContext, OpDef

_FORMATS = ("RGB", "BGR", "Grayscale")


def _k_image_decoder(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """ImageDecoder: [H, W, 3] in RGB or BGR order, or [H, W, 1] for ``pixel_format="Grayscale"``."""
    try:
        from PIL import Image
    except ImportError:
        raise RuntimeError(
            "ImageDecoder needs Pillow to decode images, and it is not installed: pip install pillow"
        ) from None
    fmt = attrs["pixel_format"]
    if fmt not in _FORMATS:
        raise ValueError(f"ImageDecoder: pixel_format must be one of {_FORMATS}, got {fmt!r}")
    data = np.ascontiguousarray(inputs[0], dtype=np.uint8).tobytes()
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except Exception as e:  # Pillow raises several types for unreadable streams
        raise ValueError(f"ImageDecoder: cannot decode the {len(data)}-byte stream as an image: {e}") from None
    if fmt == "Grayscale":
        return [np.ascontiguousarray(np.asarray(img.convert("L"), dtype=np.uint8)[:, :, None])]
    rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
    return [np.ascontiguousarray(rgb[:, :, ::-1] if fmt == "BGR" else rgb)]


def _infer_image_decoder(ctx: InferContext) -> list[TensorDesc]:
    fmt = ctx.attrs["pixel_format"]
    if fmt not in _FORMATS:
        raise ctx.fail(f"attribute 'pixel_format' must be one of {_FORMATS}, got {fmt!r}")
    d = ctx.input(0)
    if d is not None and d.dtype and d.dtype != DType.UINT8:
        raise ctx.fail(f"input 'encoded_stream' must be UINT8, got {d}")
    if d is not None and d.shape is not None and len(d.shape) != 1:
        raise ctx.fail(f"input 'encoded_stream' must be 1-D, got {d}")
    return [TensorDesc(int(DType.UINT8), (None, None, 1 if fmt == "Grayscale" else 3))]


OPS: list[OpDef] = [
    # not foldable: decoding a constant image at compile time would store the pixels in the .om
    OpDef("ImageDecoder", _infer_image_decoder, _k_image_decoder, since=20, attrs={"pixel_format": "RGB"},
          foldable=False),
]
