"""The output side of ``pycann.QuantConv`` / ``pycann.QuantMatMul``: attributes and numpy reference.

A fused int8 layer may carry, besides the conv / matmul and its ReLU:

* ``Z`` (4th input): a float32 tensor of the output's shape added before the activation (a
  residual ``Add`` absorbed by QuantizedConvFusion: ``act(conv(x) + Z)``);
* ``fast_quant`` 1: a float input may be quantised by oneDNN (within 1 LSB of QuantizeLinear, see
  ``pycann.kernels.quant_kernels.quantize_fast``) rather than by the exact numpy pass;
* ``activation`` "Clip" with ``clip_min`` / ``clip_max``: a ReLU6-like Clip after the conv (fused by
  QuantizedConvFusion where no QuantizeLinear reads it);
* ``y_scale`` > 0 (with ``y_zero_point``, ``y_q_min``, ``y_q_max``): the output is requantised to
  uint8, ``clamp(saturate_u8(round_half_even(y / y_scale) + y_zero_point), y_q_min, y_q_max)``:
  the QuantizeLinear of the int8 layers that read it, moved into this one (``chain_requant`` in
  pycann/ge/compile/passes/fuse_qdq_chain.py), so int8 layers hand uint8 tensors to each other.

Semantics: those of the ONNX graph the fusion replaced (Add, Relu, QuantizeLinear and the Clip it
absorbed); ``finish`` computes them in numpy on the float conv / matmul result. The int8 kernels
that fuse this epilogue (oneDNN's int8 primitives, PyTorch's) are in ``pycann.kernels.quant``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

EPILOGUE_ATTRS: dict[str, Any] = {"y_scale": 0.0, "y_zero_point": 0, "y_q_min": 0, "y_q_max": 255, "fast_quant": 0,
                                  "clip_min": -3.4e38, "clip_max": 3.4e38}


def requantised(attrs: Mapping[str, Any]) -> bool:
    """The layer writes uint8 (``y_scale`` > 0)."""
    return float(attrs.get("y_scale", 0.0) or 0.0) > 0.0


def finish(y: np.ndarray, attrs: Mapping[str, Any], residual: np.ndarray | None) -> np.ndarray:
    """Reference epilogue on a float32 conv / matmul result *without* its activation: + residual,
    ReLU or Clip, then the requantisation (module doc). Returns float32, or uint8 when requantised."""
    if residual is not None:
        y = y + residual
    if attrs.get("activation") == "Relu":
        y = np.maximum(y, np.float32(0))
    elif attrs.get("activation") == "Clip":
        y = np.clip(y, np.float32(attrs.get("clip_min", -np.inf)), np.float32(attrs.get("clip_max", np.inf)))
    if not requantised(attrs):
        return y
    from pycann.ops.quant_conv import quantize_activation  # quant_conv imports this module

    return quantize_activation(y, float(attrs["y_scale"]), int(attrs.get("y_zero_point", 0)), True,
                               int(attrs.get("y_q_min", 0)), int(attrs.get("y_q_max", 255)))
