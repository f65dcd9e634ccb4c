"""This machine's measured limits for pycann's kernels (issue 23 item 3's references): memory
traffic and the float32 FMA rate, measured the way the kernels run (oneDNN primitives on the plan's
OpenMP team; numpy without oneDNN). The measurement is ``pycann.profiler.peak.measure``, the one
msprof's roofline uses, here at larger sizes:

* ``copy_gbs``: a 256 MiB float32 copy (a oneDNN reorder between two buffers of the same layout),
  bytes read plus bytes written per second: the roof of memory-bound ops, which read their inputs
  and write their outputs once (elementwise, concat, transpose, pooling, resize, norms);
* ``fma_gflops``: a 2048 x 2048 x 2048 float32 matmul (2 x M x N x K flops), near the FMA peak: the
  roof of convolutions and matmuls.

Each is the best of ``--repeats`` timed runs after a warm-up (the limit, not a typical run).
Run from the repository root::

    python bench/machine_limits.py [--repeats 8] [--copy-mib 256] [--gemm 2048]

``python bench/profile_ops.py --model M --limits`` measures the same in its own process and rates
every op of a model against them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Limits:
    """Measured limits: memory traffic in GB/s (read + write), float32 FMA rate in GFLOP/s, and where
    they come from (library, sizes, threads)."""

    copy_gbs: float
    fma_gflops: float
    source: str


def measure(repeats: int = 8, copy_mib: int = 256, gemm: int = 2048) -> Limits:
    """``Limits`` measured now by ``pycann.profiler.peak.measure`` at these sizes."""
    from pycann.profiler.peak import measure as probe

    p = probe(gemm_n=gemm, copy_mib=copy_mib, repeat=repeats)
    return Limits(round(p.bandwidth / 1e9, 1), round(p.flops / 1e9, 1), p.source)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the limits as JSON."""
    ap = argparse.ArgumentParser(description="Measure this machine's memory traffic and float32 FMA rate the way "
                                             "pycann's kernels run (oneDNN), printed as JSON.")
    ap.add_argument("--repeats", type=int, default=8, help="timed runs of each probe; the best counts (default 8)")
    ap.add_argument("--copy-mib", type=int, default=256, help="size of the copied buffer in MiB (default 256)")
    ap.add_argument("--gemm", type=int, default=2048, help="M = N = K of the float32 matmul (default 2048)")
    args = ap.parse_args(argv)
    if args.repeats < 1 or args.copy_mib < 1 or args.gemm < 1:
        ap.error("--repeats, --copy-mib and --gemm must be at least 1")
    print(json.dumps(asdict(measure(args.repeats, args.copy_mib, args.gemm))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
