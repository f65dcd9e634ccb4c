"""bfloat16 speed and accuracy against OpenVINO (issue 23 item 7; docs/precision.md, bench/RESULTS.md).

Run from the repository root, under the bench lock::

    flock /tmp/pycann-bench.lock python bench/bf16_bench.py                 # resnet50, bert_base, ppocrv4 det
    flock /tmp/pycann-bench.lock python bench/bf16_bench.py --models resnet50 --rounds 3

For each model, on its benchmark inputs (``spec.inputs(0, 1)``), in one process at 2 threads:

* pycann compiled with ``--precision_mode=must_keep_origin_dtype`` (fp32) and ``allow_fp32_to_bf16``
  (``--soc_version=Ascend910B2``, static shapes), OpenVINO ``INFERENCE_PRECISION_HINT=f32`` and ``bf16``
  (``INFERENCE_NUM_THREADS=2``, latency hint, one stream);
* latency: each engine in its own process (``--engine``; in one process OpenVINO's spinning TBB workers
  slow the OpenMP threads of the engine timed after it), the engines taking turns for ``--rounds``
  rounds of ``--runs`` timed runs after 3 warm-ups; the median of all runs;
* accuracy of the first output against ONNX Runtime float32 and against OpenVINO bf16: max and mean |err|;
  for ResNet-50 the top-1 agreement over ``--images`` random inputs, for the det model also the share of
  pixels whose text/background decision (probability > 0.3, RapidOCR's threshold) differs on a real page.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

try:
    from scripts.model_zoo import MODELS, ort_run
except ImportError:
    sys.path.insert(0, __file__.rsplit("/bench/", 1)[0])
    from scripts.model_zoo import MODELS, ort_run

MODELS_DEFAULT = ("resnet50", "bert_base", "rapidocr_ppocrv4_det")
Feeds = Mapping[str, np.ndarray]
Engine = Callable[[Feeds], np.ndarray]


def pycann_engine(path: str, feeds: Feeds, mode: str) -> Engine:
    """Compile ``path`` for the feeds' static shapes in ``mode``; return a first-output runner."""
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel

    cm = compile_model(path, CompileOptions(precision_mode=mode, soc_version="Ascend910B2",
                                            input_shape={k: list(v.shape) for k, v in feeds.items()}))
    m = LoadedModel.from_compiled(cm)

    def run(f: Feeds) -> np.ndarray:
        out = m.run_dict(dict(f))
        return np.asarray(next(iter(out.values())) if isinstance(out, dict) else out[0])

    return run


def openvino_engine(path: str, feeds: Feeds, precision: str) -> Engine:
    """OpenVINO CPU at 2 threads, latency hint, ``INFERENCE_PRECISION_HINT=precision``; first output."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(path)
    model.reshape({k: list(v.shape) for k, v in feeds.items()})
    compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": 2, "PERFORMANCE_HINT": "LATENCY",
                                                 "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": precision})
    req = compiled.create_infer_request()
    return lambda f: np.array(req.infer(dict(f))[compiled.output(0)])


ENGINES = {"pycann fp32": ("pycann", "must_keep_origin_dtype"), "pycann bf16": ("pycann", "allow_fp32_to_bf16"),
           "OV f32": ("openvino", "f32"), "OV bf16": ("openvino", "bf16")}


def make_engine(label: str, path: str, feeds: Feeds) -> Engine:
    """The engine ``label`` of ``ENGINES`` for this model and these feeds' shapes."""
    kind, arg = ENGINES[label]
    return pycann_engine(path, feeds, arg) if kind == "pycann" else openvino_engine(path, feeds, arg)


def time_one(name: str, label: str, runs: int) -> list[float]:
    """(child process) ``runs`` timed runs in ms of one engine after 3 warm-ups."""
    spec = MODELS[name]
    feeds = spec.inputs(0, 1)
    fn = make_engine(label, str(spec.ensure()), feeds)
    for _ in range(3):
        fn(feeds)
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(feeds)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def time_turns(name: str, rounds: int, runs: int) -> dict[str, float]:
    """Median ms per engine, each in a fresh process; engines take turns so machine noise hits them alike."""
    import json
    import subprocess

    times: dict[str, list[float]] = {k: [] for k in ENGINES}
    for _ in range(rounds):
        for label in ENGINES:
            proc = subprocess.run([sys.executable, __file__, "--time-one", label, "--models", name, "--runs", str(runs)],
                                  capture_output=True, text=True, check=True)
            times[label] += json.loads(proc.stdout.strip().splitlines()[-1])
    return {k: statistics.median(v) for k, v in times.items()}


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """(max |err|, mean |err|) in float64."""
    d = np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))
    return float(d.max()), float(d.mean())


def page_feeds(spec: Any, shape: tuple[int, ...]) -> dict[str, np.ndarray] | None:
    """A real text page (tests/data/ocr/page.jpg) resized to ``shape`` with RapidOCR's det normalisation."""
    import pathlib

    img = pathlib.Path(__file__).resolve().parents[1] / "tests/data/ocr/page.jpg"
    try:
        from PIL import Image
    except ImportError:
        return None
    if not img.is_file():
        return None
    h, w = shape[2], shape[3]
    a = np.asarray(Image.open(img).convert("RGB").resize((w, h)), np.float32) / 255.0
    a = ((a - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225], np.float32)).astype(np.float32)
    return {next(iter(spec.inputs(0, 1))): np.ascontiguousarray(a.transpose(2, 0, 1)[None])}


def model_report(name: str, rounds: int, runs: int, images: int) -> dict[str, Any]:
    """Latencies and accuracies of one model (see the module docstring)."""
    spec = MODELS[name]
    path = str(spec.ensure())
    feeds = spec.inputs(0, 1)
    rep: dict[str, Any] = {"ms": time_turns(name, rounds, runs)}
    eng = {label: make_engine(label, path, feeds) for label in ENGINES}
    ref = ort_run(path, feeds)[0]
    outs = {k: fn(feeds) for k, fn in eng.items()}
    rep["vs_ort"] = {k: errors(v, ref) for k, v in outs.items()}
    rep["bf16_vs_ov_bf16"] = errors(outs["pycann bf16"], outs["OV bf16"])
    if name == "resnet50":
        agree = {k: 0 for k in eng}
        for seed in range(images):
            f = spec.inputs(seed, 1)
            top = int(np.argmax(ort_run(path, f)[0]))
            for k, fn in eng.items():
                agree[k] += int(np.argmax(fn(f)) == top)
        rep["top1"] = {k: f"{v}/{images}" for k, v in agree.items()}
    if name.endswith("_det"):
        page = page_feeds(spec, next(iter(feeds.values())).shape)
        if page is not None:
            want = ort_run(path, page)[0] > 0.3
            rep["det_flip"] = {k: float(((fn(page) > 0.3) != want).mean()) for k, fn in eng.items()}
            rep["det_page_err"] = {k: errors(fn(page), ort_run(path, page)[0]) for k, fn in eng.items()}
    return rep


def main(argv: list[str] | None = None) -> int:
    """Print one markdown block per model."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(MODELS_DEFAULT))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--images", type=int, default=20, help="random inputs for ResNet-50's top-1 agreement")
    ap.add_argument("--time-one", metavar="ENGINE", help="(internal) time one engine, print the run times as JSON")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    if args.time_one:
        import json

        print(json.dumps(time_one(args.models[0], args.time_one, args.runs)))
        return 0
    for name in args.models:
        r = model_report(name, args.rounds, args.runs, args.images)
        ms = r["ms"]
        print(f"\n### {name}\n\n| engine | median ms | vs OV bf16 | max/mean abs err vs ORT fp32 |\n|---|---|---|---|")
        for k, v in ms.items():
            e = r["vs_ort"][k]
            print(f"| {k} | {v:.1f} | {v / ms['OV bf16']:.2f}x | {e[0]:.2e} / {e[1]:.2e} |")
        e = r["bf16_vs_ov_bf16"]
        print(f"\npycann bf16 vs OV bf16: max {e[0]:.2e} / mean {e[1]:.2e}")
        for key in ("top1", "det_flip", "det_page_err"):
            if key in r:
                print(f"{key}: {r[key]}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
