"""An ElementwiseChain ending in Relu or Clip, fused whole into oneDNN behind the NaN guard.

Why: a pre-activation network (DenseNet's ``BatchNormalization -> Relu`` before every conv,
``bn_to_affine.py`` makes it ``Mul -> Add -> Relu``) ran the ``Mul -> Add`` head as one
multi-threaded oneDNN pass and the Relu as a second, single-threaded numpy pass over the same
tensor (~5x the head's time on 1x256x56x56), because oneDNN's ReLU and clip return 0 / the bound
for a NaN where numpy and ONNX Runtime keep it (``nan_guard``'s docstring). The guard makes the
one-pass form exact: before a run it bounds the value entering the tail from a bound of the
chain's input (recorded by a guarded producer, else one read of it, ``nan_guard.pre_bound``)
and the constant operands' bounds fixed at plan time; a finite bound means no NaN can reach
the tail, so the fused result is numpy's. Otherwise the unfused kernel runs (NaN kept). The
output's bound is recorded for the next guarded consumer (the conv after it reads nothing).

Bounds (|v| <= B for the running value v, over operands c with max |c| = C and min |c| = m):
``v + c``, ``v - c``, ``c - v``: B + C; ``v * c``: B * C; ``v / c``: B / m (m > 0); Sigmoid: 1
(not min(B, 1): sigmoid(0) = 0.5); Tanh: min(B, 1); Relu: B; Clip(lo, hi): max(|clip(-B)|,
|clip(B)|) (not min(B, ...): Clip(5, 10) of values near 0 is 5); a NaN Clip bound: no bound.
A chain with another operand (a run-time tensor, ``c / v``) gets no bound and keeps the unfused
tail.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pycann.kernels.bound import BoundKernel
from pycann.kernels.providers import nan_guard

__all__ = ["bound_map", "guarded_chain"]

BoundMap = Callable[[float], float]
_LIMIT = nan_guard._F32_SAFE  # below float32's maximum, with room for rounding


def _step_map(op: str, idx: int, right: bool, p0: float, p1: float,
              consts: Sequence[np.ndarray | None]) -> BoundMap | None:
    """``bound of the running value before -> after`` one step, or None when not bounded."""
    if op == "Sigmoid":
        return lambda b: 1.0  # sigmoid(v) is in (0, 1) whatever v: sigmoid(0) = 0.5 > a bound below 0.5
    if op == "Tanh":
        return lambda b: min(b, 1.0)
    if op == "Relu":
        return lambda b: b
    if op == "Clip":
        lo, hi = float(p0), float(p1)
        if math.isnan(lo) or math.isnan(hi):
            return None
        # clip(v) = min(max(v, lo), hi) is monotone: over |v| <= B it lies in [clip(-B), clip(B)]
        # (a range that excludes [-B, B], Clip(5, 10) of values near 0, gives 5, not B)
        return lambda b: max(abs(min(max(-b, lo), hi)), abs(min(max(b, lo), hi)))
    c = consts[idx] if 0 <= idx < len(consts) else None
    if c is None or c.size == 0 or c.dtype.kind != "f":
        return None
    with np.errstate(all="ignore"):
        a = np.abs(c.astype(np.float64))
    big, small = float(a.max()), float(a.min())
    if not math.isfinite(big):
        return None
    if op in ("Add", "Sub"):
        return lambda b: b + big
    if op == "Mul":
        return lambda b: b * big
    if op == "Div" and not right and small > 0.0:
        return lambda b: b / small
    return None


def bound_map(steps: Sequence[Sequence[Any]], consts: Sequence[np.ndarray | None]) -> BoundMap | None:
    """``bound of input 0 -> bound of the chain's value after ``steps````, from the constant
    operands ``consts`` (per chain input, None for a run-time one); None when some step is not
    bounded (see the module docstring). A bound that reaches float32's range on the way (the
    float32 value could be inf there, and ``inf * 0`` NaN) is inf from then on, so is a NaN one."""
    maps = []
    for op, idx, right, p0, p1 in steps:
        m = _step_map(str(op), int(idx), bool(right), p0, p1, consts)
        if m is None:
            return None
        maps.append(m)

    def through(b: float) -> float:
        if not b < _LIMIT:
            return math.inf
        for m in maps:
            b = m(b)
            if not b < _LIMIT:
                return math.inf
        return b

    return through


def guarded_chain(fused: BoundKernel, unfused: Callable[..., list[np.ndarray]], head: BoundMap,
                  tail: BoundMap) -> BoundKernel:
    """``fused`` (the whole chain on oneDNN, its NaN-dropping tail included; ``writes_out``) run
    when ``head(bound of input 0)`` is finite below float32's range, else ``unfused`` (NaN kept).
    ``tail`` maps the head's bound to the output's, recorded for the arena view written."""
    pre_bound, record, limit = nan_guard.pre_bound, nan_guard.record, nan_guard._F32_SAFE
    run = fused.run

    def kernel(x: Sequence[Any], a: Mapping[str, Any], out: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
        bx = pre_bound(x[0], 1.0)  # 0.0 with the guard off (PYCANN_NAN_GUARD=0): always fused
        bound = head(bx)
        if bound < limit:
            ys = run(x, a, out)
            if out is not None and ys[0] is out[0]:
                record(out[0], tail(bound) if bx > 0.0 else None)
            return ys  # type: ignore[no-any-return]
        ys = list(unfused(x, a, out)) if out is not None else list(unfused(x, a))
        if out is not None:
            record(out[0], None)
        return ys

    return replace(fused, run=kernel, guarded=fused)
