"""One-row products (a decode step's GEMVs) over cold weights: which weight layout streams fastest.

A batch-1 decode step multiplies one row by every weight of the model once (GPT-2 6L: ~330 MB a
token), so each product streams its weight from L3 or memory. This times ``x (1 x K) @ W (K x N)``
for GPT-2's shapes, cycling through enough copies of W (~320 MB) that each call finds its weight
cold, as in the model:

* ``packed``: oneDNN's brgemm matmul on W reordered once into its blocked layout (what
  ``kernels/bind_generic.packed_matmul`` runs today, for every row count);
* ``gemm_ba``: oneDNN's ``gemm:jit`` matmul (its gemv kernel at one row) on W stored transposed,
  N x K row-major (the ``ba`` layout), with the same bias + residual post-ops;
* ``numpy``: numpy's ``matmul`` (OpenBLAS sgemv on its own pthreads).

Prints median us and GB/s of weight read per call, the layouts interleaved in rounds.
``python bench/gemv_layouts.py [--shapes 768x2304 768x3072 3072x768 768x50257] [--rounds 3]``
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pycann.kernels.providers import onednn_capi as capi  # noqa: E402
from pycann.kernels.providers import onednn_capi_ops as capi_ops  # noqa: E402
from pycann.kernels.providers import onednn_matmul as om  # noqa: E402

COLD_BYTES = 320e6  # weight copies cycled through per layout: more than the L2s, about the model's weights


def _gemm_plan(k: int, n: int) -> om.MatmulPlan:
    """``x @ W + bias + residual`` with W given at run time as N x K row-major, on ``gemm:jit:f32``."""
    made = capi_ops.matmul_pd

    def walked(*args: object, **kw: object) -> capi.PrimitiveDesc:
        pd = made(*args, **kw)
        while pd.impl_info() != "gemm:jit:f32":
            if not pd.next_impl():
                raise capi.DnnlError("gemm:jit:f32 not offered", 3)
        return pd

    om.capi_ops.matmul_pd = walked  # type: ignore[assignment]
    try:
        return om.MatmulPlan(((1, k), (k, 1)), ((k, n), (1, k)), ((1, n), (n, 1)), ((1, n), (n, 1)),
                             [("binary_add", ((1, n), (n, 1)))])
    finally:
        om.capi_ops.matmul_pd = made  # type: ignore[assignment]


def _median_us(calls: list[Callable[[], object]], rounds: int = 6) -> float:
    times = []
    for r in range(rounds):
        for f in calls:
            t0 = time.perf_counter()
            f()
            if r:  # (the first round warms the code, not the weights)
                times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e6


def run(k: int, n: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    copies = max(2, int(COLD_BYTES // (k * n * 4)))
    ws = [rng.standard_normal((k, n)).astype(np.float32) for _ in range(copies)]
    wts = [np.ascontiguousarray(w.T) for w in ws]
    x, bias = rng.standard_normal((1, k)).astype(np.float32), rng.standard_normal((1, n)).astype(np.float32)
    res, y = rng.standard_normal((1, n)).astype(np.float32), np.empty((1, n), np.float32)
    packed = []
    for w in ws:
        p = om.MatmulPlan(((1, k), (k, 1)), ((k, n), None), ((1, n), (n, 1)), ((1, n), (n, 1)),
                          [("binary_add", ((1, n), (n, 1)))])
        p.pack(w)
        packed.append(p)
    g = _gemm_plan(k, n)
    ptr = capi.ptr
    layouts: dict[str, list[Callable[[], object]]] = {
        f"packed ({packed[0].impl})": [lambda p=p: p.run(ptr(x), None, ptr(y), ptr(bias), ptr(res)) for p in packed],
        f"gemm_ba ({g.impl})": [lambda wt=wt: g.run(ptr(x), ptr(wt), ptr(y), ptr(bias), ptr(res)) for wt in wts],
        "numpy (OpenBLAS)": [lambda w=w: np.add(np.matmul(x, w, out=y), bias + res, out=y) for w in ws],
    }
    want = x @ ws[0] + bias + res
    for name, calls in layouts.items():
        calls[0]()
        if not np.allclose(y, want, rtol=1e-3, atol=1e-3):
            raise SystemExit(f"{name}: wrong result")
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, calls in layouts.items():
            us = _median_us(calls)
            best[name] = min(best.get(name, us), us)
    mb = k * n * 4 / 1e6
    for name, us in best.items():
        print(f"| {k}x{n} ({mb:.1f} MB) | {name} | {us:.0f} | {mb / us * 1e3:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["768x2304", "768x3072", "3072x768", "768x50257"])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print("| K x N | layout | best median us | GB/s |\n|---|---|---:|---:|")
    for s in args.shapes:
        k, n = (int(v) for v in s.split("x"))
        run(k, n, args.rounds)


if __name__ == "__main__":
    main()
