"""Accuracy of each ``--precision_mode`` on the real model set, against ONNX Runtime in float32.

Prints the markdown table of docs/precision.md::

    python scripts/precision_report.py                       # every model, test inputs
    python scripts/precision_report.py resnet50 bert_base    # some models

For each model and mode: compile with pycann (``--soc_version=Ascend910B2``, which has bfloat16),
run ``spec.test_inputs(0)``, compare the first output with ONNX Runtime's float32 result:
max |err|, max |err| / max |ref| ("rel") and the cosine similarity.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

try:
    from scripts.model_zoo import MODELS, ort_run
except ImportError:  # run as `python scripts/precision_report.py`
    sys.path.insert(0, __file__.rsplit("/scripts/", 1)[0])
    from scripts.model_zoo import MODELS, ort_run

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel

MODES = ("must_keep_origin_dtype", "force_fp32", "allow_fp32_to_fp16", "allow_mix_precision_fp16", "force_fp16",
         "allow_mix_precision_bf16")
SHORT = {"must_keep_origin_dtype": "origin (fp32)", "force_fp32": "force_fp32", "allow_fp32_to_fp16": "allow_fp32_to_fp16",
         "allow_mix_precision_fp16": "mixed fp16", "force_fp16": "force_fp16", "allow_mix_precision_bf16": "mixed bf16"}
DEFAULT_MODELS = ("resnet50", "bert_base", "gpt2_6l", "minilm_l6", "rapidocr_ppocrv4_det", "rapidocr_ppocrv4_rec",
                  "rapidocr_ppocr_mobile_v2_cls", "ppocrv5_det", "ppocrv5_rec", "ppocrv5_cls", "silero_vad",
                  "silero_vad_half")


def metrics(got: np.ndarray, want: np.ndarray) -> tuple[float, float, float]:
    """(max abs error, max abs error / max |want|, cosine similarity), in float64."""
    g, w = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    if not np.isfinite(g).all():
        return float("inf"), float("inf"), float("nan")
    err = float(np.abs(g - w).max()) if g.size else 0.0
    scale = float(np.abs(w).max()) or 1.0
    denom = float(np.linalg.norm(g) * np.linalg.norm(w))
    cos = float(g @ w / denom) if denom else float(not g.any() and not w.any())  # all zeros vs not: 0
    return err, err / scale, cos


def measure(name: str, modes: tuple[str, ...] = MODES) -> dict[str, tuple[float, float, float]]:
    """Metrics of each mode for one model (first output)."""
    spec = MODELS[name]
    path = str(spec.ensure())
    feeds = spec.test_inputs(0)
    want = ort_run(path, feeds)[0]
    out = {}
    for mode in modes:
        cm = compile_model(path, CompileOptions(precision_mode=mode, soc_version="Ascend910B2"))
        got = LoadedModel.from_compiled(cm).run_dict(feeds)[0]
        out[mode] = metrics(got, want)
    return out


def _fmt(m: tuple[float, float, float]) -> str:
    err, rel, cos = m
    if not np.isfinite(err):
        return "inf/NaN"
    return f"{err:.1e} / {rel:.1e} / {cos:.6f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", RuntimeWarning)
    print("| model (output) | " + " | ".join(SHORT[m] for m in MODES) + " |")
    print("|---|" + "---|" * len(MODES))
    for name in args.models:
        t0 = time.perf_counter()
        res = measure(name)
        print(f"| {name} ({MODELS[name].outputs[0]}) | " + " | ".join(_fmt(res[m]) for m in MODES) + " |", flush=True)
        print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
