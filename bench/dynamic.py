"""Shapes that change on every call: KV-cache decoding and interleaved OCR shapes, pycann against
ONNX Runtime (and OpenVINO when installed: the ``bench`` extra), one fresh process per cell.

* ``decode``: ``gpt2_6l_kv`` (scripts/export_torch_models.py: GPT-2 6L/768/12H with
  ``past_key_values`` inputs, random weights), a prompt of 32 tokens then ``--steps`` greedy
  steps at batch 1 and 4: ms/token (median), tokens/s, prompt ms, peak RSS, plans built,
  whether the greedy tokens equal ORT's. pycann loads the model compiled by ``atc`` to .om
  (the CANN flow); ``pycann_onnx`` compiles the .onnx in the process instead.
* ``ocr``: PP-OCRv4 rec over ``--rec-widths`` widths (48 x W) and det over ``--det-sizes``
  sizes, interleaved in a shuffled order, ``--rounds`` times (at least 2). Table columns: "first
  call / ORT" is each shape's first call (round 1) over ORT's median *later* call of that shape,
  median and worst over the shapes (the ORT row: its own first calls); "later calls / ORT" the
  same for the median of rounds 2 on; "RSS MB round 2 -> end" the resident set when round 2
  starts and after the last call; "plans built rec+det" the specialised plans each model built
  (reduced-team twins on busy CPUs included): 0 when every shape came at most
  ``Executor.HOLD_CALLS`` (8) times back to back with new shapes, which all ran the shape-generic
  plan (docs/dynamic-shapes.md, "Background builds"); "evictions" the plans the cache dropped.

Usage (from the repository root)::

    python scripts/export_torch_models.py gpt2_6l_kv && python scripts/fetch_models.py --group ocr
    python bench/dynamic.py                     # both parts, every engine found
    python bench/dynamic.py --part decode --steps 128 --batches 1 4
    python bench/dynamic.py --part ocr --rec-widths 60 --det-sizes 32 --rounds 4

Timings on a shared machine are noisy: run when it is quiet (``uptime``), and read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
MODELS = pathlib.Path(os.environ.get("PYCANN_MODEL_DIR", str(pathlib.Path.home() / ".cache" / "pycann" / "models")))
CACHE = pathlib.Path.home() / ".cache" / "pycann" / "bench"
LAYERS, HEADS, HEAD_DIM, VOCAB = 6, 12, 64, 50257
Run = Callable[[list[np.ndarray]], list[np.ndarray]]
ENGINES = ("ort", "openvino", "pycann", "pycann_onnx")


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB, from /proc/self/status."""
    cur = peak = 0.0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                cur = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return round(cur, 1), round(peak, 1)


def _om(src: pathlib.Path) -> pathlib.Path:
    """``src`` compiled by atc into the bench cache (a child process, so this one stays clean)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    out = CACHE / f"{src.stem}_dynamic"
    om = out.with_suffix(".om")
    if not om.exists() or om.stat().st_mtime < src.stat().st_mtime:
        subprocess.run([sys.executable, "-m", "pycann.tools.atc", f"--model={src}", "--framework=5",
                        f"--output={out}", "--soc_version=Ascend310P3"], check=True, capture_output=True, cwd=REPO)
    return om


def engine(name: str, src: pathlib.Path) -> tuple[Run, Any]:
    """A run function ``feeds (model input order) -> outputs`` for engine ``name``, and its handle."""
    if name not in ENGINES:  # a typo must not silently run pycann_onnx
        raise ValueError(f"unknown engine {name!r}: expected one of {', '.join(ENGINES)}")
    if name == "ort":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 2, 1, 3
        s = ort.InferenceSession(str(src), opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in s.get_inputs()]
        return (lambda f: s.run(None, dict(zip(names, f)))), s
    if name == "openvino":
        import openvino as ov

        c = ov.Core().compile_model(str(src), "CPU", {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY",
                                                        "INFERENCE_PRECISION_HINT": "f32"})
        req = c.create_infer_request()
        return (lambda f: [req.infer(f)[o] for o in c.outputs]), c
    from pycann.ge.run.model import LoadedModel

    m = LoadedModel.from_file(_om(src) if name == "pycann" else src)
    return m.run, m


def _plans(handle: Any) -> dict[str, Any]:
    st = getattr(handle, "plan_cache_stats", None)
    if st is None:
        return {}
    s = st()
    return {"plans_built": s.built, "generic_runs": s.generic_runs, "hits": s.hits, "evictions": s.evictions,
            "plan_bytes": s.bytes_held}


# ------------------------------------------------------------------------------------------ decode
def decode_cell(name: str, batch: int, steps: int) -> dict[str, Any]:
    src = MODELS / "gpt2_6l_kv.onnx"
    t0 = time.perf_counter()
    run, handle = engine(name, src)
    load_s = time.perf_counter() - t0
    ids = np.random.default_rng(0).integers(0, VOCAB, (batch, 32)).astype(np.int64)
    past = [np.zeros((batch, HEADS, 0, HEAD_DIM), np.float32) for _ in range(2 * LAYERS)]
    t0 = time.perf_counter()
    out = run([ids, *past])
    prompt_ms = (time.perf_counter() - t0) * 1e3
    tokens, times = [], []
    for _ in range(steps):
        nxt = out[0][:, -1].argmax(-1).astype(np.int64)[:, None]
        tokens.append(nxt[:, 0].tolist())
        t0 = time.perf_counter()
        out = run([nxt, *out[1:]])
        times.append(time.perf_counter() - t0)
    ms = float(np.median(times) * 1e3)
    cur, peak = rss_mb()
    return {"engine": name, "batch": batch, "steps": steps, "load_s": round(load_s, 2), "prompt_ms": round(prompt_ms, 1),
            "ms_per_token": round(ms, 2), "mean_ms_per_token": round(float(np.mean(times) * 1e3), 2),
            "tokens_per_s": round(batch * 1e3 / ms, 1), "rss_mb": cur, "peak_rss_mb": peak, "tokens": tokens,
            **_plans(handle)}


# --------------------------------------------------------------------------------------------- ocr
def ocr_shapes(n_rec: int, n_det: int) -> list[tuple[str, tuple[int, ...]]]:
    """(model, input shape) pairs: rec 48 x W for ``n_rec`` widths, det for ``n_det`` sizes (multiples of 32)."""
    rec: list[tuple[str, tuple[int, ...]]] = [("rec", (1, 3, 48, int(w))) for w in np.linspace(64, 1024, n_rec).astype(int)]
    sizes = [(32 * (4 + i % 12), 32 * (4 + (7 * i) % 17)) for i in range(n_det)]
    det = [("det", (1, 3, h, w)) for h, w in dict.fromkeys(sizes)]
    return rec + det


def ocr_cell(name: str, n_rec: int, n_det: int, rounds: int) -> dict[str, Any]:
    runs = {k: engine(name, MODELS / f"rapidocr_ppocrv4_{k}.onnx") for k in ("rec", "det")}
    shapes = ocr_shapes(n_rec, n_det)
    rng = np.random.default_rng(1)
    xs = {s: rng.random(s[1], dtype=np.float32) for s in shapes}
    first: dict[str, float] = {}
    later: dict[str, list[float]] = {}
    rss = []
    calls = 0
    for r in range(rounds):
        order = [shapes[i] for i in rng.permutation(len(shapes))]
        if r == 1:
            rss.append(rss_mb()[0])
        for s in order:
            key = f"{s[0]}:{'x'.join(map(str, s[1][2:]))}"
            t0 = time.perf_counter()
            runs[s[0]][0]([xs[s]])
            dt = (time.perf_counter() - t0) * 1e3
            calls += 1
            if r == 0:
                first[key] = dt
            else:
                later.setdefault(key, []).append(dt)
    rss.append(rss_mb()[0])
    return {"engine": name, "shapes": len(shapes), "rounds": rounds, "calls": calls, "first_ms": first,
            "later_ms": {k: float(np.median(v)) for k, v in later.items()}, "rss_mb": rss,
            "peak_rss_mb": rss_mb()[1], **{f"{k}_{a}": b for k, (_, h) in runs.items() for a, b in _plans(h).items()}}


# -------------------------------------------------------------------------------------------- main
def _engines(requested: Sequence[str]) -> list[str]:
    out = []
    for e in requested:
        if e == "openvino":
            try:
                import openvino  # noqa: F401
            except ImportError:
                print("(openvino not installed: pip install -e '.[bench]')", file=sys.stderr)
                continue
        out.append(e)
    return out


def _child(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--worker", *args], capture_output=True, text=True, cwd=REPO)
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)  # type: ignore[no-any-return]
    return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}


def decode_table(cells: list[dict[str, Any]]) -> str:
    ort = {c["batch"]: c for c in cells if c.get("engine") == "ort"}
    lines = ["| engine | batch | ms/token | vs ORT | tokens/s | prompt ms | peak RSS MB | vs ORT | plans built "
             "| generic runs | tokens = ORT |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in cells:
        if "error" in c:
            lines.append(f"| {c.get('engine')} | {c.get('batch')} | FAIL: {c['error'][:80]} |")
            continue
        o = ort.get(c["batch"])
        rt = f"{c['ms_per_token'] / o['ms_per_token']:.2f}x" if o else "-"
        rr = f"{c['peak_rss_mb'] / o['peak_rss_mb']:.2f}x" if o else "-"
        same = "-" if o is None or o is c else str(c["tokens"] == o["tokens"])
        lines.append(f"| {c['engine']} | {c['batch']} | {c['ms_per_token']} | {rt} | {c['tokens_per_s']} | "
                     f"{c['prompt_ms']} | {c['peak_rss_mb']:.0f} | {rr} | {c.get('plans_built', '-')} | "
                     f"{c.get('generic_runs', '-')} | {same} |")
    return "\n".join(lines)


def ocr_table(cells: list[dict[str, Any]]) -> str:
    ort = next((c for c in cells if c.get("engine") == "ort" and "error" not in c), None)
    lines = ["| engine | shapes | calls | first call / ORT (median, worst) | later calls / ORT (median, worst) "
             "| RSS MB round 2 -> end | peak RSS MB | plans built rec+det | evictions |",
             "|---|---:|---:|---|---|---|---:|---:|---:|"]
    for c in cells:
        if "error" in c:
            lines.append(f"| {c.get('engine')} | FAIL: {c['error'][:80]} |")
            continue
        if ort is not None:
            f = [c["first_ms"][k] / ort["later_ms"][k] for k in c["first_ms"] if k in ort["later_ms"]]
            lt = [c["later_ms"][k] / ort["later_ms"][k] for k in c["later_ms"] if k in ort["later_ms"]]
            fs = f"{np.median(f):.2f}x, {max(f):.2f}x"
            ls = f"{np.median(lt):.2f}x, {max(lt):.2f}x"
        else:
            fs = ls = "-"
        built = f"{c.get('rec_plans_built', '-')}+{c.get('det_plans_built', '-')}"
        ev = f"{c.get('rec_evictions', 0)}+{c.get('det_evictions', 0)}" if "rec_evictions" in c else "-"
        lines.append(f"| {c['engine']} | {c['shapes']} | {c['calls']} | {fs} | {ls} | "
                     f"{c['rss_mb'][0]:.0f} -> {c['rss_mb'][-1]:.0f} | {c['peak_rss_mb']:.0f} | {built} | {ev} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--part", choices=("decode", "ocr", "both"), default="both")
    p.add_argument("--engines", nargs="+", default=["ort", "openvino", "pycann"], choices=ENGINES, metavar="ENGINE",
                   help="ort, openvino, pycann (.om by atc), pycann_onnx (.onnx compiled in process)")
    p.add_argument("--batches", nargs="+", type=int, default=[1, 4], help="decode batch sizes")
    p.add_argument("--steps", type=int, default=128, help="greedy decode steps after the 32-token prompt")
    p.add_argument("--rec-widths", type=int, default=52, help="PP-OCRv4 rec widths (48 x W)")
    p.add_argument("--det-sizes", type=int, default=32, help="PP-OCRv4 det image sizes")
    p.add_argument("--rounds", type=int, default=3, help="OCR rounds over the shapes")
    p.add_argument("--json", help="also write every cell (per-shape first and later ms) to this file")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        kind, name, *rest = a.worker
        cell = decode_cell(name, int(rest[0]), int(rest[1])) if kind == "decode" else \
            ocr_cell(name, int(rest[0]), int(rest[1]), int(rest[2]))
        print(json.dumps(cell))
        return 0
    for opt, v, lo in (("--rounds", a.rounds, 2), ("--rec-widths", a.rec_widths, 0), ("--det-sizes", a.det_sizes, 0),
                       ("--steps", a.steps, 1)):
        if v < lo:  # (--rounds 1 ran every cell, then failed in the table: no later calls to compare)
            p.error(f"{opt} must be at least {lo}, got {v}" + (" (the later calls are rounds 2 on)" if lo == 2 else ""))
    if a.part in ("ocr", "both") and a.rec_widths + a.det_sizes == 0:
        p.error("--rec-widths and --det-sizes are both 0: no OCR shape to run")
    if any(b < 1 for b in a.batches):
        p.error(f"--batches must be at least 1, got {a.batches}")
    engines = _engines(a.engines)
    dump: list[dict[str, Any]] = []
    print(f"# bench/dynamic.py {' '.join(sys.argv[1:])}  ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.1f})")
    if a.part in ("decode", "both"):
        cells = [_child(["decode", e, str(b), str(a.steps)]) for b in a.batches for e in engines]
        print(f"\nKV-cache decode: gpt2_6l_kv, prompt 32 tokens, {a.steps} greedy steps\n")
        print(decode_table(cells))
        dump += cells
    if a.part in ("ocr", "both"):
        cells = [_child(["ocr", e, str(a.rec_widths), str(a.det_sizes), str(a.rounds)]) for e in engines]
        print(f"\nInterleaved OCR shapes: PP-OCRv4 rec {a.rec_widths} widths + det {a.det_sizes} sizes, "
              f"{a.rounds} rounds\n")
        print(ocr_table(cells))
        dump += cells
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(dump, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
