"""Overridable initializers (ONNX IR >= 4: a graph input with an initializer): the initializer is
the default, a feed overrides it — ONNX Runtime is the golden; a default folded away at compile
time is refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import pycann
from pycann.errors import InputError
from pycann.ge.om import dumps_om, loads_om
from pycann.ge.run.model import LoadedModel

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
W = RNG.standard_normal((2, 3, 3, 3)).astype(np.float32)
B = np.array([1.0, -2.0], np.float32)


def vi(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def conv_model(bn: bool = False) -> onnx.ModelProto:
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1])]
    inits = [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")]
    inputs = [vi("x", [1, 3, 5, 5]), vi("W", [2, 3, 3, 3]), vi("b", [2])]
    if bn:
        nodes.append(helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["y"]))
        for n, v in zip("somv", ([2.0, 0.5], [0.1, 0.2], [0.0, 1.0], [1.0, 4.0])):
            inits.append(numpy_helper.from_array(np.array(v, np.float32), n))
        inputs.append(vi("s", [2]))
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    g = helper.make_graph(nodes, "g", inputs, [vi("y", [1, 2, 5, 5])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def loaded(m: onnx.ModelProto) -> LoadedModel:
    cm = pycann.compile_model(m)
    om = loads_om(dumps_om(cm.graph, cm.manifest))
    return LoadedModel(om.graph, om.manifest)


def test_feed_overrides_the_default(tmp_path: Path) -> None:
    m = conv_model()
    lm, sess = loaded(m), ort.InferenceSession(m.SerializeToString())
    assert [i.name for i in lm.inputs] == [i.name for i in sess.get_inputs()] == ["x"]
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    for feeds in ({"x": x}, {"x": x, "W": -W}, {"x": x, "b": B * 3}, {"x": x, "W": W * 2, "b": -B}):
        np.testing.assert_allclose(lm.run_dict(feeds)[0], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-6)
    pycann.compile_model(m).save(tmp_path / "m.om")  # the ais_bench facade, from a file
    sess2 = pycann.InferSession(0, str(tmp_path / "m.om"))
    np.testing.assert_allclose(sess2.infer({"x": x, "W": -W})[0], sess.run(None, {"x": x, "W": -W})[0],
                               rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match=r"input 'W'.*expected shape \[2,3,3,3\]"):
        lm.run_dict({"x": x, "W": W[:1]})


def test_folded_default_is_refused_by_name() -> None:
    lm = loaded(conv_model(bn=True))
    x = np.ones((1, 3, 5, 5), np.float32)
    lm.run_dict({"x": x})
    with pytest.raises(InputError, match=r"initializer 's' .* was folded into other constants"):
        lm.run_dict({"x": x, "s": np.ones(2, np.float32)})
    with pytest.raises(InputError, match=r"unknown \['q'\]"):
        lm.run_dict({"x": x, "q": x})
