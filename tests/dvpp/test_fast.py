"""pycann.dvpp.fast.decode_resize: libjpeg-turbo's DCT-scaled decode + VPC bilinear, against
OpenCV's reduced decode (the same libjpeg-turbo scaling) and its full decode + resize."""

from __future__ import annotations

import numpy as np
import pytest

from pycann.dvpp.fast import decode_resize
from pycann.dvpp.formats import DvppError, Fault, PixelFormat

from .conftest import jpeg_bytes, scene

cv2 = pytest.importorskip("cv2")

_REDUCED = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
            8: cv2.IMREAD_REDUCED_COLOR_8}


@pytest.mark.parametrize("size,out,scale", [((1080, 1920), (224, 224), 4), ((480, 640), (224, 224), 2),
                                            ((600, 800), (64, 96), 8), ((300, 200), (256, 256), 1),
                                            ((600, 800), (224, 224), 2), ((1000, 30), (200, 10), 2)])
def test_decode_resize_is_opencv_reduced_decode_plus_linear(size: tuple[int, int], out: tuple[int, int],
                                                            scale: int) -> None:
    """The scale is the smallest of 1/2, 1/4, 1/8 whose picture still covers the target (1080p ->
    224: 1/4, 480x270; 800x600 -> 224: 1/2, not libjpeg-turbo's 3/8); the bytes equal OpenCV's IMREAD_REDUCED_COLOR_<scale>
    (libjpeg-turbo's scaled IDCT) resized with INTER_LINEAR."""
    data = jpeg_bytes(scene(*size, seed=size[0]), quality=90, subsampling=2)
    oh, ow = out
    rgb = decode_resize(data, ow, oh)
    assert rgb.shape == (oh, ow, 3) and rgb.dtype == np.uint8
    reduced = cv2.imdecode(np.frombuffer(data, np.uint8), _REDUCED[scale])
    assert reduced.shape[0] >= oh or scale == 1
    ref = cv2.cvtColor(cv2.resize(reduced, (ow, oh), interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
    assert np.array_equal(rgb, ref)
    bgr = decode_resize(data, ow, oh, PixelFormat.BGR_888)
    assert np.array_equal(bgr, rgb[..., ::-1])
    # against the full decode (what JPEGD + VPC compute): the scaled IDCT low-passes where bilinear
    # aliases this picture's pixel noise (sigma 12), so they differ by a few levels on average
    # (a swapped channel or a wrong crop would differ by tens)
    full = cv2.cvtColor(cv2.resize(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), (ow, oh),
                                   interpolation=cv2.INTER_LINEAR), cv2.COLOR_BGR2RGB)
    assert np.abs(rgb.astype(int) - full).mean() < 8


def test_decode_resize_errors() -> None:
    data = jpeg_bytes(scene(64, 64))
    with pytest.raises(DvppError, match="RGB_888 .12. or BGR_888 .13., not 1") as e:
        decode_resize(data, 32, 32, PixelFormat.YUV_SEMIPLANAR_420)
    assert e.value.fault is Fault.FORMAT
    with pytest.raises(DvppError, match="JPEG decode failed") as e:
        decode_resize(data[: len(data) // 3] + b"\x00" * 10, 32, 32)
    assert e.value.fault is Fault.DATA


@pytest.mark.parametrize("w,h", [(0, 10), (10, 0), (-4, 10)])
def test_decode_resize_to_an_empty_size_is_a_param_error(w: int, h: int) -> None:
    """A width or height below 1 ended in OpenCV's assertion (cv2.error), not a DvppError."""
    with pytest.raises(DvppError) as ei:
        decode_resize(jpeg_bytes(scene(64, 80)), w, h)
    assert ei.value.fault is Fault.PARAM


def test_resize_to_an_empty_size_is_a_param_error() -> None:
    from pycann.dvpp.resize import resize

    for mode in (1, 2, 3, 4):
        with pytest.raises(DvppError) as ei:
            resize(np.zeros((8, 8, 3), np.uint8), 0, 5, mode)
        assert ei.value.fault is Fault.PARAM
