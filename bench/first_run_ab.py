"""First run A/B of two pycann source trees: import + load + first inference of one bench .om, each
round one fresh process per side, the sides' order rotated every round (issue 23 item 5).

``run_bench.py --first-run`` compares pycann with ONNX Runtime; this compares two versions of pycann
(a worktree of the base commit against the working tree) on the same .om, which is what a change to
the load path needs: one process reads 10-30 % off on a shared 2-core machine, so only many
alternating rounds (and medians) tell a few milliseconds apart. Run ``python -m compileall -q pycann``
in both trees first, so that no timed process compiles a module (the first one otherwise writes the
.pyc files while it is timed). The table names the .om used: the bench cache is shared by every
checkout, and the newest file may come from another one.

Usage (from the repository root; the .om is the newest ``<model>_b<batch>_*.om`` of the bench cache,
made by ``python bench/bench_one.py --engine pycann --model M --compile-only``)::

    git worktree add --detach /tmp/base <base-commit>
    python bench/first_run_ab.py --model tv_densenet121 --trees /tmp/base . --rounds 10
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

# the child: numpy and the input made before the clock starts (ORT's import in run_bench.py is timed
# the same way: after numpy), then import pycann, load the .om, run once
_CHILD = """
import sys, time
import numpy as np
om, shape = sys.argv[1], tuple(int(d) for d in sys.argv[2].split("x"))
x = np.random.default_rng(0).random(shape, dtype=np.float32)
t0 = time.perf_counter()
from pycann.acl.session import InferSession
t1 = time.perf_counter()
s = InferSession(0, om)
t2 = time.perf_counter()
s.infer([x])
t3 = time.perf_counter()
import pycann
print(f"{1e3 * (t1 - t0)} {1e3 * (t2 - t1)} {1e3 * (t3 - t2)} {pycann.__file__}")
"""


def newest_om(cache: pathlib.Path, model: str, batch: int) -> pathlib.Path:
    """The newest ``<model>_b<batch>_*.om`` in ``cache`` (raises SystemExit when there is none)."""
    oms = sorted(cache.glob(f"{model}_b{batch}_*.om"), key=lambda p: p.stat().st_mtime)
    if not oms:
        raise SystemExit(f"no {model}_b{batch}_*.om in {cache}: python bench/bench_one.py --engine pycann "
                         f"--model {model} --batch {batch} --compile-only")
    return oms[-1]


def run_once(tree: pathlib.Path, om: pathlib.Path, shape: str) -> tuple[float, float, float]:
    """(import, load, first) in ms of one fresh process on ``tree``'s pycann. Raises SystemExit with the
    child's error output when it fails, or when the pycann it imported is not ``tree``'s."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(tree)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(om), shape], env=env, cwd="/",
                          capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"the run on {tree} failed:\n{proc.stderr.strip()[-2000:]}")
    out = proc.stdout.split()
    if not pathlib.Path(out[3]).resolve().is_relative_to(tree):
        raise SystemExit(f"{tree}: the child imported {out[3]}, not this tree's pycann")
    return float(out[0]), float(out[1]), float(out[2])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="bench zoo name, e.g. tv_densenet121")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--shape", default="", help="input shape NxCxHxW (default: batch x 3 x 224 x 224)")
    p.add_argument("--trees", nargs=2, required=True, type=pathlib.Path, help="two source trees: A B")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--cache-dir", type=pathlib.Path, default=pathlib.Path.home() / ".cache" / "pycann" / "bench")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be at least 1")
    for t in args.trees:
        if not (t / "pycann" / "__init__.py").is_file():
            p.error(f"{t} is not a pycann source tree (no pycann/__init__.py)")
    om = newest_om(args.cache_dir, args.model, args.batch)
    shape = args.shape or f"{args.batch}x3x224x224"
    trees = [t.resolve() for t in args.trees]
    rows: dict[pathlib.Path, list[tuple[float, float, float]]] = {t: [] for t in trees}
    for r in range(args.rounds):
        for t in (trees if r % 2 == 0 else trees[::-1]):
            rows[t].append(run_once(t, om, shape))
    print(f"{args.model} batch {args.batch}, {om.name}, {args.rounds} rounds (medians, ms)")
    print("| tree | import | load | first | total |\n|---|---:|---:|---:|---:|")
    for t in trees:
        cols = list(zip(*rows[t]))
        total = statistics.median(sum(v) for v in rows[t])
        print(f"| {t} | " + " | ".join(f"{statistics.median(c):.1f}" for c in cols) + f" | **{total:.1f}** |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
