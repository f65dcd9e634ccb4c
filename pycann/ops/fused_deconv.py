"""``pycann.FusedConvTranspose`` = ConvTranspose (with its bias) -> activation, made by GE's
ConvActivationFusion (ge/compile/passes/fuse_conv_act.py).

Semantics: ONNX ConvTranspose-11/22 (``ops/nn/conv.py``), then the activation named by the
``activation`` attribute with ``act_alpha`` / ``act_beta`` exactly as ``FusedConv`` applies it
(``fused.apply_activation``: Relu, Clip, Sigmoid, HardSigmoid, HardSwish, LeakyRelu, Tanh, Swish).

Why a fused node: on the CPU device the deconvolution of a detector's FPN head writes a large map
(PP-OCRv4 det: 24x320x320 and 1x640x640) that a separate Relu or Sigmoid reads and writes again,
single-threaded in numpy (0.6-0.8 ms each). With ``onednn:conv_transpose_nhwc`` the activation is
a oneDNN eltwise post-op of the deconvolution instead; every other provider computes the
ConvTranspose, then the activation in place on its result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ops import fused
from pycann.ops.nn import conv as conv_mod
from pycann.ops.opdef import InferContext, OpDef

DOMAIN = fused.DOMAIN


def _reference_act(inputs: Sequence[Any], attrs: Mapping[str, Any],
                   act: tuple[str, float, float] | None) -> tuple[np.ndarray, bool]:
    """ConvTranspose by numpy; the activation is left to the caller (False)."""
    return conv_mod._conv_transpose(inputs, attrs), False


# ``(inputs, attrs, act) -> (Y, act applied)``: ``pycann.kernels.conv.conv_transpose_act``'s contract
ConvTransposeAct = Callable[[Sequence[Any], Mapping[str, Any], "tuple[str, float, float] | None"],
                            tuple[np.ndarray, bool]]


def _k_fused_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any],
                            conv_transpose_act: ConvTransposeAct = _reference_act) -> list[np.ndarray]:
    """act(ConvTranspose(X, W[, B])); X, W float (narrow floats computed in float32 and cast back).
    ``conv_transpose_act`` computes the ConvTranspose (numpy here, the providers' in
    ``pycann.kernels.fused``). Raises ValueError (via the ConvTranspose kernel) on shapes the spec rejects."""
    name, alpha, beta = fused._act(attrs)
    x = inputs[0]
    if fused._narrow(x.dtype):  # float16 / bfloat16 storage: float32 compute, rounded back
        # (bfloat16, an ml_dtypes type, has kind "V": a test of kind "f" let it return float32
        # where the graph, and the next node, expect bfloat16)
        wide = [None if a is None else a.astype(np.float32) for a in inputs[:3]]
        return [_k_fused_conv_transpose(wide, attrs, conv_transpose_act)[0].astype(x.dtype)]
    y, done = conv_transpose_act(inputs[:3], attrs, (name, alpha, beta) if name else None)
    if not done and name:
        if not y.flags.writeable:
            y = y.copy()
        fused.apply_activation(y, name, alpha, beta)
    return [y]


def _infer_fused_conv_transpose(ctx: InferContext) -> list[TensorDesc]:
    sub = InferContext(ctx.node, "ConvTranspose", ctx.attrs, list(ctx.inputs[:3]), list(ctx.values[:3]), 11, 1)
    return list(conv_mod._infer_conv_transpose(sub))


_ATTRS = {"auto_pad": "NOTSET", "dilations": [], "group": 1, "kernel_shape": [], "pads": [], "strides": [],
          "output_padding": [], "output_shape": [], "activation": "", "act_alpha": 0.0, "act_beta": 0.0}

OPS: list[OpDef] = [
    OpDef("FusedConvTranspose", _infer_fused_conv_transpose, _k_fused_conv_transpose, domain=DOMAIN,
          attrs=_ATTRS),
]
