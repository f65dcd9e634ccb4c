"""Benchmark one (engine, model, batch) cell in this process and print one JSON line.

Run from the repository root (``run_bench.py`` drives it, one fresh process per cell)::

    python bench/bench_one.py --engine pycann --model resnet50 --batch 8
    python bench/bench_one.py --engine ort --model bert_base
    python bench/bench_one.py --engine pycann --model resnet50 --compile-only   # fill the .om cache only

Engines:

* ``pycann``: loads an ``.om`` compiled beforehand with :func:`pycann.compile_model` for the static benchmark
  shapes (ATC style). The ``.om`` lives in a cache folder outside the repository (``--cache-dir``, default
  ``~/.cache/pycann/bench``), keyed by model, input shapes and a hash of the ``pycann`` sources, so any change
  to pycann recompiles. Compilation runs in a separate child process (its time is reported as ``compile_s``,
  its memory is not in ``peak_rss_mb``); ``load_s`` is only the ``InferSession`` creation.
* ``ort``: ONNX Runtime CPU, ``ORT_ENABLE_ALL``, 2 intra-op threads, 1 inter-op thread, sequential.
  ``ort_nospin`` adds ``session.intra_op.allow_spinning=0`` (its workers block instead of spinning, the
  counterpart of pycann's default ``OMP_WAIT_POLICY=PASSIVE``; fairer on a machine other processes keep busy).
* ``openvino`` / ``openvino_f32``: ``read_model`` -> ``reshape`` to the static benchmark shapes ->
  ``compile_model("CPU", INFERENCE_NUM_THREADS=2, PERFORMANCE_HINT=LATENCY, NUM_STREAMS=1)``; the ``_f32`` variant
  adds ``INFERENCE_PRECISION_HINT=f32`` (the default is bf16 on CPUs with avx512_bf16). When ``read_model`` or
  ``reshape`` fails it falls back to ``ov.convert_model(path, input=shapes)`` (as in peer-baselines section 5).

Method (peer-baselines section 5): create the session, one first run (timed separately), ``--warmup`` runs, then
timed runs until at least ``--min-runs`` runs and ``--min-time`` seconds have passed (at most ``--max-runs``).
Slow cells stop early: once ``--max-time`` seconds of timed runs have passed, at least ``--floor-runs`` runs are
enough. A failure prints a JSON line with ``"status": "FAIL"`` and the reason (exit status 0, so the driver
records it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
# run_bench.py freezes a copy of pycann/ for a whole run (the tree may change while it runs): import that one.
SRC = pathlib.Path(os.environ["PYCANN_BENCH_SRC"]) if os.environ.get("PYCANN_BENCH_SRC") else REPO
if SRC != REPO:
    sys.path.insert(0, str(SRC))
    # site-packages' pycann_torchvision.pth imports pycann.torch_vision_hook at interpreter start-up, i.e. the
    # pycann of the working tree (editable install / PYTHONPATH): forget it so that the snapshot is imported
    for _name in [m for m in sys.modules if m == "pycann" or m.startswith("pycann.")]:
        del sys.modules[_name]

from scripts.model_zoo import ALL_MODELS as MODELS  # noqa: E402

ENGINES = ("pycann", "ort", "ort_nospin", "openvino", "openvino_f32")
DEFAULT_CACHE = pathlib.Path(os.environ.get("PYCANN_BENCH_CACHE", "~/.cache/pycann/bench")).expanduser()

Feeds = dict[str, np.ndarray]
RunFn = Callable[[], Any]


# ----------------------------------------------------------------------------------------- helpers
def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (``ru_maxrss`` is in KiB on Linux)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(kib / 1024.0, 1)


def blas_info() -> dict[str, Any]:
    """What BLAS numpy uses, from ``threadpoolctl`` (library, kernel architecture, threads).

    numpy's own BLAS is preferred (the wheel's ``scipy_openblas``) when other libraries (e.g. torch's MKL) are loaded
    too; ``pools`` lists every thread pool threadpoolctl sees as ``internal_api/architecture/num_threads``.
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {"error": "threadpoolctl is not installed (pip install -e .[bench])"}
    pools = threadpool_info()
    blas = [p for p in pools if p.get("user_api") == "blas"]
    blas.sort(key=lambda p: "numpy" not in str(p.get("filepath", "")))
    if not blas:
        return {"error": "no BLAS found by threadpoolctl"}
    first = blas[0]
    return {
        "internal_api": first.get("internal_api"),
        "architecture": first.get("architecture"),
        "num_threads": first.get("num_threads"),
        "version": first.get("version"),
        "pools": [f"{p.get('internal_api')}/{p.get('architecture') or '-'}/{p.get('num_threads')}" for p in pools],
    }


def plan_info(sess: Any, feeds: Feeds) -> dict[str, Any]:
    """What pycann ran: step count, op types of the specialised plan, kernel choices (``_algo``), providers."""
    try:
        lm = sess.model
        plan, _ = lm.executor.plan_for(lm.check_feeds([feeds[i.name] for i in lm.inputs]))
        ops: dict[str, int] = {}
        algos: dict[str, int] = {}
        for n in plan.nodes:
            ops[n.op_type] = ops.get(n.op_type, 0) + 1
            algo = n.attrs.get("_algo")
            if algo:
                algos[str(algo)] = algos.get(str(algo), 0) + 1
        from pycann.kernels.providers import onednn2_capi, onednn_capi

        # the oneDNN libraries this process loaded (v3: the provider; v2: its Winograd convs)
        dnnl = [".".join(map(str, m.version())) for m in (onednn_capi, onednn2_capi) if m._lib is not None]
        return {"steps": len(plan.steps), "op_types": ops, "algos": algos, "torch_loaded": "torch" in sys.modules,
                "onednn": dnnl}
    except Exception as e:  # the executor's internals change; never fail the cell over this
        return {"error": _short(e)}


def benchmark_feeds(model: str, batch: int) -> Feeds:
    """The benchmark inputs of ``model`` (peer-baselines section 5, seed 0)."""
    return MODELS[model].inputs(0, batch)


def feed_shapes(feeds: Mapping[str, np.ndarray]) -> dict[str, list[int]]:
    """Input name -> static shape (``[]`` for scalars)."""
    return {k: [int(d) for d in v.shape] for k, v in feeds.items()}


def pycann_source_hash(src: pathlib.Path = SRC) -> str:
    """A short hash of every ``pycann/**/*.py`` file under ``src``, so that the .om cache follows source changes."""
    h = hashlib.sha256()
    root = src / "pycann"
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def om_path(cache_dir: pathlib.Path, model: str, batch: int, shapes: Mapping[str, list[int]]) -> pathlib.Path:
    """Where the .om for (model file, static shapes, pycann sources, ``PYCANN_*`` settings) is cached.

    The model file's size and modification time are part of the key, so a re-exported model is recompiled."""
    settings = sorted((k, v) for k, v in os.environ.items()
                      if k.startswith("PYCANN_") and k not in ("PYCANN_BENCH_SRC", "PYCANN_BENCH_CACHE", "PYCANN_MODEL_DIR"))  # fmt: skip
    src = MODELS[model].path
    stamp = [src.stat().st_size, src.stat().st_mtime_ns] if src.is_file() else None
    key = json.dumps([sorted(shapes.items()), settings, stamp]) + pycann_source_hash()
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return cache_dir / f"{model}_b{batch}_{digest}.om"


def compile_om(model: str, batch: int, cache_dir: pathlib.Path) -> dict[str, Any]:
    """Compile ``model`` for its static benchmark shapes into the cache (this process); return its record.

    When the static-shape compile fails, the model is compiled with its own (dynamic) input shapes instead and
    the record says so (``compile_mode``, ``static_error``).
    """
    import pycann

    feeds = benchmark_feeds(model, batch)
    shapes = feed_shapes(feeds)
    path = om_path(cache_dir, model, batch, shapes)
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        return dict(json.loads(meta.read_text()), cached=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    src = MODELS[model].ensure()
    rec: dict[str, Any] = {"om": str(path), "compile_mode": "static"}
    t0 = time.perf_counter()
    try:
        cm = pycann.compile_model(str(src), pycann.CompileOptions(input_shape=dict(shapes)))
    except Exception as e:  # keep the cell alive: the executor specialises dynamic graphs per input signature
        rec.update(compile_mode="dynamic", static_error=_short(e))
        t0 = time.perf_counter()
        cm = pycann.compile_model(str(src))
    compile_s = time.perf_counter() - t0
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    nbytes = cm.save(tmp)
    os.replace(tmp, path)
    rec.update({
        "compile_s": round(compile_s, 3),
        "om_bytes": nbytes,
        "input_shape": shapes,
        "peak_rss_mb": peak_rss_mb(),
    })
    meta.write_text(json.dumps(rec))
    rec["cached"] = False
    prune_cache(cache_dir, f"{model}_b{batch}_")
    return rec


KEEP_OMS = 4  # per (model, batch): every source edit makes a new .om (GPT-2's is ~0.5 GB)


def prune_cache(cache_dir: pathlib.Path, prefix: str, keep: int = KEEP_OMS) -> None:
    """Delete all but the ``keep`` newest ``<prefix>*.om`` files (and their .json) in the cache."""
    oms = sorted(cache_dir.glob(f"{prefix}*.om"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in oms[keep:]:
        for p in (old, old.with_suffix(".json")):
            p.unlink(missing_ok=True)


def ensure_om(model: str, batch: int, cache_dir: pathlib.Path) -> dict[str, Any]:
    """Make sure the .om exists, compiling it in a child process so this process's memory stays clean."""
    shapes = feed_shapes(benchmark_feeds(model, batch))
    path = om_path(cache_dir, model, batch, shapes)
    meta = path.with_suffix(".json")
    if path.exists() and meta.exists():
        rec = json.loads(meta.read_text())
        rec["cached"] = True
        return rec
    cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--engine", "pycann", "--model", model,
           "--batch", str(batch), "--cache-dir", str(cache_dir), "--compile-only"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    rec = last_json_line(proc.stdout)
    if rec is None or rec.get("status") != "ok":
        tail = proc.stderr.strip().splitlines()[-1:]
        reason = (rec or {}).get("error") or (tail[0] if tail else f"exit status {proc.returncode}")
        raise RuntimeError(f"compile failed: {reason}")
    return dict(rec["compile"], cached=False)


def last_json_line(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that parses as a JSON object, or None."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return None


# ----------------------------------------------------------------------------------------- engines
def setup_pycann(model: str, batch: int, feeds: Feeds, cache_dir: pathlib.Path, rec: dict[str, Any]) -> RunFn:
    """Load the precompiled .om; fills ``compile_s`` / ``load_s`` / ``blas``."""
    comp = ensure_om(model, batch, cache_dir)
    rec["compile_s"] = comp["compile_s"]
    rec["compile_cached"] = comp["cached"]
    rec["compile_mode"] = comp.get("compile_mode", "static")
    if "static_error" in comp:
        rec["static_error"] = comp["static_error"]
    rec["om"] = comp["om"]
    t0 = time.perf_counter()
    import pycann
    from pycann.acl.session import InferSession

    rec["import_s"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()
    sess = InferSession(0, comp["om"])
    rec["load_s"] = round(time.perf_counter() - t0, 4)
    rec["version"] = pycann.__version__
    rec["pycann_src"] = f"{pycann_source_hash()} ({pathlib.Path(pycann.__file__).parent})"

    def run() -> Any:
        return sess.infer(feeds)

    run.session = sess  # type: ignore[attr-defined]
    return run


def setup_ort(model: str, feeds: Feeds, rec: dict[str, Any], spin: bool = True) -> RunFn:
    """ONNX Runtime session with the peer-baselines settings; fills ``load_s``."""
    t0 = time.perf_counter()
    import onnxruntime as ort

    rec["import_s"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.intra_op_num_threads = 2
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(str(MODELS[model].ensure()), opts, providers=["CPUExecutionProvider"])
    rec["load_s"] = round(time.perf_counter() - t0, 4)
    rec["version"] = ort.__version__
    return lambda: sess.run(None, feeds)


def setup_openvino(model: str, feeds: Feeds, f32: bool, rec: dict[str, Any]) -> RunFn:
    """OpenVINO CPU with static shapes (ATC-like); fills ``load_s``, ``ov_import`` and ``precision``."""
    t0 = time.perf_counter()
    import openvino as ov

    rec["import_s"] = round(time.perf_counter() - t0, 4)
    t0 = time.perf_counter()
    core = ov.Core()
    path = str(MODELS[model].ensure())
    shapes = feed_shapes(feeds)
    try:
        m = core.read_model(path)
        m.reshape({inp.get_any_name(): ov.PartialShape(shapes[inp.get_any_name()]) for inp in m.inputs})
        rec["ov_import"] = "read_model"
        config: dict[str, Any] = {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        if f32:
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = core.compile_model(m, "CPU", config)
    except Exception as first:  # fall back to the converter with static input shapes (peer method)
        rec["ov_read_model_error"] = _short(first)
        m = ov.convert_model(path, input={k: ov.PartialShape(v) for k, v in shapes.items()})
        rec["ov_import"] = "convert_model"
        config = {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        if f32:
            config["INFERENCE_PRECISION_HINT"] = "f32"
        compiled = core.compile_model(m, "CPU", config)
    rec["load_s"] = round(time.perf_counter() - t0, 4)
    prec = compiled.get_property("INFERENCE_PRECISION_HINT")
    rec["precision"] = prec.get_type_name() if hasattr(prec, "get_type_name") else str(prec)
    rec["version"] = ov.get_version()
    req = compiled.create_infer_request()
    names = [inp.get_any_name() for inp in compiled.inputs]
    ov_feeds = {n: feeds[n] for n in names}
    return lambda: req.infer(ov_feeds)


def _short(e: BaseException, limit: int = 400) -> str:
    text = f"{type(e).__name__}: {e}".replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------- timing
def time_runs(
    run: RunFn, warmup: int, min_runs: int, min_time: float, max_runs: int, max_time: float, floor_runs: int
) -> list[float]:
    """Warm up, then time runs (seconds each) under the stopping rules in the module docstring."""
    for _ in range(warmup):
        run()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < max_runs:
        elapsed = time.perf_counter() - start
        if len(times) >= min_runs and elapsed >= min_time:
            break
        if len(times) >= floor_runs and elapsed >= max_time:
            break
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def summarize(times: Sequence[float]) -> dict[str, Any]:
    """Median, p90, min and mean in ms."""
    ms = np.asarray(times) * 1e3
    return {
        "median_ms": round(float(np.median(ms)), 4),
        "p90_ms": round(float(np.percentile(ms, 90)), 4),
        "min_ms": round(float(ms.min()), 4),
        "mean_ms": round(float(ms.mean()), 4),
        "runs": len(times),
        "timed_s": round(float(ms.sum()) / 1e3, 3),
    }


def bench(args: argparse.Namespace) -> dict[str, Any]:
    """Run one cell and return its record."""
    rec: dict[str, Any] = {
        "engine": args.engine, "model": args.model, "batch": args.batch, "status": "ok",
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"), "python": platform.python_version(),
        "numpy": np.__version__, "loadavg_1m": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    try:
        feeds = benchmark_feeds(args.model, args.batch)
        rec["inputs"] = {k: f"{v.dtype}{list(v.shape)}" for k, v in feeds.items()}
        if args.compile_only:
            rec["compile"] = compile_om(args.model, args.batch, args.cache_dir)
            return rec
        if args.engine == "pycann":
            run = setup_pycann(args.model, args.batch, feeds, args.cache_dir, rec)
        elif args.engine in ("ort", "ort_nospin"):
            run = setup_ort(args.model, feeds, rec, spin=args.engine == "ort")
        else:
            run = setup_openvino(args.model, feeds, args.engine == "openvino_f32", rec)
        t0 = time.perf_counter()
        run()
        rec["first_run_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
        times = time_runs(run, args.warmup, args.min_runs, args.min_time, args.max_runs, args.max_time,
                          args.floor_runs)  # fmt: skip
        rec.update(summarize(times))
        if args.engine == "pycann":  # after the runs: providers such as torch load lazily
            rec["blas"] = blas_info()
            rec["plan"] = plan_info(getattr(run, "session", None), feeds)
    except Exception as e:
        rec["status"] = "FAIL"
        rec["error"] = _short(e)
        if args.verbose:
            traceback.print_exc()
    rec["peak_rss_mb"] = peak_rss_mb()
    return rec


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options (see the module docstring)."""
    p = argparse.ArgumentParser(description="Benchmark one (engine, model) pair; prints one JSON line.")
    p.add_argument("--engine", choices=ENGINES, required=True)
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--warmup", type=int, default=4, help="untimed runs after the first run (default 4)")
    p.add_argument("--min-runs", type=int, default=20, help="timed runs at least (default 20)")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timed runs at least (default 1)")
    p.add_argument("--max-runs", type=int, default=2000, help="timed runs at most (default 2000)")
    p.add_argument("--max-time", type=float, default=30.0,
                   help="slow cells: stop after this many seconds once --floor-runs are done (default 30)")
    p.add_argument("--floor-runs", type=int, default=5, help="fewest timed runs for slow cells (default 5)")
    p.add_argument("--cache-dir", type=pathlib.Path, default=DEFAULT_CACHE, help="where compiled .om files live")
    p.add_argument("--compile-only", action="store_true", help="pycann: compile into the cache and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="print tracebacks of failures to stderr")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: print the cell's JSON record on one line."""
    args = parse_args(argv)
    args.cache_dir = args.cache_dir.expanduser()
    rec = bench(args)
    print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
