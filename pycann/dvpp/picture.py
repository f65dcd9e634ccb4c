"""Pictures in buffers <-> arrays: the planes of a ``PicDesc`` as numpy views of its bytes, and
every format to and from one working form (``Frame``: full-resolution 3 channels in YUV or RGB).

Semi-planar YUV is read as its planes (``Planes``: Y ``(h, w)``, chroma ``(h/sy, w/sx, 2)`` in
U,V order) so that same-subsampling VPC work stays on the planes, as the device's does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pycann.dvpp import color
from pycann.dvpp.formats import Family, Layout, PixelFormat, layout


@dataclass
class Planes:
    """Y ``(h, w)`` and chroma ``(h/sy, w/sx, 2)`` (U, V) of a YUV picture; ``None`` chroma for grey."""

    y: np.ndarray
    uv: np.ndarray | None
    sub: tuple[int, int]


@dataclass
class Frame:
    """A picture as ``(h, w, 3)`` uint8: Y,U,V when ``yuv`` else R,G,B."""

    data: np.ndarray
    yuv: bool


def _rows(buf: np.ndarray, offset: int, rows: int, stride: int) -> np.ndarray:
    return buf[offset : offset + rows * stride].reshape(rows, stride)


def plane_views(buf: np.ndarray, fmt: int, w: int, h: int, ws: int, hs: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Writable views of a picture's pixel rows: first plane ``(h, w*bpp)`` and, for semi-planar
    YUV, the chroma plane ``(h/sy, 2*w/sx)`` (rows ``2*ws/sx`` bytes apart). ``buf`` must hold ``buffer_size(fmt, ws, hs)`` bytes."""
    lay = layout(fmt)
    first = _rows(buf, 0, hs, ws)[:h, : w * lay.bpp]
    if lay.family is not Family.YUV_SP:
        return first, None
    sx, sy = lay.sub
    # the chroma plane's rows hold 2 bytes (U, V) per chroma sample: 2 * ws / sx bytes a row
    # (ws for 4:2:0 and 4:2:2, 2 * ws for 4:4:4), hs / sy rows
    second = _rows(buf, ws * hs, hs // sy, 2 * ws // sx)[: h // sy, : 2 * (w // sx)]
    return first, second


def read_planes(buf: np.ndarray, fmt: int, w: int, h: int, ws: int, hs: int) -> Planes:
    """The Y and (U, V) planes of a grey or semi-planar YUV picture (views, no copy)."""
    lay = layout(fmt)
    first, second = plane_views(buf, fmt, w, h, ws, hs)
    if second is None:
        return Planes(first, None, (1, 1))
    uv = second.reshape(second.shape[0], -1, 2)
    if lay.order == "VU":
        uv = uv[..., ::-1]
    return Planes(first, uv, lay.sub)


def write_planes(buf: np.ndarray, fmt: int, w: int, h: int, ws: int, hs: int, planes: Planes) -> None:
    """Write Y / chroma planes (already at the format's subsampling) into a picture."""
    lay = layout(fmt)
    first, second = plane_views(buf, fmt, w, h, ws, hs)
    first[...] = planes.y
    if second is not None and planes.uv is not None:
        uv = planes.uv[..., ::-1] if lay.order == "VU" else planes.uv
        second[...] = uv.reshape(second.shape)


def _packed_channels(lay: Layout) -> dict[str, int]:
    return {c: i for i, c in enumerate(lay.order)}


def read_frame(buf: np.ndarray, fmt: int, w: int, h: int, ws: int, hs: int) -> Frame:
    """Any supported picture as a full-resolution ``Frame`` (chroma replicated, alpha dropped)."""
    lay = layout(fmt)
    if lay.family in (Family.GRAY, Family.YUV_SP):
        p = read_planes(buf, fmt, w, h, ws, hs)
        out = np.empty((h, w, 3), np.uint8)
        out[..., 0] = p.y
        if p.uv is None:
            out[..., 1:] = 128
        else:
            out[..., 1:] = color.upsample(p.uv, *p.sub)
        return Frame(out, True)
    first, _ = plane_views(buf, fmt, w, h, ws, hs)
    px = first.reshape(h, w // 2, 4) if lay.family is Family.YUV_PACKED and lay.sub == (2, 1) \
        else first.reshape(h, w, lay.bpp)
    ch = _packed_channels(lay)
    if lay.family is Family.RGB:
        return Frame(np.stack([px[..., ch["R"]], px[..., ch["G"]], px[..., ch["B"]]], axis=-1), False)
    if lay.sub == (1, 1):  # YUV_PACKED_444
        return Frame(np.ascontiguousarray(px[..., :3]), True)
    # packed 4:2:2: 4 bytes carry two pixels; the order names Y twice (first Y = left pixel)
    ys = [i for i, c in enumerate(lay.order) if c == "Y"]
    out = np.empty((h, w, 3), np.uint8)
    out[:, 0::2, 0], out[:, 1::2, 0] = px[..., ys[0]], px[..., ys[1]]
    for k, c in ((1, "U"), (2, "V")):
        out[:, 0::2, k] = out[:, 1::2, k] = px[..., ch[c]]
    return Frame(out, True)


def convert(frame: Frame, yuv: bool) -> Frame:
    """``frame`` in YUV (``yuv=True``) or RGB."""
    if frame.yuv == yuv:
        return frame
    return Frame(color.rgb_to_yuv(frame.data) if yuv else color.yuv_to_rgb(frame.data), yuv)


def frame_to_planes(frame: Frame, sub: tuple[int, int]) -> Planes:
    """A YUV frame as Y and chroma planes subsampled by ``sub`` (block means)."""
    f = convert(frame, True).data
    return Planes(f[..., 0], color.subsample(f[..., 1:], *sub), sub)


def write_frame(buf: np.ndarray, fmt: int, w: int, h: int, ws: int, hs: int, frame: Frame,
                alpha: int = 255) -> None:
    """Write a full-resolution frame into a picture of any supported format (alpha set to ``alpha``)."""
    lay = layout(fmt)
    if lay.family in (Family.GRAY, Family.YUV_SP):
        write_planes(buf, fmt, w, h, ws, hs, frame_to_planes(frame, lay.sub))
        return
    first, _ = plane_views(buf, fmt, w, h, ws, hs)
    ch = _packed_channels(lay)
    if lay.family is Family.RGB:
        rgb = convert(frame, False).data
        px = first.reshape(h, w, lay.bpp)
        for i, c in enumerate("RGB"):
            px[..., ch[c]] = rgb[..., i]
        if "A" in ch:
            px[..., ch["A"]] = alpha
        return
    f = convert(frame, True).data
    if lay.sub == (1, 1):
        first.reshape(h, w, 3)[...] = f
        return
    px = first.reshape(h, w // 2, 4)
    ys = [i for i, c in enumerate(lay.order) if c == "Y"]
    px[..., ys[0]], px[..., ys[1]] = f[:, 0::2, 0], f[:, 1::2, 0]
    uv = color.subsample(f[..., 1:], 2, 1)
    px[..., ch["U"]], px[..., ch["V"]] = uv[..., 0], uv[..., 1]


def to_array(buf: np.ndarray, fmt: int, w: int, h: int, ws: int, hs: int) -> np.ndarray:
    """A picture as a plain array: ``(h, w, bpp)`` for packed/RGB formats, the ``(h*ratio, w)``
    stacked planes (Y rows then chroma rows, stride removed) for grey and semi-planar YUV."""
    first, second = plane_views(buf, fmt, w, h, ws, hs)
    if second is None:
        lay = layout(fmt)
        return first.reshape(h, w, lay.bpp) if lay.bpp > 1 else first.copy()
    return np.concatenate([first, second.reshape(-1, w)], axis=0)


__all__ = ["Frame", "PixelFormat", "Planes", "convert", "frame_to_planes", "plane_views", "read_frame",
           "read_planes", "to_array", "write_frame", "write_planes"]
