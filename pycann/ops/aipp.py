"""The ``Aipp`` op (domain ``pycann``): CANN's AI pre-processing of uint8 images, computed on the CPU.

Processing follows cann-interfaces.md §3.2 (fixed hardware order): channel swap
(``rbuv_swap_switch`` / ``ax_swap_switch``) -> crop -> CSC -> normalisation -> padding, then
the result is laid out NCHW or NHWC as the model input expects.

* CSC YUV->RGB: ``[c0,c1,c2] = (M . [Y-ib0, U-ib1, V-ib2]) >> 8``, saturated to [0, 255].
* CSC RGB->YUV: ``[Y,U,V] = ((M . [c0,c1,c2]) >> 8) + [ob0, ob1, ob2]``, saturated to [0, 255].
* Normalisation: ``out_i = (in_i - mean_chn_i - min_chn_i) * var_reci_chn_i`` (float outputs
  only; a uint8 output skips it). ``var_reci_chn_i`` is applied as the float16 the device's AIPP
  registers hold (``var_reci_f16``): 1e-45 becomes 0, 1e-6 the subnormal 1.013e-6.

Source layouts (the model input pycann creates, one image per batch row):
``YUV420SP_U8`` / ``YVU420SP_U8`` ``[N, H*3/2, W]`` (Y plane, then interleaved UV / VU at half
resolution, NV12 / NV21); ``YUV400_U8`` ``[N, H, W]``; ``RGB888_U8`` / ``BGR888_U8``
``[N, H, W, 3]``; ``XRGB8888_U8`` / ``ARGB8888_U8`` ``[N, H, W, 4]`` (the X/A byte is dropped).
``YVU420SP_U8`` and ``BGR888_U8`` are the YUV420SP / RGB888 forms with ``rbuv_swap_switch``
toggled (§3.2 "NV21" / "BGR packed input").

Dynamic AIPP (``aipp_mode: dynamic``): input 1 is the ``ascend_dynamic_aipp_data`` buffer,
CANN's ``kAippDynamicPara`` layout (a 64-byte header, then one 96-byte block per batch image);
``pack_dynamic`` / ``unpack_dynamic`` convert it from and to ``AippParams``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, to_numpy
from pycann.ops.opdef import InferContext, OpDef

DOMAIN = "pycann"

# input_format -> (channels the pixels decode to, bytes per pixel as a fraction num/den)
FORMATS: dict[str, tuple[int, int, int]] = {
    "YUV420SP_U8": (3, 3, 2),
    "YVU420SP_U8": (3, 3, 2),
    "RGB888_U8": (3, 3, 1),
    "BGR888_U8": (3, 3, 1),
    "XRGB8888_U8": (3, 4, 1),
    "ARGB8888_U8": (3, 4, 1),
    "YUV400_U8": (1, 1, 1),
}
YUV_FORMATS = ("YUV420SP_U8", "YVU420SP_U8", "YUV400_U8")
# aclAippInputFormat values (cann-interfaces.md §1.7), used in the dynamic-AIPP header.
ACL_FORMAT_CODES: dict[str, int] = {"YUV420SP_U8": 1, "XRGB8888_U8": 2, "RGB888_U8": 3, "YUV400_U8": 4, "ARGB8888_U8": 7}
ACL_FORMAT_NAMES: dict[int, str] = {v: k for k, v in ACL_FORMAT_CODES.items()}  # code -> input_format

DEFAULT_MATRIX_YUV2RGB = (298, 516, 0, 298, -100, -208, 298, 0, 409)  # §3.1 template defaults
DEFAULT_MATRIX_RGB2YUV = (66, 129, 25, -38, -74, 112, 112, -94, -18)  # GE's RGB->YUV defaults
DEFAULT_BIAS = (16, 128, 128)


def canonical_format(fmt: str, rbuv_swap: bool) -> tuple[str, bool]:
    """``YVU420SP_U8`` / ``BGR888_U8`` as their CANN spelling: YUV420SP / RGB888 with the swap toggled."""
    if fmt == "YVU420SP_U8":
        return "YUV420SP_U8", not rbuv_swap
    if fmt == "BGR888_U8":
        return "RGB888_U8", not rbuv_swap
    return fmt, rbuv_swap


def src_shape(fmt: str, h: int, w: int) -> tuple[int, ...]:
    """Per-image shape (without N) of the uint8 source layout for ``fmt``."""
    if fmt in ("YUV420SP_U8", "YVU420SP_U8"):
        return (h * 3 // 2, w)
    if fmt == "YUV400_U8":
        return (h, w)
    return (h, w, 4 if fmt in ("XRGB8888_U8", "ARGB8888_U8") else 3)


def src_bytes(fmt: str, h: int, w: int) -> int:
    """Bytes of one source image (§3.1 ``max_src_image_size`` factors 1 / 1.5 / 3 / 4)."""
    _, num, den = FORMATS[fmt]
    return h * w * num // den


@dataclass(frozen=True)
class AippParams:
    """Resolved parameters for one image (static config, or one batch entry of dynamic AIPP)."""

    input_format: str
    src_w: int
    src_h: int
    crop: tuple[int, int, int, int] | None = None  # (start_w, start_h, size_w, size_h)
    csc: bool = False
    matrix: tuple[int, ...] = DEFAULT_MATRIX_YUV2RGB
    input_bias: tuple[int, int, int] = DEFAULT_BIAS
    output_bias: tuple[int, int, int] = DEFAULT_BIAS
    rbuv_swap: bool = False
    ax_swap: bool = False
    mean: tuple[float, ...] = (0, 0, 0, 0)
    min: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    var_reci: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    pad: tuple[int, int, int, int] = (0, 0, 0, 0)  # (top, bottom, left, right)
    pad_value: float = 0.0

    @property
    def out_hw(self) -> tuple[int, int]:
        """(H, W) after crop and padding."""
        cw, ch = (self.crop[2], self.crop[3]) if self.crop else (self.src_w, self.src_h)
        return ch + self.pad[0] + self.pad[1], cw + self.pad[2] + self.pad[3]

    @property
    def channels(self) -> int:
        return FORMATS[self.input_format][0]

    @classmethod
    def from_attrs(cls, a: Mapping[str, Any]) -> AippParams:
        """From an ``Aipp`` node's attributes (static mode)."""
        crop = None
        if int(a["crop"]):
            crop = (int(a["load_start_pos_w"]), int(a["load_start_pos_h"]), int(a["crop_size_w"]), int(a["crop_size_h"]))
        pad = (0, 0, 0, 0)
        if int(a["padding"]):
            pad = (int(a["top_padding_size"]), int(a["bottom_padding_size"]),
                   int(a["left_padding_size"]), int(a["right_padding_size"]))
        return cls(
            input_format=str(a["input_format"]), src_w=int(a["src_image_size_w"]), src_h=int(a["src_image_size_h"]),
            crop=crop, csc=bool(int(a["csc_switch"])), matrix=tuple(int(v) for v in a["matrix"]),
            input_bias=_three(a["input_bias"]), output_bias=_three(a["output_bias"]),
            rbuv_swap=bool(int(a["rbuv_swap_switch"])), ax_swap=bool(int(a["ax_swap_switch"])),
            mean=tuple(float(v) for v in a["mean_chn"]), min=tuple(float(v) for v in a["min_chn"]),
            var_reci=tuple(float(v) for v in a["var_reci_chn"]), pad=pad, pad_value=float(a["padding_value"]),
        )


def _three(v: Sequence[Any]) -> tuple[int, int, int]:
    return int(v[0]), int(v[1]), int(v[2])


# ------------------------------------------------------------------------------ processing
def planes(img: np.ndarray, p: AippParams) -> list[np.ndarray]:
    """Stages 1-2 (channel swap, crop): uint8 source images ``[N, ...]`` -> one ``[N, h, w]``
    plane per channel, (Y, U, V) or (R, G, B) or (Y). YUV420SP chroma is upsampled 2x2
    (nearest) for the cropped window only; the X/A byte of 4-byte formats is dropped."""
    n, h, w = img.shape[0], p.src_h, p.src_w
    flat = img.reshape(n, -1)
    need = src_bytes(p.input_format, h, w)
    if flat.shape[1] < need:
        raise ValueError(f"AIPP {p.input_format} {w}x{h} needs {need} bytes per image, received {flat.shape[1]}")
    x0, y0, cw, ch = p.crop if p.crop is not None else (0, 0, w, h)
    rows, cols = slice(y0, y0 + ch), slice(x0, x0 + cw)
    fmt, swap = canonical_format(p.input_format, p.rbuv_swap)
    if fmt == "YUV420SP_U8":
        y = flat[:, : h * w].reshape(n, h, w)[:, rows, cols]
        uv = flat[:, h * w: need].reshape(n, h // 2, w // 2, 2)
        r = (np.arange(y0, y0 + ch) // 2)[:, None]
        c = (np.arange(x0, x0 + cw) // 2)[None, :]
        u, v = uv[:, r, c, 0], uv[:, r, c, 1]
        return [y, v, u] if swap else [y, u, v]
    if fmt == "YUV400_U8":
        return [flat[:, :need].reshape(n, h, w)[:, rows, cols]]
    k = 3 if fmt == "RGB888_U8" else 4
    px = flat[:, :need].reshape(n, h, w, k)[:, rows, cols]
    idx = [0, 1, 2] if k == 3 or p.ax_swap else [1, 2, 3]  # ax_swap: RGBA -> ARGB, then A dropped
    out = [px[..., i] for i in idx]
    return out[::-1] if swap else out


def _csc(pl: list[np.ndarray], p: AippParams) -> list[np.ndarray]:
    """Stage 3, Q8 fixed point, saturating: YUV->RGB subtracts input_bias first, RGB->YUV adds
    output_bias after the shift (cann-interfaces.md §3.2)."""
    m = np.asarray(p.matrix, np.int32).reshape(3, 3)
    yuv = p.input_format in YUV_FORMATS
    src = [q.astype(np.int32) - (p.input_bias[i] if yuv else 0) for i, q in enumerate(pl)]
    out = []
    for i in range(3):
        acc = m[i, 0] * src[0] + m[i, 1] * src[1] + m[i, 2] * src[2]
        acc >>= 8
        if not yuv:
            acc += p.output_bias[i]
        out.append(np.clip(acc, 0, 255, out=acc))
    return out


def process(img: np.ndarray, p: AippParams, out_dtype: np.dtype, layout: str) -> np.ndarray:
    """Run AIPP on uint8 source images ``[N, ...]`` (cann-interfaces.md §3.2 order); the result
    is ``out_dtype`` in ``layout`` (NCHW or NHWC), written plane by plane into place."""
    pl = planes(img, p)
    if p.csc:
        pl = _csc(pl, p)
    n, h, w = pl[0].shape
    top, bottom, left, right = p.pad
    hh, ww, c = h + top + bottom, w + left + right, len(pl)
    shape = (n, c, hh, ww) if layout == "NCHW" else (n, hh, ww, c)
    padded = bool(top or bottom or left or right)
    fill = p.pad_value if out_dtype.kind == "f" else min(max(round(p.pad_value), 0), 255)
    out = np.full(shape, fill, out_dtype) if padded else np.empty(shape, out_dtype)
    for i, q in enumerate(pl):
        dst = out[:, i, top:top + h, left:left + w] if layout == "NCHW" else out[:, top:top + h, left:left + w, i]
        if out_dtype.kind != "f":  # uint8 -> uint8 skips normalisation
            dst[...] = q
            continue
        sub = np.float32(float(p.mean[i]) + float(p.min[i]))
        scale = np.float32(var_reci_f16(p.var_reci[i]))
        if out_dtype == np.float32:
            np.subtract(q, sub, out=dst, dtype=np.float32)
            np.multiply(dst, scale, out=dst)
        else:
            dst[...] = (q.astype(np.float32) - sub) * scale
    return out


# ---------------------------------------------------------------------- dynamic parameters
_HEAD = struct.Struct("<Bbbbb3xii9h6x3B3B2x16x")  # kAippDynamicParaHeader, 64 bytes
_BATCH = struct.Struct("<bbbb4x4i4i4i4h4H4H16x")  # kAippDynamicBatchPara, 96 bytes
HEAD_BYTES, BATCH_BYTES = _HEAD.size, _BATCH.size


def dynamic_buffer_bytes(batch: int) -> int:
    """Size of ``ascend_dynamic_aipp_data`` for ``batch`` images (GE's CalcMaxSize)."""
    return HEAD_BYTES + BATCH_BYTES * batch


def var_reci_f16(v: float) -> float:
    """``var_reci_chn`` as the device applies it: rounded to float16, the type of its AIPP
    parameter (the dynamic buffer's ``dtcPixelVarReciChn`` is fp16 bits, static AIPP the same)."""
    return float(np.float16(v))


def _f16_bits(v: float) -> int:
    return int(np.array(v, np.float16).view(np.uint16))


def _bits_f16(b: int) -> float:
    return float(np.array(b, np.uint16).view(np.float16))


def pack_dynamic(params: Sequence[AippParams]) -> np.ndarray:
    """Encode per-image parameters as the ``ascend_dynamic_aipp_data`` uint8 buffer.

    Image-wide fields (format, source size, CSC, swaps) come from ``params[0]``; crop, padding
    and normalisation are per image. ``min``/``var_reci`` are stored as fp16, ``mean`` as int16.
    """
    if not params:
        raise ValueError("dynamic AIPP needs parameters for at least one image")
    p0 = params[0]
    fmt, swap = canonical_format(p0.input_format, p0.rbuv_swap)
    head = _HEAD.pack(ACL_FORMAT_CODES[fmt], int(p0.csc), int(swap), int(p0.ax_swap), len(params),
                      p0.src_w, p0.src_h, *p0.matrix, *p0.output_bias, *p0.input_bias)
    out = bytearray(head)
    for p in params:
        crop = p.crop or (0, 0, 0, 0)
        out += _BATCH.pack(int(p.crop is not None), 0, int(any(p.pad)), 0, *crop, 0, 0, 0, 0,
                           *p.pad, *(int(v) for v in p.mean), *(_f16_bits(v) for v in p.min),
                           *(_f16_bits(v) for v in p.var_reci))
    return np.frombuffer(bytes(out), np.uint8).copy()


def unpack_dynamic(buf: np.ndarray, batch: int) -> list[AippParams]:
    """Decode ``batch`` images' parameters from an ``ascend_dynamic_aipp_data`` buffer."""
    raw = np.ascontiguousarray(buf, np.uint8).tobytes()
    if len(raw) < dynamic_buffer_bytes(1):
        raise ValueError("dynamic AIPP parameters are not set (call set_dynamic_aipp / acl.mdl.set_input_aipp first)")
    h = _HEAD.unpack_from(raw, 0)
    codes = ACL_FORMAT_NAMES
    if h[0] not in codes:
        raise ValueError(f"dynamic AIPP input_format code {h[0]} is not supported; use one of {sorted(codes)}")
    if h[4] < batch or len(raw) < dynamic_buffer_bytes(batch):
        raise ValueError(f"dynamic AIPP parameters describe {h[4]} images, the model runs batch {batch}")
    base = AippParams(input_format=codes[h[0]], src_w=h[5], src_h=h[6], csc=bool(h[1]), rbuv_swap=bool(h[2]),
                      ax_swap=bool(h[3]), matrix=tuple(h[7:16]), output_bias=_three(h[16:19]),
                      input_bias=_three(h[19:22]))
    out = []
    for i in range(batch):
        b = _BATCH.unpack_from(raw, HEAD_BYTES + BATCH_BYTES * i)
        out.append(replace(
            base, crop=tuple(b[4:8]) if b[0] else None, pad=tuple(b[12:16]) if b[2] else (0, 0, 0, 0),
            mean=tuple(float(v) for v in b[16:20]), min=tuple(_bits_f16(v) for v in b[20:24]),
            var_reci=tuple(_bits_f16(v) for v in b[24:28]),
        ))
    return out


# ------------------------------------------------------------------------------- op entry
def _infer(ctx: InferContext) -> list[TensorDesc]:
    a = ctx.attrs
    d = ctx.input(0)
    if d is None or d.dtype != DType.UINT8:
        raise ctx.fail(f"AIPP input must be uint8 image data, got {d}")
    out = list(a["out_shape"])
    if a["aipp_mode"] == "static" and d.shape is not None:
        want = list(a["src_shape"])
        if len(d.shape) != len(want) or any(isinstance(s, int) and s != w for s, w in zip(d.shape[1:], want[1:])):
            raise ctx.fail(f"AIPP source must be uint8[N,{','.join(map(str, want[1:]))}], got {d}")
        out[0] = d.shape[0]
    return [TensorDesc(int(a["out_dtype"]), tuple(out))]


def _kernel(x: Sequence[np.ndarray | None], a: Mapping[str, Any]) -> list[np.ndarray]:
    img = x[0]
    assert img is not None
    dt = to_numpy(int(a["out_dtype"]))
    layout = str(a["out_layout"])
    if a["aipp_mode"] == "static":
        return [process(img, AippParams.from_attrs(a), dt, layout)]
    # dynamic: images packed one after another in the flat buffer
    out_shape = [int(v) for v in a["out_shape"]]
    n = out_shape[0]
    hw = tuple(out_shape[2:4]) if layout == "NCHW" else tuple(out_shape[1:3])
    params = unpack_dynamic(x[1] if len(x) > 1 and x[1] is not None else np.zeros(0, np.uint8), n)
    data = img.reshape(-1)
    outs = []
    off = 0
    for p in params:
        if p.out_hw != hw:
            raise ValueError(f"dynamic AIPP output {p.out_hw[0]}x{p.out_hw[1]} (crop + padding) must equal "
                             f"the model input H x W {hw[0]}x{hw[1]}")
        size = src_bytes(p.input_format, p.src_h, p.src_w)
        if off + size > data.size:
            raise ValueError(f"dynamic AIPP images need {n * size} bytes, the input holds {data.size} "
                             f"(max_src_image_size {a['max_src_image_size']})")
        outs.append(process(data[off:off + size].reshape(1, -1), p, dt, layout))
        off += size
    return [np.concatenate(outs, axis=0)]


_ATTRS: dict[str, Any] = {
    "aipp_mode": "static", "related_input_rank": 0, "input_format": "RGB888_U8",
    "src_image_size_w": 0, "src_image_size_h": 0, "crop": 0, "load_start_pos_w": 0, "load_start_pos_h": 0,
    "crop_size_w": 0, "crop_size_h": 0, "padding": 0, "left_padding_size": 0, "right_padding_size": 0,
    "top_padding_size": 0, "bottom_padding_size": 0, "padding_value": 0.0, "csc_switch": 0,
    "matrix": list(DEFAULT_MATRIX_YUV2RGB), "input_bias": list(DEFAULT_BIAS), "output_bias": list(DEFAULT_BIAS),
    "rbuv_swap_switch": 0, "ax_swap_switch": 0, "mean_chn": [0, 0, 0, 0], "min_chn": [0.0] * 4,
    "var_reci_chn": [1.0] * 4, "max_src_image_size": 0, "out_layout": "NCHW", "out_dtype": int(DType.FLOAT),
    "src_shape": [], "out_shape": [],
}

OPS: list[OpDef] = [
    OpDef("Aipp", _infer, _kernel, domain=DOMAIN, since=1, attrs=_ATTRS, foldable=False,
          doc="CANN AIPP image pre-processing (cann-interfaces.md §3): swap, crop, CSC, normalise, pad."),
]
