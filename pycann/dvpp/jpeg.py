"""JPEGD / JPEGE: JPEG decode and encode with libjpeg-turbo (``simplejpeg``'s bundled build for RGB
output, headers and encoding; Pillow's libjpeg-turbo for YCbCr output). Nothing is decoded here.

Device rules kept (cann-interfaces.md §9.3, JPEGD/JPEGE docs): baseline or extended Huffman JPEGs
only (progressive, arithmetic-coded and lossless ones are refused as the device refuses them),
32x32 .. 8192x8192; the decoded picture lies at width stride ``ALIGN(w, 128)`` and height stride
``ALIGN(h, 16)`` (Ascend 310/910; ``ALIGN(w, 64)`` on 310P), widths and heights of subsampled
output rounded up to even (the extra column / row repeats the last one). JPEGE takes NV12/NV21 or
packed YUV 4:2:2 with even sizes and a width stride that is a multiple of 16.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from pycann.dvpp import picture
from pycann.dvpp.formats import (
    DvppError,
    Family,
    Fault,
    PicDesc,
    PixelFormat,
    align_up,
    buffer_size,
    layout,
    row_bytes,
)

MIN_SIDE, MAX_SIDE = 32, 8192
_SOF_OK = {0xC0: "baseline", 0xC1: "extended sequential"}
_SOF_REFUSED = {0xC2: "progressive", 0xC3: "lossless", 0xC5: "differential sequential",
                0xC6: "differential progressive", 0xC7: "differential lossless", 0xC9: "arithmetic sequential",
                0xCA: "arithmetic progressive", 0xCB: "arithmetic lossless", 0xCD: "arithmetic differential",
                0xCE: "arithmetic differential progressive", 0xCF: "arithmetic differential lossless"}
DECODE_FORMATS = (PixelFormat.YUV_SEMIPLANAR_420, PixelFormat.YVU_SEMIPLANAR_420, PixelFormat.YUV_SEMIPLANAR_422,
                  PixelFormat.YVU_SEMIPLANAR_422, PixelFormat.YUV_SEMIPLANAR_444, PixelFormat.YVU_SEMIPLANAR_444,
                  PixelFormat.YUV_400, PixelFormat.RGB_888, PixelFormat.BGR_888)
ENCODE_FORMATS = (PixelFormat.YUV_SEMIPLANAR_420, PixelFormat.YVU_SEMIPLANAR_420, PixelFormat.YUYV_PACKED_422,
                  PixelFormat.UYVY_PACKED_422, PixelFormat.YVYU_PACKED_422, PixelFormat.VYUY_PACKED_422)


@dataclass(frozen=True)
class JpegInfo:
    """``width``, ``height`` in pixels; ``components`` (1 grey, 3 YCbCr, 4 CMYK); ``subsampling``
    as simplejpeg names it (``"420"``, ``"422"``, ``"444"``, ``"Gray"`` ...); ``process`` (SOF kind)."""

    width: int
    height: int
    components: int
    subsampling: str
    process: str


def _sof(data: bytes) -> tuple[int, int]:
    """(SOF marker, component count) by walking the segments up to the first SOS."""
    if len(data) < 4 or data[0] != 0xFF or data[1] != 0xD8:
        raise DvppError(Fault.DATA, "not a JPEG stream: it does not start with the SOI marker FF D8")
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise DvppError(Fault.DATA, f"corrupt JPEG: no marker at byte {i}")
        m = data[i + 1]
        if m == 0xFF:  # fill byte
            i += 1
            continue
        n = int.from_bytes(data[i + 2 : i + 4], "big")
        if (m in _SOF_OK or m in _SOF_REFUSED) and i + 10 <= len(data):
            return m, data[i + 9]
        if m == 0xDA:
            break
        i += 2 + n
    raise DvppError(Fault.DATA, "corrupt JPEG: no frame header (SOF) before the scan data")


def get_image_info(data: bytes) -> JpegInfo:
    """Width, height and components of a JPEG (no decoding). Raises ``DvppError`` for data that
    is not a JPEG (DATA) or a kind the device's JPEGD refuses (UNSUPPORTED)."""
    import simplejpeg

    marker, comps = _sof(data)
    try:
        h, w, _cs, sub = simplejpeg.decode_jpeg_header(data)
    except ValueError as e:
        raise DvppError(Fault.DATA, f"corrupt JPEG header: {e}") from None
    process = _SOF_OK.get(marker) or _SOF_REFUSED[marker]
    return JpegInfo(int(w), int(h), int(comps), str(sub), process)


def check_decodable(info: JpegInfo) -> None:
    """Raise ``DvppError(UNSUPPORTED)`` for a JPEG the device's JPEGD does not decode."""
    if info.process not in _SOF_OK.values():
        raise DvppError(Fault.UNSUPPORTED, f"{info.process} JPEGs are not decoded by JPEGD (baseline and "
                                           "extended Huffman only); re-encode it as baseline")
    if info.components == 4:
        raise DvppError(Fault.UNSUPPORTED, "CMYK JPEGs are not decoded by JPEGD")
    if not (MIN_SIDE <= info.width <= MAX_SIDE and MIN_SIDE <= info.height <= MAX_SIDE):
        raise DvppError(Fault.UNSUPPORTED, f"{info.width}x{info.height} is outside JPEGD's range "
                                           f"{MIN_SIDE}x{MIN_SIDE}..{MAX_SIDE}x{MAX_SIDE}")


def stride_align(soc: str) -> tuple[int, int]:
    """JPEGD's output (width, height) stride alignment on ``soc``."""
    return (64, 16) if "310P" in soc else (128, 16)


def output_layout(width: int, height: int, fmt: int, soc: str) -> tuple[int, int, int, int, int]:
    """(width, height, width stride, height stride, bytes) of JPEGD's output picture."""
    pf = decode_format(fmt)
    lay = layout(pf)
    aw, ah = stride_align(soc)
    w = align_up(width, 2) if lay.sub[0] == 2 else width
    h = align_up(height, 2) if lay.sub[1] == 2 else height
    ws, hs = align_up(row_bytes(pf, w), aw), align_up(h, ah)
    return w, h, ws, hs, buffer_size(pf, ws, hs)


def decode_format(fmt: int) -> PixelFormat:
    try:
        pf = PixelFormat(fmt)
    except ValueError:
        pf = None
    if pf not in DECODE_FORMATS:
        raise DvppError(Fault.FORMAT, f"JPEGD cannot output pixel format {fmt}; use one of "
                                      f"{', '.join(f'{f.name} ({int(f)})' for f in DECODE_FORMATS)}")
    return pf


def decode_array(data: bytes, fmt: int) -> np.ndarray:
    """The decoded image, ``(h, w, 3)`` uint8: R,G,B / B,G,R for RGB formats (simplejpeg), else
    Y,Cb,Cr (Pillow, libjpeg's YCbCr output: the decoded components, chroma upsampled by libjpeg).
    Raises ``DvppError(DATA)`` for a stream libjpeg-turbo cannot decode."""
    pf = decode_format(fmt)
    try:
        if layout(pf).family is Family.RGB:
            import simplejpeg

            return simplejpeg.decode_jpeg(data, colorspace="BGR" if pf is PixelFormat.BGR_888 else "RGB")
        from PIL import Image

        with Image.open(io.BytesIO(data)) as im:
            im.draft("YCbCr", im.size)
            if im.mode == "L":
                g = np.asarray(im)
                out = np.full((*g.shape, 3), 128, np.uint8)
                out[..., 0] = g
                return out
            return np.asarray(im.convert("YCbCr") if im.mode != "YCbCr" else im)
    except (ValueError, OSError, SyntaxError) as e:
        raise DvppError(Fault.DATA, f"JPEG decode failed: {e}") from None


def decode_planes(data: bytes, sub: tuple[int, int]) -> picture.Planes:
    """Y and chroma planes (chroma subsampled by ``sub``: block means of libjpeg's upsampled
    chroma, computed by Pillow's ``reduce``, round half up as ``color.subsample``)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.draft("YCbCr", im.size)
            if im.mode == "L":
                y = np.asarray(im)
                return picture.Planes(y, np.full((y.shape[0] // sub[1], y.shape[1] // sub[0], 2), 128, np.uint8), sub)
            im = im if im.mode == "YCbCr" else im.convert("YCbCr")
            small = im.reduce(sub) if sub != (1, 1) else im
            return picture.Planes(np.asarray(im.getchannel(0)), np.asarray(small)[..., 1:], sub)
    except (ValueError, OSError, SyntaxError) as e:
        raise DvppError(Fault.DATA, f"JPEG decode failed: {e}") from None


def decode_into(data: bytes, out_buf: np.ndarray, out: PicDesc, soc: str) -> None:
    """Decode ``data`` into the picture ``out`` (its format, strides and buffer checked against
    JPEGD's rules); sets ``out.width`` / ``out.height`` to the decoded size. Raises ``DvppError``."""
    info = get_image_info(data)
    check_decodable(info)
    w, h, ws, hs, size = output_layout(info.width, info.height, out.format, soc)
    aw, ah = stride_align(soc)
    if out.width_stride % aw or out.width_stride < ws or out.height_stride % ah or out.height_stride < hs:
        raise DvppError(Fault.PARAM, f"JPEGD output strides {out.width_stride}x{out.height_stride} must be "
                                     f"multiples of {aw}x{ah} and at least {ws}x{hs} for a {info.width}x"
                                     f"{info.height} image on {soc}")
    need = buffer_size(out.format, out.width_stride, out.height_stride)
    if out.size < need or out_buf.size < need:
        raise DvppError(Fault.PARAM, f"JPEGD output buffer {out.size} bytes is smaller than {need} "
                                     f"(dvpp_jpeg_predict_dec_size gives {size})")
    lay = layout(out.format)
    if lay.family is Family.YUV_SP and (w, h) == (info.width, info.height):
        picture.write_planes(out_buf, out.format, w, h, out.width_stride, out.height_stride,
                             decode_planes(data, lay.sub))
        out.width, out.height = w, h
        return
    img = decode_array(data, out.format)
    if img.shape[:2] != (h, w):
        img = np.pad(img, ((0, h - img.shape[0]), (0, w - img.shape[1]), (0, 0)), mode="edge")
    yuv = layout(out.format).family is not Family.RGB
    if not yuv:  # already in the output's channel order
        picture.plane_views(out_buf, out.format, w, h, out.width_stride, out.height_stride)[0][...] = img.reshape(h, -1)
    else:
        picture.write_frame(out_buf, out.format, w, h, out.width_stride, out.height_stride, picture.Frame(img, True))
    out.width, out.height = w, h


def predict_enc_size(width: int, height: int, fmt: int) -> int:
    """An upper bound of JPEGE's output: libjpeg-turbo's ``tj3JPEGBufSize`` for the subsampling."""
    lay = layout(fmt)
    mcu_w, mcu_h = 8 * lay.sub[0], 8 * lay.sub[1]
    chroma_sf = 4 * 64 // (mcu_w * mcu_h)
    return align_up(width, mcu_w) * align_up(height, mcu_h) * (2 + chroma_sf) + 2048


def check_encodable(inp: PicDesc) -> None:
    """JPEGE's input rules; raises ``DvppError``."""
    try:
        pf = PixelFormat(inp.format)
    except ValueError:
        pf = None
    if pf not in ENCODE_FORMATS:
        raise DvppError(Fault.FORMAT, f"JPEGE cannot encode pixel format {inp.format}; use one of "
                                      f"{', '.join(f'{f.name} ({int(f)})' for f in ENCODE_FORMATS)}")
    w, h = inp.width, inp.height
    if w % 2 or h % 2 or not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
        raise DvppError(Fault.PARAM, f"JPEGE input {w}x{h}: width and height must be even and within "
                                     f"{MIN_SIDE}..{MAX_SIDE}")
    need_ws = row_bytes(pf, w)
    if inp.width_stride % 16 or inp.width_stride < need_ws or inp.height_stride < h or inp.height_stride % 2:
        raise DvppError(Fault.PARAM, f"JPEGE input strides {inp.width_stride}x{inp.height_stride}: the width "
                                     f"stride must be a multiple of 16 and >= {need_ws}, the height stride even "
                                     f"and >= {h}")
    if inp.size < buffer_size(pf, inp.width_stride, inp.height_stride):
        raise DvppError(Fault.PARAM, f"JPEGE input buffer {inp.size} bytes is smaller than "
                                     f"{buffer_size(pf, inp.width_stride, inp.height_stride)}")


def encode(in_buf: np.ndarray, inp: PicDesc, level: int) -> bytes:
    """JPEG bytes of the picture ``inp`` (``level`` 0..100; 0 encodes as 100, as on the device)."""
    import simplejpeg

    check_encodable(inp)
    lay = layout(inp.format)
    w, h = inp.width, inp.height
    if lay.family is Family.YUV_SP:
        p = picture.read_planes(in_buf, inp.format, w, h, inp.width_stride, inp.height_stride)
        y, uv = p.y, p.uv
    else:
        f = picture.read_frame(in_buf, inp.format, w, h, inp.width_stride, inp.height_stride)
        pl = picture.frame_to_planes(f, lay.sub)
        y, uv = pl.y, pl.uv
    assert uv is not None
    quality = 100 if level == 0 else level
    return bytes(simplejpeg.encode_jpeg_yuv_planes(np.ascontiguousarray(y), np.ascontiguousarray(uv[..., 0]),
                                                   np.ascontiguousarray(uv[..., 1]), quality=quality))
