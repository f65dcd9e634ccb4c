"""Canonicalize's ReduceMeanToGlobalAveragePool: ReduceMean over exactly the spatial axes with keepdims=1
(the dynamo exporter's adaptive_avg_pool2d(1)) becomes GlobalAveragePool; other reductions stay. Every case
is compared with ONNX Runtime on the original graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.ge.onnx_graphs import canonicalized as _canon
from tests.ge.onnx_graphs import check_compiled, const, float_model

RNG = np.random.default_rng(11)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)



def _reduce_mean(shape: list[int], axes: list[int], keepdims: int, opset: int) -> onnx.ModelProto:
    if opset >= 18:
        node = helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)
        inits = [const("axes", np.array(axes, np.int64))]
    else:
        node = helper.make_node("ReduceMean", ["x"], ["y"], axes=axes, keepdims=keepdims)
        inits = []
    return float_model([node], [("x", shape)], "y", inits, opset=opset)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("shape,axes", [([2, 5, 7, 6], [2, 3]), ([2, 5, 7, 6], [-1, -2]), ([1, 3, 4, 5, 6], [2, 3, 4])])
def test_spatial_mean_becomes_global_average_pool(opset: int, shape: list[int], axes: list[int]) -> None:
    m = _reduce_mean(shape, axes, 1, opset)
    g, counts, _ = _canon(m)
    assert counts.get("ReduceMeanToGlobalAveragePool") == 1
    assert [n.op_type for n in g.nodes] == ["GlobalAveragePool"]
    check_compiled(m, {"x": _f32(*shape)}, absent=("ReduceMean",))


@pytest.mark.parametrize("shape,axes,keepdims", [([2, 5, 7, 6], [2, 3], 0), ([2, 5, 7, 6], [1, 2, 3], 1),
                                                 ([2, 5, 7, 6], [3], 1), ([2, 5, 7, 6], [1], 1), ([4, 6], [1], 1),
                                                 ([1, 4, 9], [2], 1)])
def test_other_reductions_are_kept(shape: list[int], axes: list[int], keepdims: int) -> None:
    for opset in (13, 18):
        m = _reduce_mean(shape, axes, keepdims, opset)
        g, counts, _ = _canon(m)
        assert "ReduceMeanToGlobalAveragePool" not in counts
        assert [n.op_type for n in g.nodes] == ["ReduceMean"]
        check_compiled(m, {"x": _f32(*shape)}, present={"ReduceMean": 1})


def test_variable_axes_are_kept_with_a_reason() -> None:
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 4, 4]),
                                        helper.make_tensor_value_info("axes", onnx.TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    _, counts, missed = _canon(m)
    assert "ReduceMeanToGlobalAveragePool" not in counts
    assert any("axes are not constant" in r for r in missed)


def test_se_block_after_conv_matches_ort() -> None:
    """The squeeze-excite block of the dynamo exports: Conv -> Relu -> ReduceMean(2,3) -> Conv -> Sigmoid -> Mul."""
    w1, w2 = _f32(8, 4, 3, 3) * 0.3, _f32(8, 8, 1, 1) * 0.3
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMean", ["r", "axes"], ["s"], keepdims=1),
             helper.make_node("Conv", ["s", "W2"], ["e"]), helper.make_node("Sigmoid", ["e"], ["g"]),
             helper.make_node("Mul", ["r", "g"], ["y"])]
    m = float_model(nodes, [("x", [1, 4, 12, 12])], "y",
                    [const("W1", w1), const("W2", w2), const("axes", np.array([2, 3], np.int64))], opset=18)
    check_compiled(m, {"x": _f32(1, 4, 12, 12)}, absent=("ReduceMean",))


def test_normalisation_mean_is_left_to_layernorm_fusion() -> None:
    """x - mean(x) over H, W is a normalisation (instance-norm statistics), not a pooling."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[2, 3], keepdims=1),
             helper.make_node("Sub", ["x", "m"], ["y"])]
    m = float_model(nodes, [("x", [2, 5, 8, 3])], "y", opset=13)
    _, counts, missed = _canon(m)
    assert "ReduceMeanToGlobalAveragePool" not in counts
    assert any("normalisation" in r for r in missed)
    check_compiled(m, {"x": _f32(2, 5, 8, 3)}, present={"ReduceMean": 1})
