"""atc command line: CANN's option names, console lines, E-codes and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.acl.session import InferSession
from pycann.tools.atc import FAILED, START, SUCCESS, main
from tests.ops.oracle import run_ort


@pytest.fixture()
def small_onnx(tmp_path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    p = tmp_path / "small.onnx"
    onnx.save(m, p)
    return p


def run_atc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().out


def test_compile_and_run(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m"
    rc, text = run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3")
    assert rc == 0, text
    lines = text.strip().splitlines()
    assert lines[0] == START and lines[-1] == SUCCESS
    om = tmp_path / "m.om"
    assert om.is_file()
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    got = InferSession(0, str(om)).infer([x])[0]
    np.testing.assert_allclose(got, run_ort(onnx.load(small_onnx), {"x": x})[0], rtol=1e-6)


def test_space_separated_values_and_input_shape(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = run_atc(capsys, "--model", str(small_onnx), "--framework", "5", "--output", str(tmp_path / "s.om"),
                       "--soc_version", "Ascend910B2", "--input_shape", "x:3,4", "--log", "info")
    assert rc == 0, text
    assert "[InferShapes]" in text and "[MemoryPlan]" in text
    sess = InferSession(0, str(tmp_path / "s.om"))
    assert sess.get_inputs()[0].shape == [3, 4]
    with pytest.raises(Exception, match=r"expected shape \[3,4\], received \[2, 4\]"):
        sess.infer([np.zeros((2, 4), np.float32)])


def test_missing_framework_is_E10007(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = run_atc(capsys, f"--model={small_onnx}", f"--output={tmp_path / 'm'}", "--soc_version=Ascend310P3")
    assert rc == 1
    assert FAILED in text and "E10007: [--framework] is required" in text


def test_unsupported_op_is_E19010(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="weird_node")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.graph.node[0].op_type = "FancyOp"
    p = tmp_path / "bad.onnx"
    onnx.save(m, p)
    rc, text = run_atc(capsys, f"--model={p}", "--framework=5", f"--output={tmp_path / 'b'}", "--soc_version=Ascend310P3")
    assert rc == 1
    assert "E19010" in text and "weird_node" in text and "FancyOp" in text and "opset 15" in text


def test_out_nodes_and_output_type(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={tmp_path / 'o'}",
                       "--soc_version=Ascend310P3", "--out_nodes=mm:0", "--output_type=FP16")
    assert rc == 0, text
    sess = InferSession(0, str(tmp_path / "o.om"))
    x = np.ones((1, 4), np.float32)
    (h,) = sess.infer([x])
    assert h.dtype == np.float16 and h.shape == (1, 3)
    w = onnx.numpy_helper.to_array(onnx.load(small_onnx).graph.initializer[0])
    np.testing.assert_allclose(h, (x @ w).astype(np.float16), rtol=1e-3)


def test_mode1_json_and_mode6_display(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={tmp_path / 'm'}", "--soc_version=Ascend310P3")[0] == 0
    rc, text = run_atc(capsys, "--mode=1", f"--om={tmp_path / 'm.om'}", f"--json={tmp_path / 'm.json'}")
    assert rc == 0, text
    doc = json.loads((tmp_path / "m.json").read_text())
    # MatMul + Relu were fused; the fused node keeps the names of the nodes it stands for
    assert [n["op_type"] for n in doc["graph"]["nodes"]] == ["FusedMatMul"]
    assert doc["graph"]["nodes"][0]["origin"] == ["mm", "relu"]
    assert doc["manifest"]["soc_version"] == "Ascend310P3"
    rc, text = run_atc(capsys, "--mode=6", f"--om={tmp_path / 'm.om'}")
    assert rc == 0
    assert "============ Display Model Info start ============" in text
    assert "soc_version[Ascend310P3]" in text and "Original Atc command line: atc --model=" in text
    assert "resource info: memory_size[" in text and "weight_size[48B]" in text
    # a dynamic dim prints as -1 (CANN's form), its name from the model after the shape
    assert "input: x FLOAT[-1x4] (dim 0: N)" in text and "output: y FLOAT[-1x3] (dim 0: N)" in text


def test_huawei_om_is_refused_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "huawei.om"
    p.write_bytes(b"IMOD" + bytes(252))
    rc, text = run_atc(capsys, "--mode=6", f"--om={p}")
    assert rc == 1 and "Huawei" in text


def test_console_script_entry_point(small_onnx: Path, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pycann.tools.atc", f"--model={small_onnx}", "--framework=5",
                        f"--output={tmp_path / 'cli'}", "--soc_version=Ascend310P3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert SUCCESS in r.stdout


def test_display_of_missing_file_is_E10001(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for mode in ("--mode=6", "--mode=1"):
        extra = [f"--json={tmp_path / 'x.json'}"] if mode == "--mode=1" else []
        rc, text = run_atc(capsys, mode, f"--om={tmp_path / 'nope.om'}", *extra)
        assert rc == 1 and "E10001" in text and "does not exist" in text


def test_nhwc_input_format_is_rejected_for_onnx(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={tmp_path / 'm'}",
                       "--soc_version=Ascend310P3", "--input_format=NHWC")
    assert rc == 1 and "E10001" in text and "--input_format" in text


def test_output_type_keeps_output_names_and_checks_nodes(small_onnx: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={tmp_path / 'm'}",
                       "--soc_version=Ascend310P3", "--output_type=nonexist:0:FP16")
    assert rc == 1 and "E10016" in text and "nonexist:0" in text
    rc, text = run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={tmp_path / 'h'}",
                       "--soc_version=Ascend310P3", "--output_type=FP16")
    assert rc == 0, text
    sess = InferSession(0, str(tmp_path / "h.om"))
    assert [o.name for o in sess.get_outputs()] == ["y"]
    (y,) = sess.run(["y"], {"x": np.ones((2, 4), np.float32)})
    assert y.dtype == np.float16


def test_unknown_fusion_switch_name_is_warned(small_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sw = tmp_path / "switch.cfg"
    sw.write_text("LayerNormFuson:off\nMatMulBiasActivationFusion:off\n")
    rc, text = run_atc(capsys, f"--model={small_onnx}", "--framework=5", f"--output={tmp_path / 'm'}",
                       "--soc_version=Ascend310P3", f"--fusion_switch_file={sw}")
    assert rc == 0, text
    assert "[WARNING] --fusion_switch_file: no pass named [LayerNormFuson]" in text
    doc_ops = [n.op_type for n in InferSession(0, str(tmp_path / "m.om")).model.graph.nodes]
    assert doc_ops == ["MatMul", "Relu"]  # the correctly named pass was switched off


def test_empty_model_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "empty.onnx"
    p.write_bytes(b"")
    rc, text = run_atc(capsys, f"--model={p}", "--framework=5", f"--output={tmp_path / 'm'}", "--soc_version=Ascend310P3")
    assert rc == 1 and "is empty" in text


def test_singleop_precompilation_says_it_is_not_needed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """CANN's ``atc --singleop=ops.json`` (no --model): pycann runs single ops without offline
    compilation, and says so instead of asking for --framework."""
    rc, text = run_atc(capsys, f"--singleop={tmp_path / 'ops.json'}", f"--output={tmp_path / 'sop'}",
                       "--soc_version=Ascend310P3")
    assert rc != 0
    assert "E10001" in text and "single-op precompilation is not needed" in text and "E10007" not in text


def test_help_prints_the_usage_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """``atc --help`` is the usage text, not a run: no start banner before it, exit status 0."""
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: atc") and START not in out
