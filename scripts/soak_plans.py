"""Soak: dynamic-shape models fed many input shapes in turn keep their memory bounded.

PP-OCRv4 rec (``48 x W``, ``--rec-shapes`` widths from 64 to 1024) and PP-OCRv4 det
(``--det-shapes`` image sizes, multiples of 32 from 128 to 640: the sizes ``bench/dynamic.py``
uses) are run ``--calls`` times in all, interleaved in a shuffled cycle over every (model,
shape) pair, in a fresh process per plan-cache budget (``PYCANN_PLAN_CACHE_BYTES``, per
model): the default, and one small enough that plans are evicted all the time. The resident
set is sampled every ``--every`` calls; after two cycles (every plan built, after its shape's
first call, and its arena allocated, by its first hit) it must stay flat: the script prints the samples and exits 1 when the last sample exceeds the
post-warm-up one by more than ``--tolerance`` (default 10%). With ``--det-shapes 0`` only rec
runs.

    python scripts/fetch_models.py rapidocr_ppocrv4_rec rapidocr_ppocrv4_det
    python scripts/soak_plans.py                       # 5,000 calls over 52 + 30 shapes, two budgets
    python scripts/soak_plans.py --calls 1000 --rec-shapes 24 --det-shapes 0 --budgets 8M

Issue 14 item 3 / issue 15 item 3; results go to bench/RESULTS.md ("Soak").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Sequence

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
MODELS = pathlib.Path(os.environ.get("PYCANN_MODEL_DIR", str(pathlib.Path.home() / ".cache" / "pycann" / "models")))


def rss_mb() -> float:
    """This process's resident set (``VmRSS``), MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def shapes(n_rec: int, n_det: int) -> list[tuple[str, tuple[int, ...]]]:
    """(model, input shape) pairs: rec 48 x W for ``n_rec`` widths, det for ``n_det`` distinct sizes."""
    rec: list[tuple[str, tuple[int, ...]]] = [("rec", (1, 3, 48, int(w))) for w in dict.fromkeys(np.linspace(64, 1024, n_rec).astype(int))]
    sizes: dict[tuple[int, int], None] = {}
    i = 0
    while len(sizes) < n_det:  # bench/dynamic.py's sizes, continued past its first 30 if asked for more
        sizes[(32 * (4 + i % 12), 32 * (4 + (7 * i) % 17))] = None
        i += 1
    return rec + [("det", (1, 3, h, w)) for h, w in sizes]


def soak(calls: int, n_rec: int, n_det: int, every: int) -> dict[str, object]:
    """Run in this process; returns the RSS samples and each model's plan-cache counters."""
    from pycann.ge.run.model import LoadedModel

    pairs = shapes(n_rec, n_det)
    names = sorted({m for m, _ in pairs})
    models = {m: LoadedModel.from_file(MODELS / f"rapidocr_ppocrv4_{m}.onnx") for m in names}
    rng = np.random.default_rng(0)
    xs = [rng.random(s, dtype=np.float32) for _, s in pairs]
    samples: list[tuple[int, float]] = [(0, round(rss_mb(), 1))]
    order: list[int] = []
    t0 = time.perf_counter()
    for i in range(calls):
        if not order:
            order = list(rng.permutation(len(pairs)))
        k = order.pop()
        models[pairs[k][0]].run([xs[k]])
        if i + 1 == len(pairs):
            # background builds (docs/dynamic-shapes.md): the first cycle queued every shape's
            # plan; the post-warm-up sample is taken once they are all built
            for model in models.values():
                model.executor.wait_builds()
        if (i + 1) % every == 0 or i + 1 in (len(pairs), 2 * len(pairs), calls):
            gc.collect()
            samples.append((i + 1, round(rss_mb(), 1)))
            print(f"call {i + 1}: RSS {samples[-1][1]:.1f} MB, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out: dict[str, object] = {"calls": calls, "shapes": len(pairs), "seconds": round(time.perf_counter() - t0, 1),
                              "rss": samples}
    for m, model in models.items():
        st = model.plan_cache_stats()
        out[m] = {"summary": st.summary(), "built": st.built, "evictions": st.evictions, "bytes_held": st.bytes_held,
                  "max_bytes": st.max_bytes, "plans": st.plans}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--rec-shapes", type=int, default=52, help="distinct rec widths")
    p.add_argument("--det-shapes", type=int, default=30, help="distinct det sizes (0: rec only)")
    p.add_argument("--every", type=int, default=250, help="RSS sample interval, calls")
    p.add_argument("--budgets", nargs="+", default=["default", "24M"], help="PYCANN_PLAN_CACHE_BYTES values")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        print(json.dumps(soak(a.calls, a.rec_shapes, a.det_shapes, a.every)))
        return 0
    ok = True
    for budget in a.budgets:
        env = dict(os.environ)
        if budget != "default":
            env["PYCANN_PLAN_CACHE_BYTES"] = budget
        proc = subprocess.run([sys.executable, __file__, "--worker", "--calls", str(a.calls), "--rec-shapes",
                               str(a.rec_shapes), "--det-shapes", str(a.det_shapes), "--every", str(a.every)],
                              stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)  # progress on stderr
        if proc.returncode != 0:
            print(f"budget {budget}: failed (exit {proc.returncode}; its error is above)")
            ok = False
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        rss = r["rss"]
        # after two cycles: every shape's plan built (after its first call, background builds) and
        # its arena allocated (by its first hit, in the second cycle); one cycle with fewer calls
        cycles = 2 if r["calls"] >= 2 * r["shapes"] else 1
        warm = next(v for n, v in rss if n >= cycles * r["shapes"])
        last = rss[-1][1]
        peak = max(v for _, v in rss)
        flat = last <= warm * (1 + a.tolerance)
        ok &= flat
        print(f"budget {budget}: {r['calls']} calls over {r['shapes']} shapes in {r['seconds']} s; RSS MB at start "
              f"{rss[0][1]:.0f}, after {cycles} cycle(s) {warm:.0f}, peak {peak:.0f}, last {last:.0f} "
              f"({(last / warm - 1) * 100:+.1f}%): {'flat' if flat else 'GROWS'}")
        for m in ("rec", "det"):
            if m in r:
                print(f"  {m}: {r[m]['summary']}")
        print("  samples (call: MB): " + ", ".join(f"{n}: {v:.0f}" for n, v in rss))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
