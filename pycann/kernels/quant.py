"""QuantConv / QuantMatMul on the kernel providers: ``ops/quant_conv.py`` and ``ops/quant_matmul.py``
(semantics, reference) given the int8 kernels of ``providers/torch_int8.py`` where they are exact
and the providers' float Conv for the reference path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.kernels import algorithm
from pycann.kernels import conv as kconv
from pycann.kernels.providers import torch_int8
from pycann.ops import quant_conv as ref_conv
from pycann.ops import quant_matmul as ref_matmul


def exact_int8(attrs: Mapping[str, Any]) -> bool:
    """The int8 kernel is available and exact for this layer: VNNI, 7-bit activations or narrow weights."""
    return torch_int8.usable(bool(attrs.get("seven_bit", 0)) or bool(attrs.get("narrow_w", 0)))


def int8_eligible(x_shape: Sequence[int], attrs: Mapping[str, Any]) -> bool:
    """The int8 kernel applies: uint8 activations, 2-D conv, explicit symmetric pads, and exact here."""
    pads = list(attrs.get("pads") or [])
    if len(x_shape) != 4 or not int(attrs.get("x_unsigned", 1)) or str(attrs.get("auto_pad", "NOTSET")) != "NOTSET":
        return False
    if pads and pads[:2] != pads[2:]:
        return False
    return exact_int8(attrs)


def _int8_conv(xq: np.ndarray, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray | None:
    x, w = inputs[0], inputs[1]
    if not int8_eligible(x.shape, attrs) or algorithm.is_numpy(attrs):
        return None
    pads = list(attrs.get("pads") or [0, 0, 0, 0])[:2]
    stride = list(attrs.get("strides") or [1, 1])
    dil = list(attrs.get("dilations") or [1, 1])
    b = inputs[2] if len(inputs) > 2 else None
    return torch_int8.qconv2d(xq, float(attrs["x_scale"]), int(attrs["x_zero_point"]), w,  # type: ignore[no-any-return]
                              ref_conv._w_scale(attrs, w.shape[0]), b, stride, pads, dil, int(attrs.get("group", 1)),
                              attrs.get("activation") == "Relu")


def _int8_matmul(xq: np.ndarray, s: float, zp: int, w: np.ndarray, ws: np.ndarray, b: np.ndarray | None,
                 relu: bool, attrs: Mapping[str, Any]) -> np.ndarray | None:
    if not exact_int8(attrs):
        return None
    return torch_int8.qlinear(xq, s, zp, w, ws, b, relu)  # type: ignore[no-any-return]


def k_quant_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QuantConv on the providers."""
    return ref_conv._k_quant_conv(inputs, attrs, kconv.conv_act, _int8_conv)


def k_quant_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QuantMatMul on the providers."""
    return ref_matmul._k_quant_matmul(inputs, attrs, _int8_matmul)
