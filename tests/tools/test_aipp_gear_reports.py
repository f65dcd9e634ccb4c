"""What a user sees for AIPP and gear models (found by a fresh-user walkthrough): a float tensor fed
to a static-AIPP input says to feed the raw image (not ``astype(uint8)``, which turns normalised
values into garbage pixels); ``pycann compare`` refuses an AIPP .om with a reason; ``dymhw`` reads
H and W at the input's own layout (an AIPP input is NHWC); ``atc --mode=6`` and
``acl.mdl.query_size`` give a gear model's largest arena and say its gears' plans are built at load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pycann
import pycann.acl as acl
from pycann.acl.session import InferSession
from pycann.errors import InputError
from pycann.ge.om import load_om
from pycann.ge.planning.memory import plan_memory
from pycann.tools import atc, compare
from tests.ge.test_aipp import cfg_text
from tests.ge.test_gears import conv_model

AIPP = {"input_format": "RGB888_U8", "csc_switch": False}


def _aipp_om(tmp_path: Path, **opts: object) -> Path:
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text(cfg_text(AIPP))
    p = tmp_path / "m.om"
    pycann.compile_model(conv_model(), pycann.CompileOptions(insert_op_conf=str(cfg), **opts)).save(p)  # type: ignore[arg-type]
    return p


def test_a_float_tensor_for_an_aipp_input_says_to_feed_the_raw_image(tmp_path: Path) -> None:
    om = _aipp_om(tmp_path, input_shape={"x": [1, 3, 8, 6]})
    s = InferSession(0, str(om))
    with pytest.raises(InputError) as e:
        s.infer([np.zeros((1, 3, 8, 6), np.float32)])
    msg = str(e.value)
    assert "has AIPP" in msg and "uint8 NHWC [1, 8, 6, 3]" in msg and "RGB888_U8" in msg and "astype" not in msg
    img = np.random.default_rng(0).integers(0, 256, (1, 8, 6, 3), dtype=np.uint8)
    ref = InferSession(0, str(om)).infer([img])[0]  # the raw image runs
    assert ref.shape == (1, 4) and np.isfinite(ref).all()


def test_compare_refuses_an_aipp_om(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    om = _aipp_om(tmp_path, input_shape={"x": [1, 3, 8, 6]})
    onnx.save(conv_model(), tmp_path / "m.onnx")
    rc = compare.main(["--model", str(tmp_path / "m.onnx"), "--om", str(om), "--output", str(tmp_path / "cmp")])
    err = capsys.readouterr().err
    assert rc == 2 and "has AIPP" in err and "without --insert_op_conf" in err, err


def test_dymhw_reads_an_aipp_inputs_nhwc_layout(tmp_path: Path) -> None:
    om = _aipp_om(tmp_path, input_shape={"x": [-1, 3, 8, 6]}, dynamic_batch_size=[1, 2])
    s = InferSession(0, str(om))
    img = np.zeros((2, 8, 6, 3), np.uint8)
    with pytest.raises(RuntimeError, match=r"^hw 8x6: the model was compiled with --dynamic_batch_size"):  # (was "hw 6x3")
        s.infer([img], mode="dymhw")
    assert s.infer([img], mode="dymbatch")[0].shape == (2, 4)


def test_a_gear_models_memory_size_is_its_largest_gear(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "g.om"
    opts = pycann.CompileOptions(input_shape={"x": [-1, 3, 16, 12]}, dynamic_batch_size=[1, 4])
    pycann.compile_model(conv_model(), opts).save(p)
    peaks = []
    for b in (1, 4):  # each gear compiled as a static model: its arena
        cm = pycann.compile_model(conv_model(), pycann.CompileOptions(input_shape={"x": [b, 3, 16, 12]}))
        peaks.append(plan_memory(cm.graph).peak_bytes)
    assert peaks[1] > peaks[0] > 0
    m = load_om(p).manifest
    assert m["memory_plan"]["peak_bytes"] == max(peaks) and m["gears"]["arena_bytes"] == peaks
    assert atc.main(["--mode=6", f"--om={p}"]) == 0
    out = capsys.readouterr().out
    assert f"memory_size[{max(peaks)}B]" in out and "plan cache: 2 gears, each gear's plan built at load and kept (never evicted)" in out
    assert acl.mdl.query_size(str(p))[0] == max(peaks)


def test_mode6_shows_an_inputs_declared_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / "r.om"
    pycann.compile_model(conv_model(), pycann.CompileOptions(input_shape={"x": [1, 3, "8~32", -1]})).save(p)
    assert atc.main(["--mode=6", f"--om={p}"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("input: x "))
    assert line.startswith("input: x FLOAT[1x3x-1x-1] (") and "range 8~32" in line and line.count("range") == 1, line
