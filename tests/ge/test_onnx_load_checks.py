"""Loading an .onnx file or a ModelProto: onnx.checker runs on the model's structure, its large weights left
out (``importers/onnx_check.py``: they are never serialised for it, so its copies of them and onnx.load's are
never alive together), the importer checks the weights' sizes itself, and the verdicts reach the user as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.errors import ModelError, UnsupportedOpError
from pycann.ge.compile.importers.onnx import load_onnx

ROOT = Path(__file__).resolve().parents[2]


def _matmul_model(n: int = 64) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((n, n), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_a_valid_file_loads_with_its_weights(tmp_path: Path) -> None:
    p = tmp_path / "m.onnx"
    onnx.save(_matmul_model(), p)
    g = load_onnx(p)
    assert np.array_equal(g.initializers["w"], np.ones((64, 64), np.float32))


def test_a_file_that_fails_the_checker_names_the_check(tmp_path: Path) -> None:
    m = _matmul_model()
    m.graph.node[0].input[1] = "missing"  # an edge from nowhere
    p = tmp_path / "bad.onnx"
    onnx.save(m, p)
    with pytest.raises(ModelError, match="fails onnx.checker"):
        load_onnx(p)
    with pytest.raises(ModelError, match="fails onnx.checker"):  # the same verdict for the ModelProto
        load_onnx(m)


def test_the_checker_sees_the_structure_without_the_weights() -> None:
    """``structure_of`` keeps every node and small constant and replaces a large initializer by an empty one
    of its name, type and rank; the checker still judges the edges (a node reading a name no one writes)."""
    from pycann.ge.compile.importers.onnx_check import structure_of

    m = _matmul_model(512)  # 1 MiB of weights
    small = numpy_helper.from_array(np.arange(4, dtype=np.int64), "small")
    m.graph.initializer.append(small)
    light = structure_of(m)
    assert light.ByteSize() < 2000 < m.ByteSize()
    w = next(t for t in light.graph.initializer if t.name == "w")
    assert (list(w.dims), w.data_type, w.raw_data) == ([0, 0], TensorProto.FLOAT, b"")
    assert next(t for t in light.graph.initializer if t.name == "small") == small
    assert list(light.graph.node) == list(m.graph.node) and light.opset_import == m.opset_import
    onnx.checker.check_model(light)
    m.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ModelError, match="fails onnx.checker"):
        load_onnx(m)


def test_weights_that_do_not_fill_their_dims_are_refused_by_the_importer() -> None:
    """The checker no longer sees a large weight's bytes: the importer names it (4 bytes for a 512 x 512 float)."""
    m = _matmul_model(512)
    m.graph.initializer[0].raw_data = b"\0" * 4
    with pytest.raises(ModelError, match=r"tensor 'w': raw_data holds 4 bytes, dims \[512, 512\] of FLOAT need 1048576"):
        load_onnx(m)


def test_an_unknown_op_in_a_file_names_the_node(tmp_path: Path) -> None:
    m = _matmul_model()
    m.graph.node[0].op_type = "NoSuchOp"
    p = tmp_path / "unknown.onnx"
    onnx.save(m, p)
    with pytest.raises(UnsupportedOpError, match="node mm: no parser is registered for op NoSuchOp"):
        load_onnx(p)


def test_a_corrupt_file_is_reported_as_unparsable(tmp_path: Path) -> None:
    p = tmp_path / "corrupt.onnx"
    p.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0fnot a model")
    with pytest.raises(ModelError, match="cannot parse"):
        load_onnx(p)


_PEAK = r"""
import sys
import numpy as np
from pycann.ge.compile.importers.onnx import load_onnx
def status(key):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(key)) * 1024
base = status("VmRSS:")
open("/proc/self/clear_refs", "w").write("5")  # the peak so far := the resident set now
g = load_onnx(sys.argv[1])
print((status("VmHWM:") - base) / g.initializers["w"].nbytes)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc peak reset")
def test_loading_a_file_holds_at_most_about_two_copies_of_its_weights(tmp_path: Path) -> None:
    """The checker given the ModelProto serialised it while it was alive (3 copies of 64 MB of weights:
    the proto, the bytes, the checker's parse); given the structure alone, the peak is ~2 (onnx.load's read
    and parse, then the proto and the arrays)."""
    p = tmp_path / "big.onnx"
    onnx.save(_matmul_model(4096), p)  # 64 MiB of float32 weights
    out = subprocess.run([sys.executable, "-c", _PEAK, str(p)], capture_output=True, text=True, cwd=ROOT,
                         timeout=300, check=True)
    assert float(out.stdout.strip()) < 2.5, out.stdout
