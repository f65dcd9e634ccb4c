"""Linear quantization ops (ONNX spec, Operators.md: QuantizeLinear, DequantizeLinear,
QLinearConv, ConvInteger).

QuantizeLinear / DequantizeLinear implement the latest definitions (25/28); every older
version is a subset (new attributes default to the older behaviour), so one definition from
opset 10 serves all. Scale and zero point select the granularity: per tensor (one element),
per axis (1-D along ``axis``) or blocked (same rank as x, ``block_size`` elements per scale
along ``axis``). Narrow types (int4/uint4/int2/uint2, float8, float4e2m1) are ml_dtypes arrays.

The integer convolutions reuse the Conv kernels of ``pycann.ops.nn.conv`` on float operands
holding the zero-point-shifted integers: float32 when every partial sum is provably below 2**24
(exact), float64 otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from pycann.dtypes import DType, TensorDesc, dtype_name, from_numpy, to_numpy
from pycann.ops.nn.conv import _conv, _infer_conv
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.operand_checks import check_vector

# Integer quantized types and their saturation ranges (spec: QuantizeLinear).
INT_RANGES: dict[int, tuple[int, int]] = {
    DType.UINT8: (0, 255), DType.INT8: (-128, 127), DType.UINT16: (0, 65535), DType.INT16: (-32768, 32767),
    DType.UINT4: (0, 15), DType.INT4: (-8, 7), DType.UINT2: (0, 3), DType.INT2: (-2, 1),
}
FLOAT8 = frozenset({DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ})
QUANT_TYPES = frozenset(INT_RANGES) | FLOAT8 | {DType.FLOAT4E2M1}
DEQUANT_INPUTS = QUANT_TYPES | {DType.INT32}
SCALE_TYPES = frozenset({DType.FLOAT, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT8E8M0})
QUANT_X_TYPES = frozenset({DType.FLOAT, DType.FLOAT16, DType.BFLOAT16, DType.INT32})
REAL_OUT = frozenset({DType.FLOAT, DType.FLOAT16, DType.BFLOAT16})
_PLAIN_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16))

_Q_ATTRS: dict[str, Any] = {"axis": 1, "block_size": 0, "output_dtype": 0, "saturate": 1, "precision": 0}
_DQ_ATTRS: dict[str, Any] = {"axis": 1, "block_size": 0, "output_dtype": 0}


def _onnx_type(dt: np.dtype) -> int:
    try:
        return int(from_numpy(dt))
    except TypeError:
        return 0


def expand_param(p: np.ndarray, x_shape: tuple[int, ...], axis: int, block_size: int, what: str) -> np.ndarray:
    """A scale / zero point made broadcastable to ``x_shape`` (spec: QuantizeLinear granularity).

    One element: per tensor. ``block_size`` 0: a 1-D tensor of length ``x_shape[axis]``.
    Otherwise blocked: same rank as x, each element repeated ``block_size`` times along ``axis``
    (the last block may be short). Raises ``ValueError`` on a shape that fits none of these.
    """
    p = np.asarray(p)
    if p.size == 1:
        return p.reshape(())
    rank = len(x_shape)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for x of rank {rank}")
    axis %= rank
    if block_size <= 0:
        if p.ndim != 1 or p.shape[0] != x_shape[axis]:
            raise ValueError(f"{what} of shape {p.shape} must be a scalar or 1-D of length "
                             f"{x_shape[axis]} (x dim {axis}) for per-axis quantization")
        return p.reshape([x_shape[axis] if i == axis else 1 for i in range(rank)])
    want = tuple(-(-d // block_size) if i == axis else d for i, d in enumerate(x_shape))
    if p.shape != want:
        raise ValueError(f"{what} of shape {p.shape} does not fit x {x_shape} with block_size={block_size} "
                         f"on axis {axis}; expected {want}")
    return np.repeat(p, block_size, axis=axis)[tuple(slice(0, d) for d in x_shape)]


def _as_compute(s: np.ndarray) -> np.ndarray:
    """Scale in an arithmetic dtype: float8e8m0 (a pure power of two) is widened to float32."""
    return s if s.dtype in _PLAIN_FLOATS else s.astype(np.float32)


def _q_out_type(zp_dtype: int | None, output_dtype: int) -> int:
    return int(zp_dtype) if zp_dtype else (int(output_dtype) or int(DType.UINT8))


def quantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray:
    """QuantizeLinear (spec: QuantizeLinear-25): y = saturate(round_half_even(x / scale) + zp)."""
    axis, bs = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    out_t = _q_out_type(_onnx_type(zp.dtype) if zp is not None else None, int(attrs.get("output_dtype", 0)))
    if out_t not in QUANT_TYPES:
        raise ValueError(f"QuantizeLinear cannot produce {dtype_name(out_t)}")
    out_dt = to_numpy(out_t)
    s = _as_compute(expand_param(scale, x.shape, axis, bs, "y_scale"))
    prec = int(attrs.get("precision", 0) or 0)
    if prec:
        cd = to_numpy(prec)
        q = x.astype(cd, copy=False) / s.astype(cd, copy=False)
    else:
        # numpy promotion (the wider of x and scale; int32 x -> float64) like onnx.reference.
        q = np.asarray(x / s)
    z = None if zp is None else expand_param(zp, x.shape, axis, bs, "y_zero_point")
    if out_t in INT_RANGES:
        lo, hi = INT_RANGES[out_t]
        # Round in the compute dtype, then add the zero point in a dtype that holds it exactly.
        r = np.rint(q).astype(np.float64 if q.dtype == np.float64 else np.float32, copy=False)
        if z is not None:
            r = r + z.astype(r.dtype)
        # fmax / fmin return the bound for a NaN: NaN saturates to lo whatever the zero point, as
        # in ONNX Runtime (int8 -128, uint8 0); np.clip would keep the NaN for the cast to mangle.
        return np.asarray(np.fmin(np.fmax(r, lo), hi).astype(np.int32).astype(out_dt))
    if z is not None and np.any(z.astype(np.float32) != 0):
        q = q + z.astype(np.float32)
    if out_t in FLOAT8 and int(attrs.get("saturate", 1)):
        m = float(ml_dtypes.finfo(out_dt).max)
        q = np.clip(q, -m, m)  # NaN stays NaN; +-inf saturate (spec: saturate table)
    return np.asarray(np.asarray(q).astype(out_dt))


def dequantize(x: np.ndarray, scale: np.ndarray, zp: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray:
    """DequantizeLinear (spec: DequantizeLinear-25): y = (x - zp) * scale, in float32 arithmetic."""
    axis, bs = int(attrs.get("axis", 1)), int(attrs.get("block_size", 0))
    out_t = int(attrs.get("output_dtype", 0) or 0)
    out_dt = to_numpy(out_t) if out_t else scale.dtype
    if x.dtype == np.int32:
        # int32 has no zero point in the spec; subtract exactly in int64 if one is given anyway.
        d = x.astype(np.int64)
        if zp is not None:
            d = d - expand_param(zp, x.shape, axis, bs, "x_zero_point").astype(np.int64)
        dx = d.astype(np.float32)
    else:
        dx = x.astype(np.float32)
        if zp is not None:
            dx = dx - expand_param(zp, x.shape, axis, bs, "x_zero_point").astype(np.float32)
    s = _as_compute(expand_param(scale, x.shape, axis, bs, "x_scale"))
    return np.asarray(np.asarray(dx * s).astype(out_dt, copy=False))


def _k_quantize(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QuantizeLinear kernel: see ``quantize``."""
    return [quantize(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, attrs)]


def _k_dequantize(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """DequantizeLinear kernel: see ``dequantize``."""
    return [dequantize(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, attrs)]


def _check_param_shape(ctx: InferContext, name: str, i: int, x: TensorDesc | None) -> None:
    """Fail when input ``i`` (scale or zero point) has a shape no granularity accepts."""
    p = ctx.input(i)
    if p is None or p.shape is None or all(d == 1 for d in p.shape):
        return
    if x is None or x.shape is None:
        return
    rank = len(x.shape)
    axis, bs = int(ctx.attrs.get("axis", 1)), int(ctx.attrs.get("block_size", 0))
    if not -rank <= axis < rank:
        raise ctx.fail(f"attribute axis = {axis} is out of range for x of rank {rank}")
    axis %= rank
    xd = x.shape[axis]
    if bs <= 0:
        if len(p.shape) != 1:
            raise ctx.fail(f"input {name} has shape {list(p.shape)}; expected a scalar or 1-D tensor "
                           "(set block_size for blocked quantization)")
        if isinstance(xd, int) and isinstance(p.shape[0], int) and p.shape[0] != xd:
            raise ctx.fail(f"input {name} has {p.shape[0]} elements; expected {xd} (x dim {axis})")
        return
    if len(p.shape) != rank:
        raise ctx.fail(f"input {name} has rank {len(p.shape)}; blocked quantization needs rank {rank} like x")
    for k, (pd, d) in enumerate(zip(p.shape, x.shape)):
        if isinstance(pd, int) and isinstance(d, int):
            want = -(-d // bs) if k == axis else d
            if pd != want:
                raise ctx.fail(f"input {name} has shape {list(p.shape)}; expected dim {k} = {want} "
                               f"for x {list(x.shape)} with block_size={bs} on axis {axis}")


def _check_dtype(ctx: InferContext, i: int, name: str, allowed: frozenset[int]) -> None:
    d = ctx.input(i)
    if d is not None and d.dtype and d.dtype not in allowed:
        names = ", ".join(sorted(dtype_name(t) for t in allowed))
        raise ctx.fail(f"input {name} has dtype {dtype_name(d.dtype)}; expected one of {names}")


def _infer_quantize(ctx: InferContext) -> list[TensorDesc]:
    """QuantizeLinear output: x's shape; dtype of y_zero_point, else output_dtype, else uint8."""
    x, zp = ctx.input(0), ctx.input(2)
    _check_dtype(ctx, 0, "x", QUANT_X_TYPES)
    _check_dtype(ctx, 1, "y_scale", SCALE_TYPES)
    odt = int(ctx.attrs.get("output_dtype", 0) or 0)
    if zp is not None and zp.dtype and odt and zp.dtype != odt:
        raise ctx.fail(f"attribute output_dtype {dtype_name(odt)} differs from y_zero_point's "
                       f"dtype {dtype_name(zp.dtype)}")
    out_t = _q_out_type(zp.dtype if zp is not None else None, odt)
    if out_t not in QUANT_TYPES:
        raise ctx.fail(f"output dtype {dtype_name(out_t)} is not a quantized type")
    prec = int(ctx.attrs.get("precision", 0) or 0)
    if prec and prec not in REAL_OUT:
        raise ctx.fail(f"attribute precision {dtype_name(prec)} must be FLOAT, FLOAT16 or BFLOAT16")
    _check_param_shape(ctx, "y_scale", 1, x)
    _check_param_shape(ctx, "y_zero_point", 2, x)
    return [TensorDesc(out_t, x.shape if x is not None else None)]


def _infer_dequantize(ctx: InferContext) -> list[TensorDesc]:
    """DequantizeLinear output: x's shape; dtype output_dtype, else x_scale's dtype."""
    x, s, zp = ctx.input(0), ctx.input(1), ctx.input(2)
    _check_dtype(ctx, 0, "x", DEQUANT_INPUTS)
    _check_dtype(ctx, 1, "x_scale", SCALE_TYPES)
    if x is not None and zp is not None and x.dtype and zp.dtype and x.dtype != zp.dtype:
        raise ctx.fail(f"input x_zero_point has dtype {dtype_name(zp.dtype)}; it must match x "
                       f"({dtype_name(x.dtype)})")
    odt = int(ctx.attrs.get("output_dtype", 0) or 0)
    out_t = odt or (s.dtype if s is not None else 0)
    if out_t and out_t not in REAL_OUT:
        raise ctx.fail(f"output dtype {dtype_name(out_t)} must be FLOAT, FLOAT16 or BFLOAT16 "
                       "(set output_dtype when x_scale is FLOAT8E8M0)")
    _check_param_shape(ctx, "x_scale", 1, x)
    _check_param_shape(ctx, "x_zero_point", 2, x)
    return [TensorDesc(out_t, x.shape if x is not None else None)]


# ---------------------------------------------------------------- integer convolutions

_WINDOW_ATTRS: dict[str, Any] = {
    "auto_pad": "NOTSET", "dilations": [], "group": 1, "kernel_shape": [], "pads": [], "strides": [],
}


def _per_channel(zp: np.ndarray | None, m: int, n_spatial: int, what: str) -> np.ndarray:
    """A weight zero point / scale: scalar, or 1-D of length M reshaped to (M, 1, ...)."""
    if zp is None:
        return np.zeros((), np.int64)
    zp = np.asarray(zp)
    if zp.size == 1:
        return zp.reshape(())
    if zp.ndim != 1 or zp.shape[0] != m:
        raise ValueError(f"{what} of shape {zp.shape} must be a scalar or 1-D of length {m} (output channels)")
    return zp.reshape((m,) + (1,) * (n_spatial + 1))


def int_conv(x: np.ndarray, w: np.ndarray, x_zp: Any, w_zp: Any, bias: np.ndarray | None,
             attrs: Mapping[str, Any]) -> np.ndarray:
    """Exact int64 result of conv(x - x_zp, w - w_zp) (+ bias) with Conv's window attributes.

    The shifted operands go through the float Conv kernels; float32 when the largest possible
    |partial sum| (K * max|x| * max|w|) is below 2**24, where float32 is exact, else float64.
    """
    if x.ndim < 3:
        raise ValueError(f"x {x.shape} must be (N, C, D1, ...)")
    xi = x.astype(np.int32)
    if x_zp is not None:
        xz = np.asarray(x_zp)
        if xz.size != 1:
            raise ValueError(f"x_zero_point of shape {xz.shape} must be a scalar (per-tensor)")
        xi -= xz.reshape(()).astype(np.int32)
    wi = w.astype(np.int32) - _per_channel(w_zp, w.shape[0], w.ndim - 2, "w_zero_point").astype(np.int32)
    k = int(np.prod(w.shape[1:]))
    bound = k * (int(np.abs(xi).max()) if xi.size else 0) * (int(np.abs(wi).max()) if wi.size else 0)
    cd = np.float32 if bound < (1 << 24) else np.float64
    y = _conv([xi.astype(cd), wi.astype(cd)], attrs)
    out = np.rint(y).astype(np.int64)
    if bias is not None and out.size:
        out += np.asarray(bias).astype(np.int64).reshape((1, -1) + (1,) * (x.ndim - 2))
    return out


def _k_conv_integer(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """ConvInteger (spec: ConvInteger-10): int32 conv(x - x_zero_point, w - w_zero_point)."""
    x, w = inputs[0], inputs[1]
    xz = inputs[2] if len(inputs) > 2 else None
    wz = inputs[3] if len(inputs) > 3 else None
    # The spec lets the 32-bit accumulation overflow: wrap like int32 arithmetic would.
    return [np.asarray(int_conv(x, w, xz, wz, None, attrs).astype(np.int32))]


def _k_qlinear_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearConv (spec: QLinearConv-10): y = saturate(round(acc * x_s * w_s / y_s) + y_zp).

    acc = conv(x - x_zp, w - w_zp) + B in int32; requantized in float32 with rounding half
    to even like ONNX Runtime; w_scale / w_zero_point may be per output channel.
    """
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = inputs[:8]
    b = inputs[8] if len(inputs) > 8 else None
    acc = int_conv(x, w, x_zp, w_zp, b, attrs).astype(np.int32).astype(np.float32)
    ns = x.ndim - 2
    # (M, 1, ...) weight layout -> (M, *spatial ones) broadcasting over the (N, M, ...) output.
    ws = _per_channel(np.asarray(w_s, np.float32), w.shape[0], ns, "w_scale")
    ws = ws.reshape(ws.shape[:1] + ws.shape[2:]) if ws.ndim else ws
    mult = (np.asarray(x_s, np.float32).reshape(()) * ws) / np.asarray(y_s, np.float32).reshape(())
    out_dt = np.asarray(y_zp).dtype if y_zp is not None else x.dtype
    info = np.iinfo(out_dt)
    zp = np.float32(np.asarray(y_zp).reshape(()) if y_zp is not None else 0)
    v = np.rint(acc * mult) + zp
    return [np.asarray(np.clip(v, info.min, info.max).astype(out_dt))]


def _conv_ctx(ctx: InferContext, xi: int, wi: int) -> InferContext:
    return InferContext(ctx.node, ctx.op_type, ctx.attrs, [ctx.input(xi), ctx.input(wi)], [None, None],
                        ctx.opset, 1)


_INT8S = frozenset({DType.INT8, DType.UINT8})


def _infer_conv_integer(ctx: InferContext) -> list[TensorDesc]:
    """ConvInteger output: Conv's shape rules, int32."""
    _check_dtype(ctx, 0, "x", _INT8S)
    _check_dtype(ctx, 1, "w", _INT8S)
    shape = _infer_conv(_conv_ctx(ctx, 0, 1))[0].shape
    _check_conv_params(ctx, 1, (2, "x_zero_point", False), (3, "w_zero_point", True))
    return [TensorDesc(int(DType.INT32), shape)]


def _check_conv_params(ctx: InferContext, wi: int, *params: tuple[int, str, bool]) -> None:
    """Per-tensor parameters are scalars; per-channel ones (``True``) are scalars or 1-D with
    M = W.shape[0] elements (spec: ConvInteger / QLinearConv; ONNX Runtime refuses others)."""
    w = ctx.input(wi)
    m = w.shape[0] if w is not None and w.shape else None
    for i, name, per_channel in params:
        if per_channel:
            check_vector(ctx, i, name, m, "one per output channel of w, or a scalar", allow_scalar=True)
        else:
            d = ctx.input(i)
            if d is not None and d.shape is not None and any(isinstance(v, int) and v != 1 for v in d.shape):
                raise ctx.fail(f"input {name} has shape {list(d.shape)}; expected a scalar (per-tensor)")


def _infer_qlinear_conv(ctx: InferContext) -> list[TensorDesc]:
    """QLinearConv output: Conv's shape rules, y_zero_point's dtype."""
    _check_dtype(ctx, 0, "x", _INT8S)
    _check_dtype(ctx, 3, "w", _INT8S)
    _check_dtype(ctx, 7, "y_zero_point", _INT8S)
    _check_conv_params(ctx, 3, (1, "x_scale", False), (6, "y_scale", False), (2, "x_zero_point", False),
                       (7, "y_zero_point", False), (4, "w_scale", True), (5, "w_zero_point", True))
    w = ctx.input(3)
    check_vector(ctx, 8, "B", w.shape[0] if w is not None and w.shape else None, "one int32 per output channel")
    yz, x = ctx.input(7), ctx.input(0)
    dtype = yz.dtype if yz is not None and yz.dtype else (x.dtype if x is not None else 0)
    shape = _infer_conv(_conv_ctx(ctx, 0, 3))[0].shape
    return [TensorDesc(dtype, shape)]


OPS: list[OpDef] = [
    OpDef("QuantizeLinear", _infer_quantize, _k_quantize, since=10, attrs=dict(_Q_ATTRS)),
    OpDef("DequantizeLinear", _infer_dequantize, _k_dequantize, since=10, attrs=dict(_DQ_ATTRS)),
    OpDef("ConvInteger", _infer_conv_integer, _k_conv_integer, since=10, attrs=dict(_WINDOW_ATTRS)),
    OpDef("QLinearConv", _infer_qlinear_conv, _k_qlinear_conv, since=10, attrs=dict(_WINDOW_ATTRS)),
]
