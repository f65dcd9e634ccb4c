"""VPC (vision pre-processing core): resize, crop, crop-and-paste and colour conversion between
any two supported pixel formats, on picture buffers (``uint8`` arrays holding ``PicDesc`` pictures).

Rules enforced (Ascend 310 VPC docs, the strictest; an app that keeps them runs on every chip):
pictures as ``formats.check_vpc_picture``; crop and paste areas (``Roi``, inclusive coordinates)
inside their pictures, at least 10x6; where chroma is subsampled, left/top even and right/bottom
odd; the paste area's left offset a multiple of 16; each axis scaled within [1/32, 16].
Same-subsampling YUV work (NV12 -> NV21/NV12, ...) resizes the Y and chroma planes separately,
as the device does; a resize from semi-planar YUV to another family resizes Y and chroma (from its
own grid) to the output size, then converts; other pairs go through full-resolution YUV or RGB
(``picture.Frame``, chroma replicated).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pycann.dvpp import picture
from pycann.dvpp.formats import (
    DvppError,
    Family,
    Fault,
    Layout,
    PicDesc,
    align_up,
    buffer_size,
    check_vpc_picture,
    layout,
    row_bytes,
)
from pycann.dvpp.resize import resize

MIN_ROI_W, MIN_ROI_H = 10, 6
PASTE_LEFT_ALIGN = 16
SCALE_MIN, SCALE_MAX = 1 / 32, 16.0


@dataclass
class Roi:
    """``acldvppRoiConfig``: inclusive pixel coordinates."""

    left: int
    right: int
    top: int
    bottom: int

    @property
    def width(self) -> int:
        return self.right - self.left + 1

    @property
    def height(self) -> int:
        return self.bottom - self.top + 1


def full_roi(pic: PicDesc) -> Roi:
    return Roi(0, pic.width - 1, 0, pic.height - 1)


def check_roi(roi: Roi, pic: PicDesc, lay: Layout, what: str, paste: bool = False) -> None:
    """Raise ``DvppError(PARAM)`` unless ``roi`` keeps VPC's rules inside ``pic``."""
    if not (0 <= roi.left <= roi.right < pic.width and 0 <= roi.top <= roi.bottom < pic.height):
        raise DvppError(Fault.PARAM, f"{what} ({roi.left},{roi.top})-({roi.right},{roi.bottom}) is not inside "
                                     f"the {pic.width}x{pic.height} picture")
    if roi.width < MIN_ROI_W or roi.height < MIN_ROI_H:
        raise DvppError(Fault.PARAM, f"{what} is {roi.width}x{roi.height}; VPC needs at least {MIN_ROI_W}x{MIN_ROI_H}")
    sx, sy = lay.sub if lay.family is not Family.RGB else (1, 1)
    if sx == 2 and (roi.left % 2 or roi.right % 2 == 0):
        raise DvppError(Fault.PARAM, f"{what}: left must be even and right odd for subsampled chroma "
                                     f"(got {roi.left}, {roi.right}); e.g. right = (right >> 1 << 1) - 1")
    if sy == 2 and (roi.top % 2 or roi.bottom % 2 == 0):
        raise DvppError(Fault.PARAM, f"{what}: top must be even and bottom odd for 4:2:0 chroma "
                                     f"(got {roi.top}, {roi.bottom})")
    if paste and roi.left % PASTE_LEFT_ALIGN:
        raise DvppError(Fault.PARAM, f"{what}: left offset {roi.left} must be a multiple of {PASTE_LEFT_ALIGN}")


def _check_scale(crop: Roi, paste: Roi) -> None:
    for name, a, b in (("width", crop.width, paste.width), ("height", crop.height, paste.height)):
        if not SCALE_MIN <= b / a <= SCALE_MAX:
            raise DvppError(Fault.PARAM, f"{name} {a} -> {b} is outside VPC's scaling range [1/32, 16]")


def _render(in_buf: np.ndarray, inp: PicDesc, crop: Roi, out_fmt: int, w: int, h: int, mode: int) -> tuple[np.ndarray, int, int]:
    """The crop of ``inp`` resized to ``w x h`` in ``out_fmt``, in a tight temporary picture buffer;
    returns (buffer, width stride, height stride)."""
    lin, lout = layout(inp.format), layout(out_fmt)
    ws, hs = align_up(row_bytes(out_fmt, w), 16), align_up(h, 2)
    tmp = np.zeros(buffer_size(out_fmt, ws, hs), np.uint8)
    planar_in = lin.family in (Family.GRAY, Family.YUV_SP)
    planar_out = lout.family in (Family.GRAY, Family.YUV_SP)
    same_sub = lin.sub == lout.sub and (lin.family is Family.GRAY) == (lout.family is Family.GRAY)
    if planar_in and planar_out and same_sub:
        p = picture.read_planes(in_buf, inp.format, inp.width, inp.height, inp.width_stride, inp.height_stride)
        sx, sy = p.sub
        y = resize(p.y[crop.top : crop.bottom + 1, crop.left : crop.right + 1], h, w, mode)
        uv = None
        if p.uv is not None:
            c = p.uv[crop.top // sy : (crop.bottom + 1) // sy, crop.left // sx : (crop.right + 1) // sx]
            uv = resize(c, h // sy, w // sx, mode)
        picture.write_planes(tmp, out_fmt, w, h, ws, hs, picture.Planes(y, uv, p.sub))
        return tmp, ws, hs
    if planar_in and (crop.width, crop.height) != (w, h):
        # resize the planes (chroma from its own grid straight to the output's), then convert:
        # never builds the full-resolution input frame
        p = picture.read_planes(in_buf, inp.format, inp.width, inp.height, inp.width_stride, inp.height_stride)
        frame = np.empty((h, w, 3), np.uint8)
        frame[..., 0] = resize(p.y[crop.top : crop.bottom + 1, crop.left : crop.right + 1], h, w, mode)
        if p.uv is None:
            frame[..., 1:] = 128
        else:
            sx, sy = p.sub
            c = p.uv[crop.top // sy : (crop.bottom + 1) // sy, crop.left // sx : (crop.right + 1) // sx]
            frame[..., 1:] = resize(c, h, w, mode)
        picture.write_frame(tmp, out_fmt, w, h, ws, hs, picture.Frame(frame, True))
        return tmp, ws, hs
    f = picture.read_frame(in_buf, inp.format, inp.width, inp.height, inp.width_stride, inp.height_stride)
    part = f.data[crop.top : crop.bottom + 1, crop.left : crop.right + 1]
    picture.write_frame(tmp, out_fmt, w, h, ws, hs, picture.Frame(resize(part, h, w, mode), f.yuv))
    return tmp, ws, hs


def _blit(tmp: np.ndarray, ws: int, hs: int, out_buf: np.ndarray, out: PicDesc, at: Roi) -> None:
    """Copy a rendered ``at.width x at.height`` picture into ``out`` at ``at``."""
    lay = layout(out.format)
    w, h = at.width, at.height
    src1, src2 = picture.plane_views(tmp, out.format, w, h, ws, hs)
    dst1, dst2 = picture.plane_views(out_buf, out.format, out.width, out.height, out.width_stride, out.height_stride)
    dst1[at.top : at.bottom + 1, at.left * lay.bpp : (at.right + 1) * lay.bpp] = src1
    if src2 is not None and dst2 is not None:
        sx, sy = lay.sub
        dst2[at.top // sy : (at.bottom + 1) // sy, 2 * (at.left // sx) : 2 * ((at.right + 1) // sx)] = src2


def check(inp: PicDesc, out: PicDesc, crop: Roi | None, paste: Roi | None) -> tuple[Roi, Roi]:
    """Every rule of one VPC job, without touching data; returns the (crop, paste) areas."""
    lin = check_vpc_picture(inp, "input picture")
    lout = check_vpc_picture(out, "output picture")
    c = crop or full_roi(inp)
    p = paste or full_roi(out)
    check_roi(c, inp, lin, "crop area")
    if paste is not None:
        check_roi(p, out, lout, "paste area", paste=True)
    _check_scale(c, p)
    return c, p


def run(in_buf: np.ndarray, inp: PicDesc, out_buf: np.ndarray, out: PicDesc,
        crop: Roi | None = None, paste: Roi | None = None, mode: int = 0) -> None:
    """One VPC job: ``crop`` of ``inp`` (default: all of it) resized into ``paste`` of ``out``
    (default: all of it) with interpolation ``mode``, converting formats on the way. The rest of
    ``out`` is left as it was. Raises ``DvppError``."""
    c, p = check(inp, out, crop, paste)
    tmp, ws, hs = _render(in_buf, inp, c, out.format, p.width, p.height, mode)
    _blit(tmp, ws, hs, out_buf, out, p)
