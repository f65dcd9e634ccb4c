"""ChannelShuffleFusion (ge/compile/passes/fuse_channel_shuffle.py) and pycann.ChannelShuffle
(ops/channel_shuffle.py): the ShuffleNet spellings of two exporters fuse (positive), what is not a
channel shuffle stays (negative), and every compiled graph computes what ONNX Runtime computes on
the original model (equivalence), channels-last chains included."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from pycann.ops.channel_shuffle import _k_shuffle, _out_shuffle
from tests.ge.onnx_graphs import check_compiled, const, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(11)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _reference(xs: list[np.ndarray], group: int, split: list[int]) -> list[np.ndarray]:
    cat = np.concatenate(xs, axis=1)
    n, c, h, w = cat.shape
    y = cat.reshape(n, group, c // group, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    bounds = np.cumsum([0, *(split or [c])])
    return [y[:, a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("sizes,group,split", [
    ([58, 58], 2, [58, 58]), ([24], 2, []), ([12, 6], 3, [9, 9]), ([8, 8, 16], 4, [4, 20, 8]),
    ([10], 5, [1, 2, 3, 4]), ([6, 2], 2, [3, 5]),
])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_kernel_equals_reshape_transpose_reshape(sizes: list[int], group: int, split: list[int], layout: str) -> None:
    xs = [_f32(2, c, 3, 5) for c in sizes]
    if layout == "nhwc":
        xs = [_cl(x) for x in xs]
    attrs = {"group": group, "split": split}
    want = _reference(xs, group, split)
    got = _k_shuffle(xs, attrs)
    assert len(got) == len(want)
    for g_, w_ in zip(got, want):
        np.testing.assert_array_equal(g_, w_)
        if g_.shape[1] > 1:
            assert (g_.strides[1] == 4) == (layout == "nhwc")  # the input's layout
    outs = [_cl(np.full(w_.shape, np.nan, np.float32)) for w_ in want]  # arena views, channels-last
    _out_shuffle(xs, attrs, outs)
    for o, w_ in zip(outs, want):
        np.testing.assert_array_equal(o, w_)


@pytest.mark.parametrize("sizes,group,split,why", [
    ([5], 2, [], "does not divide"), ([4, 4], 2, [3, 3], "add up"), ([4], 2, [6, -2], "add up"),
])
def test_kernel_refuses_inconsistent_attributes(sizes: list[int], group: int, split: list[int], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        _k_shuffle([_f32(1, c, 2, 2) for c in sizes], {"group": group, "split": split})


def _shuffle_nodes(x: str, n: int, c: int, h: int, w: int, g: int, out: str, tag: str = "",
                   perm: tuple[int, ...] = (0, 2, 1, 3, 4), back: tuple[int, ...] | None = None) -> tuple[list[Any], list[Any]]:
    back = back or (n, c, h, w)
    nodes = [helper.make_node("Reshape", [x, f"s1{tag}"], [f"r1{tag}"]),
             helper.make_node("Transpose", [f"r1{tag}"], [f"t{tag}"], perm=list(perm)),
             helper.make_node("Reshape", [f"t{tag}", f"s2{tag}"], [out])]
    inits = [const(f"s1{tag}", np.array([n, g, c // g, h, w], np.int64)), const(f"s2{tag}", np.array(back, np.int64))]
    return nodes, inits


def _unit(c: int = 16, hw: int = 6, g: int = 2, readers: str = "slices", concat: bool = True) -> onnx.ModelProto:
    """conv -> [Concat(a, conv)] -> channel shuffle -> two channel Slices / a Split -> convs, added."""
    n = 1
    half = c // 2
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "W2"], ["b"], pads=[1, 1, 1, 1])]
    inits = [const("W1", _f32(half, 4, 3, 3) * 0.3), const("W2", _f32(half, half, 3, 3) * 0.3),
             const("W3", _f32(half, half, 1, 1) * 0.3), const("W4", _f32(half, half, 1, 1) * 0.3)]
    if concat:
        nodes.append(helper.make_node("Concat", ["a", "b"], ["cat"], axis=1))
    else:
        inits[1] = const("W2", _f32(c, half, 3, 3) * 0.3)
        nodes[1] = helper.make_node("Conv", ["a", "W2"], ["cat"], pads=[1, 1, 1, 1])
    sh, si = _shuffle_nodes("cat", n, c, hw, hw, g, "sh")
    nodes += sh
    inits += si
    if readers == "slices":
        nodes += [helper.make_node("Slice", ["sh", "z", "h", "one"], ["p"]),
                  helper.make_node("Slice", ["sh", "h", "e", "one"], ["q"])]
        inits += [const("z", np.array([0], np.int64)), const("h", np.array([half], np.int64)),
                  const("e", np.array([c], np.int64)), const("one", np.array([1], np.int64))]
    elif readers == "split":
        nodes.append(helper.make_node("Split", ["sh", "sp"], ["p", "q"], axis=1))
        inits.append(const("sp", np.array([half, half], np.int64)))
    if readers in ("slices", "split"):
        nodes += [helper.make_node("Conv", ["p", "W3"], ["u"]), helper.make_node("Conv", ["q", "W4"], ["v"]),
                  helper.make_node("Add", ["u", "v"], ["y"])]
    else:  # the shuffled tensor read whole by a conv
        inits[3] = const("W4", _f32(half, c, 1, 1) * 0.3)
        nodes.append(helper.make_node("Conv", ["sh", "W4"], ["y"]))
    return float_model(nodes, [("x", [1, 4, hw, hw])], "y", inits)


@pytest.mark.parametrize("readers", ["slices", "split", "whole"])
@pytest.mark.parametrize("concat", [True, False])
def test_shufflenet_unit_fuses_and_equals_ort(readers: str, concat: bool) -> None:
    m = _unit(readers=readers, concat=concat)
    ops = check_compiled(m, {"x": _f32(1, 4, 6, 6)}, {"ChannelShuffle": 1},
                         absent=("Reshape", "Transpose", "Slice", "Split") + (("Concat",) if concat else ()))
    assert ops.count("ChannelShuffle") == 1


def test_group_of_four_with_a_larger_map_runs_channels_last() -> None:
    m = _unit(c=16, hw=20, g=4)
    cm = compile_model(m)
    shuffle = next(n for n in cm.graph.nodes if n.op_type == "ChannelShuffle")
    assert shuffle.attrs["group"] == 4 and shuffle.attrs["split"] == [8, 8]
    assert shuffle.attrs.get("_layout") == "NHWC"  # inside the convs' channels-last chain
    x = _f32(1, 4, 20, 20)
    lm = LoadedModel.from_compiled(cm)
    for _ in range(2):  # arena views reused on the second run
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["perm", "not_back", "slice_step", "extra_reader", "gap", "graph_output"])
def test_what_is_not_a_channel_shuffle_stays(case: str) -> None:
    c, hw, half = 8, 4, 4
    inits = [const("W", _f32(c, 3, 1, 1))]
    nodes = [helper.make_node("Conv", ["x", "W"], ["cat"])]
    if case == "perm":
        sh, si = _shuffle_nodes("cat", 1, c, hw, hw, 2, "sh", perm=(0, 1, 2, 4, 3))
    elif case == "not_back":
        sh, si = _shuffle_nodes("cat", 1, c, hw, hw, 2, "sh", back=(1, c, hw * hw, 1))
    else:
        sh, si = _shuffle_nodes("cat", 1, c, hw, hw, 2, "sh")
    nodes += sh
    inits += si
    outs = ["y"]
    if case == "slice_step":
        nodes.append(helper.make_node("Slice", ["sh", "z", "e", "ax", "two"], ["y"]))
        inits += [const("z", np.array([0], np.int64)), const("e", np.array([c], np.int64)),
                  const("ax", np.array([1], np.int64)), const("two", np.array([2], np.int64))]
    elif case == "extra_reader":
        nodes += [helper.make_node("Slice", ["sh", "z", "h", "ax"], ["p"]), helper.make_node("Relu", ["sh"], ["r"]),
                  helper.make_node("Concat", ["p", "r"], ["y"], axis=1)]
        inits += [const("z", np.array([0], np.int64)), const("h", np.array([half], np.int64)),
                  const("ax", np.array([1], np.int64))]
    elif case == "gap":
        nodes += [helper.make_node("Slice", ["sh", "z", "one", "ax"], ["p"]),
                  helper.make_node("Slice", ["sh", "h", "e", "ax"], ["q"]),
                  helper.make_node("Concat", ["p", "q"], ["y"], axis=1)]
        inits += [const("z", np.array([0], np.int64)), const("one", np.array([1], np.int64)),
                  const("h", np.array([half], np.int64)), const("e", np.array([c], np.int64)),
                  const("ax", np.array([1], np.int64))]
    else:
        nodes.append(helper.make_node("Relu", ["sh"], ["y"]))
        outs = ["y", "sh"] if case == "graph_output" else outs
    m = float_model(nodes, [("x", [1, 3, hw, hw])], "y", inits)
    if case == "graph_output":
        m.graph.output.append(helper.make_tensor_value_info("sh", onnx.TensorProto.FLOAT, None))
    cm = compile_model(m)
    ops = [n.op_type for n in cm.graph.nodes]
    if case in ("perm", "not_back"):
        assert "ChannelShuffle" not in ops, ops
    else:  # a shuffle with readers it cannot absorb keeps its one whole output
        shuffle = [n for n in cm.graph.nodes if n.op_type == "ChannelShuffle"]
        assert len(shuffle) == 1 and shuffle[0].attrs["split"] == [] and len(shuffle[0].outputs) == 1, ops
    x = _f32(1, 3, hw, hw)
    got = LoadedModel.from_compiled(cm).run_dict({"x": x})
    for g_, w_ in zip(got, run_ort(m, {"x": x})):
        np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-5)


def test_a_symbolic_batch_fuses_in_each_shapes_plan() -> None:
    """Exported with a dynamic batch, the shuffle's Reshape targets come from Shape(x) at run time:
    no fusion at compile time, but each concrete batch's plan (SHAPE_CHOICES, after the shape
    arithmetic folds) has the ChannelShuffle, and equals ORT."""
    c, hw, g = 8, 5, 2
    nodes = [helper.make_node("Conv", ["x", "W"], ["cat"]),
             helper.make_node("Shape", ["cat"], ["shp"]),
             helper.make_node("Gather", ["shp", "i0"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "rest1"], ["s1"], axis=0),
             helper.make_node("Concat", ["n", "rest2"], ["s2"], axis=0),
             helper.make_node("Reshape", ["cat", "s1"], ["r1"]),
             helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["sh"]),
             helper.make_node("Relu", ["sh"], ["y"])]
    inits = [const("W", _f32(c, 3, 1, 1)), const("i0", np.array([0], np.int64)),
             const("rest1", np.array([g, c // g, hw, hw], np.int64)), const("rest2", np.array([c, hw, hw], np.int64))]
    m = float_model(nodes, [("x", ["N", 3, hw, hw])], "y", inits)
    lm = LoadedModel.from_compiled(compile_model(m))
    for n in (2, 3):
        x = _f32(n, 3, hw, hw)
        plan = lm.executor.plan_for(lm.check_feeds([x]))[0]
        assert [st.node.op_type for st in plan.steps].count("ChannelShuffle") == 1
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
