"""Cast and CastLike (ONNX spec: Operators.md, "Cast" and "CastLike").

Numeric conversions follow ONNX Runtime on x86-64, which numpy's ``astype`` reproduces:
float -> integer truncates toward zero (out-of-range values give the C conversion's result),
integer -> narrower integer wraps. Conversions *to* float16, bfloat16 and the float8/float4
types round through float32 first, as ORT does (a float64 source is rounded twice). Float8
saturation follows the spec's tables; strings are parsed like C's ``strtod``/``strtoll`` (the
longest numeric prefix) and numbers print like ``printf("%.8g")`` with ``NaN``/``INF``/``-INF``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from pycann.dtypes import DType, TensorDesc, dtype_name, from_numpy, to_numpy
from pycann.ops.opdef import REQUIRED, InferContext, OpDef
from pycann.ops.shape_utils import same_as

_FLOAT8 = {
    DType.FLOAT8E4M3FN: float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).max),
    DType.FLOAT8E4M3FNUZ: float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fnuz).max),
    DType.FLOAT8E5M2: float(ml_dtypes.finfo(ml_dtypes.float8_e5m2).max),
    DType.FLOAT8E5M2FNUZ: float(ml_dtypes.finfo(ml_dtypes.float8_e5m2fnuz).max),
}
# Targets ORT reaches by way of float32 (double rounding for float64 sources).
_VIA_F32 = {DType.FLOAT16, DType.BFLOAT16, DType.FLOAT4E2M1, *_FLOAT8}
_NUMPY_NATIVE = frozenset("biuf")
_SMALL_INTS = {
    np.dtype(ml_dtypes.int4): np.int8,
    np.dtype(ml_dtypes.int2): np.int8,
    np.dtype(ml_dtypes.uint4): np.uint8,
    np.dtype(ml_dtypes.uint2): np.uint8,
}
_ROUND_MODES = ("up", "down", "nearest")

_FLOAT_RE = re.compile(
    r"\s*([+-]?(?:0x(?:[0-9a-f]+(?:\.[0-9a-f]*)?|\.[0-9a-f]+)(?:p[+-]?\d+)?"
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?|nan))",
    re.IGNORECASE,
)
_INT_RE = re.compile(r"\s*([+-]?\d+)")


def target_dtype(to: Any) -> int:
    """The ONNX dtype enum of Cast's ``to``: an int, or (opset < 6) a type name such as ``"FLOAT"``."""
    if isinstance(to, bytes):
        to = to.decode()
    if isinstance(to, str):
        try:
            return int(DType[to.strip().upper()])
        except KeyError:
            raise ValueError(f"unknown type name {to!r}") from None
    return int(to)


# ----------------------------------------------------------------------------- strings


def _text(s: Any) -> str:
    return s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)


def _strtod(s: Any) -> float:
    """C ``strtod``: the longest leading float literal (decimal, hex, inf, nan), spaces skipped."""
    m = _FLOAT_RE.match(_text(s))
    if m is None:
        raise ValueError(f"Cast: string {_text(s)!r} does not start with a number")
    tok = m.group(1)
    body = tok.lstrip("+-")
    if body[:2].lower() == "0x":
        return float.fromhex(tok)
    return float(tok)


def _strtoll(s: Any) -> int:
    """C ``strtoll``/``strtoull`` in base 10: the longest leading integer, spaces skipped."""
    m = _INT_RE.match(_text(s))
    if m is None:
        raise ValueError(f"Cast: string {_text(s)!r} does not start with an integer")
    return int(m.group(1))


def _from_string(x: np.ndarray, to: int, saturate: bool, round_mode: str) -> np.ndarray:
    dst = to_numpy(to)
    flat = x.reshape(-1).tolist()
    if to == DType.BOOL:
        return np.array([_strtoll(s) != 0 for s in flat], dtype=np.bool_).reshape(x.shape)
    if dst.kind in "iu" or dst in _SMALL_INTS:
        # Parse as 64-bit, then keep the low bits (two's complement), as ORT's cast of stoll does.
        words = np.array([_strtoll(s) & 0xFFFFFFFFFFFFFFFF for s in flat], dtype=np.uint64)
        return cast_array(words.view(np.int64).reshape(x.shape), to, saturate, round_mode)
    vals = np.array([_strtod(s) for s in flat], dtype=np.float64).reshape(x.shape)
    return cast_array(vals, to, saturate, round_mode)


def _fmt(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "INF" if v > 0 else "-INF"
    return f"{v:.8g}"


def _to_string(x: np.ndarray) -> np.ndarray:
    """Numbers to ``object`` strings: ints as decimal, bool as 1/0, floats as ``%.8g``."""
    if x.dtype == np.bool_:
        return np.where(x, "1", "0").astype(object)
    flat = x.reshape(-1)
    if flat.dtype.kind in "iu":
        strs = [str(v) for v in flat.tolist()]
    else:
        strs = [_fmt(v) for v in flat.astype(np.float64).tolist()]
    out = np.empty(len(strs), dtype=object)
    out[:] = strs
    return out.reshape(x.shape)


# ----------------------------------------------------------------------------- numbers


def _to_e8m0(f: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """float32 -> FLOAT8E8M0 (a bare biased exponent, 255 = NaN) per the Cast spec.

    The exponent field of the float32 is kept and bumped by ``round_mode``: ``up`` for any
    mantissa bits, ``nearest`` from half of the mantissa range (ties up), ``down`` never. With
    ``saturate`` results clamp to the largest finite code (and +-inf maps there); without it
    overflow, infinities and zero give NaN. The sign is ignored (negative input is undefined).
    """
    if round_mode not in _ROUND_MODES:
        raise ValueError(f"Cast: round_mode must be one of {_ROUND_MODES}, got {round_mode!r}")
    bits = np.ascontiguousarray(f, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    mant = bits & 0x7FFFFF
    if round_mode == "up":
        inc = mant != 0
    elif round_mode == "nearest":
        inc = (mant > 0x400000) | ((mant == 0x400000) & (exp > 0))
    else:
        inc = np.zeros(exp.shape, dtype=np.bool_)
    special = exp == 0xFF
    inc &= ~special
    if saturate:
        inc &= exp != 0xFE
    code = exp + inc
    is_inf = special & (mant == 0)
    if saturate:
        code[is_inf] = 0xFE
    else:
        code[(bits & 0x7FFFFFFF) == 0] = 0xFF
    return code.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _widen(x: np.ndarray) -> np.ndarray:
    """ml_dtypes sources (bfloat16, float8, float4, int4...) as a plain numpy dtype holding the value."""
    if x.dtype.kind in _NUMPY_NATIVE:
        return x
    if x.dtype in _SMALL_INTS:
        return x.astype(_SMALL_INTS[x.dtype])
    return x.astype(np.float32)


def cast_array(x: np.ndarray, to: int, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """Convert ``x`` to ONNX dtype ``to`` with ONNX Cast semantics (see the module docstring)."""
    to = int(to)
    dst = to_numpy(to)
    if to == DType.STRING:
        return _to_string(_widen(x)) if x.dtype.kind not in "OUS" else np.array(x, dtype=object)
    if x.dtype.kind in "OUS":
        return _from_string(x, to, saturate, round_mode)
    if x.dtype == dst:
        return x.copy()
    x = _widen(x)
    with np.errstate(all="ignore"):
        if to == DType.FLOAT8E8M0:
            return _to_e8m0(x.astype(np.float32), saturate, round_mode)
        if to in _VIA_F32 and x.dtype != np.float32:
            x = x.astype(np.float32)
        if to in _FLOAT8 and saturate:
            m = _FLOAT8[DType(to)]
            x = np.clip(x, -m, m)  # NaN passes through; +-inf become +-max as the spec's table says
        return np.asarray(x.astype(dst))


# ----------------------------------------------------------------------------- ops


def _check_attrs(ctx: InferContext) -> None:
    rm = ctx.attrs.get("round_mode", "up")
    rm = rm.decode() if isinstance(rm, bytes) else rm
    if rm not in _ROUND_MODES:
        raise ctx.fail(f"attribute round_mode must be one of {_ROUND_MODES}, got {rm!r}")


def _infer_cast(ctx: InferContext) -> list[TensorDesc]:
    _check_attrs(ctx)
    try:
        to = target_dtype(ctx.attrs["to"])
        to_numpy(to)
    except (TypeError, ValueError) as e:
        raise ctx.fail(f"attribute to={ctx.attrs['to']!r} is not a supported target type ({e})") from None
    return [same_as(ctx.inputs[0], to)]


def _infer_cast_like(ctx: InferContext) -> list[TensorDesc]:
    _check_attrs(ctx)
    target = ctx.input(1)
    if target is None:
        raise ctx.fail("input target_type is required")
    if target.dtype:
        try:
            to_numpy(target.dtype)
        except TypeError:
            raise ctx.fail(f"target_type has unsupported dtype {dtype_name(target.dtype)}") from None
    return [same_as(ctx.inputs[0], target.dtype)]


def _mode(a: Mapping[str, Any]) -> str:
    rm = a.get("round_mode", "up")
    return rm.decode() if isinstance(rm, bytes) else str(rm)


def _k_cast(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """Cast (opset 25 semantics; ``to`` may be a type name for opset < 6)."""
    return [cast_array(x[0], target_dtype(a["to"]), bool(a.get("saturate", 1)), _mode(a))]


def _k_cast_like(x: Sequence[Any], a: Mapping[str, Any]) -> list[np.ndarray]:
    """CastLike: Cast to the dtype of the second input."""
    to = int(from_numpy(x[1].dtype))
    return [cast_array(x[0], to, bool(a.get("saturate", 1)), _mode(a))]


_SAT = {"saturate": 1, "round_mode": "up"}

OPS: list[OpDef] = [
    # One definition serves every opset: later versions only add types and float8 attributes.
    OpDef("Cast", _infer_cast, _k_cast, since=1, attrs={"to": REQUIRED, **_SAT}),
    OpDef("CastLike", _infer_cast_like, _k_cast_like, since=15, attrs=dict(_SAT)),
]
