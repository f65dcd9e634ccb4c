"""The fused ops of ``pycann.ops.fused`` / ``fused_deconv`` computed by the kernel providers: the
same kernels (one copy of the fused semantics) given the providers' products (``PROVIDED``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import bfloat16, is_bfloat16
from pycann.kernels import algorithm
from pycann.kernels import conv as kconv
from pycann.kernels import gemm as kgemm
from pycann.kernels.algorithm import ONEDNN_MATMUL_BF16_PACKED
from pycann.kernels.bf16_conv import Bf16Conv, out_bound, recorded
from pycann.kernels.providers import (
    GemmSpec,
    nan_guard,
    onednn_bf16,
    onednn_bf16_deconv,
    onednn_cast,
    onednn_softmax,
    resolve,
)
from pycann.kernels.providers import available as provider_available
from pycann.kernels.providers.onednn_eltwise import onednn_unary
from pycann.ops import fused as ref
from pycann.ops import fused_deconv as ref_deconv
from pycann.ops.nn.conv import check_conv_transpose

DECODE_ROWS = 4  # FusedAttention products with at most this many query rows go straight to numpy


def _onednn_softmax_(s: np.ndarray) -> bool:
    """Softmax over the last axis in place by oneDNN when the ``onednn`` provider is there
    (and allowed by ``PYCANN_PROVIDERS``); False when the caller must compute it.

    A decode step's scores (at most ``DECODE_ROWS`` query rows) stay in numpy, as its products do:
    their key length is new on every step, and oneDNN's primitive is made per shape, so from
    ``MIN_ELEMENTS`` scores on (batch 4 x 32 heads at 128 keys) every step made one (1-4 ms) and
    every made one stayed in oneDNN's primitive cache (~35 KB each: a 6-layer decoder's RSS grew
    10 MB over 300 steps)."""
    if s.ndim >= 2 and s.shape[-2] <= DECODE_ROWS:
        return False
    if not provider_available("onednn"):
        return False
    return onednn_softmax.softmax_last_axis_(s)


def _provider_matmul(a: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The static table's float32 MatMul for these operands (``onednn:matmul`` when libdnnl is
    there: in a plan running oneDNN kernels, numpy's OpenBLAS is held to one thread), as a
    two-argument function."""
    if a.ndim >= 2 and a.shape[-2] <= DECODE_ROWS:
        # a decode step's query rows: its key length is new on every step, so a per-shape oneDNN
        # primitive (or even the per-shape lookup, ~5-12 us a miss) would be paid on every call
        return np.matmul
    algo = resolve(None, lambda: GemmSpec("MatMul", tuple(a.shape), tuple(b.shape), "float32"))
    return lambda x, y: algo.fn(x, y, None)


def _bf16_conv_fused(inputs: Sequence[Any], attrs: Mapping[str, Any], relu: bool,
                     out: np.ndarray | None = None) -> np.ndarray | None:
    """bf16 Conv + residual + activation in oneDNN (staying bf16 between layers; written into
    ``out`` when it is a bf16 array of the output's shape), unless the node's recorded algorithm
    is numpy's (``bf16_conv.Bf16Conv``, made per call here; the static binder makes one per node).
    None: not handled (the caller computes in float32)."""
    if algorithm.is_numpy(attrs):
        return None
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    z = inputs[3] if len(inputs) > 3 else None
    return Bf16Conv(x.shape, w.shape, attrs, relu).run(x, w, b, z, out)


def _bf16_matmul_fused(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray | None:
    """FusedMatMul ``act(A @ B + bias + residual)`` of bf16 A and B in one oneDNN bf16 matmul
    (bias, residual and activation as post-ops on the float32 accumulator, bf16 result; B packed
    once when KernelSelection recorded it constant), written into ``out`` when it fits. None: not
    handled (the caller's path: product here or in torch, epilogue in float32)."""
    if algorithm.is_numpy(attrs) or not onednn_bf16.native():
        return None
    name, alpha, beta = ref._act(attrs)
    unary = onednn_unary(name, alpha, beta) if name else None
    if (name and unary is None) or nan_guard.drops_nan(unary):  # a NaN-dropping activation: numpy's epilogue
        return None
    packed = algorithm.of(attrs) == ONEDNN_MATMUL_BF16_PACKED
    return onednn_bf16.matmul(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None,
                              inputs[3] if len(inputs) > 3 else None, unary, bfloat16(), packed, out)


def _bf16_operand(s: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 for a value only a native bf16 product reads (FusedAttention's P): oneDNN's
    multi-threaded reorder, subnormals to zero as the product reads them (else numpy's exact cast)."""
    if onednn_bf16.native():
        return onednn_cast.to_bf16_flushing(s)
    return s.astype(bfloat16())


def _bf16_matmul_bf16(a: np.ndarray, b: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """bf16 ``a @ b`` rounded to bfloat16 by oneDNN's native kernel (as every native bf16 product's
    result is), None where it does not run (the caller rounds the float32 product)."""
    if algorithm.is_numpy(attrs):
        return None
    return onednn_bf16.matmul(a, b, out_dtype=bfloat16())


PROVIDED = ref.FusedCompute(
    bf16_operand=_bf16_operand,
    bf16_matmul_bf16=_bf16_matmul_bf16,
    bf16_matmul_fused=_bf16_matmul_fused,
    conv_act=kconv.conv_act,
    float_matmul=kgemm.float_matmul,
    bf16_matmul=kgemm.bf16_matmul,
    bf16_conv_fused=_bf16_conv_fused,
    attention_matmul=_provider_matmul,
    softmax_last_axis_=_onednn_softmax_,
    softmax_min_elements=onednn_softmax.MIN_ELEMENTS,
    # a decode step's bf16 products: oneDNN made (and kept, up to 512) two native kernels a step, one
    # per new key length: RSS +79 MB over 200 steps of a tiny decoder
    attention_bf16_min_rows=DECODE_ROWS + 1,
)


def k_fused_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """FusedConv on the providers."""
    return ref._k_fused_conv(inputs, attrs, PROVIDED)


def out_fused_conv(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """FusedConv into the arena on the providers."""
    ref._out_fused_conv(inputs, attrs, outs, PROVIDED)


def k_fused_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """FusedMatMul on the providers."""
    return ref._k_fused_matmul(inputs, attrs, PROVIDED)


def out_fused_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """FusedMatMul into the arena on the providers."""
    ref._out_fused_matmul(inputs, attrs, outs, PROVIDED)


def k_attention(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """FusedAttention on the providers."""
    return ref._k_attention(inputs, attrs, PROVIDED)


def k_fused_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """FusedConvTranspose on the providers (oneDNN takes the activation as a post-op); bf16 operands
    of a patch geometry in oneDNN's native bf16 matmul (``onednn_bf16_deconv``), else widened."""
    x = inputs[0]
    if is_bfloat16(x.dtype) and len(inputs) > 1 and is_bfloat16(inputs[1].dtype) and not algorithm.is_numpy(attrs):
        y = _bf16_conv_transpose(inputs, attrs)
        if y is not None:
            return [y]
    return ref_deconv._k_fused_conv_transpose(inputs, attrs, kconv.conv_transpose_act)


def _bf16_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> np.ndarray | None:
    """FusedConvTranspose of bf16 X and W whose kernel equals its stride, in oneDNN's bf16 matmul with
    the activation as a post-op (float32 sum, one rounding); None: not handled (the caller widens).
    A NaN-dropping activation runs fused only when the NaN guard proves the sum finite (as the bf16
    convs: ``_bf16_conv_fused``), whose bound of the result is then recorded for the next reader."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    try:
        win, outs = check_conv_transpose(x, w, b, group, attrs)
    except (ValueError, TypeError):
        return None  # the widened path raises the spec's error, naming the node
    name, alpha, beta = ref._act(attrs)
    unary = onednn_unary(name, alpha, beta) if name else None
    if name and unary is None:
        return None
    bound = 0.0
    # an odd channel count: oneDNN's bf16 matmul multiplies the last channel of a pixel by a padding
    # zero too, so an inf there gives NaN where the spec's sum is inf (the guard proves x finite first)
    finite_only = nan_guard.drops_nan(unary) or x.shape[1] % 2 == 1
    if finite_only or recorded(x, None):
        bound = nan_guard.pre_bound(x, nan_guard.weight_bound(w, b, transpose=True))
        if finite_only and not bound < nan_guard._F32_SAFE:
            return None
    y = onednn_bf16_deconv.conv_transpose_patches(x, w, b, group, win, outs, unary)
    if y is not None:
        ok = 0.0 < bound < nan_guard._F32_SAFE
        nan_guard.record(y, out_bound(name, bound) if ok else None)
    return y
