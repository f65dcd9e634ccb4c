"""Conv and ConvTranspose computed by the kernel providers (``pycann.kernels.providers``).

The node attribute ``_algo`` that GE's KernelSelection pass records names the algorithm; without
one, or when its provider is missing here, the static selection table decides. The op
definitions, geometry and numpy references are in ``pycann.ops.nn.conv``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import is_bfloat16
from pycann.kernels import algorithm
from pycann.kernels.algorithm import (
    NUMPY_IM2COL_GEMM,
    ONEDNN_CONV_NHWC,
    ONEDNN_CONV_TRANSPOSE_NHWC,
    ONEDNN_CONV_WINOGRAD,
    TORCH_CONV2D_NHWC,
    Algorithm,
    Packing,
)
from pycann.kernels.providers import ConvSpec, nan_guard, onednn_bf16, resolve, torch_onednn
from pycann.kernels.providers.onednn_eltwise import RELU
from pycann.kernels.providers.torch_onednn import bf16_conv
from pycann.ops.nn.conv import _bias_shape, _select, check_conv, check_conv_transpose
from pycann.ops.nn.spatial import compute_dtype


def conv(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None, *,
          residual: np.ndarray | None = None, relu: bool = False) -> np.ndarray:
    """Conv (spec: Conv-11/22); see ``conv_act``."""
    return conv_act(inputs, attrs, out, residual=residual, relu=relu)[0]


def conv_act(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None, *,
             residual: np.ndarray | None = None, relu: bool = False,
             act: tuple[str, float, float] | None = None,
             affine: tuple[float, float] | None = None) -> tuple[np.ndarray, bool]:
    """Conv (spec: Conv-11/22): Y = X (*) W + B with strides, dilations, pads and groups.

    The kernel is the provider algorithm recorded in ``attrs["_algo"]`` (else the static choice).
    The result lands in ``out`` when it has the compute dtype (float32/float64) and is
    C-contiguous; the returned array is then a view of it. ``residual`` (added after the bias)
    and ``relu`` are optional epilogues, applied by the provider when it can fuse them.
    ``act`` (name, alpha, beta of a FusedConv activation) and then ``affine`` (scale, shift)
    are applied too when the provider can run them as post-ops; the flag returned says whether
    they were (else the caller applies both).
    """
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    win = check_conv(x, w, b, group, attrs)
    # bf16 precision modes: oneDNN's bf16 kernels (fp32 accumulation), as the NPU computes
    if is_bfloat16(x.dtype) and is_bfloat16(w.dtype) and onednn_bf16.native() and _torch_ok(attrs):
        # a NaN/inf input (or overflow) would turn to 0 in the fused ReLU: then the conv alone and
        # the ReLU in numpy (torch's bf16 conv, the fallback, spreads a NaN/inf beyond its window on
        # AMX CPUs: docs/precision.md)
        fuse_relu = relu and nan_guard.safe(x, nan_guard.weight_bound(w, b), residual)
        y16n = onednn_bf16.conv(x, w, b, group, win, residual, RELU if fuse_relu else None,
                                out if out is not None and is_bfloat16(out.dtype) else None)
        if y16n is not None:  # bias, residual and relu applied in the primitive, result bf16
            return (onednn_bf16.relu_keeping_nan(y16n) if relu and not fuse_relu else y16n), False
    y16 = bf16_conv(x, w, b, group, win) if is_bfloat16(x.dtype) and is_bfloat16(w.dtype) and _torch_ok(attrs) else None
    cd = compute_dtype(x.dtype)
    bc = b.astype(cd, copy=False) if b is not None else None
    if y16 is not None:
        y = y16
    elif _select(x.shape, w.shape, group, win) == "empty":
        y = np.zeros((x.shape[0], w.shape[0]) + win.out, dtype=cd)
        if bc is not None and y.size:
            y += bc.reshape(_bias_shape(w.shape[0], len(win.out)))
    else:
        algo = resolve(algorithm.of(attrs),
                       lambda: ConvSpec("Conv", x.shape, w.shape, group, win, win.out, cd.name))
        xc, wc = x.astype(cd, copy=False), w.astype(cd, copy=False)
        if wc is not w and algo.algo.packing is not Packing.NONE:  # their caches are keyed by the weight array
            algo = resolve(NUMPY_IM2COL_GEMM, lambda: ConvSpec("Conv", x.shape, w.shape, group, win, win.out,
                                                               cd.name))
        post = _POST_OPS.get(algo.algo)
        if algo.provider in ("torch", "onednn") and (relu or (act is not None and nan_guard.drops_nan(act[0]))) \
                and not nan_guard.safe(xc, nan_guard.weight_bound(wc, bc), residual):
            # a NaN/inf (or overflow) would turn to 0 in the fused max(x, 0): activation in numpy
            y = algo.fn(xc, wc, bc, group, win, out, residual=residual) if residual is not None \
                else algo.fn(xc, wc, bc, group, win, out)
            if relu:
                np.maximum(y, 0, out=y)
            return y, False
        if act is not None and post is not None and (affine is None or algo.provider == "onednn"):
            mod = post()
            if mod.native(xc, wc, win):
                unary = mod.onednn_unary(*act)
                if unary is not None and affine is not None:
                    unary = (unary, (mod.E["linear"], affine[0], affine[1]))  # a chain of eltwise post-ops
                if unary is not None:
                    return algo.fn(xc, wc, bc, group, win, out, residual=residual, unary=unary), True
        if algo.provider in ("torch", "onednn") and (residual is not None or relu):
            return algo.fn(xc, wc, bc, group, win, out, residual=residual, relu=relu), False
        y = algo.fn(xc, wc, bc, group, win, out)
    if residual is not None:
        y += residual
    if relu:
        np.maximum(y, 0, out=y)
    return y, False




def _onednn_module() -> Any:
    from pycann.kernels.providers import onednn  # imported on first use: it loads libdnnl lazily too

    return onednn


# Algorithms that run an activation as a oneDNN post-op -> provider module (with
# ``native(x, w, win)`` and ``onednn_unary(act, alpha, beta)``).
_POST_OPS: dict[Algorithm, Any] = {TORCH_CONV2D_NHWC: lambda: torch_onednn, ONEDNN_CONV_NHWC: _onednn_module,
                                   ONEDNN_CONV_WINOGRAD: _onednn_module}


def _torch_ok(attrs: Mapping[str, Any]) -> bool:
    """bf16 convs go to torch unless the node's recorded algorithm is a numpy one."""
    return not algorithm.is_numpy(attrs)


def k_conv(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """Conv kernel: see ``_conv``; narrow floats are computed in float32 and cast back."""
    return [np.asarray(conv(inputs, attrs).astype(inputs[0].dtype, copy=False))]


def out_conv(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """Conv into a preallocated output: the GEMM writes straight into the arena when it can."""
    y = conv(inputs, attrs, outs[0])
    if not np.may_share_memory(y, outs[0]):
        outs[0][...] = y


def conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None) -> np.ndarray:
    """ConvTranspose (spec: ConvTranspose-11/22): the gradient of Conv w.r.t. its input.

    Computed by the provider algorithm recorded in ``attrs["_algo"]`` (else the static choice).
    """
    return conv_transpose_act(inputs, attrs, None, out)[0]


def conv_transpose_act(inputs: Sequence[Any], attrs: Mapping[str, Any], act: tuple[str, float, float] | None,
                       out: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """ConvTranspose (spec: ConvTranspose-11/22) whose provider also applies ``act`` (name, alpha,
    beta of a FusedConvTranspose activation) when it can: oneDNN's deconvolution takes it as an
    eltwise post-op. Returns (Y, whether ``act`` was applied); the caller applies it otherwise.
    Raises ValueError for shapes the spec rejects (channel mismatch, negative output size)."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    group = int(attrs.get("group", 1))
    win, outs = check_conv_transpose(x, w, b, group, attrs)
    cd = compute_dtype(x.dtype)
    algo = resolve(algorithm.of(attrs),
                   lambda: ConvSpec("ConvTranspose", x.shape, w.shape, group, win, outs, cd.name))
    bc = b.astype(cd, copy=False) if b is not None else None
    xc, wc = x.astype(cd, copy=False), w.astype(cd, copy=False)
    if act is not None and algo.algo == ONEDNN_CONV_TRANSPOSE_NHWC:
        mod = _onednn_module()
        unary = mod.onednn_unary(*act)
        # (any activation: a leaky ReLU post-op of some deconvolution kernels turns -inf into NaN;
        # PatchDeconv's dense form applies it in numpy, so the input need not be read for the guard)
        if unary is not None \
                and not mod.transpose_activation_in_numpy(xc, wc, group, win, outs, bc is not None, unary) \
                and not nan_guard.safe(xc, nan_guard.weight_bound(wc, bc, transpose=True)):
            unary = None  # NaN/inf in: the caller applies the activation in numpy, keeping NaN
        if unary is not None and mod.native(xc, wc, win):
            return mod.conv_transpose_nhwc(xc, wc, bc, group, win, outs, out, unary=unary), True
    return algo.fn(xc, wc, bc, group, win, outs, out), False


def k_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> list[np.ndarray]:
    """ConvTranspose kernel: see ``_conv_transpose``; narrow floats are cast back. The result
    keeps the provider's layout (channels-last from ``torch:conv_transpose_nhwc``)."""
    return [np.asarray(conv_transpose(inputs, attrs).astype(inputs[0].dtype, copy=False))]


def out_conv_transpose(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    """ConvTranspose into a preallocated output (torch writes straight into the arena)."""
    y = conv_transpose(inputs, attrs, outs[0])
    if not np.may_share_memory(y, outs[0]):
        outs[0][...] = y


