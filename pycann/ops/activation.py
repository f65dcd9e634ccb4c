"""Unary math and activation ops (ONNX spec: Operators.md, per-op sections).

Kernels keep the ONNX output dtype: float16/bfloat16 activations compute in float32 and cast back
(ORT's CPU kernels widen the same way); float32/float64 compute in their own precision. Binary
elementwise ops live in ``pycann.ops.elementwise``.
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
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.operand_checks import check_broadcast_to, require_broadcast_to
from pycann.ops.shape_utils import same_as

Kern = Callable[[Sequence[Any], Mapping[str, Any]], list[np.ndarray]]
_NATIVE = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_FLOAT8 = frozenset({DType.FLOAT8E4M3FN, DType.FLOAT8E4M3FNUZ, DType.FLOAT8E5M2, DType.FLOAT8E5M2FNUZ})


# ----------------------------------------------------------------------------- erf

# Least-squares fits made for pycann against math.erf (max relative error 1.4e-9 for the
# float32 set on |x| < 4, 2.4e-15 for the float64 set on |x| < 6):
#   |x| <  A:  erf(x)  = x * P(x^2)
#   |x| >= A:  erfc(x) = exp(-x^2) * Q(1 / (1 + x/2)),  x clamped to HI, where erf rounds to 1.
_ERF_F32 = (
    0.5,
    4.0,
    (1.1283791656147928, -0.3761260917334035, 0.11282834739145424, -0.0267579443321916, 0.004719505353352893),
    (-0.0002855408448623871, 0.2870475007420192, 0.24467837575313225, 0.4074197764583811,
     -0.24996459568866408, 0.7906966207828823, -0.6897293372275854, 0.23809299154277783,
     -0.027945538923185055),
)
_ERF_F64 = (
    0.75,
    6.0,
    (1.1283791670955126, -0.37612638903180945, 0.11283791670794795, -0.02686617060879973,
     0.00522397720777381, -0.0008548299415002529, 0.00012054219481085023, -1.4897736528853025e-05,
     1.603546822273612e-06, -1.267318472304409e-07),
    (8.671934449200717e-08, 0.2820923368364438, 0.2821253918693332, 0.2466144733913992,
     0.17727462812018882, 0.08114198328641893, -0.0007984978213199045, -0.05656355134704732,
     -0.06101527560902902, -0.0005597726782440095, 0.06534295714170738, 0.04778008650742491,
     -0.04491820368559646, -0.08207463829255277, 0.017246822273467407, 0.10964231426922805,
     -0.008074552680620233, -0.1450727115787644, 0.12052137567421936, -0.030608711335088617,
     -0.00010203815313174371),
)


def _horner(t: np.ndarray, coeffs: Sequence[float]) -> np.ndarray:
    """sum(c[i] * t**i), in place on one accumulator."""
    acc = np.full_like(t, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc *= t
        acc += c
    return acc


def select(mask: np.ndarray, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    """``np.where(mask, a, b)`` (``b=None``: 0) for same-shape float arrays, written into ``a``.

    Works on the bit patterns: ``np.where`` branches per element and mispredicts on data with
    random signs (about 4x slower at 4M elements); AND/OR with an all-ones mask does not branch.
    """
    u = np.dtype(f"u{a.dtype.itemsize}")
    m = mask.astype(u)
    np.negative(m, out=m)  # True -> all ones, False -> 0
    out = a.view(u)
    out &= m
    if b is not None:
        np.invert(m, out=m)
        m &= b.view(u)
        out |= m
    return a


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorised error function for float32/float64 arrays (ONNX Erf), same dtype out.

    Accurate to a few ulp in either precision (see the fits above); NaN propagates, erf(+-inf) = +-1.
    Both branches are evaluated everywhere and merged with ``select`` (boolean indexing and
    ``np.where`` are several times slower); buffers are reused to limit allocations.
    """
    x = np.asarray(x)
    if x.ndim == 0:
        return erf(x.reshape(1)).reshape(())
    a, hi, p, q = _ERF_F64 if x.dtype == np.float64 else _ERF_F32
    ax = np.abs(x)
    small = ax < a
    with np.errstate(over="ignore", invalid="ignore"):  # |x| >= ~1.8e19 (float32): x^2 overflows; unused there
        t = np.multiply(ax, ax)
        near = _horner(t, p)
        near *= x  # erf for |x| < a
    np.clip(ax, x.dtype.type(a), x.dtype.type(hi), out=ax)
    np.multiply(ax, ax, out=t)
    np.negative(t, out=t)
    np.exp(t, out=t)  # exp(-x^2)
    ax *= 0.5
    ax += 1
    np.reciprocal(ax, out=ax)  # s = 1 / (1 + x/2)
    far = _horner(ax, q)
    far *= t  # erfc
    np.subtract(1, far, out=far)
    np.copysign(far, x, out=far)  # erf for |x| >= a
    return select(small, near, far)


# ----------------------------------------------------------------------------- GELU (erf form)

# Phi(x) = 0.5 * (1 + erf(x / sqrt(2))) in one formula for float32: with z = |x| / sqrt(2) and
# t = 1 / (1 + p z), erfc(z) = t * C(t) * exp(-z^2), C of degree 5 (weighted least-squares fit
# made for pycann against math.erfc on z in [0, 10], p = 0.55: absolute erfc error <= 1.8e-8,
# far below float32's rounding). About half the passes of ``erf`` and no branch merge.
_GELU_P = 0.55
_GELU_C = (0.3015730891692054, 0.3909075945584249, -0.04159056018863497, 0.7599190828313516,
           -0.5181646672977621, 0.10735547832448995)
_GELU_CHUNK = 1 << 16  # elements per block: the three float32 scratch buffers stay in L2


def _gelu_erf_block(c: np.ndarray, b1: np.ndarray, b2: np.ndarray, b3: np.ndarray) -> None:
    """``c *= Phi(c)`` for one contiguous float32 block, using same-size scratch ``b1..b3``.

    Only cheap, vectorised ufuncs: ``np.divide(1, t)`` beats ``np.reciprocal``, and the sign is
    applied with integer bit operations (``np.copysign`` and ``np.maximum`` are each about ten
    times slower than a multiply). ``np.exp2`` would be faster than ``np.exp`` on small
    arguments but takes a slow path (up to 100x) where the result underflows (|x| > 13 here).
    """
    f = np.float32
    ax = np.abs(c, out=b1)
    t = np.multiply(ax, f(_GELU_P / math.sqrt(2.0)), out=b2)
    t += f(1)
    np.divide(f(1), t, out=t)  # t = 1 / (1 + p z)
    h = np.multiply(t, f(0.5 * _GELU_C[-1]), out=b3)
    for k in _GELU_C[-2::-1]:
        h += f(0.5 * k)
        h *= t  # 0.5 * t * C(t)
    e = np.multiply(ax, ax, out=b1)
    e *= f(-0.5)
    np.exp(e, out=e)  # exp(-z^2)
    h *= e  # 0.5 * erfc(z) = Phi(-|x|)
    np.subtract(f(0.5), h, out=h)
    sign = np.bitwise_and(c.view(np.uint32), np.uint32(0x80000000), out=b2.view(np.uint32))
    hu = h.view(np.uint32)
    hu ^= sign  # sign(x) * (0.5 - Phi(-|x|))
    h += f(0.5)  # Phi(x)
    c *= h


def gelu_erf_(y: np.ndarray) -> np.ndarray:
    """Exact-form GELU ``y * 0.5 * (1 + erf(y / sqrt(2)))`` computed in place; returns ``y``.

    float32 uses the one-formula approximation above (absolute error of Phi below 2e-8, plus
    float32 rounding), block by block with three scratch buffers that stay in cache; other
    dtypes (and non-contiguous arrays) use ``erf``. NaN propagates; GELU(+inf) = +inf,
    GELU(-inf) = NaN (-inf * 0, as the formula evaluated in IEEE arithmetic gives).
    """
    if y.size == 0:
        return y
    if y.dtype != np.float32 or y.ndim == 0 or not y.flags.c_contiguous:
        with np.errstate(all="ignore"):
            t = erf(y * y.dtype.type(1.0 / math.sqrt(2.0)))
            t += 1
            t *= 0.5
            y *= t
        return y
    flat = y.reshape(-1)
    n = min(_GELU_CHUNK, flat.size)
    b1, b2, b3 = np.empty(n, np.float32), np.empty(n, np.float32), np.empty(n, np.float32)
    with np.errstate(all="ignore"):
        for i in range(0, flat.size, n):
            c = flat[i : i + n]
            k = c.size
            _gelu_erf_block(c, b1[:k], b2[:k], b3[:k])
    return y


def gelu_tanh_(y: np.ndarray) -> np.ndarray:
    """Tanh-form GELU ``0.5 y (1 + tanh(sqrt(2/pi) (y + 0.044715 y^3)))`` (ONNX Gelu-20 with
    ``approximate="tanh"``, GPT-2's ``gelu_new``) computed in place; returns ``y``. NaN propagates."""
    if y.size == 0:
        return y
    k = y.dtype.type(math.sqrt(2.0 / math.pi))
    with np.errstate(all="ignore"):
        t = y * y
        t *= y.dtype.type(0.044715) * k
        t += k
        t *= y
        np.tanh(t, out=t)
        t += 1
        t *= y.dtype.type(0.5)
        y *= t
    return y


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
