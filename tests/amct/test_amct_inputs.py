"""AMCT on inputs beyond the torch-exported CNN: Gemm biases that are not one value per output
channel, float16 models, and the CLI's damaged calibration files and out-of-range targets."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann import amct
from pycann.errors import InputError, ModelError, OptionError

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(11)


def _save(path: Path, nodes: list[onnx.NodeProto], x: onnx.ValueInfoProto, y: onnx.ValueInfoProto,
          inits: list[onnx.TensorProto]) -> Path:
    onnx.save(helper.make_model(helper.make_graph(nodes, "m", [x], [y], inits),
                                opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _gemm(path: Path, c_shape: tuple[int, ...]) -> Path:
    w = numpy_helper.from_array(RNG.normal(size=(6, 5)).astype(np.float32), "W")
    c = numpy_helper.from_array(RNG.normal(size=c_shape).astype(np.float32), "C")
    node = helper.make_node("Gemm", ["x", "W", "C"], ["y"], name="g", transB=1, alpha=0.5, beta=2.0)
    return _save(path, [node], helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
                 helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6]), [w, c])


def _ort(path: str, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    out: np.ndarray = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return out


def _flow(tmp_path: Path, model: Path, batches: list[np.ndarray]) -> Path:
    cfg, mod, rec = tmp_path / "cfg.json", tmp_path / "mod.onnx", tmp_path / "rec.txt"
    amct.create_quant_config(str(cfg), str(model), batch_num=len(batches))
    amct.quantize_model(str(cfg), str(model), str(mod), str(rec))
    amct.calibrate(str(mod), batches)
    prefix = tmp_path / "out" / "m"
    amct.save_model(str(mod), str(rec), str(prefix))
    return prefix


@pytest.mark.parametrize("c_shape", [(1, 6), (4, 6), (4, 1), (), (6,)])
def test_gemm_bias_of_any_broadcast_shape_gives_a_valid_deploy_model(tmp_path: Path, c_shape: tuple[int, ...]) -> None:
    """A Gemm C of shape [1, N] or [M, N] became an int32 bias with a per-channel DequantizeLinear of
    the wrong rank: ONNX Runtime refused to run the deploy model. Now it runs and equals the
    fake-quant model."""
    model = _gemm(tmp_path / "g.onnx", c_shape)
    batches = [RNG.normal(size=(4, 5)).astype(np.float32) for _ in range(2)]
    prefix = _flow(tmp_path, model, batches)
    x = batches[0]
    ref = _ort(str(model), x)
    fake = _ort(f"{prefix}_fake_quant_model.onnx", x)
    deploy = _ort(f"{prefix}_deploy_model.onnx", x)
    assert deploy.shape == ref.shape == (4, 6)
    np.testing.assert_allclose(deploy, fake, rtol=1e-5, atol=1e-5)
    assert np.abs(fake - ref).max() < 0.05 * np.abs(ref).max()


def test_float16_model_is_refused_naming_the_layer(tmp_path: Path) -> None:
    """A float16 Conv was written as QDQ with float32 scales on a float16 activation: models that no
    runtime loads. It is refused at once."""
    w = numpy_helper.from_array(RNG.normal(size=(4, 3, 3, 3)).astype(np.float16), "W")
    model = _save(tmp_path / "h.onnx", [helper.make_node("Conv", ["x", "W"], ["y"], name="conv_h")],
                  helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 6, 6]),
                  helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 4, 4, 4]), [w])
    with pytest.raises(ModelError, match=r"float16 layers \(conv_h\).*float32"):
        amct.create_quant_config(str(tmp_path / "c.json"), str(model))
    (tmp_path / "c2.json").write_text('{"version": 1, "batch_num": 1}')
    with pytest.raises(ModelError, match="float16 layers"):
        amct.quantize_model(str(tmp_path / "c2.json"), str(model), str(tmp_path / "m.onnx"), str(tmp_path / "r"))


def _conv(path: Path) -> Path:
    w = numpy_helper.from_array(RNG.normal(size=(4, 3, 3, 3)).astype(np.float32), "W")
    return _save(path, [helper.make_node("Conv", ["x", "W"], ["y"], name="c", pads=[1, 1, 1, 1])],
                 helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                 helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8]), [w])


@pytest.mark.parametrize("kind,match", [("garbage.npy", "is not a readable .npy array"),
                                        ("object.npy", "is not a readable .npy array"),
                                        ("notimage.jpg", "is not a readable image"),
                                        ("target", "--accuracy_target 1.5 is a cosine similarity")])
def test_cli_bad_data_and_target_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     kind: str, match: str) -> None:
    """A damaged or pickled .npy and a file that is not an image ended in a traceback; a target
    cosine above 1 ran the whole search and reported it unreachable."""
    from pycann.tools.amct_cli import main

    model = _conv(tmp_path / "c.onnx")
    data = tmp_path / "data"
    data.mkdir()
    extra = []
    if kind == "garbage.npy":
        (data / kind).write_bytes(RNG.integers(0, 256, 300, dtype=np.uint8).tobytes())
    elif kind == "object.npy":
        np.save(data / kind, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif kind == "notimage.jpg":
        (data / kind).write_text("not an image")
    else:
        np.save(data / "0.npy", RNG.normal(size=(1, 3, 8, 8)).astype(np.float32))
        extra = ["--accuracy_target=1.5"]
    rc = main(["calibration", f"--model={model}", f"--save_path={tmp_path / 'o' / 'n'}", f"--data_dir={data}",
               "--input_shape=x:1,3,8,8", "--batch_num=1", *extra])
    err = capsys.readouterr().err
    assert rc == 1 and match in err and err.count("\n") == 1, err
    assert not (tmp_path / "o").exists()


def test_auto_calibration_refuses_an_unreachable_target(tmp_path: Path) -> None:
    model = _conv(tmp_path / "c.onnx")
    with pytest.raises(OptionError, match="target_cosine 1.5"):
        amct.accuracy_based_auto_calibration(str(model), [np.zeros((1, 3, 8, 8), np.float32)],
                                             str(tmp_path / "o" / "n"), target_cosine=1.5)


@pytest.mark.parametrize("record,match", [('[1, 2]', "expected an object with a 'layers' object"),
                                          ('{"layers": {"c": {"scale_d": "x", "offset_d": 0}}}', "scale_d must be a number"),
                                          ('{"layers": {"c": {"scale_d": 0.1}}}', "offset_d must be an integer in 0..255"),
                                          ('{"layers": {"c": {"scale_d": 0.1, "offset_d": 300}}}', "got 300"),
                                          ('{"layers": {"c": {"scale_d": 0.1, "offset_d": 0, "unsigned": 1}}}',
                                           "unsigned must be true or false")])
def test_damaged_record_file_is_one_clear_error(tmp_path: Path, record: str, match: str) -> None:
    """A hand-edited record ended in AttributeError / ValueError / KeyError / OverflowError tracebacks."""
    model = _conv(tmp_path / "c.onnx")
    cfg, mod, rec = tmp_path / "cfg.json", tmp_path / "mod.onnx", tmp_path / "rec.txt"
    amct.create_quant_config(str(cfg), str(model))
    amct.quantize_model(str(cfg), str(model), str(mod), str(rec))
    rec.write_text(record)
    with pytest.raises(OptionError, match=match):
        amct.save_model(str(mod), str(rec), str(tmp_path / "out" / "m"))
    assert not (tmp_path / "out").exists()


def test_skip_layers_as_one_string_is_one_name(tmp_path: Path) -> None:
    """``skip_layers="c"`` was iterated character by character (a substring test for every layer)."""
    w = numpy_helper.from_array(RNG.normal(size=(3, 3, 3, 3)).astype(np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["a"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "W"], ["y"], name="c", pads=[1, 1, 1, 1])]
    model = _save(tmp_path / "two.onnx", nodes, helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
                  helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 6, 6]), [w])
    amct.create_quant_config(str(tmp_path / "cfg.json"), str(model), skip_layers="conv")
    import json

    doc = json.loads((tmp_path / "cfg.json").read_text())
    assert doc["conv"]["quant_enable"] is False and doc["c"]["quant_enable"] is True


def test_compare_models_with_other_outputs_is_one_clear_error(tmp_path: Path) -> None:
    """Models whose outputs differ: shapes ended in a numpy reshape ValueError, counts were silently
    truncated to the shorter list."""
    a = _conv(tmp_path / "a.onnx")
    w = numpy_helper.from_array(RNG.normal(size=(2, 3, 3, 3)).astype(np.float32), "W")
    b = _save(tmp_path / "b.onnx", [helper.make_node("Conv", ["x", "W"], ["y"], name="c", pads=[1, 1, 1, 1])],
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
              helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8]), [w])
    x = [RNG.normal(size=(1, 3, 8, 8)).astype(np.float32)]
    with pytest.raises(ModelError, match=r"output 0 is \[1, 4, 8, 8\] in the reference and \[1, 2, 8, 8\]"):
        amct.compare_models(str(a), str(b), x)
    two = onnx.load(str(a))
    two.graph.node.append(helper.make_node("Relu", ["y"], ["z"], name="r"))
    two.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8]))
    onnx.save(two, str(tmp_path / "two.onnx"))
    with pytest.raises(ModelError, match="the reference has 1 outputs, the candidate 2"):
        amct.compare_models(str(a), str(tmp_path / "two.onnx"), x)
    assert amct.compare_models(str(a), str(a), x).cosine == pytest.approx(1.0)


def _nan_flow(tmp_path: Path, model: Path, batches: list[np.ndarray]) -> Path:
    cfg, mod, rec = tmp_path / "cfg.json", tmp_path / "mod.onnx", tmp_path / "rec.txt"
    amct.create_quant_config(str(cfg), str(model), batch_num=len(batches))
    amct.quantize_model(str(cfg), str(model), str(mod), str(rec))
    return mod


def test_nan_calibration_data_is_an_error_naming_the_layer(tmp_path: Path) -> None:
    """All-NaN batches calibrated scale 1.0 (the observers skip non-finite values) and save_model
    wrote a quantised model without a word; now calibrate refuses, naming layer, tensor and batch."""
    mod = _nan_flow(tmp_path, _gemm(tmp_path / "g.onnx", (6,)), [np.zeros((4, 5), np.float32)] * 2)
    good = RNG.normal(size=(4, 5)).astype(np.float32)
    with pytest.raises(InputError, match=r"batch 0: layer 'g' \(Gemm\): its input tensor 'x' holds 20 NaN of 20 "
                                         r"values; the batch's input\(s\) \['x'\] hold NaN"):
        amct.calibrate(str(mod), [np.full((4, 5), np.nan, np.float32), good])
    one = good.copy()
    one[2, 3] = np.nan
    with pytest.raises(InputError, match=r"batch 1: layer 'g'.*holds 1 NaN of 20"):
        amct.calibrate(str(mod), [good, one])
    assert not (tmp_path / "rec.txt").exists()  # no record written
    with pytest.raises(InputError, match=r"layer 'g' \(Gemm\): its input tensor 'x' had no finite value in 2 "):
        amct.calibrate(str(mod), [np.full((4, 5), np.inf, np.float32)] * 2)
    rec = amct.calibrate(str(mod), [good, good])  # finite data still calibrates: scale = max|x| / 127
    assert rec["layers"]["g"]["range"][1] == pytest.approx(float(good.max()), rel=1e-2)


def test_nan_computed_inside_the_model_names_the_layer(tmp_path: Path) -> None:
    """NaN-free data whose Log (of negatives) feeds the Gemm: the error says the model made the NaN."""
    w = numpy_helper.from_array(RNG.normal(size=(6, 5)).astype(np.float32), "W")
    nodes = [helper.make_node("Log", ["x"], ["lx"], name="log"),
             helper.make_node("Gemm", ["lx", "W"], ["y"], name="fc", transB=1)]
    model = _save(tmp_path / "l.onnx", nodes, helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
                  helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6]), [w])
    mod = _nan_flow(tmp_path, model, [np.zeros((4, 5), np.float32)])
    x = np.abs(RNG.normal(size=(4, 5))).astype(np.float32) + 0.1
    x[0, :2] = -1.0
    with pytest.raises(InputError, match=r"layer 'fc' \(Gemm\): its input tensor 'lx' holds 2 NaN of 20 values; "
                                         r"the batch's inputs are NaN-free"):
        amct.calibrate(str(mod), [x])


def test_nan_weight_is_an_error_naming_the_layer(tmp_path: Path) -> None:
    """A NaN in a weight: its channel's scale fell back to 1.0 (NaN > 0 is false) and save_model wrote
    int8 weights of that channel at scale 1 without a word; now it refuses, naming layer and weight."""
    model = _gemm(tmp_path / "g.onnx", (6,))
    m = onnx.load(str(model))
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[2, 3] = np.nan
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "W"))
    onnx.save(m, str(model))
    mod = _nan_flow(tmp_path, model, [np.ones((4, 5), np.float32)])
    amct.calibrate(str(mod), [np.ones((4, 5), np.float32)])  # the activation is finite: calibrates
    with pytest.raises(ModelError, match=r"layer 'g' \(Gemm\): its weight 'W' holds 1 NaN/inf of 30 values"):
        amct.save_model(str(mod), str(tmp_path / "rec.txt"), str(tmp_path / "out" / "m"))
