"""Unary math and activation ops (ONNX spec: Operators.md, per-op sections).

Kernels keep the ONNX output dtype: float16/bfloat16 activations compute in float32 and cast back
(ORT's CPU kernels widen the same way); float32/float64 compute in their own precision. Binary
elementwise ops live in ``pycann.ops.elementwise``; the array math of erf and GELU in
``pycann.ops.erf_gelu``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from pycann.dtypes import DType, TensorDesc, from_numpy
from pycann.ops.elementwise import (
    FLOATS,
    NUMERIC,
    SIGNED,
    broadcast_descs,
    check_same_type,
    check_types,
)
from pycann.ops.erf_gelu import (
    erf,
    gelu_erf_,
    select,
)
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.operand_checks import check_broadcast_to, require_broadcast_to
from pycann.ops.shape_utils import same_as

Kern = Callable[[Sequence[Any], Mapping[str, Any]], list[np.ndarray]]
_NATIVE = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_FLOAT8 = frozenset({DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ})


# ----------------------------------------------------------------------------- helpers


def _arr(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x)


_CHUNK_BYTES = 1 << 18


def chunked(fn: Callable[[np.ndarray, Mapping[str, Any]], Any], v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    """``fn(v, a)`` over 256 KiB slices of ``v`` (``fn`` keeps dtype and shape).

    Multi-pass formulas (erf, Gelu, Mish...) stream several temporaries; on slices those stay in
    cache, which halves the time on large tensors compared with whole-array passes.
    """
    if v.ndim == 0:  # the formulas update temporaries in place; numpy gives 0-d inputs scalars
        return _arr(fn(v.reshape(1), a)).reshape(())
    n = _CHUNK_BYTES // v.dtype.itemsize
    if v.size <= 2 * n:
        return _arr(fn(v, a))
    flat = np.ascontiguousarray(v).reshape(-1)
    out = np.empty_like(flat)
    for i in range(0, flat.size, n):
        out[i : i + n] = fn(flat[i : i + n], a)
    return out.reshape(v.shape)


def _float_kernel(
    fn: Callable[[np.ndarray, Mapping[str, Any]], Any], native16: bool = False, chunk: bool = False
) -> Kern:
    """Wrap ``fn(v, attrs)`` (v float32/float64) so other dtypes compute in float32 and cast back.

    ``native16``: numpy's float16 loops already widen to float32 internally (plain ufuncs).
    ``chunk``: run ``fn`` slice by slice (see ``chunked``) — for formulas of many passes.
    """

    def run(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
        if chunk or v.ndim == 0:
            return chunked(fn, v, a)
        return _arr(fn(v, a))

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        v = x[0]
        dt = v.dtype
        with np.errstate(all="ignore"):
            if dt in _NATIVE and (native16 or dt != np.float16):
                return [run(v, a)]
            return [run(v.astype(np.float32), a).astype(dt, copy=False)]

    return kernel


def _ufunc(fn: Callable) -> Kern:
    """Plain ufunc on its input dtype; non-numpy floats (bfloat16) go through float32."""
    return _float_kernel(lambda v, a: fn(v), native16=True)


def _int_or_float(fn: Callable) -> Kern:
    """Ufunc that numpy supports natively on integers too (Abs, Neg, Sign)."""
    fk = _ufunc(fn)

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        if x[0].dtype.kind in "iu":
            return [_arr(fn(x[0]))]
        return fk(x, a)

    return kernel


def _unary(allowed: frozenset[int], out_dtype: int | None = None) -> Callable:
    def infer(ctx: InferContext) -> list[TensorDesc]:
        check_types(ctx, allowed, [0])
        return [same_as(ctx.inputs[0], out_dtype)]

    return infer


# ----------------------------------------------------------------------------- kernels


def _sigmoid(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    # exp(min(x, 0)) / (1 + exp(-|x|)): both exponents are <= 0, so nothing overflows, and for
    # x < 0 this is e^x / (1 + e^x), which keeps tiny results precise (1 - sigmoid(-x) would not).
    num = np.minimum(v, 0)
    np.exp(num, out=num)
    den = np.abs(v)
    np.negative(den, out=den)
    np.exp(den, out=den)
    den += 1
    num /= den
    return num


def _hard_sigmoid(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    y = v * float(a["alpha"])
    y += float(a["beta"])
    return np.clip(y, 0, 1, out=y)


def _hard_swish(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    y = v * (1.0 / 6.0)
    y += 0.5
    np.clip(y, 0, 1, out=y)
    y *= v
    return y


def _leaky_relu(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    # max(x, alpha*x) for alpha <= 1, min(...) above: branch-free, unlike np.where.
    alpha = float(a["alpha"])
    return (np.maximum if alpha <= 1 else np.minimum)(v, v * alpha)


def _elu_like(v: np.ndarray, alpha: float, scale: float = 1.0) -> np.ndarray:
    """max(x, 0) + alpha * (exp(min(x, 0) / scale) - 1): Elu (scale 1) and Celu (scale alpha)."""
    y = np.minimum(v, 0)
    if scale != 1.0:
        y /= scale
    np.expm1(y, out=y)  # argument <= 0: no overflow
    y *= alpha
    y += np.maximum(v, 0)
    return y


def _elu(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return _elu_like(v, float(a["alpha"]))


def _selu(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    y = _elu_like(v, float(a["alpha"]))
    y *= float(a["gamma"])
    return y


def _celu(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    alpha = float(a["alpha"])
    return _elu_like(v, alpha, alpha)


def _thresholded_relu(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return select(v > float(a["alpha"]), v.copy())


def _softplus_into(v: np.ndarray) -> np.ndarray:
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), without overflow (np.logaddexp is ~10x slower)."""
    y = np.abs(v)
    np.negative(y, out=y)
    np.exp(y, out=y)
    np.log1p(y, out=y)
    y += np.maximum(v, 0)
    return y


def _softplus(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return _softplus_into(v)


def _softsign(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    d = np.abs(v)
    d += 1
    return np.divide(v, d, out=d)


def _mish(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    y = _softplus_into(v)
    np.tanh(y, out=y)
    y *= v
    return y


def _gelu(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    approx = a.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    if approx == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        k = math.sqrt(2.0 / math.pi)
        y = v * v
        y *= 0.044715 * k
        y += k
        y *= v
        np.tanh(y, out=y)
    elif v.dtype == np.float32:
        return gelu_erf_(v.copy())
    else:
        y = erf(v * (1.0 / math.sqrt(2.0)))
    y += 1
    y *= 0.5  # (exact) before the product: x * (1 + t) overflows for x above half the dtype's max, as ORT's does not
    y *= v
    return y


def _erf_fn(v: np.ndarray, a: Mapping[str, Any]) -> np.ndarray:
    return erf(v)


def _k_erf(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    v = x[0]
    if v.dtype in (np.float32, np.float64):
        return [chunked(_erf_fn, v, a)]
    w = v.astype(np.float64 if v.dtype.kind in "iu" and v.dtype.itemsize > 2 else np.float32)
    return [chunked(_erf_fn, w, a).astype(v.dtype)]


def _k_shrink(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Shrink: x+bias below -lambd, x-bias above lambd, else 0; integers compute in float64."""
    v = x[0]
    lambd, bias = float(a["lambd"]), float(a["bias"])
    w = v.reshape(-1)  # 1-d so that numpy returns arrays (not scalars) for 0-d inputs
    w = w if w.dtype in (np.float32, np.float64) else w.astype(np.float64 if w.dtype.kind in "iu" else np.float32)
    with np.errstate(all="ignore"):
        shifted = w - np.copysign(w.dtype.type(bias), w)  # x - bias above, x + bias below
        out = select(np.abs(w) > lambd, shifted)
    return [out.astype(v.dtype, copy=False).reshape(v.shape)]


def _k_isnan(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    v = x[0]
    return [np.asarray(np.isnan(v if v.dtype in _NATIVE else v.astype(np.float32)))]


def _k_isinf(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    v = x[0]
    v = v if v.dtype in _NATIVE else v.astype(np.float32)
    neg, pos = bool(a["detect_negative"]), bool(a["detect_positive"])
    if neg and pos:
        return [np.asarray(np.isinf(v))]
    if neg or pos:
        return [np.asarray(v == (-np.inf if neg else np.inf))]
    return [np.zeros(v.shape, dtype=np.bool_)]


def _clip_bound(b: np.ndarray | None, dt: np.dtype) -> np.ndarray | None:
    """A Clip bound as a 0-d array of the input's dtype (None when omitted or empty)."""
    if b is None or b.size == 0:
        return None
    return b.reshape(-1)[:1].reshape(()).astype(dt, copy=False)


def _k_clip(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Clip (opset 13): min/max are optional scalar inputs; min > max yields max everywhere; a NaN
    bound is no bound (as ORT)."""
    v = x[0]
    dt = v.dtype
    wide = dt not in _NATIVE and dt.kind not in "iu"  # bfloat16: compare in float32 (exact)
    w = v.astype(np.float32) if wide else v
    for i, name in ((1, "min"), (2, "max")):
        if len(x) > i and x[i] is not None and np.size(x[i]) > 1:  # (as shape inference says it)
            raise ValueError(f"input {name} must be a scalar, got {TensorDesc(from_numpy(x[i].dtype), x[i].shape)}")
    lo = _clip_bound(x[1] if len(x) > 1 else None, w.dtype)
    hi = _clip_bound(x[2] if len(x) > 2 else None, w.dtype)
    if dt in _NATIVE:  # an omitted bound is the dtype's lowest / largest value: +-inf clips to it (as ORT)
        lo = np.asarray(np.finfo(dt).min, dt) if lo is None else lo
        hi = np.asarray(np.finfo(dt).max, dt) if hi is None else hi
    # a NaN bound bounds nothing, not even +-inf (ORT's max(x, NaN) is x); a NaN x stays NaN
    lo = None if lo is not None and np.isnan(lo) else lo
    hi = None if hi is not None and np.isnan(hi) else hi
    out = w if lo is None else np.maximum(w, lo)
    out = out if hi is None else np.minimum(out, hi)
    if wide:
        return [_arr(out).astype(dt)]
    return [np.array(out, copy=True) if out is v else _arr(out)]


def _k_prelu(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """PRelu: max(x, 0) + min(x, 0) * slope (slope broadcasts to X); branch-free and exact."""
    v, slope = x[0], x[1]
    require_broadcast_to("PRelu", "slope", slope, v.shape)  # numpy would also grow X (bidirectional)
    if v.dtype not in _NATIVE and v.dtype.kind not in "iu":
        out = _k_prelu([v.astype(np.float32), slope.astype(np.float32)], a)[0]
        return [out.astype(v.dtype)]
    with np.errstate(all="ignore"):
        neg = _arr(np.minimum(v, v.dtype.type(0)) * slope)
        neg += np.maximum(v, v.dtype.type(0))
    return [neg if neg.dtype == v.dtype else neg.astype(v.dtype)]


# ----------------------------------------------------------------------------- infer


def _infer_clip(ctx: InferContext) -> list[TensorDesc]:
    check_types(ctx, NUMERIC, [0])
    check_same_type(ctx, [i for i in range(min(len(ctx.inputs), 3)) if ctx.input(i) is not None])
    for i, name in ((1, "min"), (2, "max")):
        d = ctx.input(i)
        if d is not None and d.is_static and (d.numel() or 0) > 1:
            raise ctx.fail(f"input {name} must be a scalar, got {d}")
    return [same_as(ctx.inputs[0])]


def _infer_prelu(ctx: InferContext) -> list[TensorDesc]:
    check_types(ctx, NUMERIC)
    check_same_type(ctx, [0, 1])
    x_desc = ctx.input(0)
    check_broadcast_to(ctx, 1, "slope", x_desc.shape if x_desc is not None else None)
    shape = broadcast_descs(ctx)
    x = ctx.inputs[0]
    # Unidirectional: slope must broadcast to X without growing it.
    if shape is not None and (x_shape := ctx.required(0).shape) is not None:
        grows = len(shape) != len(x_shape) or any(
            isinstance(s, int) and isinstance(d, int) and s != d for s, d in zip(shape, x_shape)
        )
        if grows:
            raise ctx.fail(f"slope {ctx.inputs[1]} is not unidirectionally broadcastable to X {x}")
    return [same_as(x)]


def _infer_gelu(ctx: InferContext) -> list[TensorDesc]:
    approx = ctx.attrs.get("approximate", "none")
    approx = approx.decode() if isinstance(approx, bytes) else approx
    if approx not in ("none", "tanh"):
        raise ctx.fail(f"attribute approximate must be 'none' or 'tanh', got {approx!r}")
    return _unary(FLOATS)(ctx)


_SIGNED_F = SIGNED | FLOATS
_SELU_DEFAULTS = {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}
_F = _unary(FLOATS)

# (name, kernel, infer, since, attrs)
_TABLE: list[tuple[str, Kern, Callable, int, dict[str, Any]]] = [
    ("Abs", _int_or_float(np.abs), _unary(NUMERIC), 1, {}),
    ("Neg", _int_or_float(np.negative), _unary(_SIGNED_F), 1, {}),
    ("Sign", _int_or_float(np.sign), _unary(NUMERIC), 9, {}),
    ("Exp", _ufunc(np.exp), _F, 1, {}),
    ("Log", _ufunc(np.log), _F, 1, {}),
    ("Sqrt", _ufunc(np.sqrt), _F, 1, {}),
    ("Reciprocal", _ufunc(np.reciprocal), _F, 1, {}),
    ("Floor", _ufunc(np.floor), _F, 1, {}),
    ("Ceil", _ufunc(np.ceil), _F, 1, {}),
    ("Round", _ufunc(np.rint), _F, 11, {}),  # rint rounds half to even, as ONNX Round requires
    ("Erf", _k_erf, _unary(NUMERIC), 9, {}),
    ("Sin", _ufunc(np.sin), _F, 7, {}),
    ("Cos", _ufunc(np.cos), _F, 7, {}),
    ("Tan", _ufunc(np.tan), _F, 7, {}),
    ("Asin", _ufunc(np.arcsin), _F, 7, {}),
    ("Acos", _ufunc(np.arccos), _F, 7, {}),
    ("Atan", _ufunc(np.arctan), _F, 7, {}),
    ("Sinh", _ufunc(np.sinh), _F, 9, {}),
    ("Cosh", _ufunc(np.cosh), _F, 9, {}),
    ("Asinh", _ufunc(np.arcsinh), _F, 9, {}),
    ("Acosh", _ufunc(np.arccosh), _F, 9, {}),
    ("Atanh", _ufunc(np.arctanh), _F, 9, {}),
    ("Tanh", _ufunc(np.tanh), _F, 1, {}),
    ("IsNaN", _k_isnan, _unary(FLOATS | _FLOAT8, DType.BOOL), 9, {}),
    ("IsInf", _k_isinf, _unary(FLOATS | _FLOAT8, DType.BOOL), 10, {"detect_negative": 1, "detect_positive": 1}),
    ("Sigmoid", _float_kernel(_sigmoid, chunk=True), _F, 1, {}),
    ("HardSigmoid", _float_kernel(_hard_sigmoid), _F, 1, {"alpha": 0.2, "beta": 0.5}),
    ("HardSwish", _float_kernel(_hard_swish), _F, 14, {}),
    ("LeakyRelu", _float_kernel(_leaky_relu), _F, 1, {"alpha": 0.01}),
    ("Elu", _float_kernel(_elu, chunk=True), _F, 1, {"alpha": 1.0}),
    ("Selu", _float_kernel(_selu, chunk=True), _F, 1, _SELU_DEFAULTS),
    ("Celu", _float_kernel(_celu, chunk=True), _F, 12, {"alpha": 1.0}),
    ("ThresholdedRelu", _float_kernel(_thresholded_relu), _F, 10, {"alpha": 1.0}),
    ("Softplus", _float_kernel(_softplus, chunk=True), _F, 1, {}),
    ("Softsign", _float_kernel(_softsign), _F, 1, {}),
    ("Mish", _float_kernel(_mish, chunk=True), _F, 18, {}),
    ("Shrink", _k_shrink, _unary(NUMERIC), 9, {"bias": 0.0, "lambd": 0.5}),
    ("Gelu", _float_kernel(_gelu, chunk=True), _infer_gelu, 20, {"approximate": "none"}),
    # Clip's min/max were attributes before opset 11; the importer turns them into inputs.
    ("Clip", _k_clip, _infer_clip, 1, {}),
    # PRelu before opset 7 allowed a size-1 or same-shape slope: a special case of broadcasting.
    ("PRelu", _k_prelu, _infer_prelu, 1, {}),
]

OPS: list[OpDef] = [OpDef(n, inf, k, since=s, attrs=at) for n, k, inf, s, at in _TABLE]
