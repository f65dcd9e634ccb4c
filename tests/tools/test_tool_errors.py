"""pycann compare, msprof and the ais_bench-style bench refuse bad output paths, surplus inputs,
wrong shapes and a zero loop count with one clear line (exit status 2 / 1), before any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import pycann
from pycann.tools import bench, compare, msprof


@pytest.fixture()
def model(tmp_path: Path) -> tuple[Path, Path]:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx_path, om_path = tmp_path / "m.onnx", tmp_path / "m.om"
    onnx.save(m, onnx_path)
    pycann.compile_model(m).save(om_path)
    return onnx_path, om_path


def err_line(capsys: pytest.CaptureFixture[str]) -> str:
    cap = capsys.readouterr()
    lines = [ln for ln in (cap.err + cap.out).splitlines() if "[ERROR]" in ln]
    assert len(lines) == 1 and "Traceback" not in cap.err, cap
    return lines[0]


@pytest.mark.parametrize("output, pattern", [("/proc/x", "cannot write into '/proc/x'"),
                                             ("{tmp}/afile", "'.*afile' is a file, not a folder"),
                                             ("{tmp}/afile/sub", "'.*afile' is a file, not a folder")])
def test_unwritable_output_folders(model: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   output: str, pattern: str) -> None:
    import re

    (tmp_path / "afile").write_text("x")
    out = output.format(tmp=tmp_path)
    assert compare.main(["--model", str(model[0]), "--om", str(model[1]), "--output", out]) == 2
    assert re.search(pattern, err_line(capsys))
    app = tmp_path / "app.py"
    app.write_text("print('ran')\n")
    assert msprof.main([f"--output={out}", str(app)]) == 2
    line = err_line(capsys)
    assert re.search(pattern, line) and "ran" not in line
    assert bench.main(["--model", str(model[1]), "--output", out]) == 1
    assert re.search(pattern, err_line(capsys))


def test_compare_input_files(model: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, wrong = tmp_path / "a.npy", tmp_path / "b.npy", tmp_path / "w.npy"
    np.save(a, np.ones((2, 3), np.float32))
    np.save(b, np.ones((2, 3), np.float32))
    np.save(wrong, np.ones((3, 3), np.float32))
    base = ["--model", str(model[0]), "--om", str(model[1]), "--output", str(tmp_path)]
    assert compare.main([*base, "--input", f"{a},{b}"]) == 2
    assert "2 --input files for a model with 1 input(s) (x)" in err_line(capsys)
    for extra in ([], ["--om", str(model[1])]):
        args = ["--model", str(model[0]), "--output", str(tmp_path), "--input", str(wrong), *extra]
        assert compare.main(args) == 2
        line = err_line(capsys)
        assert "input 'x'" in line and "[2,3]" in line and "ONNX Runtime" not in line, line
    assert compare.main([*base, "--input", str(a)]) == 0


def test_bench_counts(model: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for opt, value, why in (("--loop", "0", "must be positive"), ("--loop", "-3", "must be positive"),
                            ("--warmup_count", "-1", "must be non-negative"), ("--batchsize", "0", "must be positive")):
        with pytest.raises(SystemExit) as e:
            bench.main(["--model", str(model[1]), opt, value])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {opt}" in err and why in err, err
    assert bench.main(["--model", str(model[1]), "--loop", "2"]) == 0


def test_bench_dynamic_input_without_shape_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A -1 input without --dym*: the example names the real input and takes batch 1, not 640."""
    g = helper.make_graph([helper.make_node("Relu", ["img"], ["y"])], "g",
                          [helper.make_tensor_value_info("img", TensorProto.FLOAT, ["n", 3, "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    om = tmp_path / "dyn.om"
    pycann.compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])).save(om)
    assert bench.main(["--model", str(om), "--loop", "1"]) != 0
    line = err_line(capsys)
    assert "input 'img'" in line and '--dymShape "img:1,3,640"' in line, line
    assert bench.main(["--model", str(om), "--loop", "1", "--dymShape", "img:1,3,640"]) == 0


def test_an_om_given_as_the_onnx_model_is_named_as_one(model: tuple[Path, Path]) -> None:
    """``atc --model=m.om`` (or compare's --model) said only "cannot parse 'm.om' as an ONNX model:
    Error parsing message ... Wire format was corrupt"; the file is pycann's own compiled model."""
    from pycann.errors import ModelError

    _, om_path = model
    with pytest.raises(ModelError, match=r"is a pycann \.om .*atc --mode=6 --om="):
        pycann.compile_model(str(om_path))


def test_om_bytes_given_as_the_onnx_model_name_no_file_to_show(model: tuple[Path, Path]) -> None:
    """The .om's bytes given as the ONNX model: the message told to run ``atc --mode=6 --om=<bytes>``,
    a file that does not exist; it names the bytes as an .om without that command."""
    from pycann.errors import ModelError

    _, om_path = model
    with pytest.raises(ModelError, match=r"is a pycann \.om") as e:
        pycann.compile_model(om_path.read_bytes())
    assert "--om=<bytes>" not in str(e.value)


def _conv_model(seed: int, path: Path) -> Path:
    """x [1, 3, 8, 8] -> Conv(3 -> 4, 3x3) with weights of ``seed`` -> y: the same architecture per seed."""
    w = np.random.default_rng(seed).standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [onnx.numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_compare_refuses_an_om_compiled_from_another_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """atc records the source model's content fingerprint; an .om of the same architecture with other
    weights has the same inputs and node names, and compare used to report its weights as pycann's
    disagreement (exit 1). A model saved again (same content) still compares."""
    from pycann.tools import atc

    a, b = _conv_model(1, tmp_path / "a.onnx"), _conv_model(2, tmp_path / "b.onnx")
    assert atc.main([f"--model={a}", "--framework=5", f"--output={tmp_path / 'a'}", "--soc_version=Ascend310P3"]) == 0
    om = str(tmp_path / "a.om")
    out = str(tmp_path / "cmp")
    assert compare.main(["--model", str(b), "--om", om, "--output", out]) == 2
    line = err_line(capsys)
    assert f"a.om was not compiled from {b}" in line and "content fingerprint" in line
    onnx.save(onnx.load(a), tmp_path / "a_again.onnx")
    assert compare.main(["--model", str(tmp_path / "a_again.onnx"), "--om", om, "--output", out]) == 0


def test_compare_takes_an_om_compiled_from_tensorflow_against_its_onnx_export(tmp_path: Path) -> None:
    """The fingerprint atc records for a TensorFlow model is of the TensorFlow graph, which no ONNX
    model matches: such an .om compared with its ONNX export was refused (exit 2; it agreed before)."""
    pytest.importorskip("tensorboard")
    from numpy.random import default_rng

    from pycann.tools import atc
    from tests.importers.test_tensorflow_graphdef import G

    w = default_rng(0).standard_normal((4, 3)).astype(np.float32)
    g = G()
    g.node("MatMul", "y", [g.placeholder("x", (2, 4)), g.const("W", w)], T=("type", 1))
    (tmp_path / "m.pb").write_bytes(g.gd.SerializeToString())
    assert atc.main([f"--model={tmp_path / 'm.pb'}", "--framework=3", f"--output={tmp_path / 'tf'}",
                     "--soc_version=Ascend310P3"]) == 0
    og = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="y")], "g",
                           [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                           [onnx.numpy_helper.from_array(w, "W")])
    m = helper.make_model(og, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, tmp_path / "m.onnx")
    assert compare.main(["--model", str(tmp_path / "m.onnx"), "--om", str(tmp_path / "tf.om"),
                         "--output", str(tmp_path / "cmp")]) == 0
