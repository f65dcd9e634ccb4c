"""Accuracy of a quantised model against its float original, and AMCT's
``accuracy_based_auto_calibration``: quantise everything, and while the outputs' cosine similarity
to float stays below the target, keep the most sensitive layer in float (sensitivity = the output
cosine with only that layer quantised, NNCF's accuracy-control idea), then report which layers
were kept and why.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from pycann.amct.config import QuantConfig
from pycann.amct.graph import insert_qdq
from pycann.amct.quantize import (
    Batch,
    _feeds,
    _layers,
    _load,
    _meta,
    calibrate,
    create_quant_config,
    layer_quants,
    quantize_model,
    save_model,
)
from pycann.errors import ModelError, OptionError


@dataclass
class AccuracyReport:
    """Per graph output: mean and minimum cosine similarity over the batches, the largest absolute
    difference, and (for [N, classes] outputs) the top-1 agreement fraction."""

    cosine_mean: list[float] = field(default_factory=list)
    cosine_min: list[float] = field(default_factory=list)
    max_abs_diff: list[float] = field(default_factory=list)
    top1_agreement: list[float | None] = field(default_factory=list)

    @property
    def cosine(self) -> float:
        """The worst output's mean cosine."""
        return min(self.cosine_mean) if self.cosine_mean else 1.0

    def lines(self) -> list[str]:
        out = []
        for i, (cm, cn, d, t) in enumerate(zip(self.cosine_mean, self.cosine_min, self.max_abs_diff, self.top1_agreement)):
            top = f", top-1 agreement {t:.4f}" if t is not None else ""
            out.append(f"output {i}: cosine mean {cm:.6f} min {cn:.6f}, max |diff| {d:.4g}{top}")
        return out


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
    if na == 0 and nb == 0:
        return 1.0
    return float(a64 @ b64 / max(na * nb, 1e-300))


def _runner(model: onnx.ModelProto):  # noqa: ANN202
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel

    # high_precision: the QDQ arithmetic as written (atc's default may keep slow int8 layers fp32 and
    # bypass activation QDQ pairs, which would hide the quantisation error being measured)
    lm = LoadedModel.from_compiled(compile_model(model, CompileOptions(op_select_implmode="high_precision")))
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    return lambda batch: lm.run_dict(_feeds(batch, names))


def compare_models(reference: onnx.ModelProto | str, candidate: onnx.ModelProto | str,
                   batches: Sequence[Batch]) -> AccuracyReport:
    """Run both models (pycann) on ``batches`` and compare every output. Raises ``ModelError`` when
    the models' outputs differ in number or shape (nothing to compare one to one)."""
    ref = _load(reference) if isinstance(reference, str) else reference
    cand = _load(candidate) if isinstance(candidate, str) else candidate
    run_r, run_c = _runner(ref), _runner(cand)
    cos: list[list[float]] = []
    diff: list[float] = []
    agree: list[list[float]] = []
    for batch in batches:
        outs_r, outs_c = run_r(batch), run_c(batch)
        if len(outs_r) != len(outs_c):
            raise ModelError(f"AMCT compare_models: the reference has {len(outs_r)} outputs, the candidate "
                             f"{len(outs_c)}: compare a model with its own quantised version")
        for i, (r, c) in enumerate(zip(outs_r, outs_c)):
            r, c = np.asarray(r), np.asarray(c)
            if r.shape != c.shape:
                raise ModelError(f"AMCT compare_models: output {i} is {list(r.shape)} in the reference and "
                                 f"{list(c.shape)} in the candidate")
            while len(cos) <= i:
                cos.append([])
                agree.append([])
                diff.append(0.0)
            rows = r.reshape(r.shape[0], -1) if r.ndim >= 2 else r.reshape(1, -1)
            crow = c.reshape(rows.shape)
            cos[i].extend(_cos(x, y) for x, y in zip(rows, crow))
            diff[i] = max(diff[i], float(np.max(np.abs(r.astype(np.float64) - c))) if r.size else 0.0)
            if r.ndim == 2 and r.shape[1] > 1:
                agree[i].extend((r.argmax(1) == c.argmax(1)).astype(float).tolist())
    rep = AccuracyReport()
    for i in range(len(cos)):
        rep.cosine_mean.append(float(np.mean(cos[i])))
        rep.cosine_min.append(float(np.min(cos[i])))
        rep.max_abs_diff.append(diff[i])
        rep.top1_agreement.append(float(np.mean(agree[i])) if agree[i] else None)
    return rep


@dataclass
class AutoCalibrationResult:
    """What ``accuracy_based_auto_calibration`` did: the final report, the layers kept in float
    (name -> why), and the files written."""

    report: AccuracyReport
    kept_float: dict[str, str]
    deploy_model: str
    fake_quant_model: str


def accuracy_based_auto_calibration(model_file: str, batches: Sequence[Batch], save_path: str,
                                    target_cosine: float = 0.99, config_file: str | None = None,
                                    max_kept: int | None = None) -> AutoCalibrationResult:
    """Quantise ``model_file`` on ``batches`` (all of them calibrate and evaluate) and keep the most
    sensitive layers in float until every output's mean cosine to float is >= ``target_cosine``
    (at most ``max_kept`` layers; default: all). Writes the same files as ``save_model``.
    Raises ``OptionError`` for a ``target_cosine`` outside (0, 1] (no cosine can reach it)."""
    if not 0.0 < float(target_cosine) <= 1.0:
        raise OptionError(f"AMCT: target_cosine {target_cosine} is a cosine similarity: give a value in (0, 1]")
    work = tempfile.mkdtemp(prefix="amct_")
    try:  # the modified model and its record (the size of the model) are deleted afterwards
        return _auto_calibration(work, model_file, batches, save_path, target_cosine, config_file, max_kept)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _auto_calibration(work: str, model_file: str, batches: Sequence[Batch], save_path: str, target_cosine: float,
                      config_file: str | None, max_kept: int | None) -> AutoCalibrationResult:
    cfg_path = config_file or os.path.join(work, "config.json")
    if config_file is None:
        create_quant_config(cfg_path, model_file, batch_num=len(batches))
    modified, record = os.path.join(work, "modified.onnx"), os.path.join(work, "record.txt")
    quantize_model(cfg_path, model_file, modified, record)
    calibrate(modified, batches, record)
    kept = save_model(modified, record, save_path)
    float_model = _load(model_file)
    rep = compare_models(float_model, save_path + "_fake_quant_model.onnx", batches)
    if rep.cosine >= target_cosine:
        return AutoCalibrationResult(rep, kept, save_path + "_deploy_model.onnx", save_path + "_fake_quant_model.onnx")
    sens = _sensitivity(modified, record, cfg_path, batches[:2], float_model)
    cfg = QuantConfig.load(cfg_path)
    reasons: dict[str, str] = {}
    for n, (name, cos1) in enumerate(sorted(sens.items(), key=lambda kv: kv[1])):
        if rep.cosine >= target_cosine or (max_kept is not None and n >= max_kept):
            break
        cfg.layers[name].quant_enable = False
        cfg.save(cfg_path)
        reasons[name] = (f"costs accuracy: output cosine {cos1:.6f} with only this layer quantised "
                         f"(rank {n + 1} of {len(sens)}); target {target_cosine}")
        kept = {**save_model(modified, record, save_path), **reasons}
        rep = compare_models(float_model, save_path + "_fake_quant_model.onnx", batches)
    if rep.cosine < target_cosine:
        kept["<target>"] = f"not reached: cosine {rep.cosine:.6f} < {target_cosine} with {len(kept)} layers in float"
    return AutoCalibrationResult(rep, kept, save_path + "_deploy_model.onnx", save_path + "_fake_quant_model.onnx")


def _sensitivity(modified: str, record_file: str, cfg_path: str, batches: Sequence[Batch],
                 float_model: onnx.ModelProto) -> dict[str, float]:
    """Output cosine with only one layer quantised, per enabled layer."""
    import json

    model = _load(modified)
    meta = _meta(model, modified)
    layers = _layers(meta)
    del model.graph.output[int(meta["n_outputs"]):]
    with open(record_file, encoding="utf-8") as f:
        record = json.load(f)
    quants, _ = layer_quants(model, layers, QuantConfig.load(cfg_path), record)
    out: dict[str, float] = {}
    for q in quants:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        insert_qdq(m, [q], fake=True)
        out[q.layer.name] = compare_models(float_model, m, batches).cosine
    return out
