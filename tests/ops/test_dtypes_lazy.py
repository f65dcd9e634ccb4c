"""pycann.dtypes imports ml_dtypes only when one of its types is asked for (pycann/dtypes.py): the
tables answer the same as with it imported, and a float32 process never imports it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from pycann.dtypes import _ML_DTYPES, DType, bfloat16, from_numpy, is_bfloat16, to_numpy


@pytest.mark.parametrize("t", sorted(_ML_DTYPES, key=int))
def test_every_ml_dtypes_type_maps_both_ways(t: DType) -> None:
    dt = np.dtype(getattr(ml_dtypes, _ML_DTYPES[t]))
    assert to_numpy(int(t)) == dt and from_numpy(dt) == t and from_numpy(np.zeros(2, dt).dtype) == t


def test_bfloat16_checks() -> None:
    assert bfloat16() == np.dtype(ml_dtypes.bfloat16) and is_bfloat16(np.dtype(ml_dtypes.bfloat16))
    for dt in (np.float32, np.float16, np.int8, np.bool_, object, [("a", np.int32)], np.dtype("V4")):
        assert not is_bfloat16(np.dtype(dt))
    with pytest.raises(TypeError):
        from_numpy(np.dtype("V4"))
    with pytest.raises(TypeError):
        to_numpy(999)


def test_a_fresh_process_imports_ml_dtypes_only_when_asked() -> None:
    code = (
        "import json, sys, numpy as np\n"
        "from pycann.dtypes import DType, from_numpy, is_bfloat16, to_numpy\n"
        "r = {'f32': [str(to_numpy(1)), int(from_numpy(np.float32)), is_bfloat16(np.dtype(np.float16))]}\n"
        "r['before'] = 'ml_dtypes' in sys.modules\n"
        "r['bf16'] = str(to_numpy(int(DType.BFLOAT16)))\n"
        "r['after'] = 'ml_dtypes' in sys.modules\n"
        "print(json.dumps(r))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout)
    assert r == {"f32": ["float32", 1, False], "before": False, "bf16": "bfloat16", "after": True}, out.stderr


@pytest.mark.parametrize("t", sorted(_ML_DTYPES, key=int))
def test_from_numpy_of_an_ml_dtypes_type_first_in_a_fresh_process(t: DType) -> None:
    # from_numpy is the first pycann.dtypes call: float8_e5m2 is of kind "f", not "V" (ml_dtypes 0.5+)
    code = (
        "import ml_dtypes, numpy as np\n"
        "from pycann.dtypes import from_numpy\n"
        f"print(int(from_numpy(np.zeros(2, ml_dtypes.{_ML_DTYPES[t]}).dtype)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == [str(int(t))], out.stderr


def test_a_float8_e5m2_initializer_compiles_in_a_fresh_process(tmp_path: Path) -> None:
    # the user-visible failure: ONNX's numpy_helper gives an ml_dtypes float8_e5m2 array and
    # shape inference's from_numpy rejected it when no other ml_dtypes type was asked for first
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.array([1.0, 2.0, -0.5], ml_dtypes.float8_e5m2), "w")
    g = helper.make_graph([helper.make_node("Cast", ["w"], ["wf"], to=TensorProto.FLOAT),
                           helper.make_node("Add", ["x", "wf"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    onnx.save(m, tmp_path / "m.onnx")
    code = (
        "import numpy as np, pycann\n"
        f"pycann.compile_model({str(tmp_path / 'm.onnx')!r}).save({str(tmp_path / 'm.om')!r})\n"
        f"s = pycann.InferSession(0, {str(tmp_path / 'm.om')!r})\n"
        "print(s.infer([np.ones(3, np.float32)])[0].tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split("\n")[-2] == "[2.0, 3.0, 0.5]", out.stderr[-2000:]
