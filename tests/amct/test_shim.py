"""``import amct_onnx`` under pycann-run is pycann.amct (issue 22): an AMCT script written for
Huawei's package runs unmodified, and nothing named amct_onnx exists outside the run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import sys

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import amct_onnx as amct
    import pycann.amct

    assert amct is pycann.amct, amct
    work = sys.argv[1]
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv1")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), work + "/m.onnx")
    amct.create_quant_config(work + "/c.json", work + "/m.onnx", skip_layers=None, batch_num=2)
    amct.quantize_model(work + "/c.json", work + "/m.onnx", work + "/mod.onnx", work + "/r.txt")
    amct.calibrate(work + "/mod.onnx", [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(2)])
    amct.save_model(work + "/mod.onnx", work + "/r.txt", work + "/out/m")
    deploy = onnx.load(work + "/out/m_deploy_model.onnx")
    print("ops", sorted({n.op_type for n in deploy.graph.node}))
''')


def _run(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=tmp, env=env, timeout=240)


def test_amct_onnx_script_runs_under_pycann_run(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    app = tmp_path / "quant.py"
    app.write_text(SCRIPT)
    r = _run(["-m", "pycann.tools.run", str(app), str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ops ['Conv', 'DequantizeLinear', 'QuantizeLinear']" in r.stdout, r.stdout
    assert (tmp_path / "out" / "m_fake_quant_model.onnx").is_file()


def test_amct_onnx_is_not_importable_outside_pycann_run(tmp_path: Path) -> None:
    assert importlib.util.find_spec("amct_onnx") is None
    r = _run(["-c", "import amct_onnx"], tmp_path)
    assert r.returncode != 0 and "No module named 'amct_onnx'" in r.stderr
