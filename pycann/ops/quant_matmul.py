"""``pycann.QuantMatMul``: the INT8 matrix product QuantizedConvFusion makes of a QDQ MatMul or Gemm
(``DequantizeLinear(QuantizeLinear(x)) @ DequantizeLinear(W_int8) [+ B] [-> Relu]``).

Semantics (the ONNX ops it replaces): ``y = act(((Q(x) - zp) * x_scale) @ (W * w_scale) + B)`` with
``W`` stored (N, K) int8 (the fusion transposes a MatMul's (K, N) weight once at compile time),
``w_scale`` one value per output column N, ``B`` float32 (N) optional, ``x`` float32 (..., K).
Attributes as ``pycann.QuantConv`` (``x_scale``, ``x_zero_point``, ``x_unsigned``, ``w_scale``,
``activation``, ``seven_bit``, ``q_min``, ``q_max``, ``narrow_w``, and the output side's ``Z`` input /
``y_scale`` requantisation of pycann/ops/quant_epilogue.py); ``x`` may be already quantised (uint8 /
int8). The int8 kernel (oneDNN's int8 matmul through its C API, else PyTorch's
``qlinear_pointwise``; ``pycann.kernels.quant``, which hands it to ``_k_quant_matmul``) is taken
where it is exact (see ``kernels/providers/torch_int8.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.quant_conv import DOMAIN, quantized_input
from pycann.ops.quant_epilogue import EPILOGUE_ATTRS, finish, requantised

_ATTRS: dict[str, Any] = {"x_scale": 1.0, "x_zero_point": 0, "x_unsigned": 1, "w_scale": [], "activation": "",
                          "seven_bit": 0, "q_min": -1000, "q_max": 1000, "narrow_w": 0, **EPILOGUE_ATTRS}


def _scales(attrs: Mapping[str, Any], n: int) -> np.ndarray:
    ws = np.asarray(attrs["w_scale"], np.float32).reshape(-1)
    if ws.size not in (1, n):
        raise ValueError(f"QuantMatMul: w_scale has {ws.size} values for {n} output columns")
    return np.full(n, ws[0], np.float32) if ws.size == 1 else ws


# ``(x, x_scale, x_zero_point, W, w_scales, B, Z, attrs) -> y`` for uint8 activations, or None where
# the int8 kernel does not apply (``pycann.kernels.quant``)
Int8MatMul = Callable[..., "np.ndarray | None"]


def _reference(xq: np.ndarray, s: float, zp: int, w: np.ndarray, ws: np.ndarray, b: np.ndarray | None,
               z: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray:
    """Dequantise xq and W, multiply in float32, + B, then the epilogue (``quant_epilogue.finish``)."""
    xf = (xq.astype(np.float32) - np.float32(zp)) * np.float32(s)
    y = np.matmul(xf, (w.astype(np.float32) * ws[:, None]).T)
    if b is not None:
        y += b
    return finish(y, attrs, z)


def _k_quant_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], int8: Int8MatMul | None = None) -> list[np.ndarray]:
    """QuantMatMul: ``int8`` where it applies, else the reference. Raises ValueError on operands
    that do not match (W, B, w_scale, Z)."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if w.dtype != np.int8 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"QuantMatMul: x {list(x.shape)} and int8 W {list(w.shape)} (N, K) do not match")
    n = w.shape[0]
    if b is not None and b.shape != (n,):
        raise ValueError(f"QuantMatMul: B has shape {list(b.shape)}, expected [{n}]")
    z = inputs[3] if len(inputs) > 3 else None
    if z is not None and (z.dtype != np.float32 or z.shape != (*x.shape[:-1], n)):
        raise ValueError(f"QuantMatMul: residual Z {z.dtype}{list(z.shape)} must be float32 {[*x.shape[:-1], n]}")
    ws = _scales(attrs, n)
    s, zp, unsigned = float(attrs["x_scale"]), int(attrs["x_zero_point"]), bool(attrs.get("x_unsigned", 1))
    y = int8(x, s, zp, w, ws, b, z, attrs) if int8 is not None and unsigned else None
    return [y if y is not None else _reference(quantized_input(x, attrs), s, zp, w, ws, b, z, attrs)]


def _infer(ctx: InferContext) -> list[TensorDesc]:
    x, w = ctx.input(0), ctx.input(1)
    if w is not None and w.dtype != 3:
        raise ctx.fail(f"input W must be int8, got dtype {w.dtype}")
    dt = 2 if requantised(ctx.attrs) else 1
    if x is None or x.shape is None or w is None or w.shape is None:
        return [TensorDesc(dt, None)]
    if isinstance(x.shape[-1], int) and isinstance(w.shape[1], int) and x.shape[-1] != w.shape[1]:
        raise ctx.fail(f"x {list(x.shape)} has K={x.shape[-1]}, W (N, K) {list(w.shape)} has K={w.shape[1]}")
    return [TensorDesc(dt, tuple(x.shape[:-1]) + (w.shape[0],))]


OPS = [
    OpDef("QuantMatMul", _infer, _k_quant_matmul, domain=DOMAIN, attrs=_ATTRS,
          doc="INT8 MatMul/Gemm of a QDQ pattern (GE QuantizedConvFusion); see pycann/ops/quant_matmul.py"),
]
