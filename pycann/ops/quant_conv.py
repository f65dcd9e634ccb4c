"""``pycann.QuantConv``: the INT8 convolution GE's QuantizedConvFusion makes of a QDQ pattern
(``DequantizeLinear(QuantizeLinear(x)) -> Conv(., DequantizeLinear(W_int8), bias) [-> Relu]``).

Semantics (exactly the ONNX ops it replaces, Operators.md):

    xq = QuantizeLinear(x, x_scale, x_zero_point)                # uint8 or int8, round half to even
    y  = act(Conv((xq - x_zero_point) * x_scale, W * w_scale[:, None, None, None], B))

Inputs: ``X`` float32 (N, C, H, W) before quantisation (or already quantised: uint8 / int8 on
``x_scale`` / ``x_zero_point``, as a QOperator model's pooled tensors are, or the uint8 output of a
requantising int8 layer), ``W`` int8 (M, C/group, kh, kw), ``B`` float32 (M) optional, ``Z`` float32
(N, M, H', W') optional: a residual added before the activation. ``y_scale`` > 0 makes the output
uint8 (the requantisation of pycann/ops/quant_epilogue.py). Attributes: ``x_scale`` (float), ``x_zero_point`` (int), ``x_unsigned`` (1: uint8),
``w_scale`` (M floats), the Conv attributes, ``activation`` ("", "Relu", or "Clip" with ``clip_min``
/ ``clip_max``), ``seven_bit`` (1 when
the graph proves the quantised activation stays <= 127, see ``providers/torch_int8.py``), ``q_min``
/ ``q_max`` (a Clip before the QuantizeLinear, absorbed: the quantised values are clamped to them),
``narrow_w`` (1 when every weight lies in [-64, 64], which also makes the int8 kernel exact).

Kernels: the reference dequantises and runs pycann's float Conv (bit-for-bit what the unfused
graph computes); the int8 kernel (oneDNN's int8 primitives through its C API, else oneDNN through
PyTorch; ``pycann.kernels.quant``, which hands it to ``_k_quant_conv``) is taken where it is exact: uint8 activations, 2-D, and a VNNI CPU, ``seven_bit`` or
``narrow_w``. Its int32 accumulation is exact; its float epilogue rounds differently from the
reference by a few float32 ulps of the result, and a requantised output by at most 1 LSB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops.array_cache import ArrayCache
from pycann.ops.fused import _reference_conv_act
from pycann.ops.nn import conv as conv_mod
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.quant_epilogue import EPILOGUE_ATTRS, finish, requantised

DOMAIN = "pycann"

_ATTRS: dict[str, Any] = {
    "x_scale": 1.0, "x_zero_point": 0, "x_unsigned": 1, "w_scale": [], "activation": "", "seven_bit": 0,
    "q_min": -1000, "q_max": 1000, "narrow_w": 0,
    "strides": [], "pads": [], "dilations": [], "group": 1, "auto_pad": "NOTSET", "kernel_shape": [],
    **EPILOGUE_ATTRS,
}


def quantize_activation(x: np.ndarray, scale: float, zp: int, unsigned: bool,
                        q_min: int | None = None, q_max: int | None = None) -> np.ndarray:
    """QuantizeLinear with a scalar scale: saturate(round_half_even(x / scale) + zp) (float32
    division), then clamped to [q_min, q_max] when given (an absorbed Clip: quantisation is
    monotonic, so quantize(clip(x, lo, hi)) = clamp(quantize(x), quantize(lo), quantize(hi))).
    The result keeps ``x``'s memory layout (an NHWC-strided input gives an NHWC-strided output)."""
    t_lo, hi, dt = (0, 255, np.uint8) if unsigned else (-128, 127, np.int8)
    lo = t_lo if q_min is None else max(t_lo, q_min)
    hi = hi if q_max is None else min(hi, q_max)
    q = np.asarray(x, np.float32) / np.float32(scale)
    np.rint(q, out=q)
    q += np.float32(zp)
    np.clip(q, lo, hi, out=q)  # keeps a NaN: the absorbed Clip passes NaN on, as ONNX Runtime's does
    np.fmax(q, t_lo, out=q)  # then NaN -> the type's low end, QuantizeLinear's rule in ONNX Runtime
    return q.astype(dt, order="K")


def narrow_weights(w: np.ndarray) -> int:
    """1 when every int8 weight lies in [-64, 64]: then two uint8 x int8 products sum to at most
    2 * 255 * 64 = 32640, which the saturating int16 adds of non-VNNI CPUs hold exactly (ONNX
    Runtime's ``reduce_range`` writes such 7-bit weights)."""
    return int(w.size == 0 or int(np.abs(w.astype(np.int16)).max()) <= 64)


def quantized_input(x: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """The layer's quantised activation: ``x`` itself when it is already uint8 / int8 (a QOperator
    model's pooled or reshaped quantised tensor, on ``x_scale`` / ``x_zero_point``), else
    QuantizeLinear of the float ``x`` (with the absorbed Clip's bounds)."""
    unsigned = bool(attrs.get("x_unsigned", 1))
    if x.dtype == (np.uint8 if unsigned else np.int8):
        return x
    if x.dtype in (np.uint8, np.int8):
        raise ValueError(f"quantised input is {x.dtype}, x_unsigned={int(unsigned)} expects the other")
    return quantize_activation(x, float(attrs["x_scale"]), int(attrs["x_zero_point"]), unsigned,
                               int(attrs.get("q_min", -1000)), int(attrs.get("q_max", 1000)))


def _check(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> None:
    w = inputs[1]
    m = w.shape[0]
    ws = attrs.get("w_scale") or []
    if len(ws) not in (1, m):
        raise ValueError(f"QuantConv: w_scale has {len(ws)} values for {m} output channels")
    b = inputs[2] if len(inputs) > 2 else None
    if b is not None and b.shape != (m,):
        raise ValueError(f"QuantConv: B has shape {list(b.shape)}, expected [{m}] (one per output channel)")
    if w.dtype != np.int8:
        raise ValueError(f"QuantConv: W must be int8, got {w.dtype}")
    z = inputs[3] if len(inputs) > 3 else None
    if z is not None and (z.dtype != np.float32 or z.ndim != 4 or z.shape[:2] != (inputs[0].shape[0], m)):
        raise ValueError(f"QuantConv: residual Z {z.dtype}{list(z.shape)} must be float32 (N, {m}, H', W')")


def _w_scale(attrs: Mapping[str, Any], m: int) -> np.ndarray:
    ws = np.asarray(attrs["w_scale"], np.float32).reshape(-1)
    return np.full(m, ws[0], np.float32) if ws.size == 1 else ws


# the float kernels pack weights keyed by the weight array, so the dequantised weight must be the
# same array on every call: one per int8 weight (and scales)
_FLOAT_W = ArrayCache()


def _float_weight(w: np.ndarray, ws: np.ndarray) -> np.ndarray:
    def make() -> np.ndarray:
        wf = w.astype(np.float32) * ws.reshape((-1,) + (1,) * (w.ndim - 1))
        wf.flags.writeable = False
        return wf

    return _FLOAT_W.get(w, ws.tobytes(), make)


# the float Conv a QuantConv falls back to: ``pycann.kernels.conv.conv_act``'s contract
ConvAct = Callable[..., tuple[np.ndarray, bool]]
# ``(inputs, attrs) -> y``, or None where the int8 kernel does not apply (``pycann.kernels.quant``)
Int8Conv = Callable[[Sequence[Any], Mapping[str, Any]], "np.ndarray | None"]


def _reference(xq: np.ndarray, inputs: Sequence[Any], attrs: Mapping[str, Any],
               conv_act: ConvAct = _reference_conv_act) -> np.ndarray:
    """DequantizeLinear of xq and W, then pycann's float Conv computed by ``conv_act``, then the
    epilogue (+ Z, ReLU / Clip, requantisation: ``quant_epilogue.finish``): the unfused graph's values."""
    w = inputs[1]
    xf = (xq.astype(np.float32) - np.float32(attrs["x_zero_point"])) * np.float32(attrs["x_scale"])
    wf = _float_weight(w, _w_scale(attrs, w.shape[0]))
    b = inputs[2] if len(inputs) > 2 else None
    y = conv_act([xf, wf, b], attrs, None, relu=False)[0]
    return finish(y, attrs, inputs[3] if len(inputs) > 3 else None)


def _k_quant_conv(inputs: Sequence[Any], attrs: Mapping[str, Any], conv_act: ConvAct = _reference_conv_act,
                  int8: Int8Conv | None = None) -> list[np.ndarray]:
    """QuantConv: ``int8`` where it applies (the kernels layer's int8 kernels), else the reference
    computed by ``conv_act``. Raises ValueError on operands that do not match (W, B, w_scale, Z)."""
    _check(inputs, attrs)
    y = int8(inputs, attrs) if int8 is not None else None
    return [y if y is not None else _reference(quantized_input(inputs[0], attrs), inputs, attrs, conv_act)]


def _infer_quant_conv(ctx: InferContext) -> list[TensorDesc]:
    x, w = ctx.input(0), ctx.input(1)
    if w is not None and w.dtype != 3:  # TensorProto.INT8
        raise ctx.fail(f"input W must be int8, got dtype {w.dtype}")
    m = w.shape[0] if w is not None and w.shape else None
    ws = ctx.attrs.get("w_scale") or []
    if isinstance(m, int) and len(ws) not in (1, m):
        raise ctx.fail(f"w_scale has {len(ws)} values for {m} output channels; give 1 or {m}")
    b = ctx.input(2)
    if b is not None and b.shape is not None and isinstance(m, int) and tuple(b.shape) != (m,):
        raise ctx.fail(f"input B has shape {list(b.shape)}, expected [{m}] (one value per output channel)")
    if x is None or w is None:
        return [TensorDesc(2 if requantised(ctx.attrs) else 1, None)]
    float_ctx = InferContext(ctx.node, "Conv", ctx.attrs, [TensorDesc(1, x.shape), TensorDesc(1, w.shape),
                                                                 None if b is None else TensorDesc(1, b.shape)],
                             [None, None, None], ctx.opset, 1)
    return [TensorDesc(2 if requantised(ctx.attrs) else 1, d.shape) for d in conv_mod._infer_conv(float_ctx)]


OPS = [
    OpDef("QuantConv", _infer_quant_conv, _k_quant_conv, domain=DOMAIN, attrs=_ATTRS,
          doc="INT8 Conv of a QDQ pattern (GE QuantizedConvFusion); see pycann/ops/quant_conv.py"),
]
