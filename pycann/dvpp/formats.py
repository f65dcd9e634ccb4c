"""DVPP pixel formats, their memory layouts and the alignment rules (cann-interfaces.md §9.2, §9.3).

One ``Layout`` per ``acldvppPixelFormat`` says how a picture of that format lies in a buffer:
semi-planar YUV (a Y plane of ``height_stride`` rows of ``width_stride`` bytes, then one interleaved
chroma plane), packed (one plane, ``bpp`` bytes a pixel; the width stride counts bytes) or grey.
``check_vpc_picture`` enforces VPC's rules: width stride a multiple of 16 and at least the row's
bytes, height stride even and at least the height, even width/height where the chroma is
subsampled, and a buffer large enough for ``width_stride x height_stride`` at the format's ratio.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pycann.errors import PycannError


class PixelFormat(enum.IntEnum):
    """``acldvppPixelFormat`` values (§9.2)."""

    YUV_400 = 0
    YUV_SEMIPLANAR_420 = 1  # NV12
    YVU_SEMIPLANAR_420 = 2  # NV21
    YUV_SEMIPLANAR_422 = 3
    YVU_SEMIPLANAR_422 = 4
    YUV_SEMIPLANAR_444 = 5
    YVU_SEMIPLANAR_444 = 6
    YUYV_PACKED_422 = 7
    UYVY_PACKED_422 = 8
    YVYU_PACKED_422 = 9
    VYUY_PACKED_422 = 10
    YUV_PACKED_444 = 11
    RGB_888 = 12
    BGR_888 = 13
    ARGB_8888 = 14
    ABGR_8888 = 15
    RGBA_8888 = 16
    BGRA_8888 = 17
    YUV_SEMI_PLANNER_420_10BIT = 18
    YVU_SEMI_PLANNER_420_10BIT = 19
    YVU_PLANAR_420 = 20


class Fault(enum.Enum):
    """What kind of failure a ``DvppError`` is; ``pycann.acl.media`` maps it to an ``aclError``."""

    PARAM = "invalid parameter"  # ACL_ERROR_INVALID_PARAM
    FORMAT = "format not supported here"  # ACL_ERROR_FORMAT_NOT_MATCH
    UNSUPPORTED = "feature not supported"  # ACL_ERROR_FEATURE_UNSUPPORTED
    DATA = "bad image data"  # ACL_ERROR_INVALID_PARAM on the call, or the stream's task code


class DvppError(PycannError):
    """A DVPP call's failure: ``fault`` says which kind, the message names the value and a fix."""

    def __init__(self, fault: Fault, message: str) -> None:
        super().__init__(message)
        self.fault = fault


class Family(enum.Enum):
    GRAY = "gray"
    YUV_SP = "yuv semi-planar"
    YUV_PACKED = "yuv packed"
    RGB = "rgb"


@dataclass(frozen=True)
class Layout:
    """How one pixel format lies in memory.

    ``order``: channel letters in memory order (``"UV"`` / ``"VU"`` for the chroma plane of a
    semi-planar format, ``"YUYV"`` for a packed 4:2:2 pair of pixels, ``"BGRA"`` ...).
    ``sub``: chroma subsampling (x, y) of YUV formats. ``bpp``: bytes a pixel in the (first)
    plane's rows. ``size_num / size_den``: buffer bytes per ``width_stride x height_stride``.
    """

    family: Family
    order: str
    sub: tuple[int, int]
    bpp: int
    size_num: int
    size_den: int


LAYOUTS: dict[PixelFormat, Layout] = {
    PixelFormat.YUV_400: Layout(Family.GRAY, "Y", (1, 1), 1, 1, 1),
    PixelFormat.YUV_SEMIPLANAR_420: Layout(Family.YUV_SP, "UV", (2, 2), 1, 3, 2),
    PixelFormat.YVU_SEMIPLANAR_420: Layout(Family.YUV_SP, "VU", (2, 2), 1, 3, 2),
    PixelFormat.YUV_SEMIPLANAR_422: Layout(Family.YUV_SP, "UV", (2, 1), 1, 2, 1),
    PixelFormat.YVU_SEMIPLANAR_422: Layout(Family.YUV_SP, "VU", (2, 1), 1, 2, 1),
    PixelFormat.YUV_SEMIPLANAR_444: Layout(Family.YUV_SP, "UV", (1, 1), 1, 3, 1),
    PixelFormat.YVU_SEMIPLANAR_444: Layout(Family.YUV_SP, "VU", (1, 1), 1, 3, 1),
    PixelFormat.YUYV_PACKED_422: Layout(Family.YUV_PACKED, "YUYV", (2, 1), 2, 1, 1),
    PixelFormat.UYVY_PACKED_422: Layout(Family.YUV_PACKED, "UYVY", (2, 1), 2, 1, 1),
    PixelFormat.YVYU_PACKED_422: Layout(Family.YUV_PACKED, "YVYU", (2, 1), 2, 1, 1),
    PixelFormat.VYUY_PACKED_422: Layout(Family.YUV_PACKED, "VYUY", (2, 1), 2, 1, 1),
    PixelFormat.YUV_PACKED_444: Layout(Family.YUV_PACKED, "YUV", (1, 1), 3, 1, 1),
    PixelFormat.RGB_888: Layout(Family.RGB, "RGB", (1, 1), 3, 1, 1),
    PixelFormat.BGR_888: Layout(Family.RGB, "BGR", (1, 1), 3, 1, 1),
    PixelFormat.ARGB_8888: Layout(Family.RGB, "ARGB", (1, 1), 4, 1, 1),
    PixelFormat.ABGR_8888: Layout(Family.RGB, "ABGR", (1, 1), 4, 1, 1),
    PixelFormat.RGBA_8888: Layout(Family.RGB, "RGBA", (1, 1), 4, 1, 1),
    PixelFormat.BGRA_8888: Layout(Family.RGB, "BGRA", (1, 1), 4, 1, 1),
}
"""Formats pycann's VPC reads and writes; 10-bit and planar 4:2:0 (18-20) are not among them."""

WIDTH_STRIDE_ALIGN = 16
HEIGHT_STRIDE_ALIGN = 2
VPC_MIN_WIDTH, VPC_MIN_HEIGHT, VPC_MAX_SIDE = 10, 6, 8192  # VPC resolution range (310P docs)


def align_up(x: int, n: int) -> int:
    """``x`` rounded up to a multiple of ``n``."""
    return -(-x // n) * n


def pixel_format(value: int) -> PixelFormat:
    """The ``PixelFormat`` of an int. Raises ``DvppError(FORMAT)`` for an unknown value."""
    try:
        return PixelFormat(value)
    except ValueError:
        raise DvppError(Fault.FORMAT, f"unknown pixel format {value}: acldvppPixelFormat is 0..20") from None


def layout(fmt: int, what: str = "picture") -> Layout:
    """The layout of ``fmt``. Raises ``DvppError(FORMAT)`` for formats pycann's VPC lacks."""
    pf = pixel_format(fmt)
    lay = LAYOUTS.get(pf)
    if lay is None:
        raise DvppError(Fault.FORMAT, f"{what}: pixel format {pf.name} ({int(pf)}) is not supported; "
                                      f"use one of {', '.join(f.name for f in LAYOUTS)}")
    return lay


def row_bytes(fmt: int, width: int) -> int:
    """Bytes one row of ``width`` pixels takes in the first plane."""
    return width * layout(fmt).bpp


def buffer_size(fmt: int, width_stride: int, height_stride: int) -> int:
    """Bytes a picture of ``fmt`` needs: ``width_stride x height_stride`` at the format's ratio
    (x3/2 for YUV420SP, x2 for YUV422SP, x3 for YUV444SP, x1 for packed and RGB whose width
    stride already counts bytes)."""
    lay = layout(fmt)
    return width_stride * height_stride * lay.size_num // lay.size_den


def vpc_strides(fmt: int, width: int, height: int) -> tuple[int, int, int]:
    """(width_stride, height_stride, buffer bytes) VPC's rules give a ``width x height`` picture."""
    ws = align_up(row_bytes(fmt, width), WIDTH_STRIDE_ALIGN)
    hs = align_up(height, HEIGHT_STRIDE_ALIGN)
    return ws, hs, buffer_size(fmt, ws, hs)


@dataclass
class PicDesc:
    """``acldvppPicDesc``: where a picture is and how it lies. ``data`` is a device pointer."""

    data: int = 0
    size: int = 0
    format: int = int(PixelFormat.YUV_SEMIPLANAR_420)
    width: int = 0
    height: int = 0
    width_stride: int = 0
    height_stride: int = 0
    ret_code: int = 0


def check_vpc_picture(pic: PicDesc, what: str) -> Layout:
    """Enforce VPC's alignment rules on ``pic``; returns its layout. Raises ``DvppError``."""
    lay = layout(pic.format, what)
    name = PixelFormat(pic.format).name
    w, h, ws, hs = pic.width, pic.height, pic.width_stride, pic.height_stride
    if not (VPC_MIN_WIDTH <= w <= VPC_MAX_SIDE and VPC_MIN_HEIGHT <= h <= VPC_MAX_SIDE):
        raise DvppError(Fault.PARAM, f"{what}: {w}x{h} is outside VPC's range "
                                     f"{VPC_MIN_WIDTH}x{VPC_MIN_HEIGHT}..{VPC_MAX_SIDE}x{VPC_MAX_SIDE}")
    sx, sy = lay.sub
    if (sx == 2 and w % 2) or (sy == 2 and h % 2):
        raise DvppError(Fault.PARAM, f"{what}: {name} needs an even {'width' if sx == 2 and w % 2 else 'height'}"
                                     f" (got {w}x{h}); round it down to even")
    need_ws = row_bytes(pic.format, w)
    if ws % WIDTH_STRIDE_ALIGN or ws < need_ws:
        raise DvppError(Fault.PARAM, f"{what}: width stride {ws} must be a multiple of {WIDTH_STRIDE_ALIGN} "
                                     f"and >= {need_ws} ({name}, width {w}); use {align_up(need_ws, 16)}")
    if hs % HEIGHT_STRIDE_ALIGN or hs < h:
        raise DvppError(Fault.PARAM, f"{what}: height stride {hs} must be even and >= height {h}; "
                                     f"use {align_up(h, HEIGHT_STRIDE_ALIGN)}")
    need = buffer_size(pic.format, ws, hs)
    if pic.size < need:
        raise DvppError(Fault.PARAM, f"{what}: buffer size {pic.size} is smaller than the {need} bytes a "
                                     f"{ws}x{hs} {name} picture needs")
    if pic.data == 0:
        raise DvppError(Fault.PARAM, f"{what}: no data pointer (dvpp_set_pic_desc_data)")
    return lay
