"""AOE (issue 19 item 4): search quality on the cost model, bank reuse across processes, and
subgraph tuning of a bench model. Numbers go to bench/RESULTS.md ("AOE" section).

    python bench/aoe_bench.py tiling                 # guided vs exhaustive on fp16 GEMM shapes (cost model)
    flock /tmp/pycann-bench.lock python bench/aoe_bench.py reuse    # two aoe processes, the second from the bank
    flock /tmp/pycann-bench.lock python bench/aoe_bench.py sgat --model rapidocr_ppocrv4_det --input_shape x:1,3,640,640

``tiling`` is deterministic (the cost model, no timing); ``reuse`` and ``sgat`` time the CPU and
use a fresh bank folder under /tmp (never ~/.cache/pycann/aoe, which atc reads by default).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MODELS = Path.home() / ".cache" / "pycann" / "models"
SHAPES = [(256, 256, 256), (128, 256, 512), (512, 256, 256), (256, 512, 256), (256, 256, 1024), (512, 512, 512),
          (1024, 256, 256), (256, 1024, 256), (384, 256, 512), (128, 512, 1024)]


def tiling(shapes: list[tuple[int, int, int]], soc: str, tile_min: int) -> None:
    from pycann.aoe.op_tuning import search_tiling
    from pycann.aoe.search import budget_for, exhaustive
    from pycann.aoe.tiling import MatmulProblem, matmul_space, simulated_us

    print("| shape MxKxN | legal tilings | exhaustive best (us) | guided best (us) | gap | trials (<=10%) | default (us) |")
    print("|---|---|---|---|---|---|---|")
    for m, k, n in shapes:
        p = MatmulProblem(m, k, n, soc)
        sp = matmul_space(p, tile_min=tile_min)
        cache: dict = {}

        def obj(c, p=p, cache=cache):  # noqa: ANN001, ANN202
            if c not in cache:
                cache[c] = simulated_us(p, c)
            return cache[c]

        full = exhaustive(sp, obj)
        asked: set = set()

        def counted(c, obj=obj, asked=asked):  # noqa: ANN001, ANN202
            asked.add(c)
            return obj(c)

        res, base_cfg = search_tiling(p, sp, counted)  # what aoe runs: the default's simulation counts
        assert len(asked) <= budget_for(full.space_points)
        print(f"| {m}x{k}x{n} | {full.space_points} | {full.best_cost:.3f} | {res.best_cost:.3f} | "
              f"{res.best_cost / full.best_cost - 1:+.1%} | {len(asked)} | {obj(base_cfg):.3f} |", flush=True)


def _aoe(args: list[str]) -> tuple[float, dict]:
    out = Path(tempfile.mkdtemp(prefix="aoe_out_"))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "pycann.tools.aoe", *args, f"--output={out}"], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(r.stdout + r.stderr)
    print(r.stdout.strip().splitlines()[-3] if r.stdout else "", file=sys.stderr)
    (rep,) = out.glob("aoe_result_*.json")
    return wall, json.loads(rep.read_text())


def reuse(args: argparse.Namespace) -> None:
    bank = tempfile.mkdtemp(prefix="aoe_bank_")
    ops = Path(bank) / "ops.txt"
    ops.write_text("MatMul 1024x512x2048\n")
    common = [f"--op_bank_path={bank}", f"--soc_version={args.soc}"]
    runs = [] if args.skip_tiling else [("MatMul 1024x512x2048 tiling (cost model)",
                                         ["--job_type=2", f"--tune_ops_file={ops}"])]
    if args.model:
        runs.append((f"{args.model} kernels (measured)", ["--job_type=2", "--framework=5",
                                                          f"--model={MODELS / (args.model + '.onnx')}",
                                                          f"--input_shape={args.input_shape}"]))
    print(f"load before: {os.getloadavg()}")
    for what, a in runs:
        w1, r1 = _aoe([*a, *common])
        w2, r2 = _aoe([*a, *common])
        same = [e["choice"] for e in r1["entries"]] == [e["choice"] for e in r2["entries"]]
        print(f"| {what} | {r1['trials']} trials, {r1['tuning_seconds']:.2f} s tuning, {w1:.2f} s process | "
              f"{r2['trials']} trials, {r2['tuning_seconds']:.3f} s tuning, {w2:.2f} s process | "
              f"x{r1['tuning_seconds'] / max(r2['tuning_seconds'], 1e-3):.0f} tuning, x{w1 / w2:.1f} process | "
              f"same choice: {same} |", flush=True)
        if r1["entries"] and r1["entries"][0]["kind"] == "tiling":
            e = r1["entries"][0]
            print(f"    tiling {e['choice']}: {e['cost_us']} us vs default {e['baseline_us']} us "
                  f"({e['trials']} of {e['space_points']} legal)")
    print(f"load after: {os.getloadavg()}")


def sgat(args: argparse.Namespace) -> None:
    bank = tempfile.mkdtemp(prefix="aoe_bank_")
    print(f"load before: {os.getloadavg()}")
    model = MODELS / (args.model + ".onnx")
    w, r = _aoe(["--job_type=1", "--framework=5", f"--model={model}", f"--input_shape={args.input_shape}",
                 f"--op_bank_path={bank}", "--log=info"])
    (e,) = r["entries"]
    print(json.dumps({k: e[k] for k in ("choice", "baseline_us", "cost_us", "speedup", "trials")}))
    for c in e["configs"]:
        print(f"  {c}")
    print(f"why: {e['note']}")
    print(f"wall {w:.1f} s ({r['tuning_seconds']:.1f} s tuning), peak RSS {r['peak_rss_mib']:.0f} MiB; notes: {r['notes']}")
    w2, r2 = _aoe(["--job_type=1", "--framework=5", f"--model={model}", f"--input_shape={args.input_shape}",
                   f"--op_bank_path={bank}"])
    print(f"second run: {r2['trials']} trials, {r2['tuning_seconds']:.2f} s tuning, wall {w2:.1f} s, "
          f"same choice: {r2['entries'][0]['choice'] == e['choice']}")
    print(f"load after: {os.getloadavg()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("tiling", "reuse", "sgat"))
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--tile-min", type=int, default=64)
    ap.add_argument("--model", default="")
    ap.add_argument("--input_shape", default="x:1,3,640,640")
    ap.add_argument("--skip-tiling", action="store_true", help="reuse: the model's kernels only")
    args = ap.parse_args()
    if args.what == "tiling":
        tiling(SHAPES, args.soc, args.tile_min)
    elif args.what == "reuse":
        reuse(args)
    else:
        sgat(args)


if __name__ == "__main__":
    main()
