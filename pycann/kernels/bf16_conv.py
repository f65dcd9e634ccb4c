"""bf16 Conv + residual + activation (FusedConv in the bf16 precision modes) on the native kernels.

What a node fixes (``Bf16Conv``: the window, the group, the post-op chain, whether the activation
drops NaN, and for a constant W and B the NaN guard's weight bound) is worked out once; a call
(``Bf16Conv.run``) checks the operands with the NaN guard and runs ``onednn_bf16.conv``. The
generic kernel (``kernels/fused.py`` ``_bf16_conv_fused``) makes a ``Bf16Conv`` per call; the
static binder (``bind``) one per node, which spared ResNet-50's bf16 run ~40-60 us of setup per
conv (window arithmetic, activation lookup, the weight bound's cache key).

Semantics are those of ``ops/fused.py``'s FusedConv (ONNX Conv + residual + activation), with the
bf16 path's numbers (float32 accumulation, one rounding to bfloat16; docs/precision.md). A NaN-
dropping activation runs fused only where the NaN guard proves the sum finite; otherwise the conv
runs alone and a ReLU that keeps NaN follows, or the caller's float32 path computes the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, is_bfloat16
from pycann.kernels import algorithm
from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import nan_guard, onednn_bf16
from pycann.kernels.providers.onednn_eltwise import RELU, E, onednn_unary
from pycann.kernels.providers.torch_onednn import bf16_conv_fused as _torch_bf16_conv_fused
from pycann.ops import fused as ref
from pycann.ops.nn.conv import conv_window

__all__ = ["Bf16Conv", "bind", "out_bound", "recorded"]

_BF16_CODE = int(DType.BFLOAT16)


def recorded(x: np.ndarray, z: np.ndarray | None) -> bool:
    """Both the input and the residual (when given) have a bound on record (no read needed)."""
    return nan_guard.proven(x) is not None and (z is None or nan_guard.proven(z) is not None)


def out_bound(act: str, bound: float) -> float | None:
    """A bound of |act(v)| for |v| <= ``bound``, times 1.01 (the bf16 rounding may round up), or None.
    No activation, ReLU and HardSwish keep |act(v)| <= |v| (HardSwish: v * clip((v + 3) / 6, 0, 1),
    a factor in [0, 1]); HardSigmoid, Sigmoid and Tanh stay within 1. Recorded, the bound spares the
    next guarded conv a read of this output (a bf16 read widens every value: PP-OCRv4 det's
    HardSwish convs made 37 such reads a run)."""
    if act in ("", "Relu", "HardSwish"):
        return bound * 1.01
    if act in ("HardSigmoid", "Sigmoid", "Tanh"):
        return 1.01
    return None


class Bf16Conv:
    """A FusedConv node's fixed part on the bf16 path (see the module docstring)."""

    __slots__ = ("aff", "drops", "group", "name", "native_ok", "post", "relu", "win")

    def __init__(self, x_shape: Sequence[int], w_shape: Sequence[int], attrs: Mapping[str, Any], relu: bool) -> None:
        self.win = conv_window(x_shape, w_shape, attrs)
        self.group = int(attrs.get("group", 1))
        name, alpha, beta = ref._act(attrs)
        self.name, self.relu = name, relu
        self.aff = ref.post_affine(attrs)
        unary = RELU if relu else onednn_unary(name, alpha, beta) if name else None
        post = (*(() if unary is None else (unary,)), *(() if self.aff is None else ((E["linear"], *self.aff),)))
        self.post = post or None
        self.native_ok = unary is not None or not name
        self.drops = nan_guard.drops_nan(unary)

    def run(self, x: np.ndarray, w: np.ndarray, b: np.ndarray | None, z: np.ndarray | None,
            out: np.ndarray | None, w_bound: float | None = None) -> np.ndarray | None:
        """The node's result (written into ``out`` when it is a bf16 array of the output's shape), or
        None when the caller must compute it in float32. ``w_bound``: ``nan_guard.weight_bound(w, b)``
        when known (else computed here if the guard needs it)."""
        if onednn_bf16.native() and self.native_ok:
            # a fused NaN-dropping activation must not hide a NaN/inf: then the unfused float32 path.
            # The bound of the result is recorded, so the next conv's check needs no read of its input.
            # An activation that keeps NaN needs no check: its input is read for no bound then (a bf16
            # read widens every value; PP-OCRv4 det's HardSwish convs made 37 such reads a run), and
            # only one on record is passed on.
            if self.drops or recorded(x, z):
                wb = w_bound if w_bound is not None else nan_guard.weight_bound(w, b)
                bound = nan_guard.pre_bound(x, wb, z)
            else:
                bound = 0.0  # (nothing recorded below)
            if bound < nan_guard._F32_SAFE or not self.drops:
                # (a bound above 0 was measured or recorded: x and z hold finite values only)
                y = onednn_bf16.conv(x, w, b, self.group, self.win, z, self.post, out,
                                     finite=0.0 < bound < nan_guard._F32_SAFE)
                if y is not None:
                    # only a bound below _F32_SAFE proves the conv finite: a NaN-keeping activation
                    # runs above it too (a recorded input times large weights, an inf bias), and
                    # Tanh/Sigmoid's 1.01 would then be recorded for NaN values (a later guarded
                    # ReLU conv trusting it dropped them)
                    ok = self.aff is None and 0.0 < bound < nan_guard._F32_SAFE
                    nan_guard.record(y, out_bound(self.name, bound) if ok else None)
                    return y
            elif (self.relu or self.name == "Relu") and self.aff is None:
                # the input may hold NaN/inf: the conv alone, then a ReLU that keeps NaN (torch's bf16
                # conv, the fallback below, spreads a NaN/inf beyond its window on AMX CPUs)
                y = onednn_bf16.conv(x, w, b, self.group, self.win, z, None, out)
                if y is not None:
                    nan_guard.record(y, None)
                    return onednn_bf16.relu_keeping_nan(y)
        if self.name not in ("", "Relu") or self.aff is not None:
            return None
        return _torch_bf16_conv_fused(x, w, b, self.group, self.win, z, self.relu)  # type: ignore[no-any-return]


def bind(attrs: Mapping[str, Any], ins: Sequence[Any], consts: Sequence[np.ndarray | None],
         outs: Sequence[Any]) -> BoundKernel | None:
    """The static binder of a FusedConv whose X is bfloat16 of a static shape and whose W (and B,
    when given) is a constant bfloat16 (float) array: ``Bf16Conv`` made once, the weight bound
    once; a call whose operands differ (another shape or dtype, other W or B objects) runs the
    generic kernel. None where the native bf16 kernels are not here or the node's recorded
    algorithm is numpy's."""
    from pycann.kernels import fused as kfused

    x, w = ins[0] if ins else None, consts[1] if len(consts) > 1 else None
    b = consts[2] if len(consts) > 2 else None
    if x is None or x.dtype != _BF16_CODE or x.shape is None or not all(isinstance(d, int) for d in x.shape) \
            or w is None or not is_bfloat16(w.dtype) or algorithm.is_numpy(attrs) or not onednn_bf16.native():
        return None
    if len(ins) > 2 and ins[2] is not None and b is None:
        return None  # a computed bias: the generic kernel
    xs = tuple(int(d) for d in x.shape)
    setup = Bf16Conv(xs, w.shape, attrs, attrs.get("activation", "") == "Relu")
    w_bound = nan_guard.weight_bound(w, b)

    def kernel(inputs: Sequence[Any], a: Mapping[str, Any], out: Any = None) -> list[np.ndarray]:
        o = out[0] if out is not None else None
        xi = inputs[0]
        bi = inputs[2] if len(inputs) > 2 else None
        if xi.__class__ is np.ndarray and xi.shape == xs and is_bfloat16(xi.dtype) and inputs[1] is w \
                and bi is b and (o is None or (is_bfloat16(o.dtype) and o.shape[1] == w.shape[0])):
            y = setup.run(xi, w, b, inputs[3] if len(inputs) > 3 else None, o, w_bound)
            if y is not None:
                if o is not None and not np.may_share_memory(y, o):
                    o[...] = y
                    return [o]
                return [y]
        if o is not None:
            ref._out_fused_conv(inputs, a, [o], kfused.PROVIDED)
            return [o]
        return kfused.k_fused_conv(inputs, a)

    # inplace: the output may be planned over the residual (input 3): onednn_bf16.conv then accumulates
    # into it with a "sum" post-op (ResNet-50: 16 fresh output arrays a run before)
    return BoundKernel(kernel, writes_out=True, inplace=True, keep=(w, b, setup), impl="onednn:bf16_conv")
