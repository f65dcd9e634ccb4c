"""Executor: arena placement, aliasing through view ops, outputs never alias the arena,
concurrent runs, kernel errors naming the node."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.errors import KernelError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.specialize import specialize
from pycann.ge.planning.memory import plan_memory
from pycann.ge.run.executor import ARENA, Plan, arena_candidates
from pycann.ge.run.model import LoadedModel
from tests.ops.oracle import run_ort


def _chain_model():
    # a = x + 1 ; r = Reshape(a) (a view of a's arena block) ; b = x * 2 ; c = r + b ; y = Relu(c)
    shape = numpy_helper.from_array(np.array([4, 8], np.int64), "shape")
    one = numpy_helper.from_array(np.ones((8, 4), np.float32), "one")
    two = numpy_helper.from_array(np.full((8, 4), 2, np.float32), "two")
    nodes = [
        helper.make_node("Add", ["x", "one"], ["a"]),
        helper.make_node("Reshape", ["a", "shape"], ["r"]),
        helper.make_node("Mul", ["x", "two"], ["b"]),
        helper.make_node("Reshape", ["b", "shape"], ["b2"]),
        helper.make_node("Add", ["r", "b2"], ["c"]),
        helper.make_node("Relu", ["c"], ["y"]),
        helper.make_node("Reshape", ["c", "shape"], ["y2"]),
    ]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
                           helper.make_tensor_value_info("y2", TensorProto.FLOAT, [4, 8])], [shape, one, two])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_arena_used_and_aliases_respected():
    m = _chain_model()
    cm = compile_model(m)
    sg = specialize(cm.graph, [(8, 4)])
    cand = arena_candidates(sg)
    assert {"a", "b", "c"} <= cand
    assert "y" not in cand  # a graph output is allocated by its producer: no copy out of the arena per run
    mem = plan_memory(sg, only=cand)
    plan = Plan(sg, memory=mem)
    assert sum(1 for s in plan.steps if s.kind is ARENA) >= 3
    # 'a' is read through its alias 'r' at the step that makes 'c': it must not share memory with 'b'
    oa, sa = mem.offsets["a"]
    ob, sb = mem.offsets["b"]
    assert oa + sa <= ob or ob + sb <= oa
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    want = run_ort(m, {"x": x})
    got = plan.run([x])
    for g_, w_ in zip(got, want):
        np.testing.assert_allclose(g_, w_, rtol=1e-6)


def test_outputs_do_not_alias_the_arena_between_runs():
    lm = LoadedModel.from_compiled(compile_model(_chain_model()))
    x1 = np.ones((8, 4), np.float32)
    y_first, y2_first = lm.run([x1])
    keep = y2_first.copy()
    y_second, _ = lm.run([np.full((8, 4), -5, np.float32)])
    np.testing.assert_array_equal(y2_first, keep)
    assert not np.may_share_memory(y_first, y_second)


def test_concurrent_runs_give_correct_results():
    m = _chain_model()
    lm = LoadedModel.from_compiled(compile_model(m))
    errors: list[str] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(50):
            x = rng.standard_normal((8, 4)).astype(np.float32)
            want = np.maximum((x + 1).reshape(4, 8) + (x * 2).reshape(4, 8), 0)
            got = lm.run([x])[0]
            if not np.allclose(got, want, rtol=1e-6):
                errors.append(f"thread {seed} got wrong result")

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_kernel_failure_names_node_op_and_inputs():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"]),
                                       helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b"])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    lm = LoadedModel.from_compiled(compile_model(m))
    with pytest.raises(KernelError, match=r"bad_reshape \(Reshape, opset 17\).*x: float32\[6\]"):
        lm.run([np.zeros(6, np.float32), np.array([4, 4], np.int64)])


def test_plan_with_onednn_prepared_kernel_holds_blas_to_one_thread():
    """A plan whose only oneDNN work is a prepared kernel (LayerNorm) still counts as an OpenMP
    plan: OpenBLAS's pool and oneDNN's spinning one must not fight over the cores."""
    from pycann.kernels import providers

    if not providers.available("onednn"):
        pytest.skip("onednn-cpu-gomp not installed")
    scale = numpy_helper.from_array(np.ones(384, np.float32), "scale")
    node = helper.make_node("LayerNormalization", ["x", "scale"], ["y"], axis=-1)
    g = helper.make_graph([node], "ln", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 128, 384])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 128, 384])], [scale])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    sg = specialize(compile_model(m).graph, [(4, 128, 384)])
    plan = Plan(sg, memory=plan_memory(sg, only=arena_candidates(sg)))
    assert any(s.openmp for s in plan.steps)
    assert plan.torch_pool
    x = np.random.default_rng(1).standard_normal((4, 128, 384)).astype(np.float32)
    np.testing.assert_allclose(plan.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_outputs_never_alias_feeds_constants_or_each_other():
    """As ONNX Runtime: a caller may modify any output without changing its inputs, a later
    run's results, or another output (Identity of an input, a folded Shape, an output twice)."""
    nodes = [helper.make_node("Identity", ["x"], ["same"]), helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Relu", ["x"], ["r"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("same", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 3]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lm = LoadedModel.from_compiled(compile_model(m))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    same, s, r1, r2 = lm.run([x])
    assert not np.may_share_memory(same, x) and not np.may_share_memory(r1, r2)
    s[0] = 999
    same[...] = -1
    r1[...] = -7
    assert lm.run([x])[1].tolist() == [2, 3]
    np.testing.assert_array_equal(x, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(r2, np.maximum(x, 0))


def test_static_model_checks_feeds_fast_and_still_rejects_bad_ones():
    """A static model takes matching arrays through a one-comparison fast path; anything else goes
    through the full checks and their messages."""
    from pycann.errors import InputError
    from pycann.ge.compile.options import CompileOptions

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lm = LoadedModel.from_compiled(compile_model(m, CompileOptions(input_shape={"x": [2, 3]})))
    assert lm._static_feeds == [(np.dtype(np.float32), (2, 3))]
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(lm.run([x])[0], np.maximum(x, 0))
    with pytest.raises(InputError, match=r"expected shape \[2,3\], received \[3, 3\]"):
        lm.run([np.zeros((3, 3), np.float32)])
    with pytest.raises(InputError, match="expected dtype float32, received float64"):
        lm.run([x.astype(np.float64)])
    with pytest.raises(InputError, match=r"convert with np\.asarray\(x, dtype=np\.float32\)"):
        lm.run([x.tolist()])  # a list has no .astype: the hint names the call that works for it
    with pytest.raises(InputError, match=r"the model has 1 input \(x\) but 2 were given"):
        lm.run([x, x])
    np.testing.assert_array_equal(lm.run([x[:, [0, 1, 2]]])[0], np.maximum(x, 0))  # a copy: a new array, same signature


def test_run_takes_a_dict_by_name_and_a_bare_array():
    """LoadedModel.run iterated a dict (feeding its keys: "expected dtype float32, received <U1")
    and a bare array (feeding its rows: "received [3] (rank 1 ...)"); InferSession.infer takes both."""
    from pycann.errors import InputError

    one = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    two = helper.make_graph([helper.make_node("Sub", ["x", "z"], ["y"])], "g",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                             helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    lms = []
    for g in (one, two):
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        lms.append(LoadedModel.from_compiled(compile_model(m)))
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(lms[0].run({"x": x})[0], [[0, 2, 0], [4, 0, 6]])
    np.testing.assert_array_equal(lms[0].run(x)[0], [[0, 2, 0], [4, 0, 6]])
    np.testing.assert_array_equal(lms[1].run({"z": x, "x": 2 * x})[0], x)
    with pytest.raises(InputError, match=r"unknown \['w'\], missing \['z'\]"):
        lms[1].run({"x": x, "w": x})
    with pytest.raises(InputError, match=r"a single array was given, but the model has 2 inputs \(x, z\)"):
        lms[1].run(np.stack([x, x]))
    # None failed with a TypeError ("object of type 'NoneType' has no len()"), a str fed its characters
    for bad in (None, "xz", b"xz", 3.0):
        with pytest.raises(InputError, match=r"feeds must be a list of arrays in input order \(x, z\) or a dict by name, "
                                             f"not {type(bad).__name__}"):
            lms[1].run(bad)  # type: ignore[arg-type]
    np.testing.assert_array_equal(lms[1].run((x, 2 * x))[0], -x)  # (a tuple is a list of feeds)
