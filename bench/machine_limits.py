"""This machine's measured limits for pycann's kernels (issue 23 item 3): memory bandwidth and the
float32 FMA rate, measured the way the kernels run (oneDNN primitives on the plan's OpenMP team).

* ``copy_gbs``: a oneDNN reorder copying a 256 MB float32 buffer into another (same layout), bytes
  read plus bytes written per second: the reference for memory-bound ops, which read their inputs
  and write their outputs once (elementwise, concat, transpose, pooling, resize, norms).
* ``fma_gflops``: a oneDNN float32 matmul of 2048 x 2048 x 2048 (2 x M x N x K flops per run):
  the reference for convolutions and matmuls (a tuned GEMM of that size runs near the FMA peak).

Each figure is the best of ``repeats`` timed runs after a warm-up (the limit, not a typical run).
Run from the repository root: ``python bench/machine_limits.py`` prints them as JSON;
``bench/profile_ops.py --limits`` measures them in its own process and rates each op against them.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Limits:
    """Measured limits: memory traffic in GB/s (read + write), float32 FMA rate in GFLOP/s."""

    copy_gbs: float
    fma_gflops: float
    threads: int


def _best(run: object, repeats: int) -> float:
    """Smallest wall time of ``repeats`` calls of ``run`` after one warm-up, in seconds."""
    run()  # type: ignore[operator]
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()  # type: ignore[operator]
        best = min(best, time.perf_counter() - t0)
    return best


def measure(repeats: int = 8, copy_mb: int = 256, gemm: int = 2048) -> Limits:
    """Measure ``Limits`` with oneDNN on the current OpenMP team (``RuntimeError`` without libdnnl)."""
    from pycann.kernels.providers import onednn, openmp
    from pycann.kernels.providers import onednn_capi as capi

    if not onednn.available():
        raise RuntimeError("machine_limits needs oneDNN (onednn-cpu-gomp)")
    n = copy_mb * (1 << 20) // 4
    a, b = np.ones(n, np.float32), np.empty(n, np.float32)
    md = capi.MemoryDesc.strided((n,), (1,))
    copy = capi.Reorder(md, md)
    t = _best(lambda: copy.run(capi.ptr(a), capi.ptr(b)), repeats)
    copy_gbs = 2 * a.nbytes / t / 1e9

    x = np.random.default_rng(0).standard_normal((gemm, gemm)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((gemm, gemm)).astype(np.float32)
    y = np.empty((gemm, gemm), np.float32)
    dense = capi.MemoryDesc.strided((gemm, gemm), (gemm, 1))
    pd = capi.matmul_pd(dense, dense, None, dense, capi.Attr([]))
    prim = capi.Primitive(pd, [(capi.ARG_SRC, capi.Memory(dense, capi.ptr(x))),
                               (capi.ARG_WEIGHTS, capi.Memory(dense, capi.ptr(w))),
                               (capi.ARG_DST, capi.Memory(dense, capi.ptr(y)))])
    t = _best(prim.execute, max(3, repeats // 2))
    fma = 2.0 * gemm ** 3 / t / 1e9
    return Limits(round(copy_gbs, 1), round(fma, 1), openmp.team())


def main() -> int:
    """Print the limits as JSON."""
    print(json.dumps(asdict(measure())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
