"""The shape-generic plan's common subexpressions (ge/run/dedup.py) and the named-dims reading of the
shape arithmetic (ge/run/shape_program.py): which nodes merge, which must not, and values against
ONNX Runtime on the generic plan."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.dtypes import TensorDesc
from pycann.ge.compile.compiler import compile_model
from pycann.ge.ir import Graph, Node
from pycann.ge.run import dedup, shape_program
from pycann.ge.run.model import LoadedModel

F = TensorProto.FLOAT


def _graph(nodes: list[Node], outputs: list[str], inits: dict[str, np.ndarray] | None = None) -> Graph:
    return Graph(nodes=nodes, inputs=["x"], outputs=outputs, initializers=dict(inits or {}))


def _slice(out: str, data: str = "x", attrs: dict | None = None) -> Node:
    return Node("Slice", [data, "s0", "e1"], [out], dict(attrs or {}), name=out, opset=13)


CONSTS = {"s0": np.array([0], np.int64), "e1": np.array([1], np.int64)}


def test_equal_nodes_merge_and_readers_follow() -> None:
    g = _graph([_slice("a"), _slice("b"), Node("Add", ["a", "b"], ["y"], {}, name="add", opset=14)], ["y"], CONSTS)
    out, dropped = dedup.merge_equal(g)
    assert dropped == 1 and [n.name for n in out.nodes] == ["a", "add"]
    assert out.nodes[1].inputs == ["a", "a"]
    assert len(g.nodes) == 3  # the graph itself is left as it was


def test_equal_constants_count_as_one_input() -> None:
    """A buffer stored once per layer (GPT-2's causal ``bias``) with equal bytes is one input; a
    constant that differs in one value is not."""
    inits = {**CONSTS, "m1": np.tril(np.ones((4, 4), bool)), "m2": np.tril(np.ones((4, 4), bool)),
             "m3": np.triu(np.ones((4, 4), bool))}
    nodes = [_slice("a", "m1"), _slice("b", "m2"), _slice("c", "m3"),
             Node("Concat", ["a", "b", "c"], ["y"], {"axis": 0}, name="cat", opset=13)]
    out, dropped = dedup.merge_equal(_graph(nodes, ["y"], inits))
    assert dropped == 1 and out.nodes[-1].inputs == ["a", "a", "c"]


def test_what_must_not_merge() -> None:
    """Other attributes, a graph output, a value a body reads, an op outside ``PURE`` (random, or
    the KV cache's in-place append) and an omitted output are kept apart."""
    body = Graph(nodes=[Node("Identity", ["d"], ["o"], {}, name="id", opset=13)], inputs=[], outputs=["o"])
    nodes = [_slice("a"), _slice("b", attrs={"note": 1}),  # (an unknown attribute still differs)
             _slice("c"), _slice("d"),
             Node("If", ["cond"], ["e"], {"then_branch": body, "else_branch": body}, name="if", opset=13),
             Node("RandomUniformLike", ["x"], ["r1"], {}, name="r1", opset=1),
             Node("RandomUniformLike", ["x"], ["r2"], {}, name="r2", opset=1),
             Node("CacheAppend", ["x", "a"], ["k1"], {"axis": 0}, name="k1", domain="pycann", opset=1),
             Node("CacheAppend", ["x", "a"], ["k2"], {"axis": 0}, name="k2", domain="pycann", opset=1)]
    out, dropped = dedup.merge_equal(_graph(nodes, ["b", "c", "e", "r1", "r2", "k1", "k2"], CONSTS))
    assert dropped == 0 and out is not None
    # d equals a but a body reads d; c equals a but is a graph output: both kept
    split = [Node("Split", ["x"], ["p", ""], {"axis": 0}, name="s1", opset=13),
             Node("Split", ["x"], ["q", "r"], {"axis": 0}, name="s2", opset=13)]
    _, dropped = dedup.merge_equal(_graph(split, ["p", "q", "r"]))
    assert dropped == 0


def test_names_agree() -> None:
    groups = (((0, 1), (1, 2)),)
    a, b = np.zeros((2, 5)), np.zeros((1, 3, 5))
    assert shape_program.names_agree(groups, [a, b])
    assert not shape_program.names_agree(groups, [a, np.zeros((1, 3, 4))])
    assert not shape_program.names_agree(groups, [a, np.zeros((5,))])  # too few dims: not agreeing
    assert not shape_program.names_agree(groups, [a, None])


def _model(named: bool) -> bytes:
    """Two branches that each compute a mask from their own input's length and a constant of their
    own, as a decoder's layers do: Slice of a lower-triangular table bounded by Shape arithmetic."""
    dims = ["n", 3] if named else [None, 3]
    inputs = [helper.make_tensor_value_info(x, F, dims) for x in ("x1", "x2")]
    tri = np.tril(np.ones((16, 16), np.float32))
    inits = [numpy_helper.from_array(tri, "t1"), numpy_helper.from_array(tri.copy(), "t2"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"), numpy_helper.from_array(np.array(0, np.int64), "i0"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0")]
    nodes = []
    for k in ("1", "2"):
        nodes += [helper.make_node("Shape", [f"x{k}"], [f"s{k}"]),
                  helper.make_node("Gather", [f"s{k}", "i0"], [f"n{k}"], axis=0),
                  helper.make_node("Unsqueeze", [f"n{k}", "ax0"], [f"u{k}"]),
                  helper.make_node("Slice", [f"t{k}", "zero", f"u{k}", "ax0"], [f"rows{k}"]),
                  helper.make_node("Slice", [f"rows{k}", "zero", f"u{k}", "ax1"], [f"m{k}"]),
                  helper.make_node("MatMul", [f"m{k}", f"x{k}"], [f"y{k}"])]
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "ax1"))
    outs = [helper.make_tensor_value_info(y, F, [None, 3]) for y in ("y1", "y2")]
    g = helper.make_graph(nodes, "g", inputs, outs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_named_dims_merge_the_branches_and_match_ort() -> None:
    """With x1 and x2 both ``n`` long the branches' masks are one computation; with unnamed dims they
    stay two. Values equal ORT's at several lengths; lengths that break the name (a valid call: ORT
    runs it) run the generic plan made without the names."""
    for named, slices in ((True, 2), (False, 4)):
        model = _model(named)
        onnx.checker.check_model(onnx.load_from_string(model))
        lm = LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
        ops = [n.op_type for n in lm.executor.generic_plan().graph.nodes]
        assert ops.count("Slice") == slices, (named, ops)
        sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        for n1, n2 in ((4, 4), (9, 9), (1, 1), (5, 7), (7, 5)):
            x1 = rng.standard_normal((n1, 3)).astype(np.float32)
            x2 = rng.standard_normal((n2, 3)).astype(np.float32)
            for g, w in zip(lm.run([x1, x2]), sess.run(None, {"x1": x1, "x2": x2})):
                np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=f"{named} {n1} {n2}")
        st = lm.plan_cache_stats()
        # named: the two calls that break the name ran the generic plan without names; all five generic
        assert (st.built, st.generic_runs) == (0, 5)
        assert (lm.executor._plain is not None) == named


def test_placeholder_dim_params_are_not_names() -> None:
    """Paddle2ONNX writes ``?`` on every dynamic dim: two inputs carrying it are not made equal."""
    g = Graph(nodes=[], inputs=["a", "b"], outputs=[])
    g.descs["a"] = TensorDesc(1, ("?", "n", 3))
    g.descs["b"] = TensorDesc(1, ("?", "n", "unk"))
    assert shape_program.input_dim_names(g) == {"n": ("a", 1)}
    assert shape_program.name_groups(g) == (((0, 1), (1, 1)),)


@pytest.mark.parametrize("dim", ["n", "?"])
def test_reshape_to_a_named_dim_that_is_zero_copies_the_input_dim(dim: str) -> None:
    """``Reshape(d, [n, -1])`` with ``n`` read from ``x``'s named dim: with ``allowzero`` 0 an ``n`` of 0
    copies ``d``'s dim, so the output's dim is ``n`` only while ``n`` is not 0. The generic plan read
    ``n`` for the output's Shape (ConstantOfShape of shape [0, 0] instead of ORT's [4, 0]); a call with
    ``n`` = 0 now runs the plan without names, the others keep the named reading. A placeholder
    (``?``) is no name: nothing is assumed of it (it made the plan's build fail with KeyError)."""
    i64 = TensorProto.INT64
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["nu"]), helper.make_node("Concat", ["nu", "m1"], ["t"], axis=0),
             helper.make_node("Reshape", ["d", "t"], ["r"]), helper.make_node("Shape", ["r"], ["sr"]),
             helper.make_node("ConstantOfShape", ["sr"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "m1")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [dim, 2]),
                                       helper.make_tensor_value_info("d", F, ["a", "b"]),
                                       helper.make_tensor_value_info("z", F, ["n"])],
                          [helper.make_tensor_value_info("y", F, None), helper.make_tensor_value_info("sr", i64, [2])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    lm = LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for xs, ds in (((3, 2), (3, 4)), ((0, 2), (4, 0)), ((2, 2), (4, 3))):
        x, d, z = np.ones(xs, np.float32), np.ones(ds, np.float32), np.ones(xs[0], np.float32)
        for got, want in zip(lm.run([x, d, z]), sess.run(None, {"x": x, "d": d, "z": z})):
            assert got.shape == want.shape and np.array_equal(got, want), (xs, ds, got, want)
        # (with '?' nothing is assumed, and no call needs the plan without names)
        assert (lm.executor._plain is not None) == (dim == "n" and (xs[0] == 0 or ds == (4, 3)))
    assert lm.plan_cache_stats().built == 0
