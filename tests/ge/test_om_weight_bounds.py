"""atc records the NaN guard's conv weight bounds in the .om (manifest ``weight_bounds``) and a load hands
them to the guard, so loading reads no weight for it. The values equal the guard's own computation,
and NaN/inf still come out as ONNX Runtime gives them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model, weight_bounds
from pycann.ge.om import load_om
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import nan_guard
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")
RNG = np.random.default_rng(11)


def _model() -> object:
    """Conv + Relu, ConvTranspose + Relu (each a fused activation the guard checks), then Conv."""
    w1 = RNG.standard_normal((8, 4, 3, 3)).astype(np.float32)
    wt = RNG.standard_normal((8, 6, 2, 2)).astype(np.float32)
    w3 = RNG.standard_normal((4, 6, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (wt, "wt"), (w3, "w3"))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("ConvTranspose", ["b", "wt"], ["c"], strides=[2, 2]), helper.make_node("Relu", ["c"], ["d"]),
             helper.make_node("Conv", ["d", "w3"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 16, 16])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_recorded_bounds_are_the_guards_own() -> None:
    cm = compile_model(_model())
    table = cm.manifest["weight_bounds"]
    assert sorted((name, t) for name, t, _ in table) == [("w1", False), ("w3", False), ("wt", True)]
    for name, transpose, part in table:
        w = cm.graph.initializers[name]
        assert part == nan_guard._weight_bound(w, None, transpose)
    assert weight_bounds(cm.graph) == table


def test_loaded_om_seeds_the_guard_and_keeps_ort_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _model()
    path = tmp_path / "m.om"
    compile_model(m).save(path)
    computed: list[int] = []
    real = nan_guard._weight_bound
    monkeypatch.setattr(nan_guard, "_weight_bound", lambda *a, **k: (computed.append(1), real(*a, **k))[1])
    lm = LoadedModel.from_file(path)
    assert computed == []  # every bound came from the .om
    for name, transpose in (("w1", False), ("wt", True), ("w3", False)):
        w = lm.graph.initializers[name]
        assert nan_guard._w_bounds[nan_guard._key(w, transpose)] == real(w, None, transpose)
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    bad = x.copy()
    bad[0, 1, 2, 3], bad[0, 2, 5, 5] = np.nan, np.inf
    for feed in (x, bad):
        with np.errstate(invalid="ignore", over="ignore"):
            got, want = lm.run([feed])[0], run_ort(m, {"x": feed})[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert np.array_equal(np.isnan(got), np.isnan(want))


def test_malformed_table_entries_are_ignored(tmp_path: Path) -> None:
    m = _model()
    cm = compile_model(m)
    cm.manifest["weight_bounds"] = [["w1", False, "big"], ["nope", False, 1.0], "x", ["w3", 1, 2.0], None]
    cm.save(tmp_path / "m.om")
    om = load_om(tmp_path / "m.om")
    lm = LoadedModel(om.graph, om.manifest)
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)
    for name in ("w1", "w3"):  # none of the bad entries was taken: absent, or the guard's own value
        w = lm.graph.initializers[name]
        got = nan_guard._w_bounds.get(nan_guard._key(w, False))
        assert got is None or got == nan_guard._weight_bound(w, None, False)
