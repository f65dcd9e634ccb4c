"""Adversarial tests of ChannelShuffleFusion (ge/compile/passes/fuse_channel_shuffle.py) and
pycann.ChannelShuffle (ops/channel_shuffle.py): precision settings that name a node the fusion
absorbed, and older-opset spellings of the channel slices."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(17)


def _shuffle_split_model():
    """Concat(a, b) -> Reshape -> Transpose -> Reshape -> Split -> Neg, Neg; every node named."""
    nodes = [helper.make_node("Concat", ["a", "b"], ["cat"], axis=1, name="cat"),
             helper.make_node("Reshape", ["cat", "s1"], ["r1"], name="r1"),
             helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1, 3, 4], name="tr"),
             helper.make_node("Reshape", ["t", "s2"], ["sh"], name="r2"),
             helper.make_node("Split", ["sh", "sp"], ["o0", "o1"], axis=1, name="split"),
             helper.make_node("Neg", ["o0"], ["y0"], name="n0"), helper.make_node("Neg", ["o1"], ["y1"], name="n1")]
    inits = [const("s1", np.array([1, 2, 4, 3, 4], np.int64)), const("s2", np.array([1, 8, 3, 4], np.int64)),
             const("sp", np.array([4, 4], np.int64))]
    m = float_model(nodes, [("a", [1, 4, 3, 4]), ("b", [1, 4, 3, 4])], "y0", inits, opset=13)
    m.graph.output.append(helper.make_tensor_value_info("y1", TensorProto.FLOAT, None))
    return m


@pytest.mark.parametrize("node,spec", [
    ("r1", {"inputs": [10], "outputs": [10]}),  # the first Reshape computes in float16
    ("tr", {"inputs": [10], "outputs": [10]}),
    ("split", {"inputs": [10], "outputs": [10, 10]}),
    ("cat", {"inputs": [10], "outputs": [10]}),  # one dtype listed for the Concat's two inputs
])
def test_customize_dtypes_naming_an_absorbed_node_runs_as_unfused(node: str, spec: dict) -> None:
    """--customize_dtypes on a node the fusion absorbed reaches the ChannelShuffle through its origin;
    the plan then casts only some of its inputs to float16. Unfused, the same entry compiles and runs
    (Concat takes mixed dtypes); fused, the kernel refused the mixed inputs at run time (KernelError).
    The fused result must equal the unfused compile's."""
    m = _shuffle_split_model()
    feeds = {"a": RNG.standard_normal((1, 4, 3, 4)).astype(np.float32),
             "b": RNG.standard_normal((1, 4, 3, 4)).astype(np.float32)}
    opts = {"customize_dtypes": {node: spec}, "soc_version": "CPU"}
    cm = compile_model(m, CompileOptions(**opts))
    assert [n.op_type for n in cm.graph.nodes].count("ChannelShuffle") == 1
    ref = LoadedModel.from_compiled(compile_model(m, CompileOptions(**opts, disabled_passes=["ChannelShuffleFusion"])))
    want = ref.run_dict(feeds)
    lm = LoadedModel.from_compiled(cm)
    for _ in range(2):  # arena reuse
        got = lm.run_dict(feeds)
        for g_, w_ in zip(got, want):
            assert np.asarray(g_).dtype == np.asarray(w_).dtype
            np.testing.assert_array_equal(g_, w_)


def test_opset9_slices_are_absorbed() -> None:
    """Slice-1 (opset < 10: starts/ends/axes attributes) is imported with those attributes moved to
    constant inputs (importers/opset_upgrade.py), the node keeping opset 9. The pass read the
    attributes for opset < 10, found none, and left both Slices (a missed fusion)."""
    nodes = [helper.make_node("Reshape", ["x", "s1"], ["r1"]),
             helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["sh"]),
             helper.make_node("Slice", ["sh"], ["p"], starts=[0], ends=[4], axes=[1]),
             helper.make_node("Slice", ["sh"], ["q"], starts=[4], ends=[100], axes=[1]),
             helper.make_node("Sub", ["p", "q"], ["y"])]
    inits = [const("s1", np.array([2, 2, 4, 3, 4], np.int64)), const("s2", np.array([2, 8, 3, 4], np.int64))]
    m = float_model(nodes, [("x", [2, 8, 3, 4])], "y", inits, opset=9)
    cm = compile_model(m)
    ops = [n.op_type for n in cm.graph.nodes]
    assert "Slice" not in ops, ops
    (shuffle,) = [n for n in cm.graph.nodes if n.op_type == "ChannelShuffle"]
    assert shuffle.attrs["split"] == [4, 4]
    x = RNG.standard_normal((2, 8, 3, 4)).astype(np.float32)
    lm = LoadedModel.from_compiled(cm)
    for _ in range(2):
        np.testing.assert_array_equal(lm.run_dict({"x": x})[0], run_ort(m, {"x": x})[0])


def _split_outputs_model():
    """``_shuffle_split_model`` without the Negs: the Split's outputs are the model's."""
    m = _shuffle_split_model()
    m.graph.node.pop()
    m.graph.node.pop()
    del m.graph.output[:]
    m.graph.output.extend([helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("o0", "o1")])
    return m


@pytest.mark.parametrize("keys", [{"split:1": 10}, {"split:0": 10, "split:1": 10}, {"": 10, "split:0": 1}])
def test_output_type_naming_an_absorbed_split_is_honoured(keys: dict) -> None:
    """--output_type ``node:idx`` names a model output by the node that produces it in the model.
    The keys were resolved on the optimised graph, where the Split had become part of the
    ChannelShuffle (``r1_shuffle``): E10016 for a valid key (any fusion did the same: a Gemm output
    named ``/fc/Gemm:0`` failed once it was a FusedMatMul, e.g. tv_shufflenet_v2's logits)."""
    m = _split_outputs_model()
    feeds = {"a": RNG.standard_normal((1, 4, 3, 4)).astype(np.float32),
             "b": RNG.standard_normal((1, 4, 3, 4)).astype(np.float32)}
    cm = compile_model(m, CompileOptions(output_type=keys))
    assert [n.op_type for n in cm.graph.nodes].count("ChannelShuffle") == 1
    got = LoadedModel.from_compiled(cm).run_dict(feeds)
    want = run_ort(m, feeds)
    for j, (g_, w_) in enumerate(zip(got, want)):
        dt = keys.get(f"split:{j}", keys.get(""))
        assert np.asarray(g_).dtype == (np.float16 if dt == 10 else np.float32), (j, np.asarray(g_).dtype)
        np.testing.assert_array_equal(g_, w_.astype(g_.dtype))


def test_output_type_naming_a_gemm_fused_into_matmul() -> None:
    """The same for a Gemm that canonicalisation and MatMul fusion rename."""
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    m = float_model([helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1)], [("x", [2, 4])], "y",
                    [const("w", w)])
    cm = compile_model(m, CompileOptions(output_type={"fc:0": 10}))
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    (y,) = LoadedModel.from_compiled(cm).run_dict({"x": x})
    assert y.dtype == np.float16
    np.testing.assert_allclose(y, run_ort(m, {"x": x})[0], rtol=2e-3, atol=2e-3)


def test_output_type_key_that_names_no_output_is_still_refused() -> None:
    from pycann.errors import OptionError

    with pytest.raises(OptionError, match=r"E10016.*\[cat:0\].*split:0, split:1"):
        compile_model(_split_outputs_model(), CompileOptions(output_type={"cat:0": 10}))
