"""Measured selection: time every candidate implementation on one spec and keep the fastest
(``select(..., mode="measure")``, op_select_implmode and AOE's op tuning).

Separate from the static choice in ``pycann.kernels.providers``: it is the one part that runs the
kernels on random inputs, and its per-process cache of timings is its own state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from pycann.kernels.algorithm import Algorithm
from pycann.kernels.providers.specs import ConvSpec, Implementation, OpSpec

log = logging.getLogger("pycann.kernels.providers")

_measured: dict[OpSpec, list[tuple[float, Algorithm]]] = {}


def _random_inputs(spec: OpSpec, weight: np.ndarray | None) -> list[Any]:
    rng = np.random.default_rng(0)
    cd = np.dtype(spec.dtype)

    def r(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape).astype(cd)

    if isinstance(spec, ConvSpec):
        w = weight.astype(cd, copy=False) if weight is not None else r(spec.w_shape)
        m = spec.w_shape[0] if spec.op_type == "Conv" else spec.w_shape[1] * spec.group
        args: list[Any] = [r(spec.x_shape), w, r((m,)), spec.group, spec.win]
        return args + ([spec.out_sizes] if spec.op_type == "ConvTranspose" else []) + [None]
    b = weight.astype(cd, copy=False) if weight is not None else r(spec.b_shape)
    a = r(spec.a_shape)
    if spec.op_type == "MatMul":
        return [a, b, None]
    a = a.T if spec.trans_a else a
    b = b.T if spec.trans_b else b
    return [a, b, None, 1.0, 1.0, None]


def measure(spec: OpSpec, cands: Sequence[Implementation], weight: np.ndarray | None = None,
            budget_s: float = 0.05) -> tuple[Implementation, list[tuple[float, Algorithm]]]:
    """Time each candidate on ``spec`` (best of a few runs after a warm-up); the fastest wins.

    Results are cached per spec for the process. A candidate that raises is skipped.
    """
    if spec not in _measured:
        args = _random_inputs(spec, weight)
        times: list[tuple[float, Algorithm]] = []
        for a in cands:
            try:
                a.fn(*args)
                best, t_end, runs = float("inf"), time.perf_counter() + budget_s, 0
                while runs < 3 or (time.perf_counter() < t_end and runs < 20):
                    t0 = time.perf_counter()
                    a.fn(*args)
                    best = min(best, time.perf_counter() - t0)
                    runs += 1
                times.append((best, a.algo))
            except Exception as e:  # pragma: no cover - a provider bug must not break compilation
                log.info("kernel %s failed on %s: %s", a.key, spec, e)
        _measured[spec] = sorted(times, key=lambda t: t[0])
    by_algo = {a.algo: a for a in cands}
    for _, n in _measured[spec]:
        if n in by_algo:
            return by_algo[n], _measured[spec]
    return cands[0], _measured[spec]
