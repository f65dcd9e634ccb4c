"""How long libgomp's workers spin on this CPU: the cost of a small oneDNN call after an idle gap.

``GOMP_SPINCOUNT`` counts PAUSE rounds, and a PAUSE costs ~8-10 ns on some Xeons and ~24 ns on Zen 5,
so the same count spins 3x longer on one machine than on another (pycann/config.py ``BRIEF_SPINCOUNT``,
docs/kernels.md "Threads"). For each spin count, one fresh process times a oneDNN LayerNormalization of
one 768-value row (~10 us while the worker spins) right after a busy-wait gap of each length: where the
call jumps to 40-150 us, the worker had gone to sleep and the call paid its wake-up. The gap where that
happens is the spin's length on this machine.

Usage (from the repository root)::

    python bench/omp_spin.py                                # spin counts 2000 10000 30000
    python bench/omp_spin.py --spins 2000 5000 --gaps 0 20 40 80 160 320
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]


def _cell(gaps: Sequence[float], calls: int) -> dict[str, float]:
    """Median call time (us) of a one-row LayerNormalization after each busy-wait gap (us)."""
    sys.path.insert(0, str(REPO))
    from pycann.kernels.providers import onednn_norm

    rng = np.random.default_rng(0)
    scale, bias = rng.standard_normal(768).astype(np.float32), rng.standard_normal(768).astype(np.float32)
    k = onednn_norm.bound_layer_norm((1, 1, 768), 768, scale, bias, 1e-5)
    if k is None:
        raise SystemExit("oneDNN is not available")
    x = rng.standard_normal((1, 1, 768)).astype(np.float32)
    out: dict[str, float] = {}
    for gap in gaps:
        times = []
        for _ in range(calls):
            k.run([x], {})  # the region whose worker then spins (or sleeps)
            end = time.perf_counter() + gap * 1e-6
            while time.perf_counter() < end:  # a busy wait: the caller's CPU stays awake
                pass
            t0 = time.perf_counter()
            k.run([x], {})
            times.append(time.perf_counter() - t0)
        out[f"{gap:g}"] = float(np.median(times) * 1e6)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spins", type=int, nargs="*", default=[2000, 10000, 30000], help="GOMP_SPINCOUNT values")
    ap.add_argument("--gaps", type=float, nargs="*", default=[0, 10, 20, 40, 80, 160, 320, 640, 1280],
                    help="idle gaps before the timed call, us")
    ap.add_argument("--calls", type=int, default=200, help="timed calls per gap")
    ap.add_argument("--cell", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cell:
        print(json.dumps(_cell(args.gaps, args.calls)))
        return 0
    print("| GOMP_SPINCOUNT | " + " | ".join(f"{g:g} us" for g in args.gaps) + " |")
    print("|---:|" + "---:|" * len(args.gaps))
    for spin in args.spins:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "PYCANN_OMP_WAIT_POLICY")}
        env["GOMP_SPINCOUNT"] = str(spin)
        cmd = [sys.executable, __file__, "--cell", "--calls", str(args.calls), "--gaps", *map(str, args.gaps)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, check=True)
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"| {spin} | " + " | ".join(f"{row[f'{g:g}']:.0f}" for g in args.gaps) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
