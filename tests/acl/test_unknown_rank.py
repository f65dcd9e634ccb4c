"""An input or output whose rank the model does not know is reported with CANN's unknown-rank dims
``[-2]`` (GE's UNKNOWN_RANK), not ``[]``: ``[]`` is a scalar, and get_output_size_by_index said 4 bytes
for any output (a pyACL app sizing its buffers by it got a 4-byte buffer)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import pycann
import pycann.acl as acl
from pycann.acl.session import InferSession
from pycann.tools import bench
from tests.acl.helpers import dataset_of, from_device, to_device


def _relu_of_unknown_rank(tmp_path: Path) -> Path:
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "rankless",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    p = tmp_path / "rankless.om"
    pycann.compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).save(p)
    return p


def test_unknown_rank_dims_and_sizes(acl_ready: int, tmp_path: Path) -> None:
    om = _relu_of_unknown_rank(tmp_path)
    mid, ret = acl.mdl.load_from_file(str(om))
    assert ret == 0
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, mid) == 0
    assert acl.mdl.get_input_dims(desc, 0)[0] == {"name": "x", "dimCount": 1, "dims": [-2]}
    assert acl.mdl.get_output_dims(desc, 0)[0] == {"name": "y", "dimCount": 1, "dims": [-2]}
    assert acl.mdl.get_input_size_by_index(desc, 0) == 0 and acl.mdl.get_output_size_by_index(desc, 0) == 0
    # the documented flow: the shape by set_dataset_tensor_desc, the result's dims after execute
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    xin, yout = to_device(x), to_device(np.zeros(6, np.float32))
    ds, _ = dataset_of([(xin, x.nbytes)])
    td = acl.create_tensor_desc(0, [2, 3], 2)
    assert acl.mdl.set_dataset_tensor_desc(ds, td, 0)[1] == 0
    out, _ = dataset_of([(yout, 24)])
    assert acl.mdl.execute(mid, ds, out) == 0, acl.get_recent_err_msg()
    assert acl.mdl.get_cur_output_dims(desc, 0)[0]["dims"] == [2, 3]
    np.testing.assert_array_equal(from_device(yout, (2, 3)), np.maximum(x, 0))
    for p in (xin, yout):
        assert acl.rt.free(p) == 0
    assert acl.mdl.unload(mid) == 0


def test_unknown_rank_in_infersession_and_bench(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    om = _relu_of_unknown_rank(tmp_path)
    s = InferSession(0, om)
    (i,), (o,) = s.get_inputs(), s.get_outputs()
    assert (i.shape, i.size, o.shape, o.size) == ([-2], 0, [-2], 0)
    x = np.array([[[-1.0], [2.0]]], np.float32)
    np.testing.assert_array_equal(s.infer([x], mode="dymshape")[0], np.maximum(x, 0))
    assert bench.main(["--model", str(om), "--loop", "1"]) == 1
    assert "its rank is unknown: give every dim" in "".join(capsys.readouterr())
