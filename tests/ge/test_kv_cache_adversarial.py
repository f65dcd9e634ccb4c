"""Adversarial checks of the KV cache appended in place on the shape-generic plan (ge/run/kv_alias.py,
kernels/kv_cache.py) through the executor: every plan a new signature can run on appends in place
(the contention twin too), and the values stay ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.kernels.providers import openmp
from tests.ge.test_contention import Script, busy_neighbour  # noqa: F401 - the fixture
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.usefixtures("default_providers")

RNG = np.random.default_rng(11)
H, D = 3, 8


def _cache_model() -> object:
    """past [B, H, P, D], x [B, H, N, D] -> present = Concat(past, x @ W, axis 2), y = Sum(present @ W)."""
    w = numpy_helper.from_array(RNG.standard_normal((D, D)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["k"]),
             helper.make_node("Concat", ["past", "k"], ["present"], axis=2),
             helper.make_node("MatMul", ["present", "w"], ["pw"]),
             helper.make_node("ReduceSum", ["pw"], ["y"], keepdims=0)]
    g = helper.make_graph(nodes, "kv", [helper.make_tensor_value_info("past", TensorProto.FLOAT, ["B", H, "P", D]),
                                        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", H, "N", D])],
                          [helper.make_tensor_value_info("present", TensorProto.FLOAT, ["B", H, "T", D]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_the_contention_twin_of_the_generic_plan_appends_in_place_too(busy_neighbour: Script) -> None:  # noqa: F811
    """Beside a busy process a decode step runs the shape-generic plan's twin bound for fewer threads
    (ge/run/contention.py). That twin was planned from the graph as compiled, with Concat: every step
    copied the whole past again and the presents were writable C-order copies, unlike the full team's."""
    m = _cache_model()
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC,
                                                                               adaptive_threads=True))
    past = np.zeros((2, H, 0, D), np.float32)
    x = RNG.standard_normal((2, H, 3, D)).astype(np.float32)
    present, _ = lm.run([past, x])
    full = openmp.max_threads()
    if not full or full < 2:
        pytest.skip("one OpenMP thread here: nothing to reduce")
    assert lm.executor.wait_builds(timeout=120)
    assert [p.team for p in lm.executor._generic_teams.values()] == [1]
    for step in range(4):
        x = RNG.standard_normal((2, H, 1, D)).astype(np.float32)
        got, want = lm.run([present, x]), run_ort(m, {"past": present, "x": x})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"step {step}")
        assert np.shares_memory(got[0], present) and not got[0].flags.writeable, f"step {step}: copied"
        present = got[0]
    assert lm.plan_cache_stats().team_runs == 4


def _feature_model(axis: int) -> object:
    """Not a KV cache: y = Concat(x, Relu(x)) of an image batch (DenseNet-style), a dynamic batch."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["x", "r"], ["y"], axis=axis)]
    out = ["N", 6, 8, 8] if axis == 1 else ["M", 3, 8, 8]
    g = helper.make_graph(nodes, "feat", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("axis", [1, 0])
def test_a_concat_of_an_input_that_is_no_kv_cache_keeps_ort_outputs(axis: int) -> None:
    """``Concat(x, Relu(x))`` returned as an output is no KV cache: its input is also read by Relu
    (a past is read only through the Concat) and, on axis 1, its length on the axis is fixed (a past
    grows). Rewritten to CacheAppend, the first call of each batch size (the shape-generic plan, policy
    auto) returned a read-only, strided output holding a buffer of 3 + 3 + 64 channels (11.7x its
    size), the second call of that size (a specialised plan) a writable C-order array."""
    m = _feature_model(axis)
    lm = LoadedModel.from_compiled(compile_model(m))
    assert "CacheAppend" not in [n.op_type for n in lm.executor.generic_plan().graph.nodes]
    for n in (2, 2, 3):
        x = RNG.standard_normal((n, 3, 8, 8)).astype(np.float32)
        (y,) = lm.run([x])
        np.testing.assert_array_equal(y, run_ort(m, {"x": x})[0])
        assert y.flags.writeable and y.flags.c_contiguous and (y.base is None or y.base.nbytes == y.nbytes)
        y[:] = 0  # ORT's outputs are the caller's


def test_an_output_that_is_a_view_of_present_is_an_ordinary_output() -> None:
    """``alias = Identity(present)`` listed before ``present``, a single head at batch 1 (the view is
    C-contiguous, so the C-order conversion leaves it): ``alias`` was the read-only cache view itself
    (model.py's ``_owned`` hands cache views out as they are) and ``present`` became the copy, so the
    next step copied the past again. Only ``present`` is a cache view; ``alias`` is the caller's."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["k"]), helper.make_node("Concat", ["past", "k"], ["present"], axis=2),
             helper.make_node("Identity", ["present"], ["alias"])]
    shape = ["B", 1, "T", D]
    g = helper.make_graph(nodes, "kv1", [helper.make_tensor_value_info("past", TensorProto.FLOAT, ["B", 1, "P", D]),
                                         helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 1, "N", D])],
                          [helper.make_tensor_value_info("alias", TensorProto.FLOAT, shape),
                           helper.make_tensor_value_info("present", TensorProto.FLOAT, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    lm = LoadedModel.from_compiled(compile_model(m), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
    present = np.zeros((1, 1, 0, D), np.float32)
    for step in range(3):
        x = RNG.standard_normal((1, 1, 2, D)).astype(np.float32)
        alias, got = lm.run([present, x])
        want = run_ort(m, {"past": present, "x": x})
        np.testing.assert_array_equal(alias, want[0])
        np.testing.assert_array_equal(got, want[1])
        assert alias.flags.writeable and not np.shares_memory(alias, got)
        assert not got.flags.writeable
        if step:
            assert np.shares_memory(got, present), "present appended in place"
        alias[:] = 0
        np.testing.assert_array_equal(got, want[1])
        present = got
