"""The shape-generic plan's shape arithmetic as ``pycann.ShapeOf`` steps (ge/run/shape_program.py,
ops/shape_of.py): values against ONNX Runtime at several input shapes, and which nodes collapse."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.config import PlanCacheConfig, PlanPolicy
from pycann.ge.compile.compiler import compile_model
from pycann.ge.run import shape_program
from pycann.ge.run.model import LoadedModel
from pycann.ops import shape_of

I64 = TensorProto.INT64
SHAPES = [(2, 3, 4), (5, 1, 4), (1, 7, 4)]
_TYPES = {"y": TensorProto.FLOAT, "z": TensorProto.FLOAT, "s32": TensorProto.INT32}  # outputs; others int64


def _c(name: str, v: Sequence[int] | int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(v, dtype=np.int64), name)


def _model(nodes: list[onnx.NodeProto], outputs: list[str], inits: list[onnx.TensorProto],
           dims: Sequence[str | int | None] = ("a", "b", 4)) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info(o, _TYPES.get(o, I64), None) for o in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _check(model: bytes) -> LoadedModel:
    """Run the model on the generic plan at every shape of SHAPES; outputs equal ORT's exactly."""
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    lm = LoadedModel.from_compiled(compile_model(model), plan_cache=PlanCacheConfig(policy=PlanPolicy.GENERIC))
    for shape in SHAPES:
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        want = sess.run(None, {"x": x})
        got = lm.run([x])
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.dtype == w.dtype, (shape, g.shape, w.shape)
            np.testing.assert_array_equal(g, w)
    return lm


def _ops(lm: LoadedModel) -> list[str]:
    return [n.op_type for n in lm.executor.generic_plan().graph.nodes]


def test_reshape_target_chain_is_one_shape_of() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"]),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["u1"]),
             helper.make_node("Concat", ["u0", "u1", "two2"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    lm = _check(_model(nodes, ["y"], [_c("i0", 0), _c("i1", 1), _c("ax0", [0]), _c("two2", [2, 2])]))
    assert _ops(lm) == ["ShapeOf", "Reshape"]


def test_affine_arithmetic_slice_squeeze_cast_and_shape_range() -> None:
    """Add/Sub/Mul by a constant, Slice, Squeeze, Cast to int64, Identity, Shape(start=1) and a
    negative Gather index feed a Range and a Reshape; a product of two dims is not affine and stays."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Shape", ["x"], ["s1"], start=1),  # [b, 4]
             helper.make_node("Gather", ["s", "im1"], ["last"], axis=0),  # 4 (static in the desc)
             helper.make_node("Slice", ["s", "st0", "en1"], ["sa"]),  # [a]
             helper.make_node("Squeeze", ["sa", "ax0"], ["a"]),
             helper.make_node("Cast", ["a"], ["a64"], to=I64),
             helper.make_node("Identity", ["a64"], ["a_id"]),
             helper.make_node("Gather", ["s1", "i0"], ["b"], axis=0),
             helper.make_node("Mul", ["b", "k3"], ["b3"]),
             helper.make_node("Sub", ["b3", "k1"], ["b3m1"]),
             helper.make_node("Add", ["b3m1", "a_id"], ["n"]),  # 3b - 1 + a
             helper.make_node("Range", ["k0", "n", "k1"], ["r"]),
             helper.make_node("Mul", ["a_id", "b"], ["ab"]),  # a * b: not affine
             helper.make_node("Unsqueeze", ["ab", "ax0"], ["ab1"]),
             helper.make_node("Unsqueeze", ["last", "ax0"], ["last1"]),
             helper.make_node("Concat", ["ab1", "last1"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    inits = [_c("im1", -1), _c("st0", [0]), _c("en1", [1]), _c("ax0", [0]), _c("i0", 0), _c("k3", 3), _c("k1", 1),
             _c("k0", 0)]
    lm = _check(_model(nodes, ["r", "y"], inits))
    ops = _ops(lm)
    assert "Mul" in ops and "Range" in ops and "Reshape" in ops  # the product stays a node
    assert not {"Shape", "Slice", "Squeeze", "Cast", "Identity", "Sub", "Add"} & set(ops)


def test_values_it_does_not_track_stay_nodes() -> None:
    """A data-dependent Gather index, a Cast to int32 and a Div end the chain: those nodes run as before,
    reading the collapsed target."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["s", "i1"], ["d1"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax0"], ["u0"]),
             helper.make_node("Unsqueeze", ["d1", "ax0"], ["u1"]),
             helper.make_node("Concat", ["u0", "u1"], ["t"], axis=0),
             helper.make_node("Cast", ["t"], ["s32"], to=TensorProto.INT32),
             helper.make_node("Div", ["t", "k2"], ["half"]),
             helper.make_node("Greater", ["x", "big"], ["gt"]),  # all false: index 0, from the data
             helper.make_node("Cast", ["gt"], ["gt64"], to=I64),
             helper.make_node("ReduceMin", ["gt64"], ["zero"], keepdims=0),
             helper.make_node("Gather", ["s", "zero"], ["g"], axis=0)]
    inits = [_c("i0", 0), _c("i1", 1), _c("ax0", [0]), _c("k2", 2),
             numpy_helper.from_array(np.array(1e9, np.float32), "big")]
    lm = _check(_model(nodes, ["g", "s32", "half"], inits))
    ops = _ops(lm)
    assert ops.count("ShapeOf") == 2 and ops.count("Gather") == 1  # t, and s for the data-indexed Gather
    assert {"Cast", "Div", "ReduceMin"} <= set(ops) and "Concat" not in ops and "Unsqueeze" not in ops


def test_shape_output_and_duplicates_share_one_step() -> None:
    """A graph output that is a shape is computed by ShapeOf; two equal targets over the same tensor
    are computed once."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Shape", ["x"], ["s_again"]),
             helper.make_node("Reshape", ["x", "s_again"], ["y"]),
             helper.make_node("Shape", ["y"], ["sy"]),
             helper.make_node("Reshape", ["y", "sy"], ["z"])]
    lm = _check(_model(nodes, ["s", "z"], [], dims=[None, None, 4]))
    assert _ops(lm) == ["ShapeOf", "Reshape", "ShapeOf", "Reshape"]  # s_again is s; sy is another tensor's
    # with x's dims named (a, b), y = Reshape(x, shape(x)) is known to be (a, b, 4): sy is s too
    assert _ops(_check(_model(nodes, ["s", "z"], []))) == ["ShapeOf", "Reshape", "Reshape"]
    g = compile_model(_model(nodes, ["s", "z"], [])).graph
    collapsed, removed = shape_program.collapse(g)
    assert removed == 1 and len(g.nodes) == 5  # the compiled graph itself is left as it was

def test_shape_of_kernel_and_bad_programs() -> None:
    x, y = np.zeros((2, 3)), np.zeros((5,))
    attrs = {"dims": [1, 2, 0, 1, 2, 1, 0, -1], "scalar": 1}  # 1 + 2*x.dim1 - y.dim0
    (out,) = shape_of._k_shape_of([x, y], attrs)
    assert out.shape == () and out.dtype == np.int64 and int(out) == 1 + 6 - 5
    (vec,) = shape_of._k_shape_of([x], {"dims": [0, 1, 0, 0, 1, 7, 0], "scalar": 0})
    assert vec.tolist() == [2, 7]
    for bad in ([1], [0, 2, 0, 0, 1], [0, -1]):
        with pytest.raises(ValueError, match="ShapeOf dims"):
            shape_of.decode(bad)


def test_data_dependent_sizes_through_shared_shape_values() -> None:
    """Sizes only known at run time (NonZero's count, a Range of it) through two equal Shape values (one
    kept, the other read under its name) into Range, Concat and Reshape, against ORT."""
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),  # [3, n]: n is data-dependent
             helper.make_node("Shape", ["nz"], ["s1"]),
             helper.make_node("Shape", ["nz"], ["s2"]),
             helper.make_node("Reshape", ["nz", "s1"], ["r1"]),
             helper.make_node("Gather", ["s2", "i1"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Range", ["k0", "n", "k1"], ["rg"]),
             helper.make_node("Shape", ["rg"], ["srg"]),
             helper.make_node("Concat", ["srg", "n1"], ["t"], axis=0),
             helper.make_node("Reshape", ["r1", "t2"], ["out"]),
             helper.make_node("Identity", ["t"], ["tt"])]
    inits = [_c("i1", 1), _c("ax0", [0]), _c("k0", 0), _c("k1", 1), _c("t2", [3, -1])]
    _check(_model(nodes, ["out", "tt"], inits))
