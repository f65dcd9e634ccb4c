"""atc --insert_op_conf and the gear options: compile + run, --mode=6 display, CANN error lines."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.run.model import LoadedModel
from pycann.tools.atc import FAILED, SUCCESS, main


@pytest.fixture()
def conv_onnx(tmp_path: Path) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 3, 1, 1)).astype(np.float32), "W")
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 4, 6])], [w])
    p = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), p)
    return p


def atc(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    rc = main(list(args))
    return rc, capsys.readouterr().out


def base(model: Path, out: Path) -> list[str]:
    return [f"--model={model}", "--framework=5", f"--output={out}", "--soc_version=Ascend310P3"]


def test_aipp_and_batch_gears_compile_run_and_display(conv_onnx: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text("# NV12 camera frames\naipp_op {\n  aipp_mode : static\n  input_format : YUV420SP_U8\n"
                   "  csc_switch : true\n  src_image_size_w : 8\n  src_image_size_h : 6\n  crop : true\n"
                   "  load_start_pos_w : 2\n  crop_size_w : 6\n  crop_size_h : 4\n  var_reci_chn_0 : 0.5\n}\n")
    rc, text = atc(capsys, *base(conv_onnx, tmp_path / "m"), "--input_shape=x:-1,3,4,6",
                   f"--insert_op_conf={cfg}", "--dynamic_batch_size=1,2", "--log=info")
    assert rc == 0, text
    assert text.strip().splitlines()[-1] == SUCCESS
    assert "[InsertAippPass]" in text and "[Gears] 2 --dynamic_batch_size gears compiled" in text
    lm = LoadedModel.from_file(tmp_path / "m.om")
    assert lm.inputs[0].datatype == "uint8" and lm.inputs[0].shape == [-1, 9, 8]
    img = np.random.default_rng(1).integers(0, 256, (2, 9, 8), dtype=np.uint8)
    assert lm.run([img])[0].shape == (2, 2, 4, 6)
    rc, text = atc(capsys, "--mode=6", f"--om={tmp_path / 'm.om'}")
    assert rc == 0, text
    assert "dynamic gears: --dynamic_batch_size 1; 2" in text
    assert "  gear 2: x[2,9,8]" in text
    assert "aipp: input 0 (x) static -> NCHW[-1, 3, 4, 6]" in text
    assert "input_format[YUV420SP_U8], src_image_size[8x6], crop[start 2,0 size 6x4], csc_matrix[298,516,0," in text
    assert "var_reci_chn[0.5,1,1,1]" in text


def test_dynamic_aipp_display(conv_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "dyn.cfg"
    cfg.write_text("aipp_op { aipp_mode: dynamic related_input_rank: 0 max_src_image_size: 400 }")
    rc, text = atc(capsys, *base(conv_onnx, tmp_path / "d"), "--input_shape=x:2,3,4,6", f"--insert_op_conf={cfg}")
    assert rc == 0, text
    rc, text = atc(capsys, "--mode=6", f"--om={tmp_path / 'd.om'}")
    assert "max_src_image_size[400], params input ascend_dynamic_aipp_data" in text
    assert "input: x UINT8[400]" in text and "input: ascend_dynamic_aipp_data UINT8[256]" in text


@pytest.mark.parametrize("cfg_text,expect", [
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 padding: true top_padding_size: 40 }",
     "E10001: Value [40] for parameter [top_padding_size] is invalid. Reason: must be an integer in [0, 32]"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 gamma: 2 }",
     "E10001: Value [gamma] for parameter [aipp_op] is invalid. Reason: unknown key"),
    ("aipp_op { aipp_mode: static input_format: RGB888_U8 crop: true src_image_size_w: 6 src_image_size_h: 4 "
     "load_start_pos_w: 2 crop_size_w: 6 crop_size_h: 4 }",
     "E10001: Value [6] for parameter [crop_size_w] is invalid. Reason: the crop [2, 8) lies outside"),
])
def test_invalid_aipp_config_fails_with_key_and_range(conv_onnx: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str], cfg_text: str,
                                                      expect: str) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(cfg_text)
    rc, text = atc(capsys, *base(conv_onnx, tmp_path / "b"), "--input_shape=x:1,3,4,6", f"--insert_op_conf={cfg}")
    assert rc == 1
    assert FAILED in text and expect in text, text
    assert not (tmp_path / "b.om").exists()


@pytest.mark.parametrize("args,code", [
    (["--input_shape=x:-1,3,4,6", "--dynamic_batch_size=1,2", "--dynamic_dims=1;2"], "E10009"),
    (["--input_shape=x:1,3,4,6", "--dynamic_batch_size=1,2"], "E10031"),
    (["--input_shape=x:1,3,-1,-1", "--dynamic_image_size=4,6;4"], "E10020"),
    (["--input_shape=x:-1,3,4,6", "--dynamic_batch_size=1,2", "--insert_op_conf=missing.cfg"], "E10001"),
])
def test_gear_option_errors_print_cann_codes(conv_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             args: list[str], code: str) -> None:
    rc, text = atc(capsys, *base(conv_onnx, tmp_path / "e"), *args)
    assert rc == 1 and FAILED in text
    assert f"\n{code}: " in text, text


def test_image_size_gears_via_atc(conv_onnx: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text = atc(capsys, *base(conv_onnx, tmp_path / "i"), "--input_shape=x:1,3,-1,-1",
                   "--dynamic_image_size=4,6;8,8")
    assert rc == 0, text
    lm = LoadedModel.from_file(tmp_path / "i.om")
    lm.set_dynamic_hw_size(8, 8)
    assert lm.run([np.zeros((1, 3, 8, 8), np.float32)])[0].shape == (1, 2, 8, 8)


def test_atc_warns_var_reci_lost_in_float16(conv_onnx: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A var_reci_chn float16 turns to 0 compiled silently (pycann applied it in float32); atc now
    prints a [WARNING] line at the default --log level naming the key, the value and the file."""
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text("aipp_op {\n  aipp_mode : static\n  input_format : RGB888_U8\n  var_reci_chn_0 : 1e-45\n"
                   "  var_reci_chn_1 : 0.5\n}\n")
    rc, text = atc(capsys, *base(conv_onnx, tmp_path / "w"), "--input_shape=x:1,3,4,6", f"--insert_op_conf={cfg}")
    assert rc == 0 and text.strip().splitlines()[-1] == SUCCESS, text
    warned = [ln for ln in text.splitlines() if ln.startswith("[WARNING]")]
    assert len(warned) == 1, text
    assert "[InsertAippPass] W: var_reci_chn_0 1e-45 rounds to 0: AIPP applies var_reci_chn as float16 " \
           "(aipp_op at aipp.cfg:1)" in warned[0], warned
