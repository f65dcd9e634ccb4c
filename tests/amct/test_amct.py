"""AMCT (pycann.amct): config, calibration statistics, the quantise/calibrate/save flow and its
files, against numpy (statistics), ONNX Runtime (the QDQ models run unoptimised give pycann's
values) and the float model (accuracy)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann import amct
from pycann.amct.observers import Observer, quant_params, weight_scales
from pycann.errors import InputError, ModelError, OptionError

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(3)


def _cnn(path: Path) -> Path:
    """Conv-BN-ReLU, grouped Conv-BN-ReLU, Linear: what torch's exporter writes (BN kept by
    exporting in training-free mode with do_constant_folding=False)."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c1, self.b1 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16)
            self.c2, self.b2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, groups=2), torch.nn.BatchNorm2d(32)
            self.fc = torch.nn.Linear(32 * 8 * 8, 10)

        def forward(self, x):
            x = torch.relu(self.b1(self.c1(x)))
            x = torch.relu(self.b2(self.c2(x)))
            return self.fc(torch.flatten(x, 1))

    net = Net().eval()
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    torch.onnx.export(net, torch.randn(4, 3, 16, 16), str(path), opset_version=13, dynamo=False,
                      input_names=["x"], do_constant_folding=False)
    return path


def _batches(n: int = 4) -> list[np.ndarray]:
    return [RNG.standard_normal((4, 3, 16, 16)).astype(np.float32) for _ in range(n)]


def _flow(tmp_path: Path, model: Path, batches, **cfg_kw) -> tuple[Path, dict]:
    cfg, mod, rec = tmp_path / "cfg.json", tmp_path / "mod.onnx", tmp_path / "record.txt"
    amct.create_quant_config(str(cfg), str(model), batch_num=len(batches), **cfg_kw)
    amct.quantize_model(str(cfg), str(model), str(mod), str(rec))
    amct.calibrate(str(mod), batches)
    prefix = tmp_path / "out" / "net"
    kept = amct.save_model(str(mod), str(rec), str(prefix))
    return prefix, kept


def _ort(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # no int8 kernel rewrites
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, feeds)


# ------------------------------------------------------------------------------ statistics


def test_observer_min_max_percentile_and_rebinning_match_numpy() -> None:
    obs = Observer()
    parts = [RNG.standard_normal((2, 3, 50)).astype(np.float32) * s for s in (1.0, 3.0, 0.5)]
    for p in parts:
        obs.update(p)
    allv = np.concatenate([p.reshape(-1) for p in parts])
    assert obs.range("min_max") == (pytest.approx(float(allv.min())), pytest.approx(float(allv.max())))
    assert obs.hist is not None and obs.hist.sum() == pytest.approx(allv.size)  # rebinning keeps every count
    width = (obs.hi - obs.lo) / 2048 * 2
    assert obs.quantile(0.99) == pytest.approx(float(np.quantile(allv, 0.99)), abs=width + 0.05)
    means = np.concatenate([np.moveaxis(p, 1, 0).reshape(3, -1) for p in parts], axis=1).mean(axis=1)
    np.testing.assert_allclose(obs.channel_mean, means, rtol=1e-6, atol=1e-7)


def test_kl_clips_outliers_and_is_deterministic() -> None:
    x = RNG.standard_normal(100_000).astype(np.float32)
    x[:5] = 60.0  # rare outliers: min-max would spend most levels on them
    a, b = Observer(channel_axis=0), Observer(channel_axis=0)
    a.update(x)
    b.update(x.copy())
    lo, hi = a.range("kl")
    assert 2.0 < hi < 30.0 and lo == -hi
    assert (lo, hi) == b.range("kl")


def test_kl_does_not_clip_relu_outputs_for_their_zeros() -> None:
    """ReLU / ReLU6 outputs: half the values are exact zeros, which quantise without error. Counted
    in the search they made the smallest threshold win (ReLU6 outputs clipped near 0.75 of 6:
    EfficientNet-Lite0 lost every prediction); left out, KL lands near the distribution's tail."""
    z = RNG.standard_normal(200_000).astype(np.float32)
    for x, low in ((np.clip(2 * z, 0, 6), 5.0), (np.maximum(z, 0), 3.0)):
        obs = Observer(channel_axis=0)
        obs.update(x)
        lo, hi = obs.range("kl")
        assert lo == 0.0 and low < hi <= float(x.max()) + 1e-6, hi


def test_ranges_always_contain_zero_and_params_are_exact() -> None:
    obs = Observer(channel_axis=0)
    obs.update(np.linspace(2.0, 5.0, 1000, dtype=np.float32))
    lo, hi = obs.range("min_max")
    assert lo == 0.0 and hi == pytest.approx(5.0)
    s, zp = quant_params(-1.0, 3.0, asymmetric=True)
    assert s == pytest.approx(4.0 / 255) and zp == round(255 / 4)
    assert quant_params(-2.0, 1.0, asymmetric=False) == (pytest.approx(2.0 / 127), 0)
    w = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(weight_scales(w, 0, True), np.abs(w).reshape(4, -1).max(1) / 127, rtol=1e-6)


# ------------------------------------------------------------------------------ config


def test_config_lists_layers_and_honours_skip(tmp_path: Path) -> None:
    model = _cnn(tmp_path / "net.onnx")
    names = [n.name for n in onnx.load(str(model)).graph.node if n.op_type in ("Conv", "Gemm")]
    amct.create_quant_config(str(tmp_path / "c.json"), str(model), skip_layers=[names[0]], batch_num=2)
    doc = json.loads((tmp_path / "c.json").read_text())
    assert doc["batch_num"] == 2 and all(n in doc for n in names)
    assert doc[names[0]]["quant_enable"] is False and doc[names[1]]["quant_enable"] is True
    assert doc[names[1]]["weight_quant_params"]["channel_wise"] is True


@pytest.mark.parametrize("bad,match", [({"batch_num": 0}, "batch_num"), ({"batch_num": "2"}, "batch_num"),
                                       ({"L": {"activation_quant_params": {"algo": "klx"}}}, "algo"),
                                       ({"L": {"quant_enable": "of"}}, "true or false"),
                                       ({"L": {"weight_quant_params": {"num_bits": 4}}}, "8-bit"),
                                       ({"L": {"typo": 1}}, "unknown field")])
def test_bad_config_is_one_clear_error(tmp_path: Path, bad: dict, match: str) -> None:
    p = tmp_path / "c.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(OptionError, match=match):
        amct.QuantConfig.load(str(p))


def test_unknown_skip_layer_and_missing_model_are_errors(tmp_path: Path) -> None:
    model = _cnn(tmp_path / "net.onnx")
    with pytest.raises(OptionError, match="not quantisable layers"):
        amct.create_quant_config(str(tmp_path / "c.json"), str(model), skip_layers=["nope"])
    with pytest.raises(ModelError, match="does not exist"):
        amct.create_quant_config(str(tmp_path / "c.json"), str(tmp_path / "none.onnx"))
    with pytest.raises(ModelError, match="directory"):
        amct.create_quant_config(str(tmp_path / "c.json"), str(tmp_path))


def test_config_layer_not_in_model_is_an_error(tmp_path: Path) -> None:
    """A config entry naming no quantisable layer of the model (a typo'd name) is refused by
    quantize_model with both names, instead of being ignored."""
    model = _cnn(tmp_path / "net.onnx")
    cfg = tmp_path / "c.json"
    amct.create_quant_config(str(cfg), str(model), batch_num=1)
    doc = json.loads(cfg.read_text())
    name = next(k for k, v in doc.items() if isinstance(v, dict))
    doc[name + "_typo"] = doc.pop(name)
    cfg.write_text(json.dumps(doc))
    with pytest.raises(OptionError, match=f"{name}_typo \\(no such node\\).*not quantisable layers"):
        amct.quantize_model(str(cfg), str(model), str(tmp_path / "m.onnx"), str(tmp_path / "r.txt"))
    # a node of the model that AMCT does not quantise is named as such (not as a missing one)
    import onnx

    other = next(n for n in onnx.load(str(model)).graph.node if n.name and n.op_type in ("Relu", "MaxPool", "Flatten"))
    doc[other.name] = doc.pop(name + "_typo")
    cfg.write_text(json.dumps(doc))
    with pytest.raises(OptionError, match=f"{other.name} \\({other.op_type}: not a layer AMCT quantises\\)"):
        amct.quantize_model(str(cfg), str(model), str(tmp_path / "m.onnx"), str(tmp_path / "r.txt"))


# ------------------------------------------------------------------------------ the flow


def test_flow_writes_qdq_models_that_match_float_and_onnxruntime(tmp_path: Path) -> None:
    model = _cnn(tmp_path / "net.onnx")
    batches = _batches()
    prefix, kept = _flow(tmp_path, model, batches)
    assert kept == {}
    fq, dep = str(prefix) + "_fake_quant_model.onnx", str(prefix) + "_deploy_model.onnx"
    dm = onnx.load(dep)
    ops = [n.op_type for n in dm.graph.node]
    assert "BatchNormalization" not in ops and ops.count("QuantizeLinear") == 3
    int8 = [t for t in dm.graph.initializer if t.data_type == TensorProto.INT8 and len(t.dims) >= 2]
    assert len(int8) == 3  # every weight stored as int8 in the deploy model
    assert (prefix.parent / "net_quant.json").exists()
    rep = amct.compare_models(str(model), fq, batches)
    assert rep.cosine > 0.999 and rep.top1_agreement[0] is not None and rep.top1_agreement[0] >= 0.9
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel

    x = batches[0]
    # high_precision: every fused layer keeps the QDQ arithmetic (the default may keep layers fp32
    # where int8 would be slower: tests/amct/test_int8_choice.py)
    exact = CompileOptions(op_select_implmode="high_precision")
    for path in (fq, dep):
        got = LoadedModel.from_compiled(compile_model(path, exact)).run([x])[0]
        np.testing.assert_allclose(got, _ort(path, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_bias_correction_removes_the_mean_error(tmp_path: Path) -> None:
    model = _cnn(tmp_path / "net.onnx")
    batches = _batches()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on, _ = _flow(tmp_path / "a", model, batches)
    defaults = tmp_path / "d.json"
    defaults.write_text(json.dumps({"bias_correction": False}))
    off, _ = _flow(tmp_path / "b", model, batches, config_defination=str(defaults))
    ref = np.concatenate([_ort(str(model), {"x": x})[0] for x in batches])
    err = {}
    for k, prefix in (("on", on), ("off", off)):
        got = np.concatenate([_ort(str(prefix) + "_fake_quant_model.onnx", {"x": x})[0] for x in batches])
        err[k] = float(np.abs((got - ref).mean(axis=0)).mean())
    assert err["on"] < err["off"], err


def test_too_few_batches_and_foreign_model_are_errors(tmp_path: Path) -> None:
    model = _cnn(tmp_path / "net.onnx")
    cfg, mod, rec = tmp_path / "cfg.json", tmp_path / "mod.onnx", tmp_path / "rec.txt"
    amct.create_quant_config(str(cfg), str(model), batch_num=3)
    amct.quantize_model(str(cfg), str(model), str(mod), str(rec))
    with pytest.raises(InputError, match="batch_num=3"):
        amct.calibrate(str(mod), _batches(2))
    with pytest.raises(InputError, match="inputs"):
        amct.calibrate(str(mod), [{"y": b} for b in _batches(3)])
    with pytest.raises(ModelError, match="not a model written by quantize_model"):
        amct.calibrate(str(model), _batches(3))


def test_gemm_and_matmul_models_from_onnx_helper(tmp_path: Path) -> None:
    """A second exporter's spelling: Gemm with transB=0 and a bare MatMul."""
    w1, b1, w2 = (RNG.standard_normal(s).astype(np.float32) for s in ((8, 16), (16,), (16, 4)))
    g = helper.make_graph([helper.make_node("Gemm", ["x", "W1", "B1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
                           helper.make_node("MatMul", ["r", "W2"], ["y"])], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 4])],
                          [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b1, "B1"),
                           numpy_helper.from_array(w2, "W2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    path = tmp_path / "mlp.onnx"
    onnx.save(m, str(path))
    batches = [RNG.standard_normal((5, 8)).astype(np.float32) for _ in range(3)]
    prefix, kept = _flow(tmp_path, path, batches)
    rep = amct.compare_models(str(path), str(prefix) + "_fake_quant_model.onnx", batches)
    assert kept == {} and rep.cosine > 0.999
    dep = str(prefix) + "_deploy_model.onnx"
    np.testing.assert_allclose(_ort(dep, {"x": batches[0]})[0],
                               _ort(str(prefix) + "_fake_quant_model.onnx", {"x": batches[0]})[0], rtol=1e-4, atol=1e-4)


def test_accuracy_based_calibration_keeps_sensitive_layers_and_says_why(tmp_path: Path) -> None:
    model = _cnn(tmp_path / "net.onnx")
    batches = _batches(3)
    res = amct.accuracy_based_auto_calibration(str(model), batches, str(tmp_path / "o" / "net"),
                                               target_cosine=0.9999999, max_kept=2)
    reasons = [v for k, v in res.kept_float.items() if k != "<target>"]
    assert 1 <= len(reasons) <= 2 and all("costs accuracy" in r for r in reasons)
    assert Path(res.deploy_model).exists()
    easy = amct.accuracy_based_auto_calibration(str(model), batches, str(tmp_path / "e" / "net"), target_cosine=0.9)
    assert easy.kept_float == {} and easy.report.cosine >= 0.9


# ------------------------------------------------------------------------------ command line


def test_cli_calibration_with_npy_and_bin_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pycann.tools.amct_cli import main

    model = _cnn(tmp_path / "net.onnx")
    data = tmp_path / "data"
    data.mkdir()
    for i, b in enumerate(_batches(2)):
        np.save(data / f"{i}.npy", b)
    b2 = tmp_path / "bin"
    b2.mkdir()
    for i, b in enumerate(_batches(2)):
        b.tofile(b2 / f"{i}.bin")
    for d in (data, b2):
        rc = main(["calibration", f"--model={model}", f"--save_path={tmp_path / d.name / 'net'}",
                   "--input_shape=x:4,3,16,16", f"--data_dir={d}", "--data_types=float32", "--batch_num=2",
                   "--calibration_algo=kl"])
        assert rc == 0
        assert (tmp_path / d.name / "net_deploy_model.onnx").exists()
    out = capsys.readouterr().out
    assert "cosine mean" in out


def test_cli_leaves_no_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    # each calibration left an amct_cli_* folder holding the modified model (98 MB for ResNet-50)
    import tempfile

    from pycann.tools.amct_cli import main

    model = _cnn(tmp_path / "net.onnx")
    data = tmp_path / "data"
    data.mkdir()
    for i, b in enumerate(_batches(2)):
        np.save(data / f"{i}.npy", b)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    for extra in ([], ["--accuracy_target=0.9"]):
        rc = main(["calibration", f"--model={model}", f"--save_path={tmp_path / 'o' / 'net'}",
                   "--input_shape=x:4,3,16,16", f"--data_dir={data}", "--batch_num=2", *extra])
        assert rc == 0 and (tmp_path / "o" / "net_deploy_model.onnx").exists()
        assert sorted(os.listdir(scratch)) == []
    capsys.readouterr()


@pytest.mark.parametrize("args,match", [(["--batch_num=5"], "needs that many"), (["--input_shape=x:4,3,8,8"], "needs"),
                                        (["--data_types=float99"], "data_types"), (["--input_shape=x4"], "name:dims"),
                                        (["--input_shape=input:4,3,16,16"],
                                         "--input_shape names ['input'], not inputs of"),
                                        (["--skip_layers=nope"], "[ERROR] AMCT: skip_layers ['nope'] are not")])
def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], match: str) -> None:
    from pycann.tools.amct_cli import main

    model = _cnn(tmp_path / "net.onnx")
    data = tmp_path / "data"
    data.mkdir()
    for i, b in enumerate(_batches(2)):
        b.tofile(data / f"{i}.bin")
    base = {"--input_shape": "x:4,3,16,16", "--batch_num": "2", "--data_types": "float32"}
    for a in args:
        k, v = a.split("=", 1)
        base[k] = v
    rc = main(["calibration", f"--model={model}", f"--save_path={tmp_path / 'o' / 'n'}", f"--data_dir={data}",
               *(f"{k}={v}" for k, v in base.items())])
    err = capsys.readouterr().err
    assert rc == 1 and match in err and err.count("\n") == 1, err


def test_cli_reads_image_folders(tmp_path: Path) -> None:
    from PIL import Image

    from pycann.tools.amct_cli import load_batches

    imgs = tmp_path / "imgs"
    imgs.mkdir()
    for i in range(4):
        Image.fromarray(RNG.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(imgs / f"{i}.png")
    batches = load_batches(str(imgs), [2, 3, 16, 16], np.dtype(np.float32), 2)
    assert len(batches) == 2 and batches[0].shape == (2, 3, 16, 16) and batches[0].dtype == np.float32
    assert 0.0 <= batches[0].min() and batches[0].max() <= 1.0
    with Image.open(imgs / "0.png") as im:
        want = np.asarray(im.convert("RGB").resize((16, 16), Image.Resampling.BILINEAR), np.float32) / 255
    np.testing.assert_allclose(batches[0][0], want.transpose(2, 0, 1))


def test_weights_written_as_constant_nodes_are_quantised(tmp_path: Path) -> None:
    """paddle2onnx (PP-OCR) writes weights as Constant nodes: they are layers too."""
    w = helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)))
    conv = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    g = helper.make_graph([w, conv], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = tmp_path / "c.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)]), str(path))
    batches = [RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(2)]
    prefix, kept = _flow(tmp_path, path, batches)
    dep = onnx.load(str(prefix) + "_deploy_model.onnx")
    assert kept == {} and [n.op_type for n in dep.graph.node].count("QuantizeLinear") == 1
    assert any(t.data_type == TensorProto.INT8 and list(t.dims) == [4, 3, 3, 3] for t in dep.graph.initializer)


def test_compare_models_measures_the_qdq_arithmetic(tmp_path: Path) -> None:
    """The report's cosine is the fake-quant model's as ONNX Runtime computes it (atc's speed rules,
    which drop activation rounding, must not hide the quantisation error)."""
    model = _cnn(tmp_path / "net.onnx")
    batches = _batches(2)
    prefix, _ = _flow(tmp_path, model, batches)
    fq = str(prefix) + "_fake_quant_model.onnx"
    rep = amct.compare_models(str(model), fq, batches)
    want = []
    for x in batches:
        r, c = _ort(str(model), {"x": x})[0], _ort(fq, {"x": x})[0]
        want += [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(r.astype(np.float64), c.astype(np.float64))]
    assert rep.cosine_mean[0] == pytest.approx(float(np.mean(want)), abs=1e-6)
    assert rep.cosine_mean[0] < 1 - 1e-6  # the quantisation error is visible
