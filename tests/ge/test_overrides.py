"""Overridable initializers (ONNX IR >= 4: a graph input with an initializer): the initializer is
the default, a feed overrides it — ONNX Runtime is the golden, also for a default the compiler
folded into other constants."""

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


def test_folded_default_can_be_fed(tmp_path: Path) -> None:
    """A BatchNormalization scale folded into the Conv (and the Conv weight itself, folded with it)
    can still be fed: the variant compiles from the source graph, as ONNX Runtime runs it; the
    default run keeps the folded graph."""
    m = conv_model(bn=True)
    for n in "omv":  # every BN parameter an overridable initializer, as keep_initializers_as_inputs
        m.graph.input.append(vi(n, [2]))
    cm = pycann.compile_model(m)
    assert "BatchNormalization" not in cm.graph.op_counts() and cm.graph.override_source is not None
    cm.save(tmp_path / "m.om")
    sess = ort.InferenceSession(m.SerializeToString())
    x = RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)
    s2, v2 = np.array([-1.0, 3.0], np.float32), np.array([0.5, 2.0], np.float32)
    for lm in (loaded(m), LoadedModel(cm.graph, cm.manifest), pycann.InferSession(0, str(tmp_path / "m.om"))):
        run = lm.infer if isinstance(lm, pycann.InferSession) else lm.run_dict
        for feeds in ({"x": x}, {"x": x, "s": s2}, {"x": x, "v": v2, "W": -W}, {"x": x, "s": s2, "b": B * 3}):
            np.testing.assert_allclose(run(feeds)[0], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    lm = loaded(m)
    lm.run_dict({"x": x})
    assert getattr(lm, "_variants", {}) == {}  # the default run compiles nothing
    lm.run_dict({"x": x, "s": s2})
    variant = lm._variants[("s",)]
    assert "s" in variant.graph.inputs and "weight_bounds" not in variant.manifest  # bounds were the folded weights'
    with pytest.raises(InputError, match=r"unknown \['q'\]"):
        lm.run_dict({"x": x, "q": x})


def test_verbatim_defaults_keep_no_source() -> None:
    """Without folding (Conv + Relu) the compiled graph keeps no source: a feed turns the constant
    into an input of the compiled graph."""
    assert pycann.compile_model(conv_model()).graph.override_source is None


def test_variants_per_fed_set_are_bounded_least_recently_used_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model keeps at most ``MAX_OVERRIDE_VARIANTS`` variants (one per set of fed initializers), the
    least recently used dropped first; a dropped set compiles again when fed, with the same values."""
    from pycann.ge.run import model as run_model

    monkeypatch.setattr(run_model, "MAX_OVERRIDE_VARIANTS", 2)
    names = ["a", "b", "c"]
    consts = {n: np.full((2, 3), i + 1, np.float32) for i, n in enumerate(names)}
    nodes = [helper.make_node("Add", ["x", "a"], ["t0"]), helper.make_node("Mul", ["t0", "b"], ["t1"]),
             helper.make_node("Sub", ["t1", "c"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 3])]
        + [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2, 3]) for n in names],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 3])],
        [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    lm = LoadedModel.from_compiled(pycann.compile_model(model))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    fed = {n: np.full((2, 3), 10 * (i + 1), np.float32) for i, n in enumerate(names)}
    for subset in (["a"], ["b"], ["a"], ["c"], ["b"]):
        feeds = {"x": x, **{n: fed[n] for n in subset}}
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_allclose(lm.run_dict(feeds)[0], want, rtol=1e-6)
        assert len(lm.__dict__["_variants"]) <= 2
    assert list(lm.__dict__["_variants"]) == [("c",), ("b",)]  # "a" least recently used: dropped


def test_a_mismatch_names_only_what_is_wrong() -> None:
    """A feed without the model's input: the message says `missing ['x']` alone (no `unknown []`), and a
    fed overridable initializer is not called unknown."""
    m = helper.make_model(
        helper.make_graph([helper.make_node("Mul", ["x", "s"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
                           helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
                          [numpy_helper.from_array(np.array([2, 3], np.float32), "s")]),
        opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lm = LoadedModel.from_compiled(pycann.compile_model(m))
    s = np.ones(2, np.float32)
    with pytest.raises(InputError) as e:
        lm.run_dict({})
    assert str(e.value) == "input names do not match the model: missing ['x']; the model's inputs are ['x']"
    with pytest.raises(InputError) as e:
        lm.run_dict({"s": s})
    assert "unknown" not in str(e.value) and "missing ['x']" in str(e.value)
    assert "initializers fed to override them: ['s']" in str(e.value)
    with pytest.raises(InputError, match=r"unknown \['q'\], missing \['x'\]"):
        lm.run_dict({"q": s, "s": s})
    np.testing.assert_array_equal(lm.run_dict({"x": s, "s": 2 * s})[0], [2, 2])
