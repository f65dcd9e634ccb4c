"""atc's refusals of bad models, options and output paths: one E-code line after CANN's failure
line, never a traceback; the console shows CANN's start/success lines by default and the pass
details, each with its own elapsed time, under --log=info; option errors before heavy imports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.tools.atc import FAILED, START, SUCCESS, main

ROOT = Path(__file__).resolve().parents[2]


def relu_model(opset: int = 13, elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", elem, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def save(m: onnx.ModelProto, p: Path) -> Path:
    p.write_bytes(m.SerializeToString())  # onnx.save would run nothing, but keep bad tensors as they are
    return p


def atc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().out


def compile_args(model: Path, output: str) -> list[str]:
    return [f"--model={model}", "--framework=5", f"--output={output}", "--soc_version=Ascend310P3"]


def assert_failed(rc: int, text: str, code: str, pattern: str) -> None:
    lines = text.strip().splitlines()
    assert rc == 1, text
    assert lines[0] == START and lines[-2] == FAILED, text
    assert lines[-1].startswith(f"{code}: ") and re.search(pattern, lines[-1]), lines[-1]
    assert "Traceback" not in text


@pytest.fixture()
def relu(tmp_path: Path) -> Path:
    return save(relu_model(), tmp_path / "relu.onnx")


@pytest.mark.parametrize("output, pattern", [
    ("/proc/x", r"\[--output\] is invalid. Reason: cannot write into '/proc'"),
    ("{tmp}/afile/m", r"Reason: '.*afile' is a file, not a folder"),
    ("{tmp}/afile/deeper/m", r"Reason: '.*afile' is a file, not a folder"),
])
def test_unwritable_output(relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str,
                           pattern: str) -> None:
    (tmp_path / "afile").write_text("x")
    rc, text = atc(capsys, *compile_args(relu, output.format(tmp=tmp_path)))
    assert_failed(rc, text, "E10001", pattern)


def test_model_is_a_directory_and_required_spelling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = atc(capsys, *compile_args(tmp_path, str(tmp_path / "m")))
    assert_failed(rc, text, "E10001", r"\[--model\] is invalid. Reason: it is a directory")
    rc, text = atc(capsys, "--framework=5", "--output=x", "--soc_version=Ascend310P3")
    assert_failed(rc, text, "E10054", r"The required parameter \[--model\] for ATC is empty")


def test_bad_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    long_w = numpy_helper.from_array(np.ones((1, 3), np.float32), "w")
    long_w.raw_data += b"\0" * 4
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [long_w])
    cases = [
        (helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), "E19999",
         r"tensor 'w': raw_data holds 16 bytes, dims \[1, 3\] of FLOAT need 12"),
        (relu_model(opset=999), "E19010", r"imports ONNX opset 999; pycann supports opsets 1\.\.\d+"),
        (relu_model(opset=0), "E19010", r"op Relu \(domain ai.onnx, opset 0\); it is not an operator of that ONNX opset"),
        (relu_model(elem=TensorProto.UNDEFINED), "E19999", r"graph input 'x' has no element type"),
    ]
    for i, (m, code, pattern) in enumerate(cases):
        rc, text = atc(capsys, *compile_args(save(m, tmp_path / f"m{i}.onnx"), str(tmp_path / f"o{i}")))
        assert_failed(rc, text, code, pattern)


def test_float_mod_fmod0_before_opset_28(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def mod(opset: int) -> onnx.ModelProto:
        g = helper.make_graph([helper.make_node("Mod", ["a", "b"], ["y"], fmod=0)], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

    rc, text = atc(capsys, *compile_args(save(mod(13), tmp_path / "m13.onnx"), str(tmp_path / "o13")))
    assert_failed(rc, text, "E19999", r"floating-point Mod needs fmod=1")
    rc, text = atc(capsys, *compile_args(save(mod(28), tmp_path / "m28.onnx"), str(tmp_path / "o28")))
    assert rc == 0, text  # Mod-28 defines fmod=0 on floats (floor modulo)


@pytest.mark.parametrize("doc, pattern", [
    ({"Switch": {"GraphFusion": {"ConvActivationFusion": "of"}}}, r'value "of" of "GraphFusion"."ConvActivationFusion" is invalid: use "on" or "off"'),
    ({"Switch": {"GraphFusion": {"ALL": 0}}}, r'value 0 of "GraphFusion"."ALL"'),
    ({"Switch": ["GraphFusion"]}, r"expected \{\"Switch\""),
    (["off"], r"line 1 .*expected 'PassName:off'"),  # not an object: read as the line form
])
def test_fusion_switch_json_typos(relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], doc: object,
                                  pattern: str) -> None:
    sw = tmp_path / "switch.json"
    sw.write_text(json.dumps(doc))
    rc, text = atc(capsys, *compile_args(relu, str(tmp_path / "o")), f"--fusion_switch_file={sw}")
    assert_failed(rc, text, "E10001", pattern)


def test_console_lines_by_log_level(relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = atc(capsys, *compile_args(relu, str(tmp_path / "a")))
    assert rc == 0 and text.strip().splitlines() == [START, SUCCESS], text
    rc, text = atc(capsys, *compile_args(relu, str(tmp_path / "b")), "--log=info")
    lines = text.strip().splitlines()
    assert rc == 0 and lines[0] == START and lines[-1] == SUCCESS
    details = lines[1:-1]
    assert any("[InferShapes]" in ln for ln in details) and any("[SaveOm]" in ln for ln in details)
    stamps = []
    for ln in details:
        m = re.match(r"\[INFO\] \[ *(\d+\.\d{3})s\] \[\w+\] ", ln)
        assert m, ln
        stamps.append(float(m.group(1)))
    assert stamps == sorted(stamps)  # each line carries the time it was printed at


def test_option_errors_come_before_heavy_imports(relu: Path, tmp_path: Path) -> None:
    """A mistyped option fails without loading numpy, onnx or ml_dtypes (checked, not timed)."""
    bad = [
        ["--bad-option"],
        compile_args(relu, str(tmp_path / "o"))[:-1] + ["--soc_version=Ascend999"],
        compile_args(relu, str(tmp_path / "o")) + ["--input_format=NHWCX"],
        compile_args(relu, str(tmp_path / "o")) + ["--input_shape=x:1,q"],
        compile_args(relu, "/proc/x"),
    ]
    code = ("import sys\nfrom pycann.tools.atc import main\nrc = main(sys.argv[1:])\n"
            "heavy = [m for m in ('numpy', 'onnx', 'ml_dtypes') if m in sys.modules]\n"
            "print('HEAVY', rc, heavy)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for args in bad:
        out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                             timeout=60, check=False).stdout
        assert "HEAVY 1 []" in out, (args, out)


def test_a_wrong_input_shape_names_the_input_it_reaches(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A channel count from --input_shape that the first conv cannot take: the line names the conv,
    the model input it reads (with the shape given) and --input_shape."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "c.onnx")
    rc, out = atc(capsys, *compile_args(m, str(tmp_path / "c")), "--input_shape=x:1,5,8,8")
    assert_failed(rc, out, "E19999", r"X has 5 channels but W \[4, 3, 3, 3\] with group=1 expects 3; the node reads "
                                     r"model input x FLOAT\[1x5x8x8\]: check that input's shape \(atc --input_shape\)$")


def test_input_shape_overriding_a_declared_static_dim_is_warned(relu: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """relu.onnx declares x [1, 3]: --input_shape x:4,3 compiles for 4 (as ATC does) and says, at the
    default log level, which declared dim it changed; the declared shape itself, a dynamic dim or a
    range says nothing."""
    rc, out = atc(capsys, *compile_args(relu, str(tmp_path / "r4")), "--input_shape=x:4,3")
    assert rc == 0 and out.strip().splitlines()[-1] == SUCCESS, out
    warned = [line for line in out.splitlines() if line.startswith("[WARNING]")]
    assert len(warned) == 1 and "input [x] (dim 0 1 -> 4)" in warned[0], out
    for dims in ("1,3", "-1,3", "1~8,3"):
        rc, out = atc(capsys, *compile_args(relu, str(tmp_path / "same")), f"--input_shape=x:{dims}")
        assert rc == 0 and "[WARNING]" not in out, (dims, out)


@pytest.mark.parametrize("dims, pattern", [
    ("1,3,400~16", r"value \[400~16\] for input \[x\] .* needs 0 <= lo <= hi \(write 16~400\)$"),
    ("1,3,-2~16", r"value \[-2~16\] for input \[x\] .* needs non-negative bounds$"),
])
def test_a_reversed_range_says_so(relu: Path, capsys: pytest.CaptureFixture[str], dims: str, pattern: str) -> None:
    rc, out = atc(capsys, *compile_args(relu, "/tmp/never"), f"--input_shape=x:{dims}")
    assert_failed(rc, out, "E10001", pattern)


def test_the_python_input_shape_takes_atc_text_and_refuses_other_dims() -> None:
    """``CompileOptions.input_shape``: "8~32" (atc's text), (8, 32), numpy ints and -1 are ranges, dims and
    dynamic dims; a string like "N" or "9~2", a float, a bool or -2 is an E10001 naming the dim (a string dim
    became a symbolic name before, and the saved .om then failed its load check)."""
    import pycann
    from pycann.errors import OptionError
    from tests.ge.test_gears import conv_model

    opts = pycann.CompileOptions(input_shape={"x": [np.int64(1), "3", "8~32", -1]})
    assert pycann.compile_model(conv_model(), opts).manifest["input_ranges"] == {"x": [1, 3, [8, 32], -1]}
    text = pycann.CompileOptions(input_shape={"x": "1,3,8~32,-1"})  # one input's atc text
    assert pycann.compile_model(conv_model(), text).manifest["input_ranges"] == {"x": [1, 3, [8, 32], -1]}
    with pytest.raises(OptionError, match=r"E10001: input_shape of input \[x\] is None: give a list of dims"):
        pycann.compile_model(conv_model(), pycann.CompileOptions(input_shape={"x": None}))  # type: ignore[dict-item]
    for i, bad in ((0, "N"), (2, "9~2"), (2, 2.5), (0, True), (3, -2), (2, (9, 2)), (1, "--1"), (1, "²")):
        dims: list[object] = [1, 3, 8, 8]
        dims[i] = bad
        with pytest.raises(OptionError, match=rf"E10001: dim {i} of input \[x\] in input_shape is "):
            pycann.compile_model(conv_model(), pycann.CompileOptions(input_shape={"x": dims}))


def test_input_shape_range_compiles_the_ranges(relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CANN's --input_shape_range "x:[1~4,3]" is --input_shape "x:1~4,3" (it was warned about as having
    no effect, and the model compiled static)."""
    from pycann.ge.run.model import LoadedModel

    out = tmp_path / "r"
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   "--input_shape_range=x:[1~4,3]")
    assert rc == 0 and "no effect" not in text, text
    m = LoadedModel.from_file(str(out) + ".om")
    assert m.inputs[0].shape == [-1, 3]
    x = np.arange(9, dtype=np.float32).reshape(3, 3) - 4
    np.testing.assert_array_equal(m.run([x])[0], np.maximum(x, 0))
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   "--input_shape_range= x : [1~4,3] ;")  # spaces around the name and the bracket
    assert rc == 0, text
    assert LoadedModel.from_file(str(out) + ".om").inputs[0].shape == [-1, 3]
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   "--input_shape_range=x:1~4,3")
    assert rc == 1 and "E10001: value [x:1~4,3] of --input_shape_range is invalid" in text
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   "--input_shape_range=x:[1~4,3]", "--input_shape=x:1,3")
    assert rc == 1 and "cannot be used together" in text
    # the compiler's errors name the option the user wrote, not the --input_shape it became
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   "--input_shape_range=x:[1~4,3];y:[1,2]")
    assert rc == 1 and "E10016: input [y] in --input_shape_range is not an input of the model" in text, text
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3",
                   "--input_shape_range=x:[1~4]")
    assert rc == 1 and "--input_shape_range gives input [x] rank 1" in text, text


@pytest.mark.parametrize("args", [["--mode=6", "--om=missing.om"], ["--mode=1", "--om=missing.om", "--json=m.json"]])
def test_python_dash_m_atc_reports_a_missing_om_without_a_traceback(tmp_path: Path, args: list[str]) -> None:
    """`python -m pycann.tools.atc --mode=6 --om=missing.om`: the E10001 line and exit 1, as the `atc`
    script gives (the module run as __main__ once had its own AtcError, which missed atc_display's)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "pycann.tools.atc", *args], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=120, check=False)
    assert r.returncode == 1, r
    assert "Traceback" not in r.stderr + r.stdout
    assert FAILED in r.stdout and "E10001: Value [missing.om] for parameter [--om] is invalid" in r.stdout


def test_an_unknown_out_node_lists_the_imported_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unnamed ONNX node gets an imported name (`Conv_0_0`) the user cannot guess: E10016 for
    `--out_nodes=Conv_0:0` suggests the close name and lists the model's nodes; the suggestion works."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    m = save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "c.onnx")
    rc, out = atc(capsys, *compile_args(m, str(tmp_path / "c")), "--out_nodes=Conv_0:0")
    assert rc == 1
    line = out.strip().splitlines()[-1]
    assert line.startswith("E10016: node [Conv_0] in --out_nodes is not in the model; did you mean Conv_0_0?"), line
    assert "Relu_1_1" in line
    rc, out = atc(capsys, *compile_args(m, str(tmp_path / "c")), "--out_nodes=Conv_0_0:0")
    assert rc == 0, out


@pytest.mark.parametrize("output", ["outdir/", "outdir/.om"])
def test_an_output_naming_a_folder_is_refused(relu: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              output: str) -> None:
    """`--output=outdir/` wrote a hidden `outdir/.om` and said success."""
    out = f"{tmp_path}/{output}"  # (a Path would drop the trailing slash)
    rc, text = atc(capsys, f"--model={relu}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3")
    assert rc == 1 and "it names a folder, not a model file" in text, text
    assert f"--output={tmp_path / 'outdir' / 'model'}" in text
    assert not (tmp_path / "outdir" / ".om").exists()
