"""Calls spaced by idle gaps, as a service sees them: pycann against ONNX Runtime at batch 1.

Back-to-back loops (bench/run_bench.py) keep every thread and vCPU hot. A service answers a request,
then waits for the next: between calls the OpenMP workers sleep, and on a VM the next call's
wake-ups (and where the guest scheduler puts the woken threads) cost more than in a loop. Each cell
is one fresh process: load the model, warm-up calls at the same pace for 0.6 s, then ``--calls`` calls each after a
``--gap`` second sleep; the median call latency is reported. Engines take turns, process by process,
for ``--rounds`` rounds (the host drifts). An engine is ``NAME[:VAR=VALUE,...]``: ``ort`` (2 intra-op
threads, as pycann's team on this machine) or ``pycann`` (the .onnx compiled in the process), with
environment variables for that process, e.g. ``pycann:PYCANN_OMP_BIND=off``.

Usage (from the repository root; models from ``scripts/export_torch_models.py``)::

    python bench/idle_gaps.py --models tv_mobilenet_v2 tv_squeezenet1_1 --gaps 0 0.03 0.1
    python bench/idle_gaps.py --engines ort pycann pycann:PYCANN_OMP_BIND=off --rounds 3
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
from typing import Any

import numpy as np

MODELS = pathlib.Path(os.environ.get("PYCANN_MODEL_DIR", str(pathlib.Path.home() / ".cache" / "pycann" / "models")))
REPO = pathlib.Path(__file__).resolve().parents[1]
ENGINES = ("ort", "pycann")


def _cell(name: str, model: str, gap: float, calls: int) -> dict[str, Any]:
    """One process's cell: median and p90 call latency (ms) of ``calls`` calls spaced by ``gap`` s."""
    path = MODELS / f"{model}.onnx"
    pinned = None
    if name == "ort":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 2, 1, 3
        s = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        inp = s.get_inputs()[0]
        shape = [d if isinstance(d, int) else 1 for d in inp.shape]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        run = lambda: s.run(None, {inp.name: x})  # noqa: E731
    elif name == "pycann":
        from pycann.ge.run.model import LoadedModel

        m = LoadedModel.from_file(path)
        shape = [d if d > 0 else 1 for d in m.inputs[0].shape]
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        run = lambda: m.run([x])  # noqa: E731
    else:
        raise SystemExit(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")
    # warm-up at the same pace for 0.6 s: pycann's governor watches two 0.25 s windows before it calls
    # the machine quiet (ge/run/contention.py), so the first half second is not what a service sees later
    t_end = time.perf_counter() + 0.6
    while True:
        run()
        if time.perf_counter() > t_end:
            break
        time.sleep(gap)
    times = []
    for _ in range(calls):
        time.sleep(gap)
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    if name == "pycann":
        from pycann.kernels.providers import omp_affinity

        p = omp_affinity.pinning()
        pinned = bool(p is not None and p.workers_pinned)
    ms = np.array(times) * 1e3
    return {"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)), "pinned": pinned}


def _child(spec: str, model: str, gap: float, calls: int) -> dict[str, Any]:
    name, _, env_s = spec.partition(":")
    env = dict(os.environ)
    for kv in filter(None, env_s.split(",")):
        k, _, v = kv.partition("=")
        env[k] = v
    out = subprocess.run([sys.executable, __file__, "--worker", name, model, str(gap), str(calls)], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        lines = (out.stderr.strip() or out.stdout.strip()).splitlines() or ["failed"]
        return {"error": lines[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["tv_mobilenet_v2", "tv_squeezenet1_1", "tv_resnet50"])
    p.add_argument("--engines", nargs="+", default=["ort", "pycann", "pycann:PYCANN_OMP_BIND=off"])
    p.add_argument("--gaps", nargs="+", type=float, default=[0.0, 0.03, 0.1])
    p.add_argument("--calls", type=int, default=40)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        name, model, gap, calls = a.worker
        print(json.dumps(_cell(name, model, float(gap), int(calls))))
        return 0
    bad = [e for e in a.engines if e.partition(":")[0] not in ENGINES]
    if bad:
        p.error(f"unknown engine(s) {', '.join(bad)}: expected NAME[:VAR=VALUE,...] with NAME one of {', '.join(ENGINES)}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# bench/idle_gaps.py {' '.join(sys.argv[1:])}  ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {load:.1f})\n")
    print("Median call latency, ms, and p90 in brackets (one value per round; each a fresh process of --calls "
          "calls; ort: 2 intra-op threads; * = pycann's team was pinned at the end, i.e. its governor found the "
          "machine quiet: docs/kernels.md, \"Threads\"):\n")
    print("| model | gap s | " + " | ".join(a.engines) + " |")
    print("|---|---:|" + "---|" * len(a.engines))
    errors: list[str] = []
    for model in a.models:
        for gap in a.gaps:
            cells: dict[str, list[str]] = {e: [] for e in a.engines}
            for _ in range(a.rounds):
                for e in a.engines:
                    r = _child(e, model, gap, a.calls)
                    if "error" in r:
                        errors.append(f"{model}, gap {gap:g}, {e}: {r['error']}")
                        cells[e].append(f"FAIL ({len(errors)})")
                    else:
                        cells[e].append(f"{r['median_ms']:.2f} [{r['p90_ms']:.2f}]{'*' if r.get('pinned') else ''}")
            print(f"| {model} | {gap:g} | " + " | ".join(", ".join(cells[e]) for e in a.engines) + " |", flush=True)
    for i, err in enumerate(errors, 1):
        print(f"\nFAIL ({i}): {err}")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
