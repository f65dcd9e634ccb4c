"""AMCT's post-training quantisation flow for ONNX models, with AMCT's call names.

    amct.create_quant_config(config_file, model_file, skip_layers, batch_num, activation_offset)
    amct.quantize_model(config_file, model_file, modified_onnx_file, record_file)
    amct.calibrate(modified_onnx_file, batches)          # AMCT: run the batches in ORT + AMCT_SO
    amct.save_model(modified_onnx_file, record_file, save_path)

``quantize_model`` folds BatchNormalization into the convs and writes the *modified* model: the
model with each quantisable layer's input activation as an extra graph output, and the layer
table, config path and record path in its ``metadata_props``. AMCT records through custom ops
loaded into ONNX Runtime (``amct.AMCT_SO``); pycann's ``calibrate`` runs the batches through
pycann instead and writes the record (JSON: per layer ``scale_d``/``offset_d``, the activation's
per-channel mean). ``save_model`` writes ``<save_path>_fake_quant_model.onnx`` (QDQ activations,
fake-quantised float weights: any ONNX runtime reproduces the int8 rounding),
``<save_path>_deploy_model.onnx`` (QDQ with int8 weights and int32 biases, for ``atc``) and
``<save_path>_quant.json`` (per-layer scales and what was skipped, and why).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from pycann.amct.config import LayerConfig, QuantConfig, parse_config
from pycann.amct.graph import (
    Layer,
    LayerQuant,
    add_outputs,
    constants_to_initializers,
    ensure_opset,
    find_layers,
    fold_batchnorm,
    insert_qdq,
    name_nodes,
    refuse_float16,
)
from pycann.amct.observers import Observer, quant_params, weight_scales
from pycann.errors import InputError, ModelError, OptionError

META = "amct."
Batch = Mapping[str, np.ndarray] | Sequence[np.ndarray] | np.ndarray


def _load(path: str | os.PathLike[str]) -> onnx.ModelProto:
    if not os.path.isfile(path):
        raise ModelError(f"AMCT: model file {path} does not exist" if not os.path.isdir(path)
                         else f"AMCT: model path {path} is a directory, not an .onnx file")
    try:
        model = onnx.load(os.fspath(path))
    except Exception as e:  # protobuf's DecodeError and friends
        raise ModelError(f"AMCT: {path} is not an ONNX model ({type(e).__name__}: {e})") from None
    constants_to_initializers(model)
    return model


def create_quant_config(config_file: str, model_file: str, skip_layers: Sequence[str] | None = None,
                        batch_num: int = 1, activation_offset: bool = True,
                        config_defination: str | None = None) -> None:
    """Write the quantisation config for ``model_file``: one entry per quantisable layer (Conv,
    Gemm, MatMul with a constant weight), ``quant_enable`` false for ``skip_layers``.

    ``config_defination`` (AMCT's spelling) is an optional JSON file of defaults for every layer,
    e.g. ``{"activation_quant_params": {"algo": "kl"}, "bias_correction": false}``; per-layer
    entries in it (by node name) override those. Raises ``ModelError`` / ``OptionError``."""
    if batch_num < 1:
        raise OptionError(f"AMCT: batch_num must be >= 1, got {batch_num}")
    if isinstance(skip_layers, str):  # one name, not its characters
        skip_layers = [skip_layers]
    model = _load(model_file)
    name_nodes(model)
    refuse_float16(model, model_file)
    layers = find_layers(model)
    names = {lay.name for lay in layers}
    unknown = [s for s in (skip_layers or []) if s not in names]
    if unknown:
        raise OptionError(f"AMCT: skip_layers {unknown} are not quantisable layers of {model_file}; "
                          f"they are: {sorted(names)[:20]}{' ...' if len(names) > 20 else ''}")
    defaults: dict[str, Any] = {}
    if config_defination:
        try:
            with open(config_defination, encoding="utf-8") as f:
                defaults = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise OptionError(f"AMCT: config_defination {config_defination}: {e}") from None
    doc: dict[str, Any] = {"version": 1, "batch_num": batch_num, "activation_offset": activation_offset}
    per_layer = {k: v for k, v in defaults.items() if k in names}
    common = {k: v for k, v in defaults.items() if k not in names}
    for lay in layers:
        entry: dict[str, Any] = {**json.loads(json.dumps(asdict(LayerConfig()))), **common}
        entry["activation_quant_params"] = {**asdict(LayerConfig().activation_quant_params),
                                            **common.get("activation_quant_params", {}),
                                            "asymmetric": activation_offset}
        entry.update({k: v for k, v in per_layer.get(lay.name, {}).items()})
        entry["quant_enable"] = lay.name not in (skip_layers or []) and entry.get("quant_enable", True)
        doc[lay.name] = entry
    parse_config(doc, config_file).save(config_file)


def quantize_model(config_file: str, model_file: str, modified_onnx_file: str, record_file: str) -> None:
    """Fold BN (``do_fusion``) and write the calibration model (see the module doc)."""
    cfg = QuantConfig.load(config_file)
    model = _load(model_file)
    name_nodes(model)
    refuse_float16(model, model_file)
    ensure_opset(model, 13)
    if cfg.do_fusion:
        fold_batchnorm(model, cfg.skip_fusion_layers)
    found = find_layers(model)
    unknown = sorted(set(cfg.layers) - {lay.name for lay in found})
    if unknown:  # a typo would silently leave the real layer out of the config (so not quantised)
        names = sorted(lay.name for lay in found)
        ops = {n.name: n.op_type for n in model.graph.node}
        kinds = [f"{u} ({ops[u]}: not a layer AMCT quantises)" if u in ops else f"{u} (no such node)"
                 for u in unknown[:10]]
        raise OptionError(f"AMCT config {config_file}: layer(s) {', '.join(kinds)} are not quantisable layers of "
                          f"{model_file}; they are: {names[:20]}{' ...' if len(names) > 20 else ''}")
    layers = [lay for lay in found if cfg.layers.get(lay.name, LayerConfig(False)).quant_enable]
    n_out = len(model.graph.output)
    add_outputs(model, list(dict.fromkeys(lay.activation for lay in layers)))
    meta = {"config_file": os.path.abspath(config_file), "record_file": os.path.abspath(record_file),
            "n_outputs": str(n_out), "layers": json.dumps([asdict(lay) for lay in layers])}
    for k, v in meta.items():
        model.metadata_props.add(key=META + k, value=v)
    onnx.save(model, modified_onnx_file)


def _meta(model: onnx.ModelProto, path: str) -> dict[str, str]:
    m = {p.key[len(META):]: p.value for p in model.metadata_props if p.key.startswith(META)}
    if "layers" not in m:
        raise ModelError(f"AMCT: {path} is not a model written by quantize_model (no {META}layers metadata)")
    return m


def _layers(meta: dict[str, str]) -> list[Layer]:
    return [Layer(**d) for d in json.loads(meta["layers"])]


def _feeds(batch: Batch, names: list[str]) -> dict[str, np.ndarray]:
    if isinstance(batch, Mapping):
        missing = [n for n in names if n not in batch]
        if missing:
            raise InputError(f"AMCT calibration batch lacks inputs {missing} (the model's inputs: {names})")
        return {n: np.asarray(batch[n]) for n in names}
    arrays = [batch] if isinstance(batch, np.ndarray) else list(batch)
    if len(arrays) != len(names):
        raise InputError(f"AMCT calibration batch has {len(arrays)} arrays; the model has inputs {names}")
    return {n: np.asarray(a) for n, a in zip(names, arrays)}


def _refuse_nan(layers: list[Layer], values: dict[str, np.ndarray], feeds: dict[str, np.ndarray],
                batch: int) -> None:
    """``InputError`` naming the first layer (graph order) whose input activation holds NaN in this
    batch, and whether the batch itself held NaN: the observers skip non-finite values, so NaN
    would otherwise calibrate a scale from what is left (1.0 when nothing is) without a word."""
    for lay in layers:
        x = np.asarray(values[lay.activation])
        if x.dtype.kind != "f":
            continue
        nan = int(np.count_nonzero(np.isnan(x)))
        if not nan:
            continue
        bad_in = [n for n, v in feeds.items() if np.asarray(v).dtype.kind in "fc" and np.isnan(v).any()]
        cause = (f"the batch's input(s) {bad_in} hold NaN: clean the calibration data" if bad_in else
                 "the batch's inputs are NaN-free, so the model computes the NaN before this layer "
                 "(a log/sqrt/division of bad values?): check the preprocessing and the model")
        raise InputError(f"AMCT calibration batch {batch}: layer {lay.name!r} ({lay.op_type}): its input tensor "
                         f"{lay.activation!r} holds {nan} NaN of {x.size} values; {cause}. A NaN activation "
                         "has no quantisation range, so no scale is recorded")


def calibrate(modified_onnx_file: str, batches: Iterable[Batch], record_file: str | None = None) -> dict[str, Any]:
    """Run ``batch_num`` batches (dicts by input name, lists of arrays, or one array for a
    single-input model) through the modified model with pycann, and write the record file.
    Returns the record. Raises ``InputError`` when fewer batches than ``batch_num`` come, and when a
    quantised layer's input activation holds NaN (naming the layer, tensor and batch) or never holds
    a finite value."""
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.run.model import LoadedModel

    model = _load(modified_onnx_file)
    meta = _meta(model, modified_onnx_file)
    cfg = QuantConfig.load(meta["config_file"])
    layers = _layers(meta)
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    outs = [o.name for o in model.graph.output]
    lm = LoadedModel.from_compiled(compile_model(model))
    observers = {lay.activation: Observer(channel_axis=lay.input_axis) for lay in layers}
    seen = 0
    for batch in batches:
        if seen >= cfg.batch_num:
            break
        feeds = _feeds(batch, names)
        values = dict(zip(outs, lm.run_dict(feeds)))
        _refuse_nan(layers, values, feeds, seen)
        for act, obs in observers.items():
            obs.update(values[act])
        seen += 1
    if seen < cfg.batch_num:
        raise InputError(f"AMCT calibration needs batch_num={cfg.batch_num} batches, got {seen}")
    for lay in layers:
        if observers[lay.activation].hist is None:  # only +-inf seen: no range to quantise into
            raise InputError(f"AMCT calibration: layer {lay.name!r} ({lay.op_type}): its input tensor "
                             f"{lay.activation!r} had no finite value in {seen} batch(es) (all +-inf): its "
                             "quantisation scale cannot be calibrated; check the calibration data and "
                             "preprocessing, or skip the layer (skip_layers)")
    record: dict[str, Any] = {"version": 1, "batch_num": seen, "layers": {}}
    for lay in layers:
        lc = cfg.layers.get(lay.name, LayerConfig())
        a = lc.activation_quant_params
        obs = observers[lay.activation]
        lo, hi = obs.range(a.algo, a.max_percentile, a.min_percentile, 255 if a.asymmetric else 254)
        scale, zp = quant_params(lo, hi, a.asymmetric, a.reduce_range and a.asymmetric)
        mean = obs.channel_mean
        record["layers"][lay.name] = {"scale_d": scale, "offset_d": zp, "unsigned": a.asymmetric,
                                      "reduce_range": bool(a.reduce_range and a.asymmetric),
                                      "range": [lo, hi], "algo": a.algo,
                                      "channel_mean": None if mean is None else [float(v) for v in mean]}
    with open(record_file or meta["record_file"], "w", encoding="utf-8") as f:
        json.dump(record, f)
    return record


def _bias_correction(lay: Layer, model: onnx.ModelProto, w: np.ndarray, w_dq: np.ndarray,
                     mean: np.ndarray | None) -> np.ndarray | None:
    """E[(W - Wq) x] per output channel from the input's per-channel mean (padding ignored)."""
    if mean is None:
        return None
    dw = w.astype(np.float64) - w_dq.astype(np.float64)
    if lay.op_type == "Conv":
        m, cg = dw.shape[0], dw.shape[1]
        if mean.size % cg:
            return None
        groups = mean.size // cg
        per = dw.reshape(groups, m // groups, cg, -1).sum(axis=3)
        return np.einsum("gmc,gc->gm", per, mean.reshape(groups, cg)).reshape(m)
    if lay.weight_axis == 0:  # Gemm transB=1: W (N, K)
        return dw @ mean if mean.size == dw.shape[1] else None
    return mean @ dw if mean.size == dw.shape[0] else None


def _gemm_plain(model: onnx.ModelProto, name: str) -> bool:
    from onnx import helper

    node = next(n for n in model.graph.node if n.name == name)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return float(attrs.get("alpha", 1.0)) == 1.0 and float(attrs.get("beta", 1.0)) == 1.0


def layer_quants(model: onnx.ModelProto, layers: list[Layer], cfg: QuantConfig,
                 record: dict[str, Any]) -> tuple[list[LayerQuant], dict[str, str]]:
    """Per-layer quantisation from the config and record; and the layers kept float, with why."""
    inits = {t.name: t for t in model.graph.initializer}
    quants: list[LayerQuant] = []
    kept: dict[str, str] = {}
    for lay in layers:
        lc = cfg.layers.get(lay.name)
        rec = record.get("layers", {}).get(lay.name)
        if lc is None or not lc.quant_enable:
            kept[lay.name] = "quant_enable is false in the config"
            continue
        if rec is None:
            kept[lay.name] = "no calibration record"
            continue
        if float(rec["scale_d"]) <= 0 or not np.isfinite(float(rec["scale_d"])):
            kept[lay.name] = f"activation scale {rec['scale_d']} is not a positive finite number"
            continue
        w = numpy_helper.to_array(inits[lay.weight]).astype(np.float32)
        bad = int(np.count_nonzero(~np.isfinite(w)))
        if bad:  # a NaN scale made that channel's int8 weights whatever the cast of NaN gives, silently
            raise ModelError(f"AMCT: layer {lay.name!r} ({lay.op_type}): its weight {lay.weight!r} holds {bad} "
                             f"NaN/inf of {w.size} values: no int8 scale fits them; fix the model's weights or "
                             "skip the layer (skip_layers)")
        s = weight_scales(w, lay.weight_axis, lc.weight_quant_params.channel_wise)
        if s.size == 1:
            s = np.full(w.shape[lay.weight_axis], s[0], np.float32)
        shape = [1] * w.ndim
        shape[lay.weight_axis] = -1
        w_int8 = np.clip(np.round(w / s.reshape(shape)), -127, 127).astype(np.int8)
        bias = numpy_helper.to_array(inits[lay.bias]).astype(np.float32) if lay.bias else None
        n_out = w.shape[lay.weight_axis]
        per_row = bias is not None and bias.size not in (1, n_out)  # a Gemm C of shape [M, N] or [M, 1]
        if bias is not None and not per_row:
            # Gemm's C may be [1, N] or a scalar: as one value per output channel it broadcasts the same,
            # and the int32 bias needs that 1-D shape for its per-channel DequantizeLinear
            bias = np.broadcast_to(bias.reshape(-1), (n_out,)).astype(np.float32)
        elif per_row:
            bias = None  # left as the model's float C (not one value per channel: no int32 form)
        if lc.bias_correction and not per_row and lay.op_type != "MatMul" \
                and (lay.op_type != "Gemm" or _gemm_plain(model, lay.name)):
            mean = rec.get("channel_mean")
            corr = _bias_correction(lay, model, w, w_int8.astype(np.float32) * s.reshape(shape),
                                    None if mean is None else np.asarray(mean, np.float64))
            if corr is not None:
                bias = ((bias if bias is not None else 0.0) + corr).astype(np.float32)
        quants.append(LayerQuant(lay, float(rec["scale_d"]), int(rec["offset_d"]), bool(rec.get("unsigned", True)),
                                 s, w_int8, bias, bool(rec.get("reduce_range", False))))
    return quants, kept


def check_record(record: Any, path: str) -> None:
    """``OptionError`` naming the file, layer and field of a record that ``calibrate`` would not
    write (hand-edited or damaged): an object with a ``layers`` object; per layer a number
    ``scale_d``, an integer ``offset_d`` in the activation type's range, booleans for the flags."""
    if not isinstance(record, dict) or not isinstance(record.get("layers", {}), dict):
        raise OptionError(f"AMCT: record file {path}: expected an object with a 'layers' object")
    for name, rec in record.get("layers", {}).items():
        where = f"AMCT: record file {path}: layer {name!r}"
        if not isinstance(rec, dict):
            raise OptionError(f"{where}: expected an object")
        for key in ("unsigned", "reduce_range"):
            if not isinstance(rec.get(key, False), bool):
                raise OptionError(f"{where}: {key} must be true or false, got {rec[key]!r}")
        scale, zp = rec.get("scale_d"), rec.get("offset_d")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise OptionError(f"{where}: scale_d must be a number, got {scale!r}")
        lo, hi = (0, 255) if rec.get("unsigned", True) else (-128, 127)
        if isinstance(zp, bool) or not isinstance(zp, int) or not lo <= zp <= hi:
            raise OptionError(f"{where}: offset_d must be an integer in {lo}..{hi}, got {zp!r}")


def save_model(modified_onnx_file: str, record_file: str, save_path: str) -> dict[str, str]:
    """Write the fake-quant and deploy models (see the module doc); returns the layers kept in
    float and why. ``save_path`` is a path prefix (``out/resnet50`` -> ``out/resnet50_deploy_model.onnx``)."""
    model = _load(modified_onnx_file)
    meta = _meta(model, modified_onnx_file)
    cfg = QuantConfig.load(meta["config_file"])
    try:
        with open(record_file, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise OptionError(f"AMCT: record file {record_file}: {e}") from None
    check_record(record, record_file)
    layers = _layers(meta)
    n_out = int(meta["n_outputs"])
    del model.graph.output[n_out:]
    keep = [p for p in model.metadata_props if not p.key.startswith(META)]
    del model.metadata_props[:]
    model.metadata_props.extend(keep)
    quants, kept = layer_quants(model, layers, cfg, record)
    folder = os.path.dirname(os.path.abspath(save_path))
    os.makedirs(folder, exist_ok=True)
    for fake, suffix in ((True, "_fake_quant_model.onnx"), (False, "_deploy_model.onnx")):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        insert_qdq(m, quants, fake)
        onnx.save(m, save_path + suffix)
    summary = {"quantized": {q.layer.name: {"act_scale": q.act_scale, "act_zero_point": q.act_zero_point,
                                            "w_scale_min": float(q.w_scales.min()), "w_scale_max": float(q.w_scales.max())}
                             for q in quants}, "kept_float": kept}
    with open(save_path + "_quant.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    return kept
