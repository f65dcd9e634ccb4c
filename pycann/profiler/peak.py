"""The machine's peak FLOP/s and memory bandwidth, the two roofs of the roofline verdict.

Measured once per process with a quick probe in the library pycann's kernels run on: with oneDNN
(the default provider), the best of a few fp32 matmul primitives and of a few large reorder copies
on the current OpenMP team; without it, the same through numpy (its BLAS, ``np.copyto``). Copies
count read + write bytes. About 0.1-0.3 s. numpy's BLAS is not the roof to use where the convs run
on oneDNN: on an AVX-512 machine whose OpenBLAS is held to AVX2 it measured half the FMA rate.
``PYCANN_PEAK_GFLOPS`` / ``PYCANN_PEAK_GBPS`` override either number (the source then says
``env``). The summary always prints where the numbers came from. ``bench/machine_limits.py``
prints the same measurement at larger sizes.
"""

from __future__ import annotations

import math
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
    """Run the probe now (no caching): a ``gemm_n``³ fp32 GEMM and a ``copy_mib`` MiB copy, in
    oneDNN when it is an allowed provider (``PYCANN_PROVIDERS``) that loads (``_measure_onednn``),
    else, or when its probe fails, in numpy. ``ValueError`` for a size or ``repeat`` below 1."""
    if min(gemm_n, copy_mib, repeat) < 1:
        raise ValueError(f"peak probe sizes must be at least 1: gemm_n={gemm_n}, copy_mib={copy_mib}, "
                         f"repeat={repeat}")
    try:
        from pycann.kernels import providers

        if providers.available("onednn"):  # (not with PYCANN_PROVIDERS=numpy: the kernels run in numpy then)
            from pycann.kernels.providers import onednn_capi as capi

            try:
                return _measure_onednn(gemm_n, copy_mib, repeat)
            except capi.DnnlError:  # (a primitive oneDNN does not make here: numpy's probe below)
                pass
    except (ImportError, OSError):  # (no libdnnl: numpy's probe below)
        pass
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


def _measure_onednn(gemm_n: int, copy_mib: int, repeat: int) -> Peaks:
    """``measure`` with a oneDNN f32 matmul primitive and a oneDNN reorder (same layout) copy."""
    from pycann.kernels.providers import onednn_capi as capi
    from pycann.kernels.providers import onednn_capi_ops as capi_ops
    from pycann.kernels.providers import openmp

    n = copy_mib * 2**18
    src, dst = np.ones(n, np.float32), np.empty(n, np.float32)
    flat = capi.MemoryDesc.strided((n,), (1,))
    copy = capi.Reorder(flat, flat)
    copy.run(capi.ptr(src), capi.ptr(dst))  # warm-up (OpenMP team start, first touch)
    t_copy = _best(lambda: copy.run(capi.ptr(src), capi.ptr(dst)), repeat)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    b = rng.standard_normal((gemm_n, gemm_n), dtype=np.float32)
    c = np.empty_like(a)
    md = capi.MemoryDesc.strided((gemm_n, gemm_n), (gemm_n, 1))
    prim = capi.Primitive(capi_ops.matmul_pd(md, md, None, md, capi_ops.Attr([])),
                          [(capi.ARG_SRC, capi.Memory(md, capi.ptr(a))), (capi.ARG_WEIGHTS, capi.Memory(md, capi.ptr(b))),
                           (capi.ARG_DST, capi.Memory(md, capi.ptr(c)))])
    prim.execute()
    t_gemm = _best(prim.execute, repeat)
    return Peaks(2.0 * gemm_n**3 / t_gemm, 2.0 * src.nbytes / t_copy,
                 f"measured: oneDNN {gemm_n}x{gemm_n} fp32 matmul, {copy_mib} MiB reorder copy, "
                 f"{openmp.team() or 1} threads (best of {repeat})")


def _override(name: str, raw: str | None) -> float | None:
    """The env override ``raw`` of ``name`` (None: unset or empty); ``ConfigError`` unless it is a
    finite number > 0 (0, NaN or inf made every roofline verdict meaningless)."""
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise config.ConfigError(f"{name}={raw!r}: expected a positive number")
    return v


def machine_peaks() -> Peaks:
    """The peaks for this process: env overrides, else measured on first call and cached."""
    global _CACHED
    if _CACHED is not None:
        return _CACHED
    raw_f, raw_b = config.peak_overrides()
    env_f, env_b = _override("PYCANN_PEAK_GFLOPS", raw_f), _override("PYCANN_PEAK_GBPS", raw_b)
    if env_f is not None and env_b is not None:
        _CACHED = Peaks(env_f * 1e9, env_b * 1e9, "env: PYCANN_PEAK_GFLOPS / PYCANN_PEAK_GBPS")
        return _CACHED
    p = measure()
    if env_f is not None or env_b is not None:
        p = Peaks(env_f * 1e9 if env_f is not None else p.flops, env_b * 1e9 if env_b is not None else p.bandwidth,
                  p.source + " (partly overridden by env)")
    _CACHED = p
    return p
