"""Binary, variadic, logical and comparison elementwise ops (ONNX spec: Operators.md, per-op sections).

Numpy ufuncs are the kernels. Unary math and activations live in ``pycann.ops.activation``.

Pattern every family follows: small ``_infer_*`` helpers, ``_k_*`` kernels, and an explicit
``OPS`` list at the bottom that ``pycann.ops.registry`` reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from typing import Any

import numpy as np

from pycann.dtypes import Dim, DType, TensorDesc, dtype_name
from pycann.ops.opdef import InferContext, OpDef
from pycann.ops.shape_utils import broadcast_shapes, same_as

Kern = Callable[[Sequence[Any], Mapping[str, Any]], list[np.ndarray]]

FLOATS = frozenset({DType.FLOAT, DType.FLOAT16, DType.DOUBLE, DType.BFLOAT16})
SIGNED = frozenset({DType.INT8, DType.INT16, DType.INT32, DType.INT64})
UNSIGNED = frozenset({DType.UINT8, DType.UINT16, DType.UINT32, DType.UINT64})
INTS = SIGNED | UNSIGNED
NUMERIC = FLOATS | INTS
BOOL = frozenset({DType.BOOL})


# ----------------------------------------------------------------------------- infer helpers


def check_types(ctx: InferContext, allowed: frozenset[int], idx: Sequence[int] | None = None) -> None:
    """Fail when a known input dtype is outside ``allowed`` (the op's ONNX type constraint)."""
    for i in idx if idx is not None else range(len(ctx.inputs)):
        d = ctx.input(i)
        if d is not None and d.dtype and d.dtype not in allowed:
            names = ", ".join(sorted(dtype_name(t) for t in allowed))
            raise ctx.fail(f"input {i} has dtype {dtype_name(d.dtype)}; expected one of {names}")


def check_same_type(ctx: InferContext, idx: Sequence[int]) -> None:
    """Fail when inputs bound to the same type variable ``T`` have different known dtypes."""
    present = [(i, d) for i in idx if (d := ctx.input(i)) is not None]
    known = [(i, d.dtype) for i, d in present if d.dtype]
    if len({t for _, t in known}) > 1:
        desc = ", ".join(f"input {i} is {dtype_name(t)}" for i, t in known)
        raise ctx.fail(f"inputs must share one dtype ({desc})")


def broadcast_descs(ctx: InferContext, idx: Sequence[int] | None = None) -> tuple[Dim, ...] | None:
    """Multidirectional broadcast (ONNX Broadcasting.md) of the present inputs' shapes
    (``None`` when a rank is unknown)."""
    descs = [d for i in (idx if idx is not None else range(len(ctx.inputs))) if (d := ctx.inputs[i]) is not None]
    if not descs:
        raise ctx.fail("expected at least one input")
    try:
        return broadcast_shapes(*(d.shape for d in descs))
    except ValueError as e:
        raise ctx.fail(f"inputs {[str(d) for d in descs]} do not broadcast: {e}") from None


def _typed_broadcast(allowed: frozenset[int], out_dtype: int | None = None) -> Callable:
    """Infer for ``T op T -> T`` (or ``-> out_dtype``) with multidirectional broadcasting."""

    def infer(ctx: InferContext) -> list[TensorDesc]:
        check_types(ctx, allowed)
        check_same_type(ctx, range(len(ctx.inputs)))
        shape = broadcast_descs(ctx)
        d0 = next(d for d in ctx.inputs if d is not None)
        return [TensorDesc(d0.dtype if out_dtype is None else out_dtype, shape)]

    return infer


def _typed_unary(allowed: frozenset[int]) -> Callable:
    def infer(ctx: InferContext) -> list[TensorDesc]:
        check_types(ctx, allowed)
        return [same_as(ctx.inputs[0])]

    return infer


def _infer_pow(ctx: InferContext) -> list[TensorDesc]:
    check_types(ctx, NUMERIC)
    return [TensorDesc(ctx.required(0).dtype, broadcast_descs(ctx))]


def _infer_where(ctx: InferContext) -> list[TensorDesc]:
    check_types(ctx, BOOL, [0])
    check_same_type(ctx, [1, 2])
    return [TensorDesc(ctx.required(1).dtype, broadcast_descs(ctx))]


def _infer_mod(ctx: InferContext) -> list[TensorDesc]:
    if ctx.attrs.get("fmod", 0) not in (0, 1):
        raise ctx.fail(f"attribute fmod must be 0 or 1, got {ctx.attrs.get('fmod')}")
    a = ctx.input(0)
    if ctx.attrs.get("fmod", 0) == 0 and a is not None and a.dtype in _FLOATS and 0 < ctx.opset < 28:
        # the ONNX spec (Mod-10/13): "If the input type is floating point, then fmod attribute must be set to 1"
        raise ctx.fail("a floating-point Mod needs fmod=1 (the ONNX spec; ONNX Runtime refuses fmod=0): set fmod=1 "
                       "for C fmod semantics, or compute x - floor(x / y) * y for Python's")
    return _typed_broadcast(NUMERIC)(ctx)


_FLOATS = frozenset((DType.FLOAT, DType.DOUBLE, DType.FLOAT16, DType.BFLOAT16))


def _infer_bitshift(ctx: InferContext) -> list[TensorDesc]:
    if _direction(ctx.attrs) not in ("LEFT", "RIGHT"):
        raise ctx.fail(f"attribute direction must be 'LEFT' or 'RIGHT', got {ctx.attrs.get('direction')!r}")
    return _typed_broadcast(INTS)(ctx)


# ----------------------------------------------------------------------------- kernels


def _arr(x: Any) -> np.ndarray:
    return x if isinstance(x, np.ndarray) else np.asarray(x)


def _ufunc2(fn: Callable) -> Kern:
    """Kernel for a same-dtype binary ufunc (numpy keeps the common dtype)."""

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        with np.errstate(all="ignore"):
            return [_arr(fn(x[0], x[1]))]

    return kernel


def _ufunc1(fn: Callable) -> Kern:
    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        return [_arr(fn(x[0]))]

    return kernel


def _k_div(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Div: float division; signed integers truncate toward zero like C (``floor_divide`` floors)."""
    p, q = x[0], x[1]
    with np.errstate(all="ignore"):
        if p.dtype.kind == "i":
            # a - fmod(a, b) is an exact multiple of b, so floor division of it is the C quotient.
            return [_arr(np.floor_divide(p - np.fmod(p, q), q))]
        if p.dtype.kind == "u":
            return [_arr(np.floor_divide(p, q))]
        return [_arr(np.true_divide(p, q))]


def power(base: Any, ex: Any, out: np.ndarray | None = None) -> Any:
    """``np.power`` with C ``pow``'s values (ONNX Runtime's ``std::pow``) where numpy's fast path for
    a scalar exponent of 0.5 (``sqrt``) differs: ``(-inf) ** 0.5`` is +inf (sqrt: NaN) and
    ``(-0) ** 0.5`` is +0 (sqrt: -0). ``out`` may be ``base`` itself (the masks are taken first)."""
    neg_inf = zero = None
    if np.size(ex) == 1 and np.asarray(ex).reshape(-1)[0] == 0.5 and np.asarray(base).dtype.kind == "f":
        b = np.asarray(base)
        neg_inf, zero = b == -np.inf, b == 0
    r = np.power(base, ex) if out is None else np.power(base, ex, out=out)
    if neg_inf is not None and zero is not None and (neg_inf.any() or zero.any()):
        if not isinstance(r, np.ndarray):
            r = np.array(r)
        np.copyto(r, np.inf, where=neg_inf)
        np.copyto(r, 0.0, where=zero)
    return r


def _k_pow(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Pow: result has the base's dtype.

    Mixed or integer operands go through float64, as ORT's ``std::pow`` promotes them to double;
    float16/bfloat16 bases compute in float32.
    """
    base, ex = x[0], x[1]
    dt = base.dtype
    with np.errstate(all="ignore"):
        if dt in (np.float32, np.float64) and ex.dtype == dt:
            return [_arr(power(base, ex))]
        narrow = dt.kind not in "iu" and dt not in (np.float32, np.float64) and ex.dtype != np.float64
        wide = np.float32 if narrow else np.float64
        out = power(base.astype(wide), ex.astype(wide, copy=False))
        return [_arr(out).astype(dt, copy=False)]


def _k_mod(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Mod: fmod=1 is C ``fmod`` (sign of dividend), fmod=0 is Python ``%`` (sign of divisor)."""
    fn = np.fmod if int(a.get("fmod", 0)) else np.remainder
    with np.errstate(all="ignore"):
        return [_arr(fn(x[0], x[1]))]


def _direction(a: Mapping[str, Any]) -> str:
    d = a.get("direction", "")
    return (d.decode() if isinstance(d, bytes) else str(d)).upper()


def _k_bitshift(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """BitShift (opset 28 semantics): signed right shift is arithmetic; out-of-range amounts give fill."""
    v, s = x[0], x[1]
    bits = v.dtype.itemsize * 8
    right = _direction(a) == "RIGHT"
    fn = np.right_shift if right else np.left_shift
    bad = (s >= bits) | (s < 0) if s.dtype.kind == "i" else s >= bits
    if not np.any(bad):
        return [_arr(fn(v, s))]
    out = _arr(fn(v, np.where(bad, 0, s).astype(s.dtype, copy=False)))
    fill = np.where(v < 0, -1, 0).astype(v.dtype) if right and v.dtype.kind == "i" else v.dtype.type(0)
    return [_arr(np.where(bad, fill, out))]


def _k_compare(fn: Callable) -> Kern:
    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        with np.errstate(invalid="ignore"):  # ml_dtypes' bfloat16 loops flag NaN operands
            out = _arr(fn(x[0], x[1]))
        # Object (string) comparisons come back as object arrays.
        return [out if out.dtype == np.bool_ else out.astype(np.bool_)]

    return kernel


def _k_where(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    out = np.where(x[0], x[1], x[2])
    return [out if out.dtype == x[1].dtype else out.astype(x[1].dtype)]


def _variadic(fn: Callable) -> Kern:
    """Fold a binary ufunc over 1..N broadcasting inputs; a single input is copied."""

    def kernel(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        xs = [v for v in x if v is not None]
        if len(xs) == 1:
            return [np.array(xs[0], copy=True)]
        with np.errstate(all="ignore"):
            return [_arr(reduce(fn, xs))]

    return kernel


def _half(v: np.ndarray) -> bool:
    """float16 / bfloat16: Sum and Mean of several such inputs accumulate in float32, as ORT
    (an intermediate sum past 65504 is not inf; one rounding at the end)."""
    return v.dtype == np.float16 or v.dtype.name == "bfloat16"


def _k_sum(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    xs = [v for v in x if v is not None]
    if len(xs) > 2 and _half(xs[0]):
        return [_variadic(np.add)([v.astype(np.float32) for v in xs], a)[0].astype(xs[0].dtype)]
    return _variadic(np.add)(xs, a)


def _k_mean(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    xs = [v for v in x if v is not None]
    if len(xs) > 1 and _half(xs[0]):
        s = _variadic(np.add)([v.astype(np.float32) for v in xs], a)[0]
        s /= np.float32(len(xs))
        return [s.astype(xs[0].dtype)]
    s = _variadic(np.add)(xs, a)[0]
    if len(xs) == 1:
        return [s]
    if s.dtype.kind == "f":
        np.divide(s, len(xs), out=s, casting="unsafe")  # in place: s is a fresh array
        return [s]
    return [_arr(s / np.asarray(len(xs), dtype=s.dtype)).astype(s.dtype, copy=False)]


def _k_relu(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Relu: max(x, 0); bfloat16 goes through float32 (exact)."""
    v = x[0]
    if v.dtype.kind in "iuf":
        return [np.asarray(np.maximum(v, v.dtype.type(0)))]
    return [np.maximum(v.astype(np.float32), np.float32(0)).astype(v.dtype)]


def _legacy(kernel: Kern) -> Kern:
    """Opset < 7 binary ops: with ``broadcast=1`` B aligns to A starting at ``axis`` (suffix if absent)."""

    def wrapped(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
        p, q = x[0], x[1]
        axis = a.get("axis")
        if int(a.get("broadcast", 0)) and axis is not None and q.ndim:
            axis = int(axis) % max(p.ndim, 1)
            q = q.reshape(q.shape + (1,) * (p.ndim - axis - q.ndim))
        return kernel([p, q], a)

    return wrapped


def _infer_legacy(inner: Callable) -> Callable:
    def infer(ctx: InferContext) -> list[TensorDesc]:
        a, b = ctx.input(0), ctx.input(1)
        axis = ctx.attrs.get("axis")
        if int(ctx.attrs.get("broadcast", 0)) and a is not None and b is not None:
            if a.shape is not None and b.shape is not None and len(b.shape) > len(a.shape):
                raise ctx.fail(f"input B {b} has higher rank than A {a} under legacy broadcast")
            if axis is not None and a.shape is not None and b.shape is not None and b.shape:
                ax = int(axis) % max(len(a.shape), 1)
                if ax + len(b.shape) > len(a.shape):
                    raise ctx.fail(f"attribute axis={axis} puts B {b} past the end of A {a}")
                padded = TensorDesc(b.dtype, tuple(b.shape) + (1,) * (len(a.shape) - ax - len(b.shape)))
                ctx = InferContext(ctx.node, ctx.op_type, ctx.attrs, [a, padded], ctx.values, ctx.opset, ctx.n_outputs)
        return inner(ctx)

    return infer


def _out2(fn: Callable) -> Callable[..., None]:
    """Out kernel for a binary ufunc: writes into the arena view (same dtype by inference)."""

    def out_kernel(x: Sequence[Any], a: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
        with np.errstate(all="ignore"):
            fn(x[0], x[1], out=outs[0])

    return out_kernel


def _out_div(x: Sequence[Any], a: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    if x[0].dtype.kind == "f":
        with np.errstate(all="ignore"):
            np.true_divide(x[0], x[1], out=outs[0])
    else:
        outs[0][...] = _k_div(x, a)[0]


def _out_relu(x: Sequence[Any], a: Mapping[str, Any], outs: Sequence[np.ndarray]) -> None:
    v = x[0]
    if v.dtype.kind in "iuf":
        np.maximum(v, v.dtype.type(0), out=outs[0])
    else:
        outs[0][...] = _k_relu(x, a)[0]


_k_add = _ufunc2(np.add)
_k_sub = _ufunc2(np.subtract)
_k_mul = _ufunc2(np.multiply)

_LEGACY_ATTRS = {"broadcast": 0}

_ARITH: list[tuple[str, Kern, frozenset[int]]] = [
    ("Add", _k_add, NUMERIC),
    ("Sub", _k_sub, NUMERIC),
    ("Mul", _k_mul, NUMERIC),
    ("Div", _k_div, NUMERIC),
]
_ARITH_OUT = {"Add": _out2(np.add), "Sub": _out2(np.subtract), "Mul": _out2(np.multiply), "Div": _out_div}
_LOGIC: list[tuple[str, Kern]] = [
    ("And", _ufunc2(np.logical_and)),
    ("Or", _ufunc2(np.logical_or)),
    ("Xor", _ufunc2(np.logical_xor)),
]
_CMP: list[tuple[str, Kern, int]] = [
    ("Equal", _k_compare(np.equal), 7),
    ("Less", _k_compare(np.less), 7),
    ("Greater", _k_compare(np.greater), 7),
    ("LessOrEqual", _k_compare(np.less_equal), 12),
    ("GreaterOrEqual", _k_compare(np.greater_equal), 12),
]
_ANY = NUMERIC | BOOL | frozenset({DType.STRING})

OPS: list[OpDef] = [
    *(OpDef(n, _typed_broadcast(t), k, since=7, out_kernel=_ARITH_OUT[n]) for n, k, t in _ARITH),
    *(OpDef(n, _infer_legacy(_typed_broadcast(t)), _legacy(k), since=1, attrs=_LEGACY_ATTRS) for n, k, t in _ARITH),
    OpDef("Pow", _infer_pow, _k_pow, since=7),
    OpDef("Pow", _infer_legacy(_infer_pow), _legacy(_k_pow), since=1, attrs=_LEGACY_ATTRS),
    OpDef("Mod", _infer_mod, _k_mod, since=10, attrs={"fmod": 0}),
    OpDef("BitShift", _infer_bitshift, _k_bitshift, since=11, attrs={"direction": "LEFT"}),
    OpDef("BitwiseAnd", _typed_broadcast(INTS), _ufunc2(np.bitwise_and), since=18),
    OpDef("BitwiseOr", _typed_broadcast(INTS), _ufunc2(np.bitwise_or), since=18),
    OpDef("BitwiseXor", _typed_broadcast(INTS), _ufunc2(np.bitwise_xor), since=18),
    OpDef("BitwiseNot", _typed_unary(INTS), _ufunc1(np.invert), since=18),
    *(OpDef(n, _typed_broadcast(BOOL), k, since=7) for n, k in _LOGIC),
    *(
        OpDef(n, _infer_legacy(_typed_broadcast(BOOL)), _legacy(k), since=1, attrs=_LEGACY_ATTRS)
        for n, k in _LOGIC
    ),
    OpDef("Not", _typed_unary(BOOL), _ufunc1(np.logical_not), since=1),
    *(OpDef(n, _typed_broadcast(_ANY, DType.BOOL), k, since=s) for n, k, s in _CMP),
    *(
        OpDef(n, _infer_legacy(_typed_broadcast(_ANY, DType.BOOL)), _legacy(k), since=1, attrs=_LEGACY_ATTRS)
        for n, k, s in _CMP
        if s == 7
    ),
    OpDef("Where", _infer_where, _k_where, since=9),
    # Before opset 8 the variadic ops required equal shapes; broadcasting is a strict superset.
    OpDef("Max", _typed_broadcast(NUMERIC), _variadic(np.maximum), since=6),
    OpDef("Min", _typed_broadcast(NUMERIC), _variadic(np.minimum), since=6),
    OpDef("Sum", _typed_broadcast(NUMERIC), _k_sum, since=6),
    OpDef("Mean", _typed_broadcast(FLOATS), _k_mean, since=6),
    # Relu stays here (the smoke test's anchor); other activations are in pycann.ops.activation.
    OpDef("Relu", _typed_unary(SIGNED | FLOATS), _k_relu, since=1, out_kernel=_out_relu),
]
