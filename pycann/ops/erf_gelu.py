"""The numerics of erf and GELU on numpy arrays: ``erf`` (polynomial fits, float32 and float64),
``gelu_erf_`` and ``gelu_tanh_`` (in place), and ``select``, the branch-free blend they use.

Separate from the Erf/Gelu op kernels in ``pycann.ops.activation``: these are plain array math with
their own fitted constants, also called by the fused kernels and the oneDNN eltwise fallback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

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
