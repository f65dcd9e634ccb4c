"""Drive ``bench_one.py`` over models x engines, one fresh process per cell, and print a markdown table.

Run from the repository root::

    python bench/run_bench.py                                   # everything, --repeat 3, both OpenBLAS kernels
    python bench/run_bench.py --repeat 1 --models resnet50 resnet50@8 bert_base --engines ort pycann
    python bench/run_bench.py --from-jsonl ~/.cache/pycann/bench/results-....jsonl   # re-print a saved run
    python bench/run_bench.py --zoo --batches 1 8 --engines ort pycann       # the torchvision zoo (tv_*)
    python bench/run_bench.py --zoo --first-run --models tv_squeezenet1_1     # import + load + first run
    python bench/run_bench.py --contention 1 --models tv_resnet50             # with one busy neighbour

* Models: ``NAME`` or ``NAME@BATCH``; the default is the whole ``scripts.model_zoo.MODELS`` table at batch 1
  (benchmark inputs) plus ``resnet50@8``. ``--zoo`` is the torchvision bench zoo (``scripts.model_zoo.ZOO``:
  ``tv_<arch>`` from the TorchScript exporter, ``tv_<arch>_dynamo`` from the dynamo one) at ``--batches``;
  with ``--models`` it restricts the zoo to those names (bare names, the batches come from ``--batches``).
* ``--first-run`` and ``--contention N``: see ``bench/bench_modes.py``. Engines that are not installed
  (OpenVINO) are left out with a note instead of failing every cell.
* Each cell runs ``--repeat`` times; repeats go round-robin over all cells (so a burst of load elsewhere on the
  machine hits one repeat of many cells, not every repeat of one cell) and the best (lowest) median is kept.
* ``--openblas both`` runs pycann twice: with the environment as is (this machine sets
  ``OPENBLAS_CORETYPE=Haswell``, i.e. AVX2 kernels) and with ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` removed
  from the child's environment (OpenBLAS picks the CPU's native kernel, e.g. SkylakeX on AVX-512 parts). The
  kernel that really ran (threadpoolctl's ``architecture``) is shown. The variables are only changed for the
  benchmark child, never in this process.
* pycann models are compiled once (static benchmark shapes) into ``--cache-dir`` before any cell is timed; the
  compile time is reported in its own column. The ``pycann/`` package is copied to ``<cache-dir>/src/<hash>`` at
  the start and every child imports that copy (``PYCANN_BENCH_SRC``), so one run measures one version of the code
  even while the working tree changes (``--no-snapshot`` uses the tree as it is).
* Noise: other work on the machine makes medians noisy (OpenBLAS and ORT spin-wait on their 2 threads, so one busy
  core can slow a cell several-fold). Before each cell the CPU time used by other processes is sampled from
  ``/proc/stat`` for 0.3 s (``busy_before``, in CPUs: 0 = idle, 2 = both cores busy), and during the cell the same is
  measured minus the child's own CPU time (``busy_during``). ``--wait-idle S`` waits up to S seconds for the machine
  to be quieter than ``--idle-threshold`` before each cell; ``--retry-noisy N`` reruns a cell up to N more times when
  ``busy_during`` exceeded the threshold. A cell that FAILs (other than by timeout) is not rerun in later repeats.

Every record goes to ``--jsonl`` (default: a timestamped file in the cache folder, outside the repository).
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
BENCH_ONE = pathlib.Path(__file__).resolve().parent / "bench_one.py"
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(BENCH_ONE.parent) not in sys.path:
    sys.path.insert(0, str(BENCH_ONE.parent))

import bench_modes  # noqa: E402
from machine_load import OtherLoad, busy_fraction, wait_idle  # noqa: E402

from scripts.model_zoo import ALL_MODELS as MODELS  # noqa: E402

ENGINES = ("ort", "ort_nospin", "openvino_f32", "openvino", "pycann")
OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
DEFAULT_CACHE = pathlib.Path(os.environ.get("PYCANN_BENCH_CACHE", "~/.cache/pycann/bench")).expanduser()


@dataclass(frozen=True)
class Cell:
    """One benchmark cell: a model at a batch size, run by one engine variant."""

    model: str
    batch: int
    engine: str  # bench_one's --engine
    variant: str = ""  # "" or "native" (pycann with the OpenBLAS variables removed)
    busy: int = 0  # busy-loop neighbour processes while it runs (--contention)

    @property
    def label(self) -> str:
        """Column key: the engine, plus ``_native`` for the native-kernel pycann run, ``+busyN`` when contended."""
        base = f"{self.engine}_{self.variant}" if self.variant else self.engine
        return f"{base}+busy{self.busy}" if self.busy else base


def snapshot_pycann(cache_dir: pathlib.Path) -> pathlib.Path:
    """Copy ``pycann/`` into ``cache_dir/src/<hash>/`` so one run measures one version of the code."""
    sys.path.insert(0, str(BENCH_ONE.parent))
    from bench_one import pycann_source_hash

    digest = pycann_source_hash(REPO)
    dest = cache_dir / "src" / digest
    if not (dest / "pycann").is_dir():
        tmp = cache_dir / "src" / f"{digest}.tmp{os.getpid()}"
        shutil.copytree(REPO / "pycann", tmp / "pycann", ignore=shutil.ignore_patterns("__pycache__"))
        os.replace(tmp, dest)
    # byte-compile as `pip install` does: with PYTHONDONTWRITEBYTECODE=1 (set on some machines) every child would
    # otherwise compile pycann's sources at import (~1-3 s of "import" that ORT, a C extension, never pays)
    compileall.compile_dir(str(dest / "pycann"), quiet=1)
    return dest


SNAPSHOT: pathlib.Path | None = None  # set by main() unless --no-snapshot


def child_env(variant: str) -> dict[str, str]:
    """The benchmark child's environment: as is, or without the OpenBLAS kernel overrides (``native``)."""
    env = dict(os.environ)
    if SNAPSHOT is not None:
        env["PYCANN_BENCH_SRC"] = str(SNAPSHOT)
    if variant == "native":
        for var in OPENBLAS_VARS:
            env.pop(var, None)
    return env


# ----------------------------------------------------------------------------------------- running
def run_cell(cell: Cell, extra: Sequence[str], timeout: float, cache_dir: pathlib.Path) -> dict[str, Any]:
    """Run ``bench_one.py`` for one cell in a fresh process and return its JSON record."""
    cmd = [sys.executable, str(BENCH_ONE), "--engine", cell.engine, "--model", cell.model,
           "--batch", str(cell.batch), "--cache-dir", str(cache_dir), *extra]  # fmt: skip
    base = {"engine": cell.engine, "model": cell.model, "batch": cell.batch}
    with bench_modes.busy_neighbours(cell.busy):
        meter = OtherLoad()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                                  env=child_env(cell.variant))  # fmt: skip
        except subprocess.TimeoutExpired:
            return {**base, "status": "FAIL", "error": f"timeout after {timeout:.0f} s"}
        busy_during = meter.stop()
    rec = _last_json(proc.stdout)
    if rec is None:
        tail = proc.stderr.strip().splitlines()[-1:]
        rec = {**base, "status": "FAIL", "error": f"exit {proc.returncode}: {tail[0] if tail else 'no output'}"}
    rec["busy_during"] = busy_during
    return rec


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


def compile_all(cells: Iterable[tuple[str, int]], cache_dir: pathlib.Path, timeout: float) -> dict[tuple[str, int], dict[str, Any]]:
    """Compile every (model, batch) for pycann into the cache (no-op when cached); returns the records."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for model, batch in cells:
        cmd = [sys.executable, str(BENCH_ONE), "--engine", "pycann", "--model", model, "--batch", str(batch),
               "--cache-dir", str(cache_dir), "--compile-only"]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=child_env(""))
            rec = _last_json(proc.stdout) or {"status": "FAIL", "error": proc.stderr.strip()[-300:]}
        except subprocess.TimeoutExpired:
            rec = {"status": "FAIL", "error": f"compile timeout after {timeout:.0f} s"}
        out[(model, batch)] = rec
        comp = rec.get("compile", {})
        state = "cached" if comp.get("cached") else f"{comp.get('compile_s', '?')} s"
        log(f"compile {model}@{batch}: {rec.get('status')} {state if rec.get('status') == 'ok' else rec.get('error')}")
    return out


def log(msg: str) -> None:
    """Progress line on stderr."""
    print(f"[{dt.datetime.now():%H:%M:%S}] {msg}", file=sys.stderr, flush=True)


def parse_models(specs: Sequence[str] | None) -> list[tuple[str, int]]:
    """``NAME`` / ``NAME@BATCH`` -> (name, batch); default: all models at batch 1 plus resnet50@8."""
    if not specs:
        return [(m, 1) for m in MODELS] + [("resnet50", 8)]
    out = []
    for s in specs:
        name, _, b = s.partition("@")
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")
        out.append((name, int(b) if b else 1))
    return out


# ----------------------------------------------------------------------------------------- table
def best_records(records: Iterable[dict[str, Any]]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """(model, batch, label) -> the record with the lowest median (a FAIL only when no repeat succeeded).

    The kept record gets ``medians`` (all successful repeats' medians) for judging the noise.
    """
    best: dict[tuple[str, int, str], dict[str, Any]] = {}
    medians: dict[tuple[str, int, str], list[float]] = {}
    for r in records:
        if "label" not in r:
            continue
        key = (r["model"], r["batch"], r["label"])
        if r.get("status") == "ok":
            medians.setdefault(key, []).append(r["median_ms"])
        cur = best.get(key)
        if cur is None or (r.get("status") == "ok" and (cur.get("status") != "ok" or r["median_ms"] < cur["median_ms"])):
            best[key] = r
    for key, rec in best.items():
        best[key] = {**rec, "medians": sorted(medians.get(key, []))}
    return best


def _ms(x: float) -> str:
    if x >= 1000:
        return f"{x / 1000:.2f} s"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def _cell_ms(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "–"
    if rec.get("status") != "ok":
        return "FAIL"
    mark = " †" if rec.get("compile_mode") == "dynamic" else ""
    return _ms(rec["median_ms"]) + mark


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if a is None or b is None or a.get("status") != "ok" or b.get("status") != "ok":
        return None
    return a["median_ms"] / b["median_ms"]


def _kernel(rec: dict[str, Any] | None) -> str:
    if rec is None:
        return "?"
    return str((rec.get("blas") or {}).get("architecture") or "?")


def _num(rec: dict[str, Any] | None, key: str, fmt: str) -> str:
    if rec is None or rec.get(key) is None:
        return "–"
    return format(rec[key], fmt)


Best = dict[tuple[str, int, str], dict[str, Any]]
NAMES = {"ort": "ORT", "ort_nospin": "ORT no-spin", "openvino_f32": "OV f32", "openvino": "OV", "pycann": "pycann", "pycann_native": "pycann native"}


def _table_head(cols: Sequence[str]) -> list[str]:
    return ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]


def render(records: list[dict[str, Any]]) -> str:
    """Markdown tables (latency with ratios; RSS / load / compile; first run) and a ratio summary."""
    best = best_records(records)
    rows = sorted({(m, b) for (m, b, _) in best}, key=lambda mb: (_model_order(mb[0]), mb[1]))
    labels = {lab for (_, _, lab) in best}
    parts = _latency_table(best, rows, labels) + [""]
    parts += _notes(best)
    parts += ["", "Peak RSS (MB) / load time (s), one process per cell; pycann's load is the .om, its compile is "
              "separate:", ""]  # fmt: skip
    parts += _resource_table(best, rows, labels)
    parts += ["", "First run (ms) after loading, and pycann's p90 / timed runs / medians of the repeats:", ""]
    parts += _first_run_table(best, rows, labels)
    return "\n".join(parts)


def _pycann_head(best: Best, label: str) -> str:
    kernels = sorted({_kernel(r) for (_, _, lab), r in best.items() if lab == label and r.get("status") == "ok"})
    return f"{NAMES[label]} ms ({'/'.join(kernels) or '?'})"


def _latency_table(best: Best, rows: list[tuple[str, int]], labels: set[str]) -> list[str]:
    pyc_cols = [lab for lab in ("pycann", "pycann_native") if lab in labels]
    nospin = "ort_nospin" in labels
    cols = ["model", "batch", "ORT ms"] + (["ORT no-spin ms"] if nospin else []) + ["OV f32 ms", "OV ms (bf16)"]
    for label in pyc_cols:
        cols += [_pycann_head(best, label), f"{'pycann' if label == 'pycann' else 'native'}/ORT"]
        cols += [f"{'pycann' if label == 'pycann' else 'native'}/ORT no-spin"] if nospin else []
    lines = _table_head(cols)
    ratios: dict[str, list[tuple[float, str]]] = {lab: [] for lab in pyc_cols}
    for m, b in rows:
        row = {lab: best.get((m, b, lab)) for lab in labels}
        cells = [m, str(b), _cell_ms(row.get("ort"))] + ([_cell_ms(row.get("ort_nospin"))] if nospin else [])
        cells += [_cell_ms(row.get("openvino_f32")), _cell_ms(row.get("openvino"))]
        for label in pyc_cols:
            ratio = _ratio(row.get(label), row.get("ort"))
            if ratio is not None:
                ratios[label].append((ratio, f"{m}@{b}" if b != 1 else m))
            cells += [_cell_ms(row.get(label)), "–" if ratio is None else f"{ratio:.2f}×"]
            if nospin:
                r2 = _ratio(row.get(label), row.get("ort_nospin"))
                if r2 is not None:
                    ratios.setdefault(label + "/nospin", []).append((r2, f"{m}@{b}" if b != 1 else m))
                cells.append("–" if r2 is None else f"{r2:.2f}×")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for key in [lab + suf for lab in pyc_cols for suf in ("", "/nospin")]:
        label, _, vs = key.partition("/")
        rs = sorted(ratios.get(key, []))
        if not rs:
            continue
        geo = math.exp(sum(math.log(x) for x, _ in rs) / len(rs))
        lines.append(
            f"* {_pycann_head(best, label).replace(' ms', '')} / ORT{' no-spin' if vs else ''} over {len(rs)} cells: geometric mean "
            f"**{geo:.2f}×**, median {rs[len(rs) // 2][0]:.2f}×, best {rs[0][0]:.2f}× ({rs[0][1]}), "
            f"worst {rs[-1][0]:.2f}× ({rs[-1][1]})."
        )
    return lines


def _notes(best: Best) -> list[str]:
    lines = []
    dyn: dict[tuple[str, int], str] = {}
    for (m, b, _), rec in best.items():
        if rec.get("compile_mode") == "dynamic":
            dyn[(m, b)] = str(rec.get("static_error", ""))
    for (m, b), err in sorted(dyn.items()):
        lines.append(f"* † {m}@{b}: pycann's static-shape compile failed, so the .om was compiled with the model's "
                     f"dynamic shapes (specialised at the first run): {err[:240]}")  # fmt: skip
    for (m, b, lab), rec in sorted(best.items()):
        if rec.get("status") != "ok":
            lines.append(f"* FAIL {lab} {m}@{b}: {str(rec.get('error', ''))[:240]}")
    return lines


def _resource_table(best: Best, rows: list[tuple[str, int]], labels: set[str]) -> list[str]:
    eng = [lab for lab in ("ort", "ort_nospin", "openvino_f32", "openvino", "pycann") if lab in labels]
    lines = _table_head(["model", "batch"] + [NAMES[e] for e in eng] + (["pycann compile s"] if "pycann" in labels else []))
    for m, b in rows:
        cells = [m, str(b)]
        for e in eng:
            rec = best.get((m, b, e))
            cells.append("–" if rec is None or rec.get("peak_rss_mb") is None or rec.get("load_s") is None
                         else f"{rec['peak_rss_mb']:.0f} / {rec['load_s']:.2f}")  # fmt: skip
        if "pycann" in labels:
            cells.append(_num(best.get((m, b, "pycann")), "compile_s", ".2f"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _first_run_table(best: Best, rows: list[tuple[str, int]], labels: set[str]) -> list[str]:
    eng = [lab for lab in ("ort", "ort_nospin", "openvino_f32", "openvino", "pycann") if lab in labels]
    lines = _table_head(["model", "batch"] + [NAMES[e] for e in eng] + ["pycann p90", "pycann runs", "pycann medians"])
    for m, b in rows:
        cells = [m, str(b)]
        for e in eng:
            rec = best.get((m, b, e))
            cells.append("–" if rec is None or rec.get("first_run_ms") is None else _ms(rec["first_run_ms"]))
        p = best.get((m, b, "pycann"))
        cells.append("–" if p is None or p.get("p90_ms") is None else _ms(p["p90_ms"]))
        cells.append(_num(p, "runs", "d"))
        cells.append("–" if p is None else ", ".join(_ms(x) for x in p.get("medians", [])) or "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _model_order(name: str) -> int:
    names = list(MODELS)
    return names.index(name) if name in names else len(names)


def render_all(records: list[dict[str, Any]], first_run: bool, contention: int) -> str:
    """The standard tables, plus the first-run or contention table when that mode ran."""
    text = render([r for r in records if "+busy" not in str(r.get("label", ""))])
    best = best_records(records)
    rows = sorted({(m, b) for (m, b, _) in best}, key=lambda mb: (_model_order(mb[0]), mb[1]))
    if first_run:
        text += "\n\nFirst run, one process per cell: import + load + first inference (ms):\n\n"
        text += "\n".join(bench_modes.first_run_table(records, rows))
    if contention:
        text += f"\n\nMedian latency (ms) quiet and with {contention} busy-loop process(es) beside it:\n\n"
        text += "\n".join(bench_modes.contention_table(best, rows, contention))
    return text


# ----------------------------------------------------------------------------------------- main
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    p = argparse.ArgumentParser(description="Benchmark pycann against ONNX Runtime and OpenVINO.")
    p.add_argument("--models", nargs="*", help="NAME or NAME@BATCH (default: every model, plus resnet50@8)")
    p.add_argument("--zoo", action="store_true", help="the torchvision bench zoo (tv_*) at --batches")
    p.add_argument("--batches", type=int, nargs="*", default=[1], help="--zoo: batch sizes (default 1)")
    p.add_argument("--first-run", action="store_true", help="one run per process: import + load + first run")
    p.add_argument("--contention", type=int, default=0, metavar="N",
                   help="run every cell also with N busy-loop processes beside it and compare")
    p.add_argument("--engines", nargs="*", choices=ENGINES, default=list(ENGINES))
    p.add_argument("--repeat", type=int, default=3, help="processes per cell; the best median is kept (default 3)")
    p.add_argument("--openblas", choices=("both", "default", "native"), default="both",
                   help="pycann with the environment as is (default), without OPENBLAS_CORETYPE/L2_SIZE "
                        "(native), or both")  # fmt: skip
    p.add_argument("--min-runs", type=int, default=20)
    p.add_argument("--min-time", type=float, default=1.0)
    p.add_argument("--max-runs", type=int, default=2000)
    p.add_argument("--max-time", type=float, default=10.0,
                   help="slow cells stop after this many seconds once --floor-runs are done (default 10)")
    p.add_argument("--floor-runs", type=int, default=5)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per cell process (default 300)")
    p.add_argument("--wait-idle", type=float, default=0.0, help="wait up to this many s for a quiet machine")
    p.add_argument("--idle-threshold", type=float, default=0.3, help="busy CPUs counted as quiet (default 0.3)")
    p.add_argument("--retry-noisy", type=int, default=0,
                   help="rerun a cell up to N more times while other processes kept more than --idle-threshold "
                        "CPUs busy during it (every attempt is a record; the best median still wins)")  # fmt: skip
    p.add_argument("--no-snapshot", action="store_true",
                   help="run pycann from the working tree instead of a copy frozen at the start of the run")
    p.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE)
    p.add_argument("--jsonl", type=pathlib.Path, help="where to write every record (default: cache dir)")
    p.add_argument("--from-jsonl", type=pathlib.Path, nargs="*", help="only print the tables of saved records")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the cells (or re-read saved records) and print the tables."""
    args = parse_args(argv)
    if args.from_jsonl:
        saved = [json.loads(line) for path in args.from_jsonl for line in path.read_text().splitlines() if line]
        busy = max((int(str(r.get("label", "")).partition("+busy")[2] or 0) for r in saved), default=0)
        print(render_all(saved, any(r.get("runs") == 1 for r in saved), busy))
        return 0
    cache_dir = args.cache_dir.expanduser()
    cache_dir.mkdir(parents=True, exist_ok=True)
    global SNAPSHOT
    if not args.no_snapshot and "pycann" in args.engines:
        SNAPSHOT = snapshot_pycann(cache_dir)
        log(f"pycann sources frozen for this run in {SNAPSHOT}")
    jsonl = args.jsonl or cache_dir / f"results-{dt.datetime.now():%Y%m%d-%H%M%S}.jsonl"
    models = bench_modes.zoo_models(args.models, args.batches) if args.zoo else parse_models(args.models)
    args.engines = bench_modes.installed_engines(args.engines)
    variants = {"both": ["", "native"], "default": [""], "native": ["native"]}[args.openblas]
    cells: list[Cell] = []
    for m, b in models:
        for e in args.engines:
            for v in variants if e == "pycann" else [""]:
                for busy in [0, args.contention] if args.contention else [0]:
                    cells.append(Cell(m, b, e, v, busy))
    extra = ["--min-runs", str(args.min_runs), "--min-time", str(args.min_time), "--max-runs", str(args.max_runs),
             "--max-time", str(args.max_time), "--floor-runs", str(args.floor_runs)]  # fmt: skip
    if args.first_run:
        extra = list(bench_modes.FIRST_RUN_ARGS)
    log(f"{len(cells)} cells x {args.repeat} repeats -> {jsonl}")
    t_start = time.perf_counter()
    compiled = compile_all([mb for mb in models if "pycann" in args.engines], cache_dir, args.timeout)
    records: list[dict[str, Any]] = []
    with jsonl.open("a") as out:
        failed: set[Cell] = set()
        for rep in range(args.repeat):
            for cell in cells:
                if cell in failed:  # a deterministic failure (not a timeout) is not retried in later repeats
                    continue
                comp: dict[str, Any] = compiled.get((cell.model, cell.batch), {})
                for attempt in range(1 + args.retry_noisy):
                    busy = wait_idle(args.wait_idle, args.idle_threshold) if args.wait_idle else busy_fraction()
                    rec: dict[str, Any]
                    if cell.engine == "pycann" and comp.get("status") != "ok":
                        rec = {"engine": "pycann", "model": cell.model, "batch": cell.batch, "status": "FAIL",
                               "error": f"compile: {comp.get('error', 'not compiled')}"}  # fmt: skip
                    else:
                        rec = run_cell(cell, extra, args.timeout, cache_dir)
                    rec.update(label=cell.label, repeat=rep, attempt=attempt, busy_before=busy,
                               env_openblas={k: child_env(cell.variant).get(k) for k in OPENBLAS_VARS})  # fmt: skip
                    if cell.engine == "pycann" and comp.get("status") == "ok":
                        rec["compile_s"] = comp["compile"].get("compile_s")
                    records.append(rec)
                    out.write(json.dumps(rec) + "\n")
                    out.flush()
                    what = (f"{rec['median_ms']:.3f} ms ({rec['runs']} runs)" if rec.get("status") == "ok"
                            else f"FAIL {rec.get('error', '')[:120]}")  # fmt: skip
                    log(f"rep {rep + 1}/{args.repeat} {cell.label:14s} {cell.model}@{cell.batch}: {what} "
                        f"busy before {busy}, during {rec.get('busy_during')}")
                    if rec.get("status") != "ok" and "timeout" not in str(rec.get("error", "")):
                        failed.add(cell)
                    noisy = rec.get("status") == "ok" and rec.get("busy_during", 0) > args.idle_threshold
                    if not noisy:
                        break
    log(f"done in {time.perf_counter() - t_start:.0f} s; records in {jsonl}")
    print(render_all(records, args.first_run, args.contention))
    return 0


if __name__ == "__main__":
    sys.exit(main())
