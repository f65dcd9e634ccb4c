"""AMCT INT8 vs float: accuracy (top-1 agreement, output cosine) and latency, side by side with
ONNX Runtime (float and its own static INT8 QDQ quantisation) in one run.

    python bench/amct_bench.py --model ~/.cache/pycann/models/resnet50.onnx --calib 8 --eval 32 --loop 20

Images: ``--images DIR`` (any JPEG/PNG; resized to 224x224, ImageNet-normalised) or, by default,
generated smooth random images (seeded), so the run needs no data set. Calibration uses AMCT's
percentile algorithm; ``reduce_range`` (7-bit activations) is switched on where the CPU lacks VNNI,
so pycann's int8 kernels are exact (docs/amct.md). Latency: median of ``--loop`` batch-1 runs after
3 warm-ups, 2 threads; numbers are only comparable within one run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)


def images(n: int, folder: str | None, seed: int) -> list[np.ndarray]:
    """``n`` normalised 1x3x224x224 images: files from ``folder`` or seeded smooth noise."""
    out = []
    if folder:
        from PIL import Image

        files = sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
        for p in (files * (n // max(len(files), 1) + 1))[:n]:
            with Image.open(p) as im:
                a = np.asarray(im.convert("RGB").resize((224, 224)), np.float32) / 255
            out.append(((a.transpose(2, 0, 1)[None] - MEAN) / STD).astype(np.float32))
        return out
    rng = np.random.default_rng(seed)
    for _ in range(n):
        low = rng.random((1, 3, 14, 14)).astype(np.float32)
        img = np.kron(low, np.ones((1, 1, 16, 16), np.float32)) + 0.1 * rng.standard_normal((1, 3, 224, 224))
        out.append(((np.clip(img, 0, 1) - MEAN) / STD).astype(np.float32))
    return out


def median_ms(fn: Callable[[], object], loop: int) -> float:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(loop):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def ort_session(path: str):  # noqa: ANN201
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_int8(model: str, calib: list[np.ndarray], out: str) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    name = ort_session(model).get_inputs()[0].name

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(calib)

        def get_next(self):  # noqa: ANN202
            x = next(self.it, None)
            return None if x is None else {name: x}

    quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/pycann/models/resnet50.onnx"))
    ap.add_argument("--images", default=None)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--eval", type=int, default=32)
    ap.add_argument("--loop", type=int, default=20)
    ap.add_argument("--algo", default="percentile")
    args = ap.parse_args()

    import pycann
    from pycann import amct
    from pycann.ops.providers import torch_int8

    work = Path(tempfile.mkdtemp(prefix="amct_bench_"))
    calib = images(args.calib, args.images, 1)
    evals = images(args.eval, args.images, 2)
    rr = not torch_int8.cpu_has_vnni()
    (work / "d.json").write_text(json.dumps({"activation_quant_params": {"algo": args.algo, "reduce_range": rr}}))
    t0 = time.perf_counter()
    amct.create_quant_config(str(work / "c.json"), args.model, batch_num=len(calib), config_defination=str(work / "d.json"))
    amct.quantize_model(str(work / "c.json"), args.model, str(work / "m.onnx"), str(work / "r.txt"))
    amct.calibrate(str(work / "m.onnx"), calib)
    amct.save_model(str(work / "m.onnx"), str(work / "r.txt"), str(work / "q"))
    calib_s = time.perf_counter() - t0
    deploy = str(work / "q_deploy_model.onnx")
    ort_q = ort_int8(args.model, calib, str(work / "ort_int8.onnx"))

    fp = pycann.InferSession(0, args.model)
    q8 = pycann.InferSession(0, deploy)
    o32, o8 = ort_session(args.model), ort_session(ort_q)
    oname = o32.get_inputs()[0].name
    runs = {"pycann fp32": lambda x: fp.infer([x])[0], "pycann int8 (AMCT)": lambda x: q8.infer([x])[0],
            "ORT fp32": lambda x: o32.run(None, {oname: x})[0], "ORT int8 (quantize_static)": lambda x: o8.run(None, {oname: x})[0]}
    ref = [runs["pycann fp32"](x) for x in evals]
    rows = []
    for label, fn in runs.items():
        outs = [fn(x) for x in evals]
        agree = float(np.mean([int(np.argmax(a) == np.argmax(b)) for a, b in zip(outs, ref)]))
        cos = float(np.mean([np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)) for a, b in zip(outs, ref)]))
        ms = median_ms(lambda fn=fn: fn(evals[0]), args.loop)
        rows.append((label, ms, agree, cos))
    print(f"model {Path(args.model).name}; calibration {args.calib} images ({args.algo}, reduce_range={rr}) "
          f"in {calib_s:.1f} s; {args.eval} evaluation images; VNNI {torch_int8.cpu_has_vnni()}")
    print("| engine | ms (batch 1, median) | top-1 agreement with pycann fp32 | mean cosine |")
    print("|---|---:|---:|---:|")
    for label, ms, agree, cos in rows:
        print(f"| {label} | {ms:.2f} | {agree:.3f} | {cos:.5f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
