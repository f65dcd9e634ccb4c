"""The choice of int8 kernel for ``pycann.QuantConv`` / ``pycann.QuantMatMul`` and the oneDNN form of
their output side.

The output side's semantics (residual ``Z``, ReLU / Clip, requantisation to uint8 with ``y_scale``,
``fast_quant``) and their numpy reference are ``pycann/ops/quant_epilogue.py``. Here: whether an
int8 kernel is exact on this machine (``usable``), the epilogue as oneDNN fuses it (``epilogue``),
and oneDNN's quantisation of a float input (``quantize_fast``). Kernels: oneDNN's int8 primitives
(``providers/onednn_int8``: epilogue and requantisation fused; agree with the QDQ reference within
1 LSB of the requantised output, where their rounding of a half-way value differs), else PyTorch's
oneDNN ops (``providers/torch_int8``, float output, epilogue in numpy), else the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from pycann.kernels.providers import onednn_int8, torch_int8


def usable(attrs: Mapping[str, Any]) -> bool:
    """An int8 kernel is available and exact for this layer: VNNI, 7-bit activations (``seven_bit``)
    or weights within [-64, 64] (``narrow_w``); see providers/torch_int8.py for why."""
    exact = bool(attrs.get("seven_bit", 0)) or bool(attrs.get("narrow_w", 0)) or torch_int8.cpu_has_vnni()
    return exact and (onednn_int8.available() or torch_int8.usable(True))


def epilogue(attrs: Mapping[str, Any], residual: bool) -> onednn_int8.Epilogue:
    """The oneDNN epilogue of a layer: ReLU and the requantisation's clamp as one float clamp
    (quantisation is monotonic, so clamping y to the float images of ``y_q_min`` / ``y_q_max``
    clamps the quantised values to them)."""
    lo = 0.0 if attrs.get("activation") == "Relu" else -np.inf
    hi = np.inf
    if attrs.get("activation") == "Clip":
        lo, hi = float(attrs.get("clip_min", -np.inf)), float(attrs.get("clip_max", np.inf))
    ys = float(attrs.get("y_scale", 0.0) or 0.0)
    zp = int(attrs.get("y_zero_point", 0))
    if ys > 0:
        q_lo, q_hi = max(0, int(attrs.get("y_q_min", 0))), min(255, int(attrs.get("y_q_max", 255)))
        if q_lo > 0:
            lo = max(lo, (q_lo - zp) * ys)
        if q_hi < 255:
            hi = (q_hi - zp) * ys
    return onednn_int8.Epilogue(residual, float(lo), float(hi), ys, zp if ys > 0 else 0)


def quantize_fast(x: np.ndarray, attrs: Mapping[str, Any], channels_last: bool) -> np.ndarray | None:
    """uint8 QuantizeLinear of float32 ``x`` on the layer's ``x_scale`` / ``x_zero_point`` (and the
    absorbed Clip's ``q_min`` / ``q_max``) by one oneDNN reorder, laid out channels-last when asked:
    within 1 LSB of QuantizeLinear (oneDNN may multiply by the reciprocal of the scale), so only
    where the layer allows it (``fast_quant``: GE sets it under ``high_performance``). None
    otherwise, or when oneDNN is not available or the activation is not a float32 to uint8."""
    if not int(attrs.get("fast_quant", 0)) or not int(attrs.get("x_unsigned", 1)) or x.dtype != np.float32:
        return None
    if not onednn_int8.available():
        return None
    q = onednn_int8.quantize(x, float(attrs["x_scale"]), int(attrs["x_zero_point"]), channels_last)
    q_min, q_max = int(attrs.get("q_min", -1000)), int(attrs.get("q_max", 1000))
    if q_max < 255:
        np.minimum(q, np.uint8(q_max), out=q)
    if q_min > 0:
        np.maximum(q, np.uint8(q_min), out=q)
    return q
