"""QuantConv / QuantMatMul on the kernel providers: ``ops/quant_conv.py`` and ``ops/quant_matmul.py``
(semantics, numpy reference, epilogue in ``ops/quant_epilogue.py``) handed the int8 kernels where
they are exact (oneDNN's int8 primitives through its C API, ``providers/onednn_int8.py``, else
PyTorch's, ``providers/torch_int8.py``) and the providers' float Conv for the reference path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.kernels import algorithm
from pycann.kernels import conv as kconv
from pycann.kernels.providers import onednn_int8, torch_int8
from pycann.kernels.providers.onednn_capi_table import DnnlError
from pycann.kernels.quant_kernels import epilogue, quantize_fast, usable
from pycann.ops import quant_conv as ref_conv
from pycann.ops import quant_matmul as ref_matmul
from pycann.ops.quant_epilogue import finish


def exact_int8(attrs: Mapping[str, Any]) -> bool:
    """The int8 kernel is available and exact for this layer: VNNI, 7-bit activations or narrow weights."""
    return usable(attrs)


def int8_eligible(x_shape: Sequence[int], attrs: Mapping[str, Any]) -> bool:
    """The int8 kernel applies: uint8 activations, 2-D conv, explicit pads (symmetric unless oneDNN's
    int8 primitives are there), and exact here."""
    pads = list(attrs.get("pads") or [])
    if len(x_shape) != 4 or not int(attrs.get("x_unsigned", 1)) or str(attrs.get("auto_pad", "NOTSET")) != "NOTSET":
        return False
    if pads and pads[:2] != pads[2:] and not onednn_int8.available():  # torch's int8 conv pads symmetrically
        return False
    return exact_int8(attrs)


def _int8_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray | None:
    """QuantConv on oneDNN's int8 primitives (epilogue fused), else PyTorch's int8 conv (epilogue in
    numpy); None where neither applies or the node's recorded algorithm is numpy's."""
    x, w = inputs[0], inputs[1]
    if not int8_eligible(x.shape, attrs) or algorithm.is_numpy(attrs):
        return None
    b = inputs[2] if len(inputs) > 2 else None
    z = inputs[3] if len(inputs) > 3 else None
    pads = list(attrs.get("pads") or [0, 0, 0, 0])
    stride = list(attrs.get("strides") or [1, 1])
    dil = list(attrs.get("dilations") or [1, 1])
    group = int(attrs.get("group", 1))
    xs, xzp = float(attrs["x_scale"]), int(attrs["x_zero_point"])
    ws = ref_conv._w_scale(attrs, w.shape[0])
    if onednn_int8.available():
        xq = quantize_fast(x, attrs, channels_last=True)
        xq = ref_conv.quantized_input(x, attrs) if xq is None else xq
        geom = onednn_int8.ConvGeom(tuple(x.shape), tuple(stride), tuple(pads), tuple(dil), group)
        try:
            return onednn_int8.qconv(xq, xs, xzp, w, ws, b, geom, epilogue(attrs, z is not None), z)
        except DnnlError:  # no fast oneDNN kernel for this geometry: the reference
            return ref_conv._reference(xq, inputs, attrs, kconv.conv_act)
    xq = ref_conv.quantized_input(x, attrs)
    y = torch_int8.qconv2d(xq, xs, xzp, w, ws, b, stride, pads[:2], dil, group, False)
    return finish(y, attrs, z)


def _int8_matmul(x: np.ndarray, s: float, zp: int, w: np.ndarray, ws: np.ndarray, b: np.ndarray | None,
                 z: np.ndarray | None, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """QuantMatMul of uint8 activations on oneDNN's int8 matmul (epilogue fused), else PyTorch's
    ``qlinear`` (epilogue in numpy); None where no exact int8 kernel is there."""
    if not exact_int8(attrs):
        return None
    if onednn_int8.available():
        xq = quantize_fast(x, attrs, channels_last=False)
        xq = ref_matmul.quantized_input(x, attrs) if xq is None else xq
        try:
            return onednn_int8.qmatmul(xq, s, zp, w, ws, b, epilogue(attrs, z is not None), z)
        except DnnlError:  # no fast oneDNN kernel: the reference
            return ref_matmul._reference(xq, s, zp, w, ws, b, z, attrs)
    xq = ref_matmul.quantized_input(x, attrs)
    return finish(torch_int8.qlinear(xq, s, zp, w, ws, b, False), attrs, z)


def k_quant_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QuantConv on the providers."""
    return ref_conv._k_quant_conv(inputs, attrs, kconv.conv_act, _int8_conv)


def k_quant_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """QuantMatMul on the providers."""
    return ref_matmul._k_quant_matmul(inputs, attrs, _int8_matmul)
