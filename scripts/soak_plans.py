"""Soak: a dynamic-shape model fed many input shapes in turn keeps its memory bounded.

PP-OCRv4 rec (``48 x W``) is run ``--calls`` times over ``--shapes`` widths in a shuffled
cycle, in a fresh process per plan-cache budget (``PYCANN_PLAN_CACHE_BYTES``): the default,
and one small enough that plans are evicted all the time. The resident set is sampled every
``--every`` calls; after the first cycle (every plan built once) it must stay flat: the
script prints the samples and exits 1 when the last sample exceeds the post-warm-up one by
more than ``--tolerance`` (default 10%).

    python scripts/fetch_models.py rapidocr_ppocrv4_rec
    python scripts/soak_plans.py                       # 5,000 calls over 30 widths, two budgets
    python scripts/soak_plans.py --calls 1000 --budgets 16M

Issue 14 item 3 / issue 15 item 3; results go to bench/RESULTS.md.
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
MODEL = pathlib.Path(os.environ.get("PYCANN_MODEL_DIR", str(pathlib.Path.home() / ".cache" / "pycann" / "models"))) \
    / "rapidocr_ppocrv4_rec.onnx"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def soak(calls: int, n_shapes: int, every: int) -> dict[str, object]:
    """Run in this process; returns the RSS samples and the plan-cache counters."""
    from pycann.ge.model import LoadedModel

    m = LoadedModel.from_file(MODEL)
    widths = np.linspace(64, 640, n_shapes).astype(int)
    rng = np.random.default_rng(0)
    xs = [rng.random((1, 3, 48, int(w)), dtype=np.float32) for w in widths]
    samples: list[tuple[int, float]] = []
    order: list[int] = []
    t0 = time.perf_counter()
    for i in range(calls):
        if not order:
            order = list(rng.permutation(n_shapes))
        m.run([xs[order.pop()]])
        if (i + 1) % every == 0 or i + 1 == n_shapes:
            samples.append((i + 1, round(rss_mb(), 1)))
    st = m.plan_cache_stats()
    return {"calls": calls, "shapes": n_shapes, "seconds": round(time.perf_counter() - t0, 1), "rss": samples,
            "stats": st.summary(), "max_bytes": st.max_bytes, "evictions": st.evictions, "built": st.built}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--shapes", type=int, default=30)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--budgets", nargs="+", default=["default", "24M"], help="PYCANN_PLAN_CACHE_BYTES values")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(soak(a.calls, a.shapes, a.every)))
        return 0
    ok = True
    for budget in a.budgets:
        env = dict(os.environ)
        if budget != "default":
            env["PYCANN_PLAN_CACHE_BYTES"] = budget
        proc = subprocess.run([sys.executable, __file__, "--worker", "--calls", str(a.calls), "--shapes", str(a.shapes),
                               "--every", str(a.every)], capture_output=True, text=True, env=env, cwd=REPO)
        if proc.returncode != 0:
            print(f"budget {budget}: failed: {proc.stderr.strip().splitlines()[-1:]}")
            ok = False
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rss = r["rss"]
        warm = next(v for n, v in rss if n >= a.shapes)  # after every shape was seen once
        last = rss[-1][1]
        peak = max(v for _, v in rss)
        flat = last <= warm * (1 + a.tolerance)
        ok &= flat
        print(f"budget {budget}: {r['calls']} calls over {r['shapes']} widths in {r['seconds']} s; RSS MB after "
              f"the first cycle {warm:.0f}, peak {peak:.0f}, last {last:.0f} ({(last / warm - 1) * 100:+.1f}%): "
              f"{'flat' if flat else 'GROWS'}")
        print(f"  {r['stats']}")
        print("  samples (call: MB): " + ", ".join(f"{n}: {v:.0f}" for n, v in rss))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
