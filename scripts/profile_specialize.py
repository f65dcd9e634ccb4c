"""Where a new input shape's plan build goes: specialisation (shape inference + folding, passes),
memory plans, binding (``Plan()``: kernels, oneDNN primitives), first and second run.

Wall and (for specialisation and binding) this thread's CPU milliseconds, medians over ``--shapes`` new shapes of PP-OCRv4 rec (48 x W) or det (H x W), after a first one
that also builds the model's template (docs/dynamic-shapes.md). Wall milliseconds: run on a quiet
machine under the bench lock and read them as proportions.

Usage (from the repository root)::

    python scripts/profile_specialize.py rec
    python scripts/profile_specialize.py det --shapes 12
"""

from __future__ import annotations

import argparse
import collections
import os
import pathlib
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from pycann.ge.compile import compiler
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.specialize import SpecializeMemo, specialize
from pycann.ge.planning.candidates import arena_candidates, inplace_candidates
from pycann.ge.planning.memory import plan_memory
from pycann.ge.run.plan import Plan

MODELS = pathlib.Path(os.environ.get("PYCANN_MODEL_DIR", str(pathlib.Path.home() / ".cache" / "pycann" / "models")))


def _timed(acc: dict[str, float], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc[key] += time.perf_counter() - t
    return wrapper


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", choices=("rec", "det"))
    p.add_argument("--shapes", type=int, default=12)
    a = p.parse_args(argv)
    g = compile_model(MODELS / f"rapidocr_ppocrv4_{a.model}.onnx").graph
    n = a.shapes
    shapes = ([(1, 3, 48, int(w)) for w in np.linspace(64, 1024, n).astype(int)] if a.model == "rec" else
              [(1, 3, 32 * (4 + i % 12), 32 * (4 + (7 * i) % 17)) for i in range(n)])
    acc: dict[str, float] = collections.defaultdict(float)
    for fn in ("infer_graph", "fold_graph", "infer_and_fold"):  # (infer_and_fold: absent before templates)
        if hasattr(compiler, fn):
            setattr(compiler, fn, _timed(acc, "infer+fold", getattr(compiler, fn)))
    compiler.run_pipeline = _timed(acc, "passes", compiler.run_pipeline)
    memo = SpecializeMemo()
    rows: dict[str, list[float]] = collections.defaultdict(list)
    rng = np.random.default_rng(0)
    for i, s in enumerate(shapes):
        acc.clear()
        c0, t0 = time.thread_time(), time.perf_counter()
        sg = specialize(g, [s], None, memo)
        c1, t1 = time.thread_time(), time.perf_counter()
        arena = plan_memory(sg, only=arena_candidates(sg), share=inplace_candidates(sg))
        plan_memory(sg)
        t2 = time.perf_counter()
        c2 = time.thread_time()
        plan = Plan(sg, memory=arena)
        c3, t3 = time.thread_time(), time.perf_counter()
        x = rng.random(s, dtype=np.float32)
        plan.run([x])
        t4 = time.perf_counter()
        plan.run([x])
        t5 = time.perf_counter()
        if i:
            for key, v in (("specialize", t1 - t0), ("of which infer+fold", acc["infer+fold"]),
                           ("of which passes", acc["passes"]), ("memory plans", t2 - t1),
                           ("binding", t3 - t2), ("first run", t4 - t3), ("second run", t5 - t4),
                           ("specialize CPU", c1 - c0), ("binding CPU", c3 - c2)):
                rows[key].append(v * 1e3)
    print(f"{a.model}: median ms over {n - 1} new shapes: "
          + "; ".join(f"{k} {np.median(v):.1f}" for k, v in rows.items())
          + f"; pass pipeline runs {getattr(memo, 'pipeline_runs', '-')} (load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
