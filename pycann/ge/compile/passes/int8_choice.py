"""Which fused QDQ layers run on the int8 kernels and which stay fp32 (issue 22: INT8 is never
slower than fp32). Used by ``QuantizedConvFusion``; a rule, not a timing, so compiles are
reproducible. A layer stays fp32 when

* the int8 kernel is not exact on this CPU (no VNNI, activations not proven <= 127, weights beyond
  +-64): the reference path (dequantise, float conv, plus the quantisation) is slower than fp32;
* it is a depthwise conv: memory-bound, the int8 kernel plus the activation's quantisation took
  1.08-1.11x the fp32 conv's CPU time (MobileNet-V2 shapes, AVX2, bench/RESULTS.md);
* it does fewer than ``MIN_MACS_PER_ELEMENT`` multiply-adds per activation element it reads and
  writes: the quantisation pass costs more than int8 saves (1x1 conv 32->16 at 112x112, 10.7 MACs
  per element: 1.26x; dense 3x3 and 1x1 convs at >= 51: 0.58-0.87x);
* its input size is not static (a conv on a dynamic image size; a MatMul with a dynamic row count
  and fewer than ``MIN_ROW_MACS`` (256 K) multiply-adds per row): the gain is unproven, and PP-OCR
  rec's small layers took 1.38x fp32's time on int8 (bench/RESULTS.md);
* it is a MatMul with K < ``MIN_MATMUL_K`` (256): PP-OCRv4 rec with only its 120 x 6625 head
  int8 took 1.16x fp32's time;
* it does fewer than ``MIN_MACS`` (16 M) multiply-adds per batch item: its fixed costs (the
  quantisation call, oneDNN's dispatch, the output) are not paid back (MobileNet-V2's 1x1 convs of
  4.8-10.8 M MACs: 0.95-1.31x; 20 M: 0.74x; ResNet-50's 3x3 64->64 at 56x56, 116 M: 0.61x).

"fp32" means the float op on the dequantised weights, reading the activation *before* its
QuantizeLinear (and before a Clip that only bounds the quantisation, AMCT's ``reduce_range``): the
values are those of the float layer with quantised weights, not the QDQ graph's (activation
rounding and range clamp dropped). It applies under ``--op_select_implmode=high_performance``
(the default) for the op types it allows (``--optypelist_for_implmode`` with ``QuantConv`` /
``QuantMatMul``); ``high_precision`` keeps every fused layer on the QDQ arithmetic (the int8 kernel
where exact, else the reference kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pycann.dtypes import TensorDesc
from pycann.ge.ir import Node
from pycann.kernels.quant import exact_int8

MIN_MACS_PER_ELEMENT = 32.0
MIN_MACS = 16e6
MIN_ROW_MACS = float(1 << 18)
MIN_MATMUL_K = 256


@dataclass(frozen=True)
class Int8Choice:
    """The decision for one fused layer: ``int8`` True to keep the QuantConv / QuantMatMul."""

    int8: bool
    reason: str


def _static(desc: TensorDesc | None) -> tuple[int, ...] | None:
    """The shape with a symbolic batch (dim 0) read as 1 (the ratios do not depend on it); None
    when another dim is not static."""
    if desc is None or desc.shape is None or not desc.shape:
        return None
    dims = [1 if i == 0 and not isinstance(d, int) else d for i, d in enumerate(desc.shape)]
    return tuple(d for d in dims if isinstance(d, int)) if all(isinstance(d, int) for d in dims) else None


def macs_per_element(node: Node, w_shape: tuple[int, ...]) -> float:
    """Multiply-adds per activation element read or written (spatial sizes cancel, 'same'-like pads):
    Conv (M, C/g, kh, kw) with strides s: ``M * C/g * kh * kw / (C * prod(s) + M)``; MatMul (N, K):
    ``K * N / (K + N)``."""
    if node.op_type == "QuantMatMul":
        k, n = w_shape[1], w_shape[0]
        return k * n / (k + n)
    m, c = w_shape[0], w_shape[1] * int(node.attrs.get("group", 1))
    stride = float(np.prod(list(node.attrs.get("strides") or [1])))
    return m * float(np.prod(w_shape[1:])) / (c * stride + m)


def layer_macs(node: Node, x_shape: tuple[int, ...] | None, w_shape: tuple[int, ...]) -> float | None:
    """Multiply-adds per batch item (Conv: output positions x weight size; MatMul: rows x K x N, the
    rows of a 2-D input all counted),
    None when the input shape is not static."""
    if x_shape is None:
        return None
    if node.op_type == "QuantMatMul":
        rows = float(np.prod(x_shape[1:-1])) if len(x_shape) > 2 else float(x_shape[0])
        return rows * w_shape[0] * w_shape[1]
    strides = list(node.attrs.get("strides") or [1] * (len(x_shape) - 2))
    spatial_out = float(np.prod([-(-d // s) for d, s in zip(x_shape[2:], strides)]))
    return w_shape[0] * float(np.prod(w_shape[1:])) * spatial_out


def choose(node: Node, x_desc: TensorDesc | None, w_shape: tuple[int, ...]) -> Int8Choice:
    """Int8 or fp32 for a fused ``QuantConv`` / ``QuantMatMul`` (attrs as the fusion wrote them)."""
    if not exact_int8(node.attrs):
        return Int8Choice(False, "the int8 kernel is not exact on this CPU (no VNNI; activations not proven "
                                 "<= 127, weights beyond +-64), and its reference path is slower than fp32")
    group = int(node.attrs.get("group", 1))
    x_shape = _static(x_desc)
    if node.op_type == "QuantConv" and group > 1 and len(w_shape) > 1 and w_shape[1] == 1:
        return Int8Choice(False, "depthwise conv: memory-bound, int8 + quantisation measured 1.08-1.11x fp32's time")
    intensity = macs_per_element(node, w_shape)
    macs = layer_macs(node, x_shape, w_shape)
    if macs is None and node.op_type == "QuantConv":
        return Int8Choice(False, "input size not static: the int8 gain is unproven (small layers are slower)")
    if node.op_type == "QuantMatMul" and w_shape[1] < MIN_MATMUL_K:
        return Int8Choice(False, f"K = {w_shape[1]} < {MIN_MATMUL_K}: too short a reduction for int8 to pay back "
                                 "the quantisation")
    row = float(np.prod(w_shape))
    if macs is None and row < MIN_ROW_MACS:
        return Int8Choice(False, f"{row / 1e3:.0f} K multiply-adds per row < {MIN_ROW_MACS / 1e3:.0f} K and the row "
                                 "count not static: the int8 gain is unproven")
    if macs is not None and macs < MIN_MACS:
        return Int8Choice(False, f"{macs / 1e6:.1f} M multiply-adds < {MIN_MACS / 1e6:g} M: too small to pay back "
                                 "the quantisation and dispatch")
    if intensity < MIN_MACS_PER_ELEMENT:
        return Int8Choice(False, f"{intensity:.1f} multiply-adds per activation element < {MIN_MACS_PER_ELEMENT:g}: "
                                 "memory-bound, quantising costs more than int8 saves")
    return Int8Choice(True, f"int8 ({intensity:.0f} multiply-adds per activation element)")
