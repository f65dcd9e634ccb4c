"""NaN and inf through fused activations (issue 14): oneDNN's ReLU, Clip and HardSigmoid post-ops
(and a ``binary_max`` post-op, and torch's fused ReLU, which is oneDNN's) compute ``max(x, 0)``
with the instruction that returns the non-NaN operand, so a NaN pre-activation comes out 0.
ONNX Runtime keeps the NaN (measured: Conv+Relu, Conv+Clip, Conv+HardSigmoid, with and without
its own fusions), and so does numpy's ``maximum``/``clip``. No eltwise formulation in oneDNN keeps
it exactly (a leaky ReLU with a denormal slope does, at the price of denormal outputs).

The fix-up: before running a conv (or matmul) whose fused activation drops NaN, ``safe`` proves
from the operands that the pre-activation cannot be NaN: every input value is finite and the
largest possible |x . w + b + residual| stays below float32's maximum (no inf - inf in the sum).
That costs one read of the input (a BLAS ``dot(x, x)``, ~0.1 us per 1000 values, about a tenth
of an unfused ReLU's read-modify-write; bench/RESULTS.md has the model-level cost). When it
cannot prove it (a NaN, an inf, a bound near float32's maximum), the caller runs the unfused
formulation: the conv, then the activation in numpy, which propagates NaN as ONNX Runtime does.

``PYCANN_NAN_GUARD=0`` turns the check off (fused results as oneDNN gives them).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from pycann import config
from pycann.dtypes import is_bfloat16

__all__ = ["drops_nan", "enabled", "end_run", "new_run", "pass_on", "pre_bound", "proven", "record", "record_max", "safe",
           "seed",
           "weight_bound", "weight_part"]

_F32_SAFE = 1e38  # below float32's maximum (3.4e38), with room for the rounding of the bound itself
# oneDNN dnnl_alg_kind_t values (onednn_capi.ELTWISE): relu, hardsigmoid, clip, clip_v2, and
# logistic (its input clamp maps NaN to a number on some kernels: docs/kernels.md)
_DROPS = {0x20, 0x28, 0x2E, 0x2F, 0x29}
_TORCH_DROPS = {"relu", "clamp", "hardtanh", "hardsigmoid", "sigmoid"}


_during_run: list[bool | None] = [None]  # PYCANN_NAN_GUARD as read when the current plan run began


def enabled() -> bool:
    """True unless ``PYCANN_NAN_GUARD=0``: as read when the current plan run began (``new_run``; a
    squeezenet run asks ~34 times, and each environment read cost ~1 us), else read now (kernels
    called outside a plan; tests flip the variable between calls)."""
    during = _during_run[0]
    return config.nan_guard() if during is None else during


def drops_nan(unary: Any) -> bool:
    """Whether an activation post-op maps NaN to a number: a oneDNN eltwise triple or chain
    (``onednn_eltwise.Unary(s)``; ReLU only with slope 0: a leaky ReLU keeps NaN), a torch
    post-op ``(attr, scalars, algorithm)`` (``torch_onednn.onednn_unary``), or an ONNX
    activation name (FusedConv's ``activation``)."""
    if unary is None:
        return False
    if isinstance(unary, str):
        return unary in ("Relu", "Clip", "HardSigmoid", "Sigmoid")
    if isinstance(unary, tuple) and unary and isinstance(unary[0], tuple):
        return any(drops_nan(u) for u in unary)
    if isinstance(unary, tuple) and len(unary) == 3 and isinstance(unary[0], int):
        alg, alpha, _ = unary
        return alg in _DROPS and not (alg == 0x20 and alpha != 0.0)
    if isinstance(unary, tuple) and unary and isinstance(unary[0], str):
        return str(unary[0]) in _TORCH_DROPS
    return True  # unknown form: assume the worst (the guard only costs time)


_w_bounds: dict[tuple[Any, ...], float] = {}


def _key(w: np.ndarray, transpose: bool) -> tuple[Any, ...]:
    return (id(w), w.__array_interface__["data"][0], w.shape, w.strides, transpose)


def _remember(w: np.ndarray, key: tuple[Any, ...], wb: float) -> None:
    try:
        weakref.finalize(w, _w_bounds.pop, key, None)  # dropped when the array is collected
        _w_bounds[key] = wb
    except TypeError:  # (not weak-referenceable: not cached)
        pass


def weight_bound(w: np.ndarray, b: np.ndarray | None, transpose: bool = False) -> float:
    """``_weight_bound`` with the weight's part cached per weight array (the generic conv path asks
    on every call; dropped when the array is collected)."""
    key = _key(w, transpose)
    wb = _w_bounds.get(key)
    if wb is None:
        wb = _weight_bound(w, None, transpose)
        _remember(w, key, wb)
    if b is None or not b.size:
        return wb
    # a read-only bias is a model constant (a computed one lives in a writable arena view, rewritten
    # every run): its part is cached as the weight's (~20 us a read, on every call of the generic path)
    bkey = ("bias", *_key(b, False))
    bb = None if b.flags.writeable else _w_bounds.get(bkey)
    if bb is None:
        bb = float(np.abs(b.astype(np.float64, copy=False)).max())
        if not b.flags.writeable:
            _remember(b, bkey, bb)
    return wb + bb


def weight_part(w: np.ndarray, transpose: bool = False) -> float:
    """The weight's part of ``weight_bound`` (max over output channels of sum |w|): what ``atc``
    records per conv weight in the .om (manifest ``weight_bounds``), so a load need not read every
    weight for it (ResNet-50: 100 MB, ~20 ms)."""
    return _weight_bound(w, None, transpose)


def seed(w: np.ndarray, transpose: bool, part: float) -> None:
    """Record ``weight_part(w, transpose)`` computed elsewhere (an .om's ``weight_bounds``) for the
    array ``w`` (a weight as loaded, which is never written). A value no weight has (negative, NaN,
    inf) is not recorded: the guard then computes the bound itself. (A
    negative bound would make ``|x| * bound`` negative for an inf input, proving a NaN-dropping
    fused activation safe; with any value >= 0 a NaN or inf input is always caught, and only a
    finite input whose sums overflow relies on the value being the weight's own.)"""
    part = float(part)
    if 0.0 <= part < math.inf:
        _remember(w, _key(w, transpose), part)


def _weight_bound(w: np.ndarray, b: np.ndarray | None, transpose: bool = False) -> float:
    """max over output channels of sum |w| (+ max |b|): with |x| <= X, |conv(x)| <= X * this + |b|.
    ``transpose``: ConvTranspose's (C, M/G, k...) weight (sums over input channels). inf or NaN
    when the weight or bias is not finite (the guard then always takes the unfused path). For a
    grouped ConvTranspose the sum runs over every group's input channels: an over-estimate."""
    # |w| in the weight's own dtype, summed with a float64 accumulator: exact as before, without a
    # float64 copy of every weight (ResNet-50's load spent 51 ms here, 2x the time of this form)
    wa = np.abs(w) if w.dtype.kind == "f" else np.abs(w.astype(np.float64))
    axes = tuple(i for i in range(wa.ndim) if i != (1 if transpose else 0))
    per_out = wa.sum(axis=axes, dtype=np.float64) if wa.size else np.zeros(1)
    wb = float(per_out.max()) if per_out.size else 0.0
    bb = float(np.abs(b.astype(np.float64, copy=False)).max()) if b is not None and b.size else 0.0
    return wb + bb


def _norm2(a: np.ndarray) -> float:
    """An upper bound of max |a|: sqrt(sum a^2), or max |a| itself where that sum overflows (finite
    values above ~1.8e19 in float32) and for bfloat16 (``_max_abs_bf16``); inf when a value is inf,
    NaN when one is NaN. Emits no numpy warning."""
    if a.size == 0:
        return 0.0
    flat = a.ravel(order="K")  # a view for any dense layout (channels-last included)
    if is_bfloat16(flat.dtype) and flat.flags.c_contiguous:
        return _max_abs_bf16(flat)
    if flat.dtype != np.float32 and flat.dtype != np.float64:
        flat = flat.astype(np.float32)
    # np.errstate (~1 us) because finite values above sqrt(dtype max) (~1.8e19 in float32) overflow
    # the sum of squares: numpy then printed "overflow encountered in dot" on a valid input (and
    # raised FloatingPointError under the app's np.seterr(over="raise"))
    with np.errstate(over="ignore", invalid="ignore"):
        v = float(np.dot(flat, flat))
    if v < math.inf:
        return math.sqrt(v)
    # inf: an inf in ``a`` or finite values whose squares overflowed; NaN: a NaN in ``a``. max |a| from
    # the two extremes (no copy; NaN propagates through max/min, an inf stays inf) tells them apart,
    # so a huge finite input gets its finite bound rather than being taken for a non-finite one
    hi, lo = float(flat.max()), float(flat.min())
    return max(hi, -lo) if hi == hi and lo == lo else math.nan


def _max_abs_bf16(flat: np.ndarray) -> float:
    """max |a| of a contiguous 1-D bfloat16 array from two integer maxima of its bits, with no
    float32 copy (ml_dtypes widens one element at a time: ~0.8 ns a value, most of a bf16 ResNet-50's
    guard reads): a bf16 magnitude's bits (sign cleared) order as its value, so the largest positive
    value is the int16 view's maximum and the largest negative magnitude the uint16 view's maximum
    less the sign bit. inf for an inf, NaN for a NaN (magnitude bits above 0x7F80)."""
    u = flat.view(np.uint16)
    pos = int(flat.view(np.int16).max())  # (negative when every value is negative)
    neg = int(u.max()) - 0x8000  # (negative when no value is)
    mag = max(pos, neg, 0)
    if mag > 0x7F80:
        return math.nan
    if mag == 0x7F80:
        return math.inf
    return float(np.array([mag], np.uint16).view(flat.dtype).astype(np.float32)[0])


def safe(x: np.ndarray, w_bound: float, residual: np.ndarray | None = None) -> bool:
    """True when a conv/matmul of ``x`` with weights of ``weight_bound`` ``w_bound`` (plus
    ``residual``) cannot produce NaN or inf before its activation, so a NaN-dropping fused
    activation gives ONNX Runtime's answer. Always True with the guard disabled."""
    return pre_bound(x, w_bound, residual) < _F32_SAFE  # False for NaN and inf too


# Proven bounds of arrays within one plan run: id -> (weak reference, max |value|, run number).
# A guarded kernel that ran fused on operands it proved finite records the bound of its output,
# so the next guarded kernel reading that very array (conv -> conv chains) needs no read of it;
# a Concat records the bound of its parts it had to read (``record_max``). A record counts only
# in the run that made it (``new_run``, called by the executor as each run starts), because an
# arena view is rewritten every run and a fed array may be refilled between runs. Within the run
# it is sound: an arena view is written only by its producer, once, before any reader (a buffer
# reused for another value is another view object), and is never handed to the caller.
_proven: dict[int, tuple[Any, float, int]] = {}
# A part's propagated bound above this is read again by ``record_max``: multiplied by the next
# layers' weight bounds it would soon pass _F32_SAFE and make the next guarded kernel read all of
# the (larger) concat instead.
_LOOSE = _F32_SAFE * 1e-8
_PROVEN_MAX = 4096
_run = [0]


def new_run() -> None:
    """A plan run starts: records of earlier runs stop counting (``proven`` returns None for
    them), and ``PYCANN_NAN_GUARD`` is read once for the run. Runs on other threads then also
    re-read what they had proven: safe, only slower."""
    _run[0] += 1
    _during_run[0] = config.nan_guard()


def end_run() -> None:
    """A plan run ended: ``enabled`` reads the environment again until the next run begins (a run
    on another thread or a sub-plan ending first only makes the rest of this one read it too)."""
    _during_run[0] = None


def _bound_of(a: np.ndarray) -> float:
    b = proven(a)
    return _norm2(a) if b is None else b


def proven(a: np.ndarray) -> float | None:
    """The bound a guarded producer recorded for the arena view ``a`` (every value finite, |value| at
    most this), or None when none is on record (not computed by one, or computed on its unfused
    path). Lets a max pooling skip its all-NaN-window check and pass the bound on (onednn_pool)."""
    hit = _proven.get(id(a))
    if hit is not None and hit[2] == _run[0] and hit[0]() is a:
        return hit[1]  # type: ignore[no-any-return]
    return None


def pre_bound(x: np.ndarray, w_bound: float, residual: np.ndarray | None = None) -> float:
    """An upper bound of |conv(x) + b + residual| (``w_bound`` from ``weight_bound``): from the
    proven bound of ``x`` when a guarded producer recorded one (``record``), else (or when that is
    too loose to prove safety) from one read of ``x``. inf/NaN when a value is not finite; 0 with the
    guard disabled."""
    if not enabled():
        return 0.0
    r = 0.0 if residual is None else _bound_of(residual)
    bound = _bound_of(x) * w_bound + r
    if not bound < _F32_SAFE and id(x) in _proven:  # a propagated bound too loose: measure x itself
        bound = _norm2(x) * w_bound + (0.0 if residual is None else _norm2(residual))
    return bound


def pass_on(y: np.ndarray, x: Any, through: Callable[[float], float | None]) -> None:
    """Record for the arena view ``y``, computed from ``x`` alone by a kernel that drops no NaN,
    ``through(x's recorded bound)``, or forget ``y``'s bound when ``x`` has none (plain convs,
    AveragePool, small chains: bounds travel on to the next guarded kernel)."""
    bx = proven(x) if isinstance(x, np.ndarray) else None
    record(y, through(bx) if bx is not None else None)


def record_max(y: np.ndarray, parts: Sequence[Any]) -> None:
    """Record for the arena view ``y`` (a Concat of ``parts``) the largest of their bounds: the
    recorded ones, and for the others (or where a record is above ``_LOOSE``) one read of that part,
    recorded for later concats of this run, when at least one part has a record (DenseNet: a layer's
    concat holds every earlier feature map; the one whose propagated bound grew too large is read,
    32 channels, instead of the whole concat by the guarded kernels after it). Forgets ``y``'s
    bound when no part has a record, or a part is not finite float."""
    if not enabled():
        return
    bounds = [proven(p) if isinstance(p, np.ndarray) else None for p in parts]
    if not bounds or all(b is None for b in bounds):
        record(y, None)
        return
    for i, b in enumerate(bounds):
        if b is None or b > _LOOSE:
            p = parts[i]
            bounds[i] = _norm2(p) if isinstance(p, np.ndarray) and p.dtype.kind == "f" else math.inf
            if isinstance(p, np.ndarray):
                record(p, bounds[i])  # the next concat of this run that holds it reads it no more
    top = 0.0
    for b in bounds:
        if b is None or not b < _F32_SAFE:  # (a NaN compares False: forgotten, never max()'s pick)
            record(y, None)
            return
        top = max(top, b)
    record(y, top)


def record(y: np.ndarray, bound: float | None) -> None:
    """Remember ``bound`` (>= max |y|) for the arena view ``y``; None forgets it (``y`` was
    computed by the unfused path, or its bound is unknown)."""
    if bound is None or not bound < _F32_SAFE:
        _proven.pop(id(y), None)
        return
    if len(_proven) >= _PROVEN_MAX:
        _proven.clear()
    _proven[id(y)] = (weakref.ref(y), bound, _run[0])
