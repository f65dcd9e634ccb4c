"""``pycann.QuantMatMul``: the INT8 matrix product QuantizedConvFusion makes of a QDQ MatMul or Gemm
(``DequantizeLinear(QuantizeLinear(x)) @ DequantizeLinear(W_int8) [+ B] [-> Relu]``).

Semantics (the ONNX ops it replaces): ``y = act(((Q(x) - zp) * x_scale) @ (W * w_scale) + B)`` with
``W`` stored (N, K) int8 (the fusion transposes a MatMul's (K, N) weight once at compile time),
``w_scale`` one value per output column N, ``B`` float32 (N) optional, ``x`` float32 (..., K).
Attributes as ``pycann.QuantConv`` (``x_scale``, ``x_zero_point``, ``x_unsigned``, ``w_scale``,
``activation``, ``seven_bit``, ``q_min``, ``q_max``, ``narrow_w``); ``x`` may be already quantised
(uint8 / int8). The int8 kernel (oneDNN through PyTorch's
``qlinear_pointwise``) is taken where it is exact (see ``providers/torch_int8.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.quant_conv import DOMAIN, quantized_input

_ATTRS: dict[str, Any] = {"x_scale": 1.0, "x_zero_point": 0, "x_unsigned": 1, "w_scale": [], "activation": "",
                          "seven_bit": 0, "q_min": -1000, "q_max": 1000, "narrow_w": 0}


def _scales(attrs: Mapping[str, Any], n: int) -> np.ndarray:
    ws = np.asarray(attrs["w_scale"], np.float32).reshape(-1)
    if ws.size not in (1, n):
        raise ValueError(f"QuantMatMul: w_scale has {ws.size} values for {n} output columns")
    return np.full(n, ws[0], np.float32) if ws.size == 1 else ws


# ``(xq, x_scale, x_zero_point, W, w_scales, B, relu, attrs) -> y``, or None where the int8 kernel
# does not apply (``pycann.kernels.quant``)
Int8MatMul = Callable[..., "np.ndarray | None"]


def _k_quant_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], int8: Int8MatMul | None = None) -> list[np.ndarray]:
    """QuantMatMul: ``int8`` where it applies, else dequantise and multiply in float32 (the
    reference). Raises ValueError on operands that do not match."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if w.dtype != np.int8 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"QuantMatMul: x {list(x.shape)} and int8 W {list(w.shape)} (N, K) do not match")
    n = w.shape[0]
    if b is not None and b.shape != (n,):
        raise ValueError(f"QuantMatMul: B has shape {list(b.shape)}, expected [{n}]")
    ws = _scales(attrs, n)
    s, zp, unsigned = float(attrs["x_scale"]), int(attrs["x_zero_point"]), bool(attrs.get("x_unsigned", 1))
    xq = quantized_input(x, attrs)
    relu = attrs.get("activation") == "Relu"
    y = int8(xq, s, zp, w, ws, b, relu, attrs) if int8 is not None and unsigned else None
    if y is not None:
        return [y]
    xf = (xq.astype(np.float32) - np.float32(zp)) * np.float32(s)
    y = np.matmul(xf, (w.astype(np.float32) * ws[:, None]).T)
    if b is not None:
        y += b
    if relu:
        np.maximum(y, 0, out=y)
    return [y]


def _infer(ctx: InferContext) -> list[TensorDesc]:
    x, w = ctx.input(0), ctx.input(1)
    if w is not None and w.dtype != 3:
        raise ctx.fail(f"input W must be int8, got dtype {w.dtype}")
    if x is None or x.shape is None or w is None or w.shape is None:
        return [TensorDesc(1, None)]
    if isinstance(x.shape[-1], int) and isinstance(w.shape[1], int) and x.shape[-1] != w.shape[1]:
        raise ctx.fail(f"x {list(x.shape)} has K={x.shape[-1]}, W (N, K) {list(w.shape)} has K={w.shape[1]}")
    return [TensorDesc(1, tuple(x.shape[:-1]) + (w.shape[0],))]


OPS = [
    OpDef("QuantMatMul", _infer, _k_quant_matmul, domain=DOMAIN, attrs=_ATTRS,
          doc="INT8 MatMul/Gemm of a QDQ pattern (GE QuantizedConvFusion); see pycann/ops/quant_matmul.py"),
]
