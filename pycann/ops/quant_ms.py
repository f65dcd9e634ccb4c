"""ONNX Runtime's quantised contrib ops (domain ``com.microsoft``) that its ``quantize_static(...,
quant_format=QuantFormat.QOperator)`` writes besides the standard QLinearConv / QLinearMatMul:
QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QGemm, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax, QLinearConcat and QLinearAveragePool (semantics: ONNX Runtime's ContribOperators.md).

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
from pycann.ops.opdef import REQUIRED, InferContext, OpDef

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


def _k_qlinear_mul(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp): C = Q(DQ(A) * DQ(B))."""
    a, a_s, a_z, b, b_s, b_z, c_s = inputs[:7]
    c_z = inputs[7] if len(inputs) > 7 else None
    return [q8(dq(a, a_s, a_z) * dq(b, b_s, b_z), c_s, c_z)]


def _unary(fn: Any) -> Any:
    """The kernel of a QLinear unary op (X, X_scale, X_zp, Y_scale, Y_zp): Y = Q(fn(DQ(X)))."""
    def kernel(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        x, x_s, x_z, y_s = inputs[:4]
        y_z = inputs[4] if len(inputs) > 4 else None
        return [q8(fn(dq(x, x_s, x_z), attrs).astype(np.float32), y_s, y_z)]
    return kernel


def _sigmoid(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _leaky_relu(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    return np.where(x >= 0, x, x * np.float32(attrs.get("alpha", 0.01)))


def _softmax(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """Softmax of the ONNX opset in ``opset``: from 13 over ``axis`` alone; before, over all the axes
    from ``axis`` on (the input coerced to 2-D), as the float model's Softmax computed it."""
    axis = int(attrs.get("axis", -1)) % x.ndim
    two_d = int(attrs.get("opset", 13)) < 13
    v = x.reshape(int(np.prod(x.shape[:axis])), -1) if two_d else x
    ax = 1 if two_d else axis
    e = np.exp(v - v.max(axis=ax, keepdims=True))
    return (e / e.sum(axis=ax, keepdims=True)).reshape(x.shape)


def _k_qlinear_concat(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearConcat(Y_scale, Y_zp, X1, X1_scale, X1_zp, X2, ...): Y = Q(Concat(DQ(X1), DQ(X2), ...))."""
    y_s, y_z, rest = inputs[0], inputs[1], inputs[2:]
    parts = [dq(rest[i], rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]
    return [q8(np.concatenate(parts, axis=int(attrs["axis"])), y_s, y_z)]


def _k_qlinear_avgpool(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QLinearAveragePool(X, x_scale, x_zp, y_scale, y_zp): Y = Q(AveragePool(DQ(X))) (NCHW)."""
    from pycann.ops.nn.pool import _k_average_pool

    x, x_s, x_z, y_s = inputs[:4]
    y_z = inputs[4] if len(inputs) > 4 else None
    pool_attrs = {k: v for k, v in attrs.items() if k != "channels_last"}
    return [q8(_k_average_pool([dq(x, x_s, x_z)], pool_attrs)[0], y_s, y_z)]


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


def _infer_unary(ctx: InferContext) -> list[TensorDesc]:
    x = ctx.required(0)
    if x.dtype not in (None, 0, int(DType.UINT8), int(DType.INT8)):
        raise ctx.fail(f"X must be uint8 or int8, got dtype {x.dtype}")
    if ctx.op_type == "QLinearSoftmax" and x.shape is not None:
        axis = int(ctx.attrs.get("axis", -1))
        if not -len(x.shape) <= axis < len(x.shape):
            raise ctx.fail(f"axis {axis} is out of range for X of rank {len(x.shape)}")
    return [TensorDesc(_zp_dtype(ctx, 4, x.dtype or int(DType.UINT8)), x.shape)]


def _infer_avgpool(ctx: InferContext) -> list[TensorDesc]:
    from pycann.ops.nn.pool import _infer_pool

    if int(ctx.attrs.get("channels_last", 0)):
        raise ctx.fail("channels_last=1 (NHWC) is not supported: quantise the model with the NCHW layout "
                       "(ONNX Runtime's quantize_static writes channels_last=0)")
    x = ctx.required(0)
    (y,) = _infer_pool(ctx)
    return [TensorDesc(_zp_dtype(ctx, 4, x.dtype or int(DType.UINT8)), y.shape)]


def _infer_concat(ctx: InferContext) -> list[TensorDesc]:
    rest = list(ctx.inputs[2:])
    if not rest or len(rest) % 3:
        raise ctx.fail(f"inputs after Y_scale, Y_zero_point must be (X, scale, zero point) triples; got {len(rest)}")
    xs = [rest[i] for i in range(0, len(rest), 3)]
    dt = _zp_dtype(ctx, 1, int(DType.UINT8))
    if any(x is None or x.shape is None for x in xs):
        return [TensorDesc(dt, None)]
    ranks = {len(x.shape) for x in xs if x is not None and x.shape is not None}
    if len(ranks) != 1:
        raise ctx.fail(f"inputs of ranks {sorted(ranks)}; QLinearConcat needs one rank")
    rank = ranks.pop()
    axis = int(ctx.attrs["axis"])
    if not -rank <= axis < rank:
        raise ctx.fail(f"axis {axis} is out of range for inputs of rank {rank}")
    axis %= rank
    shapes = [x.shape for x in xs if x is not None and x.shape is not None]
    dims = [sh[axis] for sh in shapes]
    total: Any = sum(dims) if all(isinstance(d, int) for d in dims) else None
    return [TensorDesc(dt, tuple(total if i == axis else shapes[0][i] for i in range(rank)))]


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
    OpDef("QLinearMul", _infer_add, _k_qlinear_mul, domain=MS_DOMAIN,
          doc="ONNX Runtime contrib: quantised Mul (dequantise, multiply, quantise)"),
    OpDef("QLinearSigmoid", _infer_unary, _unary(_sigmoid), domain=MS_DOMAIN,
          doc="ONNX Runtime contrib: quantised Sigmoid"),
    OpDef("QLinearLeakyRelu", _infer_unary, _unary(_leaky_relu), domain=MS_DOMAIN, attrs={"alpha": 0.01},
          doc="ONNX Runtime contrib: quantised LeakyRelu"),
    OpDef("QLinearSoftmax", _infer_unary, _unary(_softmax), domain=MS_DOMAIN, attrs={"axis": -1, "opset": 13},
          doc="ONNX Runtime contrib: quantised Softmax (opset: the float Softmax's, < 13 coerces to 2-D)"),
    OpDef("QLinearAveragePool", _infer_avgpool, _k_qlinear_avgpool, domain=MS_DOMAIN,
          attrs={"auto_pad": "NOTSET", "ceil_mode": 0, "channels_last": 0, "count_include_pad": 0,
                 "kernel_shape": REQUIRED, "pads": [], "strides": []},
          doc="ONNX Runtime contrib: quantised AveragePool (NCHW)"),
    OpDef("QLinearConcat", _infer_concat, _k_qlinear_concat, domain=MS_DOMAIN, attrs={"axis": REQUIRED},
          doc="ONNX Runtime contrib: quantised Concat of (X, scale, zero point) triples"),
    OpDef("QLinearGlobalAveragePool", _infer_gap, _k_qlinear_gap, domain=MS_DOMAIN, attrs={"channels_last": 0},
          doc="ONNX Runtime contrib: quantised GlobalAveragePool"),
    OpDef("QGemm", _infer_qgemm, _k_qgemm, domain=MS_DOMAIN,
          attrs={"alpha": 1.0, "transA": 0, "transB": 0},
          doc="ONNX Runtime contrib: quantised Gemm (int32 C, optional y_scale / y_zero_point)"),
]
