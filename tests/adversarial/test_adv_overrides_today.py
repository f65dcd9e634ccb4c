"""Adversarial checks of overridable initializers (ONNX IR >= 4 graph inputs with a default):
several variants compiled from one model's ``override_source``, in turn and from threads, against
ONNX Runtime."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import pycann
from pycann.ge.compile.options import CompileOptions
from pycann.ge.ir.graph import Graph
from pycann.ge.run.model import LoadedModel

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(7)
VALUES = {"W": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "b": np.arange(4, dtype=np.float32),
          "s": np.array([2, .5, 1, 3], np.float32), "o": np.array([.1, .2, 0, -1], np.float32),
          "m": np.array([0, 1, 0, .5], np.float32), "v": np.array([1, 4, 2, 1], np.float32)}
X = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
FEEDS = [{"x": X, "s": -VALUES["s"]}, {"x": X, "b": VALUES["b"] * 3}, {"x": X, "W": VALUES["W"] * 0.5},
         {"x": X, "m": VALUES["m"] + 1, "v": VALUES["v"] * 2}, {"x": X}]


def vi(name: str, shape: Sequence[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def conv_bn() -> onnx.ModelProto:
    """Conv + BatchNormalization with every parameter an overridable initializer (as PyTorch's
    ``keep_initializers_as_inputs=True`` exports): the compiler folds the BN into the Conv."""
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["y"])]
    inputs = [vi("x", [1, 3, 6, 6])] + [vi(k, list(v.shape)) for k, v in VALUES.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in VALUES.items()]
    g = helper.make_graph(nodes, "g", inputs, [vi("y", [1, 4, 6, 6])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def structure(g: Graph) -> list[tuple[str, list[str], list[str]]]:
    return [(n.op_type, list(n.inputs), list(n.outputs)) for n in g.nodes]


@pytest.mark.parametrize("precision_mode", ["", "force_fp16"])
def test_variants_in_turn_leave_the_source_unchanged(precision_mode: str) -> None:
    """Each feed compiles its variant from the one ``override_source``; the passes (the precision
    pass's Casts among them) must not rewrite that source, or the next variant is compiled from a
    broken graph ('input used before it is defined')."""
    m = conv_bn()
    cm = pycann.compile_model(m, CompileOptions(precision_mode=precision_mode))
    assert cm.graph.override_source is not None
    before = structure(cm.graph.override_source)
    lm = LoadedModel(cm.graph, cm.manifest)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    tol = 2e-2 if precision_mode else 1e-5
    for feeds in FEEDS:
        np.testing.assert_allclose(lm.run_dict(feeds)[0], sess.run(None, feeds)[0], rtol=tol, atol=tol)
    assert structure(cm.graph.override_source) == before


def test_variants_compiled_from_threads() -> None:
    """Threads feeding different initializers of a fresh model compile their variants at once."""
    m = conv_bn()
    cm = pycann.compile_model(m, CompileOptions(precision_mode="force_fp16"))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    gold = [sess.run(None, f)[0] for f in FEEDS]
    lm = LoadedModel(cm.graph, cm.manifest)
    errors: list[str] = []
    barrier = threading.Barrier(len(FEEDS))

    def call(i: int) -> None:
        barrier.wait()
        try:
            np.testing.assert_allclose(lm.run_dict(FEEDS[i])[0], gold[i], rtol=2e-2, atol=2e-2)
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(f"feed {sorted(FEEDS[i])}: {e!r}"[:300])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(FEEDS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_variant_keeps_the_plan_cache_config() -> None:
    """A variant runs under the bounds and policy its model was loaded with (``PlanPolicy.GENERIC``
    never specialises; the variant was loaded with the process default instead)."""
    from pycann.config import PlanCacheConfig, PlanPolicy

    m = conv_bn()
    lm = LoadedModel.from_compiled(pycann.compile_model(m),
                                   plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC, max_plans=3))
    lm.run_dict({"x": X, "s": -VALUES["s"]})
    config = lm._overriding(["s"]).executor._cache.config
    assert (config.policy, config.max_plans) == (PlanPolicy.GENERIC, 3)


def test_a_name_with_a_comma_can_be_fed() -> None:
    """ONNX names may hold commas: the importer's record of the overridable names must keep them."""
    g = helper.make_graph([helper.make_node("Add", ["x", "a,b"], ["y"])], "g", [vi("x", [2]), vi("a,b", [2])],
                          [vi("y", [2])], [numpy_helper.from_array(np.ones(2, np.float32), "a,b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = pycann.compile_model(m)
    lm = LoadedModel(cm.graph, cm.manifest)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in ({"x": np.zeros(2, np.float32)}, {"x": np.zeros(2, np.float32), "a,b": np.full(2, 5, np.float32)}):
        np.testing.assert_array_equal(lm.run_dict(feeds)[0], sess.run(None, feeds)[0])


def test_an_old_comma_separated_record_still_reads() -> None:
    """An .om written before the JSON record lists the names comma-separated."""
    from pycann.ge.ir import overrides

    g = Graph(metadata={overrides.METADATA_KEY: "W,b"})
    assert overrides.overridable(g) == {"W", "b"}


def test_a_declared_dynamic_dim_takes_other_sizes() -> None:
    """ONNX Runtime checks a fed initializer against its graph input's declared shape: a weight
    declared ``["O", 3, 3, 3]`` takes 6 output channels, an index declared ``["n"]`` three indices
    (pycann held them to the default's shape); a fixed dim is still enforced, naming the input. The
    default run keeps the folded graph; the .om round trip keeps the declared shapes."""
    from pycann.errors import InputError
    from pycann.ge.om import dumps_om, loads_om

    w = VALUES["W"]
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Gather", ["c", "idx"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "g", [vi("x", [1, 3, 6, 6]), vi("W", ["O", 3, 3, 3]),
                                       helper.make_tensor_value_info("idx", onnx.TensorProto.INT64, ["n"])],
                          [vi("y", None)], [numpy_helper.from_array(w, "W"),
                                            numpy_helper.from_array(np.array([0, 3], np.int64), "idx")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    cm = pycann.compile_model(m)
    om = loads_om(dumps_om(cm.graph, cm.manifest))
    lm = LoadedModel(om.graph, om.manifest)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    w6 = RNG.standard_normal((6, 3, 3, 3)).astype(np.float32)
    for feeds in ({"x": X}, {"x": X, "W": w6}, {"x": X, "idx": np.array([1, 2, 3], np.int64)},
                  {"x": X, "W": w6, "idx": np.array([5], np.int64)}, {"x": X}):
        np.testing.assert_allclose(lm.run_dict(feeds)[0], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match=r"input 'W'.*dim 2 is 1"):
        lm.run_dict({"x": X, "W": w6[:, :, :1, :1]})


def test_static_declared_shapes_record_nothing() -> None:
    """Declared shapes equal to the defaults' (PyTorch's export) record nothing: no source kept for
    a Conv + Relu (its weight stays verbatim), so the .om does not grow."""
    g = helper.make_graph([helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Relu", ["c"], ["y"])], "g",
                          [vi("x", [1, 3, 6, 6]), vi("W", [4, 3, 3, 3])], [vi("y", None)],
                          [numpy_helper.from_array(VALUES["W"], "W")])
    cm = pycann.compile_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert cm.graph.override_source is None
    assert "overridable_initializer_shapes" not in cm.graph.metadata


def _ir8(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
         inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _against_ort(m: onnx.ModelProto, feeds_list: list[dict[str, np.ndarray]]) -> None:
    cm = pycann.compile_model(m)
    lm = LoadedModel(cm.graph, cm.manifest)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in feeds_list:
        for got, want in zip(lm.run_dict(feeds), sess.run(None, feeds)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_default_that_shape_inference_read() -> None:
    """The Reshape target stays in the compiled graph as itself, but ``Shape`` of the Reshape's
    result folded to the default's dims: a fed target must not give the default's shape."""
    i64 = onnx.TensorProto.INT64
    nodes = [helper.make_node("Reshape", ["x", "shp"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Relu", ["r"], ["y"])]
    m = _ir8(nodes, [vi("x", [2, 3, 4]), helper.make_tensor_value_info("shp", i64, [2])],
             [vi("y", None), helper.make_tensor_value_info("s", i64, None)], {"shp": np.array([6, 4], np.int64)})
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    _against_ort(m, [{"x": x}, {"x": x, "shp": np.array([4, 6], np.int64)}, {"x": x}])


def test_a_default_read_by_a_folded_and_a_kept_node() -> None:
    """``k`` is read by ``Add(x, k)`` (kept) and by ``Mul(k, c)`` (folded into a constant with the
    default's value): still read, but feeding it must change both."""
    nodes = [helper.make_node("Mul", ["k", "c"], ["k2"]), helper.make_node("Add", ["x", "k"], ["a"]),
             helper.make_node("Add", ["a", "k2"], ["y"])]
    m = _ir8(nodes, [vi("x", [2, 3]), vi("k", [3])], [vi("y", None)],
             {"k": np.array([1, 2, 3], np.float32), "c": np.full(3, 2, np.float32)})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    _against_ort(m, [{"x": x}, {"x": x, "k": np.array([7, 8, 9], np.float32)}, {"x": x}])
