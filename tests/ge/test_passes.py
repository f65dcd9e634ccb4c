"""GE passes: before/after structure and numeric equivalence against ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.errors import ModelError, ShapeError, UnsupportedOpError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.importers.onnx import import_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import constant_folding, dead_code, fold_conv_bn, infer_shapes
from pycann.ge.compile.passes.base import PassContext
from pycann.ge.compile.specialize import specialize
from pycann.ge.ir import verify
from pycann.ge.planning.memory import lifetimes, plan_memory
from pycann.ge.run.model import LoadedModel
from tests.ops.oracle import run_ort


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, dt=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dt, shape)


def conv_bn_model(rng):
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    gamma, beta = rng.random(8).astype(np.float32) + 0.5, rng.standard_normal(8).astype(np.float32)
    mean, var = rng.standard_normal(8).astype(np.float32), rng.random(8).astype(np.float32) + 0.1
    inits = [numpy_helper.from_array(a, n) for a, n in
             [(w, "W"), (b, "B"), (gamma, "g"), (beta, "be"), (mean, "m"), (var, "v")]]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"], epsilon=1e-3),
    ]
    return _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 8, 8, 8])], inits)


def test_conv_bn_fold_structure_and_numerics():
    rng = np.random.default_rng(0)
    m = conv_bn_model(rng)
    g = import_model(m)
    assert [n.op_type for n in g.nodes] == ["Conv", "BatchNormalization"]
    n, missed = fold_conv_bn.fold(g)
    assert n == 1 and not missed
    assert [n.op_type for n in g.nodes] == ["Conv"]
    verify(g)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_conv_bn_not_folded_when_conv_output_is_shared():
    rng = np.random.default_rng(1)
    m = conv_bn_model(rng)
    m.graph.node.append(helper.make_node("Relu", ["c"], ["r"]))
    m.graph.output.append(_vi("r", [1, 8, 8, 8]))
    g = import_model(m)
    n, missed = fold_conv_bn.fold(g)
    assert n == 0 and "other consumers" in missed[0]


def test_constant_folding_and_dce():
    a = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "a")
    shape = numpy_helper.from_array(np.array([3, 2], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("Reshape", ["a", "shape"], ["ar"]),
        helper.make_node("Transpose", ["ar"], ["at"]),
        helper.make_node("Add", ["x", "at"], ["y"]),
        helper.make_node("Neg", ["x"], ["dead"]),
    ]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], [a, shape])
    g = import_model(m)
    infer_shapes.run(g, PassContext())
    res = constant_folding.run(g, PassContext())
    assert res.changed and [n.op_type for n in g.nodes] == ["Add", "Neg"]
    dead_code.run(g, PassContext())
    assert [n.op_type for n in g.nodes] == ["Add"]
    assert set(g.initializers) == {"at"}
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(LoadedModel(g).run([x])[0], run_ort(m, {"x": x})[0])


def test_shape_subgraph_folds_after_specialisation():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Reshape", ["x", "s"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", ["N", 4])], [_vi("y", ["N", 4])])
    cm = compile_model(m)
    assert [n.op_type for n in cm.graph.nodes] == ["Shape", "Reshape"]
    sg = specialize(cm.graph, [(3, 4)])
    assert [n.op_type for n in sg.nodes] == ["Reshape"]
    assert [n.op_type for n in cm.graph.nodes] == ["Shape", "Reshape"], "specialise must not mutate"


def test_chained_shape_subgraphs_fold_at_compile_time_with_static_input_shape():
    """Two levels of Shape -> Gather -> Concat -> Reshape (as exported transformers have per
    layer): folding the first makes the second's input static, so it folds too."""
    idx = numpy_helper.from_array(np.array([0], np.int64), "i0")
    tail = numpy_helper.from_array(np.array([2, 3], np.int64), "tail")
    flat = numpy_helper.from_array(np.array([-1], np.int64), "flat")
    nodes = [
        helper.make_node("Shape", ["x"], ["s1"]),
        helper.make_node("Gather", ["s1", "i0"], ["n1"]),
        helper.make_node("Concat", ["n1", "tail"], ["shp1"], axis=0),
        helper.make_node("Reshape", ["x", "shp1"], ["y"]),  # (N, 2, 3)
        helper.make_node("Shape", ["y"], ["s2"]),
        helper.make_node("Gather", ["s2", "i0"], ["n2"]),
        helper.make_node("Concat", ["n2", "flat"], ["shp2"], axis=0),
        helper.make_node("Reshape", ["y", "shp2"], ["z"]),  # (N, 6)
        helper.make_node("Relu", ["z"], ["out"]),
    ]
    m = _model(nodes, [_vi("x", ["N", 6])], [_vi("out", ["N", 6])], [idx, tail, flat])
    cm = compile_model(m, CompileOptions(input_shape={"x": [4, 6]}))
    assert "Shape" not in [n.op_type for n in cm.graph.nodes]
    assert all(cm.graph.descs[o].is_static for n in cm.graph.nodes for o in n.outputs)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(LoadedModel.from_compiled(cm).run([x])[0], run_ort(m, {"x": x})[0])
    dyn = compile_model(m)  # without --input_shape the queries stay for run-time specialisation
    assert "Shape" in [n.op_type for n in dyn.graph.nodes]


def test_memory_plan_reuses_dead_buffers():
    nodes = [helper.make_node("Neg", [f"t{i}"], [f"t{i + 1}"]) for i in range(4)]
    m = _model(nodes, [_vi("t0", [256])], [_vi("t4", [256])])
    cm = compile_model(m, CompileOptions(disabled_passes=["ElementwiseChainFusion"]))
    sg = specialize(cm.graph, [(256,)])
    lt = lifetimes(sg)
    assert lt["t1"] == (0, 1)
    plan = plan_memory(sg)
    assert plan.total_bytes == 3 * 1024
    assert plan.peak_bytes == 2 * 1024  # t1 and t3 can share
    for a, (oa, sa) in plan.offsets.items():
        for b, (ob, sb) in plan.offsets.items():
            if a < b and not (lt[a][1] < lt[b][0] or lt[b][1] < lt[a][0]):
                assert oa + sa <= ob or ob + sb <= oa, f"{a} and {b} overlap"


def test_unsupported_op_names_node_and_opset():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="r0")], [_vi("x", [2])], [_vi("y", [2])])
    m.graph.node[0].op_type = "NoSuchOp"
    with pytest.raises(UnsupportedOpError, match=r"r0.*NoSuchOp.*opset 17"):
        compile_model(m)


def test_checker_failure_is_model_error():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    m.graph.node[0].input[0] = ""
    m.graph.node[0].ClearField("input")
    with pytest.raises(ModelError, match="onnx.checker"):
        compile_model(m.SerializeToString())


def test_shape_mismatch_is_reported_at_compile_time():
    m = _model([helper.make_node("Add", ["x", "z"], ["y"], name="add0")],
               [_vi("x", [2, 3]), _vi("z", [4])], [_vi("y", [2, 3])])
    with pytest.raises(ShapeError, match="add0"):
        compile_model(m)


def test_input_shape_option_fixes_dims():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["N", 3])], [_vi("y", ["N", 3])])
    cm = compile_model(m, CompileOptions(input_shape={"x": [5, 3]}))
    assert cm.graph.descs["y"].shape == (5, 3)


def test_legacy_opset_forms_are_upgraded():
    # Squeeze-11 (axes attribute) and Clip-6 (min/max attributes)
    nodes = [helper.make_node("Squeeze", ["x"], ["s"], axes=[0]), helper.make_node("Clip", ["s"], ["y"], min=-1.0, max=1.0)]
    m = _model(nodes, [_vi("x", [1, 4])], [_vi("y", [4])], opset=6)
    m.opset_import[0].version = 6
    x = np.array([[-3, -0.5, 0.5, 3]], np.float32)
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    np.testing.assert_array_equal(got, np.clip(x[0], -1, 1))
    assert isinstance(onnx.TensorProto, type)


def test_identities_and_same_type_casts_are_removed_even_before_graph_outputs():
    """Identity and Cast-to-its-own-type are copies: readers read the input; an output made by
    one is written by the input's producer directly (unless the input is itself a graph
    input or output, or already took another output's name)."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Cast", ["r"], ["rc"], to=TensorProto.FLOAT),       # same type: a copy
        helper.make_node("Neg", ["rc"], ["n"]),
        helper.make_node("Identity", ["n"], ["out1"]),                      # producer renamed
        helper.make_node("Identity", ["n"], ["out2"]),                      # n already taken: kept
        helper.make_node("Identity", ["x"], ["out3"]),                      # a graph input: kept
        helper.make_node("Cast", ["r"], ["out4"], to=TensorProto.DOUBLE),   # a real cast: kept
    ]
    m = _model(nodes, [_vi("x", [2, 3])], [_vi("out1", [2, 3]), _vi("out2", [2, 3]), _vi("out3", [2, 3]),
                                         _vi("out4", [2, 3], TensorProto.DOUBLE)])
    cm = compile_model(m)
    ops = [n.op_type for n in cm.graph.nodes]
    assert ops.count("Identity") == 2 and ops.count("Cast") == 1 and "Neg" in ops
    assert any(n.op_type == "Neg" and n.outputs == ["out1"] for n in cm.graph.nodes)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    lm = LoadedModel.from_compiled(cm)
    for got, want in zip(lm.run([x]), run_ort(m, {"x": x})):
        np.testing.assert_array_equal(got, want)
    sg = specialize(cm.graph, [(2, 3)])
    assert [n.op_type for n in sg.nodes].count("Identity") == 2
