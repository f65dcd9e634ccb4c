"""Fused ops that GE's fusion passes create (domain ``pycann``). Each is numerically the
chain of standard ONNX ops it replaces; the gain is fewer temporaries, fewer passes over
memory and fewer per-node dispatches.

* ``FusedConv``  = [Add(residual)] + activation after Conv (with its bias)
* ``FusedMatMul`` = MatMul + [Add(bias)] + [Add(residual)] + activation
* ``FusedAttention`` = MatMul(Q, K^T) -> scale -> [Add(mask)] -> Softmax(-1) -> MatMul(., V)
* ``ElementwiseChain`` = a chain of elementwise ops evaluated in place in one buffer

float16/bfloat16 inputs are widened to float32: the matrix product, bias, residual and activation
run in float32 and the result is rounded once to the input dtype (the NPU cube accumulates in
float32 and its fixpipe applies these post-ops before the conversion); FusedAttention rounds the
softmax probabilities to the input dtype before the second product, as a float16 flash-attention
kernel feeds them to the cube.

Activations (attribute ``activation``): Relu, Clip(act_alpha=min, act_beta=max), Sigmoid,
HardSigmoid(alpha, beta), HardSwish, LeakyRelu(alpha), Swish (x*sigmoid(x)), Gelu (erf),
Tanh. Semantics per the ONNX spec section of each op.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pycann.dtypes import TensorDesc, bfloat16, is_bfloat16
from pycann.ops import erf_gelu
from pycann.ops.matmul import Bf16MatMul, FloatMatMul, _float_matmul, _infer_matmul, _no_bf16, matmul
from pycann.ops.nn import conv as conv_mod
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.operand_checks import check_broadcast_to
from pycann.ops.shape_utils import broadcast_shapes

DOMAIN = "pycann"
ACTIVATIONS = ("", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu", "Swish", "Gelu", "GeluTanh",
               "Tanh")


def _sigmoid_inplace(y: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        np.negative(y, out=y)
        np.exp(y, out=y)
        y += 1
        np.reciprocal(y, out=y)
    return y


def apply_activation(y: np.ndarray, name: str, alpha: float, beta: float) -> np.ndarray:
    """Apply activation ``name`` to ``y`` in place (float arrays); returns ``y``."""
    if not name:
        return y
    if name == "Relu":
        np.maximum(y, 0, out=y)
    elif name == "Clip":
        np.clip(y, alpha, beta, out=y)
    elif name == "Sigmoid":
        _sigmoid_inplace(y)
    elif name == "HardSigmoid":
        y *= alpha
        y += beta
        np.clip(y, 0, 1, out=y)
    elif name == "HardSwish":
        t = y * (1.0 / 6.0)
        t += 0.5
        np.clip(t, 0, 1, out=t)
        with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, as in ONNX Runtime: not a warning
            y *= t
    elif name == "LeakyRelu":
        with np.errstate(invalid="ignore"):  # -inf * 0 is NaN, as in ONNX Runtime: not a warning
            t = y * alpha
        # ONNX's where(y < 0, alpha * y, y): max (min for alpha > 1) of y and alpha * y is that for
        # finite y, but with alpha == 0 it turned +inf into NaN (inf * 0); NaN stays (not < 0)
        np.copyto(y, t, where=y < 0)
    elif name == "Swish":
        t = _sigmoid_inplace(y * alpha if alpha != 1.0 else y.copy())
        y *= t
    elif name == "Gelu":
        erf_gelu.gelu_erf_(y)
    elif name == "GeluTanh":
        erf_gelu.gelu_tanh_(y)
    elif name == "Tanh":
        np.tanh(y, out=y)
    else:
        raise ValueError(f"unknown fused activation {name!r}")
    return y


def _act(attrs: Mapping[str, Any]) -> tuple[str, float, float]:
    return attrs.get("activation", ""), float(attrs.get("act_alpha", 0.0)), float(attrs.get("act_beta", 0.0))


def post_affine(attrs: Mapping[str, Any]) -> tuple[float, float] | None:
    """FusedConv's scale/shift applied after the activation (``y * post_scale + post_shift``), or None."""
    s, t = float(attrs.get("post_scale", 1.0)), float(attrs.get("post_shift", 0.0))
    return None if (s, t) == (1.0, 0.0) else (s, t)


def _apply_affine(y: np.ndarray, aff: tuple[float, float] | None) -> np.ndarray:
    if aff is not None:
        y *= y.dtype.type(aff[0])
        y += y.dtype.type(aff[1])
    return y




def _narrow(dtype: np.dtype) -> bool:
    """float16 / bfloat16: computed in float32 and rounded back."""
    return dtype.kind == "f" and dtype.itemsize < 4 or str(dtype) == "bfloat16"


def _widen(inputs: Sequence[Any]) -> list[Any]:
    return [None if a is None else a.astype(np.float32) for a in inputs]


# ------------------------------------------------------------------------ how the products are computed


def _reference_conv_act(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None = None, *,
                        residual: np.ndarray | None = None, relu: bool = False,
                        act: tuple[str, float, float] | None = None,
                        affine: tuple[float, float] | None = None) -> tuple[np.ndarray, bool]:
    """Conv (numpy reference) + residual + ReLU; ``act``/``affine`` are left to the caller (False)."""
    y = conv_mod._conv(inputs, attrs, out)
    if residual is not None:
        y += residual
    if relu:
        np.maximum(y, 0, out=y)
    return y, False


def _reference_attention_matmul(a: np.ndarray, b: np.ndarray) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    return lambda x, y: matmul(x, y)


@dataclass(frozen=True)
class FusedCompute:
    """The products the fused kernels use; ``REFERENCE`` is numpy's, ``pycann.kernels.fused``
    passes the kernel providers' (one copy of the fused semantics serves both).

    * ``conv_act(inputs, attrs, out, residual=, relu=, act=, affine=) -> (y, act and affine applied)``
      (``pycann.kernels.conv.conv_act``'s contract);
    * ``float_matmul`` / ``bf16_matmul``: ``ops.matmul.FloatMatMul`` / ``Bf16MatMul``;
    * ``bf16_conv_fused(inputs, attrs, relu, out=None) -> y or None``: bf16 Conv + residual (input 3) +
      activation, written into ``out`` when it can;
    * ``bf16_matmul_fused(inputs, attrs, out=None) -> y or None``: the whole bf16 FusedMatMul
      (bias, residual, activation), written into ``out`` when it can;
    * ``attention_matmul(a, b) -> (x, y) -> x @ y`` for FusedAttention's float32 products;
    * ``softmax_last_axis_(s) -> bool``: softmax over the last axis in place, False when not done;
      ``softmax_min_elements``: the size below which it is not tried (it would decline);
    * ``bf16_operand(s) -> bf16 array``: float32 rounded to bfloat16 for a value read only as a bf16
      matrix operand (FusedAttention's P), where the providers may read float32 subnormals as zero
      as the native kernels read bf16 ones (``ge/compile/passes/flushing_casts.py``);
    * ``bf16_matmul_bf16(a, b, attrs) -> y or None``: ``bf16_matmul`` rounded once to bfloat16 by the
      kernel (None: the caller rounds the float32 product itself);
    * ``attention_bf16_min_rows``: FusedAttention with fewer query rows (a decode step, whose key
      length is new on every call) computes its bf16 products widened to float32 in numpy (exact
      products, float32 sums: the native kernel's numbers) instead of ``bf16_matmul``, whose
      kernels are made and kept per shape.
    """

    conv_act: Callable[..., tuple[np.ndarray, bool]] = _reference_conv_act
    float_matmul: FloatMatMul = _float_matmul
    bf16_matmul: Bf16MatMul = _no_bf16
    bf16_conv_fused: Callable[..., np.ndarray | None] = lambda *a: None  # noqa: E731
    bf16_matmul_fused: Callable[..., np.ndarray | None] = lambda *a: None  # noqa: E731
    attention_matmul: Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray, np.ndarray], np.ndarray]] = \
        _reference_attention_matmul
    softmax_last_axis_: Callable[[np.ndarray], bool] = lambda s: False  # noqa: E731
    softmax_min_elements: int = 0
    bf16_operand: Callable[[np.ndarray], np.ndarray] = lambda s: s.astype(bfloat16())  # noqa: E731
    bf16_matmul_bf16: Callable[..., np.ndarray | None] = lambda *a: None  # noqa: E731
    attention_bf16_min_rows: int = 0


REFERENCE = FusedCompute()


# ------------------------------------------------------------------------ FusedConv


def _conv_inputs(inputs: Sequence[Any]) -> list[Any]:
    return list(inputs[:3])


def _k_fused_conv(inputs: Sequence[Any], attrs: Mapping[str, Any], fc: FusedCompute = REFERENCE) -> list[np.ndarray]:
    """Conv (ONNX Conv) -> += Z (residual, optional input 3) -> activation, in place on Conv's output."""
    name = attrs.get("activation", "")
    if is_bfloat16(inputs[0].dtype) and is_bfloat16(inputs[1].dtype):
        # bf16 conv + residual + activation (+ scale/shift) in oneDNN, staying bf16 between layers
        y = fc.bf16_conv_fused(inputs, attrs, name == "Relu")
        if y is not None:
            return [y]
    if is_bfloat16(inputs[0].dtype) and is_bfloat16(inputs[1].dtype):
        # the conv kernel runs bf16 in oneDNN when it can (fp32 result); epilogue in fp32
        z = inputs[3] if len(inputs) > 3 else None
        ins = [*inputs[:3], None if z is None else z.astype(np.float32)]
        return [_conv_epilogue(ins, attrs, None, fc).astype(bfloat16())]
    if _narrow(inputs[0].dtype):
        return [_k_fused_conv(_widen(inputs), attrs, fc)[0].astype(inputs[0].dtype)]
    y = _conv_epilogue(inputs, attrs, None, fc)
    return [y if y.flags.writeable else y.copy()]


def _conv_epilogue(inputs: Sequence[Any], attrs: Mapping[str, Any], out: np.ndarray | None,
                   fc: FusedCompute = REFERENCE) -> np.ndarray:
    """Conv with the residual add (and Relu) done by the provider when it can fuse them (oneDNN
    post-ops), then any other activation in place."""
    z = inputs[3] if len(inputs) > 3 else None
    name, a, b = _act(attrs)
    aff = post_affine(attrs)
    y, done = fc.conv_act(_conv_inputs(inputs), attrs, out, residual=z, relu=name == "Relu" and aff is None,
                          act=(name, a, b) if name else None, affine=aff)
    if not done:
        if name != "Relu" or aff is not None:
            apply_activation(y, name, a, b)
        _apply_affine(y, aff)
    return y


def _out_fused_conv(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray],
                    fc: FusedCompute = REFERENCE) -> None:
    if _narrow(outs[0].dtype):
        y = None
        if outs[0].dtype == inputs[0].dtype == inputs[1].dtype and is_bfloat16(outs[0].dtype):
            y = fc.bf16_conv_fused(inputs, attrs, attrs.get("activation", "") == "Relu", outs[0])  # into the arena
        if y is None:
            y = _k_fused_conv(inputs, attrs, fc)[0]
        if not np.may_share_memory(y, outs[0]):
            outs[0][...] = y
        return
    y = _conv_epilogue(inputs, attrs, outs[0], fc)
    if not np.may_share_memory(y, outs[0]):
        outs[0][...] = y


def _infer_fused_conv(ctx: InferContext) -> list[TensorDesc]:
    """Conv's rules (B one per output channel), and the residual Z (input 3) must broadcast to the
    output, into which it is added in place (a oneDNN binary post-op reads it by pointer)."""
    sub = InferContext(ctx.node, "Conv", ctx.attrs, list(ctx.inputs[:3]), list(ctx.values[:3]), 11, 1)
    outs = list(conv_mod._infer_conv(sub))
    check_broadcast_to(ctx, 3, "Z (residual)", outs[0].shape)
    return outs


# ------------------------------------------------------------------------ FusedMatMul


def _k_fused_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], fc: FusedCompute = REFERENCE) -> list[np.ndarray]:
    """MatMul (numpy matmul semantics) -> += bias (optional input 2) -> += residual (optional
    input 3, the output's shape) -> activation, in place: ``act(A @ B + bias + residual)``."""
    a, b = inputs[0], inputs[1]
    if a.dtype == b.dtype and is_bfloat16(a.dtype):
        y = fc.bf16_matmul_fused(inputs, attrs)
        if y is not None:
            return [y]
        y16 = fc.bf16_matmul(a, b, attrs)  # oneDNN bf16 GEMM, fp32 accumulation; epilogue in fp32
        if y16 is not None:
            _mm_post(y16, [None, None, *(x if x is None else x.astype(np.float32) for x in inputs[2:])], attrs)
            return [y16.astype(bfloat16())]
    if _narrow(inputs[0].dtype):
        return [_k_fused_matmul(_widen(inputs), attrs, fc)[0].astype(inputs[0].dtype)]
    # (np.asarray: two 1-D operands give a numpy scalar, which the in-place epilogue cannot update)
    y = np.asarray(fc.float_matmul(a, b, np.result_type(a, b), attrs, None))
    _mm_post(y, inputs, attrs)
    return [y]


def _mm_post(y: np.ndarray, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> None:
    """FusedMatMul's epilogue on the product ``y``, in place: bias, residual, activation."""
    bias = inputs[2] if len(inputs) > 2 else None
    if bias is not None:
        y += bias
    residual = inputs[3] if len(inputs) > 3 else None
    if residual is not None:
        y += residual  # after the bias, as the unfused Add(Add(MatMul, bias), residual) rounds
    name, al, be = _act(attrs)
    apply_activation(y, name, al, be)


def _out_fused_matmul(inputs: Sequence[Any], attrs: Mapping[str, Any], outs: Sequence[np.ndarray],
                      fc: FusedCompute = REFERENCE) -> None:
    if _narrow(outs[0].dtype):
        y = None
        if outs[0].dtype == inputs[0].dtype == inputs[1].dtype and is_bfloat16(outs[0].dtype):
            y = fc.bf16_matmul_fused(inputs, attrs, outs[0])  # into the arena
        if y is None:
            y = _k_fused_matmul(inputs, attrs, fc)[0]
        if not np.may_share_memory(y, outs[0]):
            outs[0][...] = y
        return
    r = inputs[3] if len(inputs) > 3 else None
    if r is not None and np.may_share_memory(r, outs[0]):
        # the product is written into outs[0] first: keep the residual it would overwrite
        inputs = [*inputs[:3], r.copy()]
    y = fc.float_matmul(inputs[0], inputs[1], outs[0].dtype, attrs, outs[0])
    if not np.may_share_memory(y, outs[0]):
        outs[0][...] = y
    _mm_post(outs[0], inputs, attrs)


def _infer_fused_matmul(ctx: InferContext) -> list[TensorDesc]:
    sub = InferContext(ctx.node, "MatMul", ctx.attrs, list(ctx.inputs[:2]), list(ctx.values[:2]), 13, 1)
    d = _infer_matmul(sub)[0]
    bias = ctx.input(2)
    if bias is not None and d.shape is not None and bias.shape is not None:
        try:
            d = TensorDesc(d.dtype, broadcast_shapes(d.shape, bias.shape))
        except ValueError as e:
            raise ctx.fail(f"bias {bias} does not broadcast to {d}: {e}") from None
    res = ctx.input(3)
    if res is not None and d.shape is not None and res.shape is not None:
        try:
            shape = broadcast_shapes(d.shape, res.shape)
        except ValueError as e:
            raise ctx.fail(f"residual {res} does not broadcast to {d}: {e}") from None
        if d.is_static and res.is_static and shape != d.shape:  # added in place: it may not enlarge it
            raise ctx.fail(f"residual {res} would enlarge the result {d}")
    return [d]


# ------------------------------------------------------------------------ FusedAttention


_F32 = np.dtype(np.float32)


def _k_attention(inputs: Sequence[Any], attrs: Mapping[str, Any], fc: FusedCompute = REFERENCE) -> list[np.ndarray]:
    """softmax((Q @ Kt) * scale + mask, axis=-1) @ V, with the score buffer reused in place. With
    ``nan_to_zero`` the probabilities' NaNs become 0 before the second product (torch's
    Where(IsNaN(p), 0, p) after a boolean-masked SDPA: a fully masked row gives zeros, not NaN)."""
    q, kt, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    nan_to_zero = bool(attrs.get("nan_to_zero", 0))
    if attrs.get("masked_rows_zero", 0) and mask is not None:
        return [_masked_rows_zero(q, kt, v, mask, attrs, fc)]
    if q.dtype == kt.dtype == v.dtype == _F32 and (mask is None or mask.dtype == _F32):
        out = _attention_f32(q, kt, v, mask, float(attrs.get("scale", 1.0)), fc, nan_to_zero)
        if out is not None:
            return [out]
    if q.dtype == kt.dtype == v.dtype and is_bfloat16(q.dtype):
        out = _attention_bf16(q, kt, v, mask, float(attrs.get("scale", 1.0)), attrs, fc)
        if out is not None:
            return [out]
    if _narrow(q.dtype):
        p_dtype = q.dtype
        q, kt, v = _widen([q, kt, v])
    else:
        p_dtype = None
    if mask is not None and _narrow(mask.dtype):
        mask = mask.astype(np.float32)
    s = np.matmul(q, kt)
    scale = float(attrs.get("scale", 1.0))
    if scale != 1.0:
        s *= s.dtype.type(scale)
    if mask is not None:
        if np.broadcast_shapes(s.shape, mask.shape) == s.shape:
            s += mask
        else:
            s = s + mask
    # no keys: empty scores, so P @ V is zeros, as ONNX Runtime's MatMul/Softmax/MatMul give
    m = s.max(axis=-1, keepdims=True) if s.shape[-1] else 0
    s -= m
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    if nan_to_zero:
        np.copyto(s, 0, where=np.isnan(s))
    if p_dtype is not None:
        return [np.matmul(s.astype(p_dtype).astype(np.float32), v).astype(p_dtype)]
    return [np.matmul(s, v)]


def _masked_rows_zero(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray, attrs: Mapping[str, Any],
                      fc: FusedCompute) -> np.ndarray:
    """``masked_rows_zero``: ONNX Attention-23's Where(Equal(ReduceMax(mask, -1), -inf), 0, P) before
    P @ V. The attention runs without the attribute on the rows as they are; the rows the mask hides
    entirely (their probabilities NaN) are then recomputed as 0 @ V (zeros, NaN where V holds one)."""
    rest = {k: val for k, val in attrs.items() if k != "masked_rows_zero"}
    out = _k_attention([q, kt, v, mask], rest, fc)[0]
    m = mask.astype(np.float32) if _narrow(mask.dtype) else mask
    hidden = np.max(m, axis=-1, keepdims=True) == -np.inf if m.shape[-1] else np.zeros(m.shape, bool)
    if not hidden.any():
        return out
    # rows of P set to 0: P @ V there is a sum of 0 * V (0, or NaN where V has a NaN or an inf)
    rows = np.broadcast_to(hidden, np.broadcast_shapes(hidden.shape, out.shape[:-1] + (1,)))
    zero_row = np.matmul(np.zeros((1, v.shape[-2]), np.float32), v.astype(np.float32))  # [..., 1, Dv]
    fixed = np.where(rows, zero_row, out.astype(np.float32)).astype(out.dtype)
    return fixed


def _attention_bf16(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: float,
                    attrs: Mapping[str, Any], fc: FusedCompute) -> np.ndarray | None:
    """The bf16 path's numbers (scores and softmax in float32, P rounded to bf16 before P @ V) with
    both products in the provider's bf16 GEMM; None when it has none, a dim is 0 or Q has fewer than
    ``fc.attention_bf16_min_rows`` rows (the caller widens: the same numbers in numpy)."""
    if 0 in q.shape or 0 in kt.shape or 0 in v.shape or q.ndim < 2 or q.shape[-2] < fc.attention_bf16_min_rows:
        return None
    s = fc.bf16_matmul(q, kt, attrs)
    if s is None:
        return None
    if scale != 1.0:
        s *= np.float32(scale)
    if mask is not None:
        m32 = mask.astype(np.float32, copy=False)
        if np.broadcast_shapes(s.shape, m32.shape) == s.shape:
            s += m32
        else:
            s = s + m32
    if not fc.softmax_last_axis_(s):
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
    if attrs.get("nan_to_zero", 0):
        np.copyto(s, 0, where=np.isnan(s))
    p = fc.bf16_operand(s)  # (read only by the product below)
    y16 = fc.bf16_matmul_bf16(p, v, attrs)
    if y16 is not None:
        return y16
    y = fc.bf16_matmul(p, v, attrs)
    return None if y is None else y.astype(bfloat16())


def _broadcasts_into(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """``small`` broadcasts to ``big`` without changing it (numpy's rule, right-aligned dims equal
    or 1): ``np.broadcast_shapes(big, small) == big`` at a tenth of its cost on a decode step."""
    if len(small) > len(big):
        return False
    off = len(big) - len(small)
    return all(d == 1 or d == big[off + i] for i, d in enumerate(small))


def _attention_f32(q: np.ndarray, kt: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
                   scale: float, fc: FusedCompute = REFERENCE, nan_to_zero: bool = False) -> np.ndarray | None:
    """float32 FusedAttention with fewer and cheaper passes over the scores (None: not handled).

    ``scale`` is folded into Q (smaller than the scores when D < S), the row max uses
    ``fmax.reduce`` (1.5x faster than ``max``; a NaN row comes out NaN either way, as
    ``x - max`` is NaN), the row sums ``einsum`` (3x faster than ``sum`` on short rows), and the
    normalisation divides the output of the second product, which is smaller than the scores
    when D < S. (``exp2`` with log2(e) folded in is not used: it takes a slow path, up to 100x,
    on the underflowing arguments that masked positions give.)
    """
    if q.ndim < 2 or kt.ndim < 2 or v.ndim < 2 or 0 in q.shape or 0 in kt.shape or 0 in v.shape:
        return None
    q = np.multiply(q, np.float32(scale)) if scale != 1.0 else q
    mm = fc.attention_matmul(q, kt)
    s = mm(q, kt)
    if mask is not None:
        if _broadcasts_into(mask.shape, s.shape):
            s += mask
        else:
            s = s + mask
    # (a decode step's scores are below the oneDNN softmax's size floor: the probe, ~10 us of
    # Python a call with numpy's own checks here, would decline them anyway)
    if not nan_to_zero and s.size >= fc.softmax_min_elements and fc.softmax_last_axis_(s):  # oneDNN: one pass
        return mm(s, v)
    with np.errstate(invalid="ignore"):
        s -= np.fmax.reduce(s, axis=-1, keepdims=True)
    np.exp(s, out=s)
    den = np.einsum("ij->i", s.reshape(-1, s.shape[-1])).reshape(s.shape[:-1] + (1,))
    if nan_to_zero:
        # a row's probabilities hold a NaN exactly when its sum is NaN (a NaN or +inf score, or every
        # score -inf), and then all of them are NaN: such rows become zeros, the rest are untouched
        bad = np.isnan(den)
        if bad.any():
            np.copyto(s, 0, where=bad)
            np.copyto(den, 1, where=bad)
    sb, vb = s.shape[:-2], v.shape[:-2]
    out_batch = sb if sb == vb else np.broadcast_shapes(sb, vb)
    if math.prod(out_batch) * s.shape[-2] * v.shape[-1] > s.size:
        s /= den  # the output is the larger array (D > S, or V adds batch dims)
        return mm(s, v)
    out = mm(s, v)
    out /= den
    return out


def _infer_attention(ctx: InferContext) -> list[TensorDesc]:
    first = InferContext(ctx.node, "MatMul", ctx.attrs, list(ctx.inputs[:2]), list(ctx.values[:2]), 13, 1)
    s = _infer_matmul(first)[0]
    mask = ctx.input(3)
    if mask is not None and s.shape is not None and mask.shape is not None:
        try:
            s = TensorDesc(s.dtype, broadcast_shapes(s.shape, mask.shape))
        except ValueError as e:
            raise ctx.fail(f"mask {mask} does not broadcast to the scores {s}: {e}") from None
    second = InferContext(ctx.node, "MatMul", ctx.attrs, [s, ctx.input(2)], [None, None], 13, 1)
    return _infer_matmul(second)


_CONV_ATTRS = {"auto_pad": "NOTSET", "dilations": [], "group": 1, "kernel_shape": [], "pads": [], "strides": [],
               "activation": "", "act_alpha": 0.0, "act_beta": 0.0, "post_scale": 1.0, "post_shift": 0.0}
_ACT_ATTRS = {"activation": "", "act_alpha": 0.0, "act_beta": 0.0}

OPS: list[OpDef] = [
    OpDef("FusedConv", _infer_fused_conv, _k_fused_conv, domain=DOMAIN, attrs=_CONV_ATTRS, out_kernel=_out_fused_conv),
    OpDef("FusedMatMul", _infer_fused_matmul, _k_fused_matmul, domain=DOMAIN, attrs=_ACT_ATTRS,
          out_kernel=_out_fused_matmul),
    OpDef("FusedAttention", _infer_attention, _k_attention, domain=DOMAIN,
          attrs={"scale": 1.0, "nan_to_zero": 0, "masked_rows_zero": 0}),
]
