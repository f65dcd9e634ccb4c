"""atc precision options end to end, and --mode=3 (pre-check, check_result.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.acl.session import InferSession
from pycann.tools.atc import FAILED, SUCCESS, main

W = np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32)


def r16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float32)


@pytest.fixture()
def mm_onnx(tmp_path: Path) -> Path:
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [numpy_helper.from_array(W, "W")])
    p = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


def atc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().out


def _base(model: Path, out: Path) -> list[str]:
    return [f"--model={model}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3"]


def test_force_fp16_end_to_end(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), "--precision_mode=force_fp16", "--log=info")
    assert rc == 0, text
    assert "[PrecisionMode]" in text and "force_fp16" in text
    x = np.random.default_rng(4).standard_normal((2, 4)).astype(np.float32)
    got = InferSession(0, str(tmp_path / "m.om")).infer([x])[0]
    np.testing.assert_array_equal(got, np.maximum(r16(r16(x) @ r16(W)), 0))
    rc, text = atc(capsys, "--mode=6", f"--om={tmp_path / 'm.om'}")
    assert rc == 0 and "precision: precision_mode[force_fp16]" in text, text


def test_precision_mode_v2_and_files(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keep = tmp_path / "keep.cfg"
    keep.write_text("mm\n")
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"black-list": {"to-add": ["Relu"]}}))
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), "--precision_mode_v2=mixed_float16",
                   f"--modify_mixlist={mix}", f"--keep_dtype={keep}")
    assert rc == 0, text
    x = np.random.default_rng(5).standard_normal((2, 4)).astype(np.float32)
    got = InferSession(0, str(tmp_path / "m.om")).infer([x])[0]
    np.testing.assert_array_equal(got, np.maximum(x @ W, 0))  # MatMul kept float32 by --keep_dtype
    rc, text = atc(capsys, "--mode=6", f"--om={tmp_path / 'm.om'}")
    assert "keep_dtype[mm]" in text and "added_to_black[Relu]" in text, text


def test_input_fp16_nodes(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), "--input_fp16_nodes=x", "--output_type=FP16",
                   "--precision_mode=force_fp16")
    assert rc == 0, text
    sess = InferSession(0, str(tmp_path / "m.om"))
    x = np.random.default_rng(6).standard_normal((2, 4)).astype(np.float16)
    got = sess.infer([x])[0]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.maximum(x.astype(np.float32) @ r16(W), 0).astype(np.float16))


@pytest.mark.parametrize(("args", "code"), [
    (["--precision_mode=force_fp16", "--precision_mode_v2=fp16"], "E10056"),
    (["--precision_mode=fp8"], "E10001"),
    (["--precision_mode=allow_fp32_to_bf16"], "E10001"),  # Ascend310P3 has no bfloat16
    (["--keep_dtype=/no/such/file"], "E10410"),
    (["--input_fp16_nodes=nope"], "E10016"),
    (["--is_weight_clip=2"], "E10001"),
])
def test_bad_precision_options(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                               code: str) -> None:
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), *args)
    assert rc == 1 and FAILED in text and f"{code}:" in text, text


def test_bad_mixlist_and_keep_dtype_files(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"black-list": {"to-add": ["Relu"]}}))
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), "--precision_mode=force_fp16", f"--modify_mixlist={mix}")
    assert rc == 1 and "Modify_mixlist is set" in text
    keep = tmp_path / "keep.cfg"
    keep.write_text("OpType::matMul\n")
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), "--precision_mode=force_fp16", f"--keep_dtype={keep}")
    assert rc == 1 and "E10003" in text and "PascalCase" in text


def test_customize_dtypes_file(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "dt.cfg"
    cfg.write_text("# round the MatMul only\nmm::InputDtype:float16,float16,OutputDtype:float16\n")
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), f"--customize_dtypes={cfg}")
    assert rc == 0, text
    x = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)
    got = InferSession(0, str(tmp_path / "m.om")).infer([x])[0]
    np.testing.assert_array_equal(got, np.maximum(r16(r16(x) @ r16(W)), 0))


# ------------------------------------------------------------------------------------ --mode=3


def _bad_model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("FancyOp", ["a"], ["b"], name="fancy", domain="com.example"),
             helper.make_node("Abs", ["b"], ["c"], name="after_fancy"),
             helper.make_node("Softmax", ["a"], ["d"], name="bad_axis", axis=5),
             helper.make_node("Gemm", ["a", "a"], ["e"], name="gemm_shape")]
    g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "cde"])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]),
              path)
    return path


def test_mode3_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _bad_model(tmp_path / "bad.onnx")
    report = tmp_path / "out" / "check.json"
    rc, text = atc(capsys, "--mode=3", "--framework=5", f"--model={model}", f"--check_report={report}")
    assert rc == 1 and FAILED in text and "E19010:" in text, text
    assert f"The pre-checking report has been saved to {report}." in text
    doc = json.loads(report.read_text())
    assert (doc["name"], doc["result"], doc["total"], doc["pass"], doc["fail"]) == ("bad", "failed", 5, 2, 3)
    by = {op["name"]: op for op in doc["op"]}
    assert by["relu"]["result"] == "success" and "cause" not in by["relu"]
    assert by["fancy"]["cause"][0]["code"] == 1 and by["fancy"]["cause"][0]["kind"] == "unsupported_op"
    assert by["after_fancy"]["result"] == "success" and by["after_fancy"]["cause"][0]["kind"] == "not_checked"
    assert by["bad_axis"]["cause"][0] == {"code": 2, "kind": "attribute", "message": by["bad_axis"]["cause"][0]["message"]}
    assert "axis" in by["bad_axis"]["cause"][0]["message"]
    assert by["gemm_shape"]["cause"][0]["kind"] == "shape"
    assert not (tmp_path / "bad.om").exists()


def test_mode3_unsupported_opset_and_clean_model(mm_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "check_result.json"
    rc, text = atc(capsys, "--mode=3", "--framework=5", f"--model={mm_onnx}", f"--check_report={report}")
    assert rc == 0 and SUCCESS in text, text
    doc = json.loads(report.read_text())
    assert doc["result"] == "success" and doc["total"] == 2 and doc["fail"] == 0
    # Gelu exists from opset 20 only
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], name="gelu")], "old",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    old = tmp_path / "old.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), old)
    rc, text = atc(capsys, "--mode=3", "--framework=5", f"--model={old}", f"--check_report={report}")
    doc = json.loads(report.read_text())
    assert rc == 1 and doc["op"][0]["cause"][0]["kind"] == "unsupported_opset", doc


@pytest.mark.parametrize("log", [[], ["--log=warning"]])
def test_precision_file_entries_that_match_nothing_are_warned(mm_onnx: Path, tmp_path: Path, log: list[str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A misspelt --keep_dtype entry or --modify_mixlist "to-remove" op (docs/precision.md: "a
    warning") was reported only among --log=info's pass lines: at the default level, and even at
    --log=warning, the compile succeeded without a word and the entry did nothing."""
    keep = tmp_path / "keep.cfg"
    keep.write_text("OpType::Softmx\n")
    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"black-list": {"to-remove": ["Reluu"]}}))
    rc, text = atc(capsys, *_base(mm_onnx, tmp_path / "m"), "--precision_mode=allow_mix_precision",
                   f"--keep_dtype={keep}", f"--modify_mixlist={mix}", *log)
    assert rc == 0, text
    warned = [ln for ln in text.splitlines() if ln.startswith("[WARNING]")]
    assert any("--keep_dtype entry 'OpType::Softmx' matches no node" in ln for ln in warned), text
    assert any("--modify_mixlist: Reluu is not on the black-list" in ln for ln in warned), text
    assert "[INFO]" not in text  # (the pass lines stay --log=info's)
