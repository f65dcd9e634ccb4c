"""ONNX Runtime's quantised contrib ops (domain ``com.microsoft``) that its ``quantize_static(...,
quant_format=QuantFormat.QOperator)`` writes besides the standard QLinearConv / QLinearMatMul:
QLinearAdd, QLinearGlobalAveragePool and QGemm (semantics: ONNX Runtime's ContribOperators.md).

Reference kernels: dequantise the inputs (``(q - zp) * scale`` in float32), run the float op,
quantise the result (round half to even, saturate). ONNX Runtime's own kernels requantise in
fixed point or with fused float multipliers, so results can differ from them by one unit of the
output quantisation (1 LSB) where a value falls on a rounding boundary. GE's
``QOperatorToQDQ`` rewrites these ops (and QLinearConv / QLinearMatMul) into the same QDQ form,
which ``QuantizedConvFusion`` then maps onto the int8 kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc
from pycann.ops.opdef import InferContext, OpDef

MS_DOMAIN = "com.microsoft"
_INT8S = (np.dtype(np.uint8), np.dtype(np.int8))


def dq(q: np.ndarray, scale: Any, zp: Any, axis: int = -1) -> np.ndarray:
    """``(q - zp) * scale`` in float32; a 1-D ``scale``/``zp`` applies along ``axis``."""
    s = np.asarray(scale, np.float32)
    z = np.asarray(0 if zp is None else zp).astype(np.float32)
    if s.ndim == 1 and s.size > 1:
        shape = [1] * q.ndim
        shape[axis] = s.size
        s = s.reshape(shape)
        z = z.reshape(shape) if z.size > 1 else z.reshape(())
    return ((q.astype(np.float32) - z) * s).astype(np.float32)


def q8(x: np.ndarray, scale: Any, zp: Any) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zp)`` with a per-tensor scale; dtype of ``zp``
    (uint8 when absent)."""
    zp_a = np.asarray(0 if zp is None else zp, np.uint8 if zp is None else None)
    if zp_a.dtype not in _INT8S:
        raise ValueError(f"zero point dtype {zp_a.dtype} is not uint8 / int8")
    info = np.iinfo(zp_a.dtype)
    v = np.rint(np.asarray(x, np.float32) / np.float32(np.asarray(scale, np.float32).reshape(()))) + np.float32(zp_a.reshape(()))
    return np.clip(v, info.min, info.max).astype(zp_a.dtype)


def _k_qlinear_add(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearAdd(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp): C = Q(DQ(A) + DQ(B)), numpy broadcasting."""
    a, a_s, a_z, b, b_s, b_z, c_s = inputs[:7]
    c_z = inputs[7] if len(inputs) > 7 else None
    return [q8(dq(a, a_s, a_z) + dq(b, b_s, b_z), c_s, c_z)]


def _k_qlinear_gap(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp): the mean over the spatial axes
    (axes 2.. for NCHW; 1..-2 with ``channels_last=1``), keeping them as size 1."""
    x, x_s, x_z, y_s = inputs[:4]
    y_z = inputs[4] if len(inputs) > 4 else None
    axes = tuple(range(1, x.ndim - 1)) if int(attrs.get("channels_last", 0)) else tuple(range(2, x.ndim))
    return [q8(dq(x, x_s, x_z).mean(axis=axes, keepdims=True, dtype=np.float32), y_s, y_z)]


def _k_qgemm(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C?, y_scale?, y_zp?): ``alpha * DQ(A') @ DQ(B')
    + C * a_scale * b_scale`` (C int32 on the accumulator's scale, b_scale per column of B' or one),
    quantised with y_scale / y_zp when given, else float32."""
    a, a_s, a_z, b, b_s, b_z = inputs[:6]
    c = inputs[6] if len(inputs) > 6 else None
    y_s = inputs[7] if len(inputs) > 7 else None
    y_z = inputs[8] if len(inputs) > 8 else None
    trans_b = int(attrs.get("transB", 0))
    af = dq(a, a_s, a_z)
    bf = dq(b, b_s, b_z, axis=0 if trans_b else 1)
    af = af.T if int(attrs.get("transA", 0)) else af
    bf = bf.T if trans_b else bf
    y = np.float32(attrs.get("alpha", 1.0)) * (af @ bf)
    if c is not None:
        y = y + c.astype(np.float32) * (np.float32(np.asarray(a_s, np.float32).reshape(())) * np.asarray(b_s, np.float32))
    y = y.astype(np.float32)
    return [y if y_s is None else q8(y, y_s, y_z)]


def _zp_dtype(ctx: InferContext, i: int, default: int) -> int:
    d = ctx.input(i)
    if d is not None and d.dtype not in (None, 0, int(DType.UINT8), int(DType.INT8)):
        raise ctx.fail(f"input {i} (zero point) must be uint8 or int8, got dtype {d.dtype}")
    return d.dtype if d is not None and d.dtype else default


def _infer_add(ctx: InferContext) -> list[TensorDesc]:
    a, b = ctx.input(0), ctx.input(3)
    dt = _zp_dtype(ctx, 7, a.dtype if a is not None and a.dtype else int(DType.UINT8))
    if a is None or b is None or a.shape is None or b.shape is None:
        return [TensorDesc(dt, None)]
    try:
        shape = np.broadcast_shapes(tuple(d if isinstance(d, int) else 1 for d in a.shape),
                                    tuple(d if isinstance(d, int) else 1 for d in b.shape))
    except ValueError:
        raise ctx.fail(f"A {list(a.shape)} and B {list(b.shape)} do not broadcast") from None
    sym = a.shape if len(a.shape) >= len(b.shape) else b.shape
    out = tuple(s if not isinstance(s, int) and v == 1 else v for s, v in zip(sym, shape)) if len(sym) == len(shape) else shape
    return [TensorDesc(dt, tuple(out))]


def _infer_gap(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.input(0)
    dt = _zp_dtype(ctx, 4, x.dtype if x is not None and x.dtype else int(DType.UINT8))
    if x is None or x.shape is None:
        return [TensorDesc(dt, None)]
    if len(x.shape) < 3:
        raise ctx.fail(f"X of rank {len(x.shape)}; expected N, C and at least one spatial axis")
    cl = int(ctx.attrs.get("channels_last", 0))
    shape = (x.shape[0], *([1] * (len(x.shape) - 2)), x.shape[-1]) if cl else (*x.shape[:2], *([1] * (len(x.shape) - 2)))
    return [TensorDesc(dt, tuple(shape))]


def _infer_qgemm(ctx: InferContext) -> list[TensorDesc]:
    a, b = ctx.input(0), ctx.input(3)
    dt = int(DType.FLOAT) if ctx.input(7) is None else _zp_dtype(ctx, 8, int(DType.UINT8))
    if a is None or b is None or a.shape is None or b.shape is None:
        return [TensorDesc(dt, None)]
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.fail(f"A {list(a.shape)} and B {list(b.shape)} must be 2-D")
    m = a.shape[1] if int(ctx.attrs.get("transA", 0)) else a.shape[0]
    ka = a.shape[0] if int(ctx.attrs.get("transA", 0)) else a.shape[1]
    kb, n = (b.shape[1], b.shape[0]) if int(ctx.attrs.get("transB", 0)) else (b.shape[0], b.shape[1])
    if isinstance(ka, int) and isinstance(kb, int) and ka != kb:
        raise ctx.fail(f"A {list(a.shape)} and B {list(b.shape)} have different K ({ka} vs {kb}) for transA/transB")
    return [TensorDesc(dt, (m, n))]


OPS = [
    OpDef("QLinearAdd", _infer_add, _k_qlinear_add, domain=MS_DOMAIN,
          doc="ONNX Runtime contrib: quantised Add (dequantise, add, quantise)"),
    OpDef("QLinearGlobalAveragePool", _infer_gap, _k_qlinear_gap, domain=MS_DOMAIN, attrs={"channels_last": 0},
          doc="ONNX Runtime contrib: quantised GlobalAveragePool"),
    OpDef("QGemm", _infer_qgemm, _k_qgemm, domain=MS_DOMAIN,
          attrs={"alpha": 1.0, "transA": 0, "transB": 0},
          doc="ONNX Runtime contrib: quantised Gemm (int32 C, optional y_scale / y_zero_point)"),
]
