"""The machine's peak FLOP/s and memory bandwidth, the two roofs of the roofline verdict.

Measured once per process with a quick numpy probe (best of a few fp32 GEMMs through the BLAS
numpy uses, and best of a few large ``np.copyto`` copies counting read + write bytes), about
0.1-0.3 s. ``PYCANN_PEAK_GFLOPS`` / ``PYCANN_PEAK_GBPS`` override either number (the source
then says ``env``). The summary always prints where the numbers came from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from pycann import config


@dataclass(frozen=True)
class Peaks:
    """``flops`` in FLOP/s, ``bandwidth`` in bytes/s, ``source`` a human-readable origin."""

    flops: float
    bandwidth: float
    source: str

    @property
    def balance(self) -> float:
        """Machine balance: FLOPs per byte at which both roofs meet."""
        return self.flops / self.bandwidth if self.bandwidth else 0.0


_CACHED: Peaks | None = None


def _best(fn: object, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


def measure(gemm_n: int = 768, copy_mib: int = 64, repeat: int = 3) -> Peaks:
    """Run the probe now (no caching): ``gemm_n``³ fp32 GEMM and a ``copy_mib`` MiB memcpy."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    b = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    c = np.empty_like(a)
    np.matmul(a, b, out=c)  # warm-up (BLAS thread pool start)
    t_gemm = _best(lambda: np.matmul(a, b, out=c), repeat)
    src = np.ones(copy_mib * 2**18, dtype=np.float32)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    t_copy = _best(lambda: np.copyto(dst, src), repeat)
    flops = 2.0 * gemm_n**3 / t_gemm
    bw = 2.0 * src.nbytes / t_copy
    return Peaks(flops, bw, f"measured: numpy {gemm_n}x{gemm_n} fp32 GEMM, {copy_mib} MiB memcpy (best of {repeat})")


def machine_peaks() -> Peaks:
    """The peaks for this process: env overrides, else measured on first call and cached."""
    global _CACHED
    if _CACHED is not None:
        return _CACHED
    env_f, env_b = config.peak_overrides()
    if env_f and env_b:
        _CACHED = Peaks(float(env_f) * 1e9, float(env_b) * 1e9, "env: PYCANN_PEAK_GFLOPS / PYCANN_PEAK_GBPS")
        return _CACHED
    p = measure()
    if env_f or env_b:
        p = Peaks(float(env_f) * 1e9 if env_f else p.flops, float(env_b) * 1e9 if env_b else p.bandwidth,
                  p.source + " (partly overridden by env)")
    _CACHED = p
    return p
