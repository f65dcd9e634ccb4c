"""Adversarial cases for ConcatPrefixReuse (ge/compile/passes/concat_prefix.py), the 16K-element
ElementwiseChain threshold (kernels/providers/onednn_binary.py) and ChannelShuffle's bound oneDNN
reorders (kernels/channel_shuffle.py): each compiled model computes what ONNX Runtime computes."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const, float_model
from tests.ops.oracle import run_ort


def _in_threads(work, n: int, errors: list[BaseException]) -> None:  # noqa: ANN001
    """``work(i)`` for i < n, each on its own thread, all at once; the first error they recorded fails."""
    ts = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]

RNG = np.random.default_rng(71)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], runs: int = 2) -> LoadedModel:
    lm = LoadedModel.from_compiled(compile_model(m))
    want = run_ort(m, feeds)
    for _ in range(runs):  # the arena views again
        got = lm.run_dict(feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    return lm


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:  # noqa: ANN001
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


# --- ConcatPrefixReuse -------------------------------------------------------------------------


def test_prefix_concat_consumed_as_conv_residual_in_place() -> None:
    """t = Concat(a, b) is a conv's residual (FusedConv may write its output into t's buffer), and a
    later Concat(a, b, d) now reads t after that conv ran."""
    c, hw = 16, 12
    nodes = [
        helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "W1"], ["b"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b"], ["t"], axis=1),
        helper.make_node("Conv", ["x", "W2"], ["z"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["z", "t"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "W3"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b", "d"], ["y"], axis=1),
    ]
    inits = [const("W0", _f32(c, c, 3, 3) * 0.2), const("W1", _f32(c, c, 3, 3) * 0.2),
             const("W2", _f32(2 * c, c, 3, 3) * 0.2), const("W3", _f32(c, 2 * c, 3, 3) * 0.2)]
    _check(float_model(nodes, [("x", [1, c, hw, hw])], "y", inits), {"x": _f32(1, c, hw, hw)})


def test_prefix_concat_into_squeeze_excite_in_place() -> None:
    """t = Concat(a, b) scaled by a squeeze-excite block (its output may share t's buffer), then
    Concat(a, b, d) reads t."""
    c, hw = 16, 10
    nodes = [
        helper.make_node("Conv", ["x", "W0"], ["a0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a0"], ["a"]),
        helper.make_node("Conv", ["x", "W1"], ["b0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["b0"], ["b"]),
        helper.make_node("Concat", ["a", "b"], ["t"], axis=1),
        helper.make_node("GlobalAveragePool", ["t"], ["p"]),
        helper.make_node("Conv", ["p", "S0", "SB0"], ["q0"]),
        helper.make_node("Relu", ["q0"], ["q"]),
        helper.make_node("Conv", ["q", "S1", "SB1"], ["e0"]),
        helper.make_node("Sigmoid", ["e0"], ["e"]),
        helper.make_node("Mul", ["t", "e"], ["se"]),
        helper.make_node("Conv", ["se", "W3"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Concat", ["a", "b", "d"], ["y"], axis=1),
    ]
    inits = [const("W0", _f32(c, c, 3, 3) * 0.2), const("W1", _f32(c, c, 3, 3) * 0.2),
             const("S0", _f32(8, 2 * c, 1, 1) * 0.3), const("SB0", _f32(8) * 0.1),
             const("S1", _f32(2 * c, 8, 1, 1) * 0.3), const("SB1", _f32(2 * c) * 0.1),
             const("W3", _f32(c, 2 * c, 3, 3) * 0.2)]
    _check(float_model(nodes, [("x", [1, c, hw, hw])], "y", inits), {"x": _f32(1, c, hw, hw)})


def test_prefix_concat_is_also_a_graph_output_and_repeats_an_input() -> None:
    """Concat(a, a) (a graph output) then Concat(a, a, b); inputs and an initializer in the prefix."""
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["t"], axis=0),
        helper.make_node("Concat", ["x", "x", "k"], ["u"], axis=0),
        helper.make_node("Neg", ["u"], ["y"]),
        helper.make_node("Concat", ["k", "x"], ["v"], axis=-1),
        helper.make_node("Concat", ["k", "x", "x"], ["w"], axis=3),
    ]
    m = _model(nodes, [("x", [2, 3, 4, 5])], ["t", "y", "v", "w"], [const("k", _f32(2, 3, 4, 5))])
    _check(m, {"x": _f32(2, 3, 4, 5)})


def test_prefix_of_int64_shape_concats_for_reshape_targets() -> None:
    """Shape-tensor Concats (int64, axis 0, run-time dims) feeding Reshapes."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["c"], axis=0),
        helper.make_node("Concat", ["n", "c"], ["s2"], axis=0),
        helper.make_node("Concat", ["n", "c", "m1"], ["s3"], axis=0),
        helper.make_node("Reshape", ["x", "s3"], ["r3"]),
        helper.make_node("ReduceSum", ["r3", "ax"], ["r2"], keepdims=0),
        helper.make_node("Reshape", ["r2", "s2"], ["y"]),
    ]
    inits = [const("i0", np.array([0], np.int64)), const("i1", np.array([1], np.int64)),
             const("m1", np.array([-1], np.int64)), const("ax", np.array([2], np.int64))]
    m = _model(nodes, [("x", ["N", 3, "H", 5])], ["y"], inits)
    for shape in [(2, 3, 4, 5), (1, 3, 7, 5)]:
        _check(m, {"x": _f32(*shape)})


def test_prefix_concats_inside_an_if_branch() -> None:
    def branch(sign: float) -> onnx.GraphProto:
        ns = [helper.make_node("Concat", ["x", "x"], ["bt"], axis=1),
              helper.make_node("Concat", ["x", "x", "x"], ["bu"], axis=1),
              helper.make_node("Mul", ["bu", "sg"], ["bo"])]
        return helper.make_graph(ns, f"b{sign}", [], [helper.make_tensor_value_info("bo", TensorProto.FLOAT, None)],
                                 [const("sg", np.array(sign, np.float32))])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "z"], ["cond"]),
             helper.make_node("If", ["cond"], ["y"], then_branch=branch(1.0), else_branch=branch(-1.0))]
    m = _model(nodes, [("x", [1, 2, 3, 3])], ["y"], [const("z", np.array(0.0, np.float32))])
    _check(m, {"x": np.abs(_f32(1, 2, 3, 3))})
    _check(m, {"x": -np.abs(_f32(1, 2, 3, 3))})


# --- ElementwiseChain from 16K elements ------------------------------------------------------------


@pytest.mark.parametrize("hw,c", [(7, 336), (14, 96), (23, 64)])  # 16464, 18816, 33856 elements
@pytest.mark.parametrize("poison", ["none", "nan", "inf", "big"])
def test_pre_activation_chain_at_the_new_sizes(hw: int, c: int, poison: str) -> None:
    """conv -> Mul -> Add -> Relu -> conv (a pre-activation BN + Relu) with NaN / inf / huge values
    entering the chain at 16K-64K elements."""
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "x"], ["a2"]),
             helper.make_node("Mul", ["a2", "sc"], ["m"]),
             helper.make_node("Add", ["m", "bi"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "W1"], ["y"])]
    inits = [const("W0", _f32(c, c, 3, 3) * 0.05), const("sc", _f32(1, c, 1, 1)), const("bi", _f32(1, c, 1, 1)),
             const("W1", _f32(4, c, 1, 1) * 0.1)]
    m = float_model(nodes, [("x", [1, c, hw, hw])], "y", inits)
    x = _f32(1, c, hw, hw)
    if poison == "nan":
        x[0, 3, hw // 2, 1] = np.nan
    elif poison == "inf":
        x[0, c - 1, 0, hw - 1] = np.inf
    elif poison == "big":
        x[0, 5, 2, 2] = 3e38
    lm = LoadedModel.from_compiled(compile_model(m))
    want = run_ort(m, {"x": x})[0]
    for _ in range(2):
        np.testing.assert_allclose(lm.run([x])[0], want, rtol=1e-4, atol=1e-4)


def test_chain_two_threads() -> None:
    c, hw = 64, 20
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["a", "sc"], ["m"]), helper.make_node("Add", ["m", "bi"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]), helper.make_node("Conv", ["r", "W1"], ["y"])]
    inits = [const("W0", _f32(c, c, 3, 3) * 0.05), const("sc", _f32(1, c, 1, 1)), const("bi", _f32(1, c, 1, 1)),
             const("W1", _f32(4, c, 1, 1) * 0.1)]
    m = float_model(nodes, [("x", [1, c, hw, hw])], "y", inits)
    xs = [_f32(1, c, hw, hw) for _ in range(2)]
    xs[1][0, 1, 1, 1] = np.nan
    wants = [run_ort(m, {"x": x})[0] for x in xs]
    lm = LoadedModel.from_compiled(compile_model(m))
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(15):
                np.testing.assert_allclose(lm.run([xs[i]])[0], wants[i], rtol=1e-4, atol=1e-4)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    _in_threads(work, 2, errors)


# --- ChannelShuffle bound to oneDNN reorders ----------------------------------------------------


def _shuffle_unit(n: int, c: int, hw: int, g: int, cut: int, cin: int = 4) -> onnx.ModelProto:
    """conv a, conv b -> Concat -> Reshape/Transpose/Reshape shuffle -> Slices [0:cut], [cut:] -> convs."""
    ca = c // 2 + (c % 2)
    cb = c - ca
    nodes = [helper.make_node("Conv", ["x", "W1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "W2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "s1"], ["r1"]),
             helper.make_node("Transpose", ["r1"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["sh"]),
             helper.make_node("Slice", ["sh", "z", "h", "one"], ["p"]),
             helper.make_node("Slice", ["sh", "h", "e", "one"], ["q"]),
             helper.make_node("Conv", ["p", "W3"], ["u"]), helper.make_node("Conv", ["q", "W4"], ["v"]),
             helper.make_node("Add", ["u", "v"], ["y"])]
    inits = [const("W1", _f32(ca, cin, 3, 3) * 0.3), const("W2", _f32(cb, ca, 3, 3) * 0.3),
             const("W3", _f32(5, cut, 1, 1) * 0.3), const("W4", _f32(5, c - cut, 1, 1) * 0.3),
             const("s1", np.array([n, g, c // g, hw, hw], np.int64)), const("s2", np.array([n, c, hw, hw], np.int64)),
             const("z", np.array([0], np.int64)), const("h", np.array([cut], np.int64)),
             const("e", np.array([c], np.int64)), const("one", np.array([1], np.int64))]
    return float_model(nodes, [("x", [n, cin, hw, hw])], "y", inits)


@pytest.mark.parametrize("n,c,hw,g,cut", [
    (1, 116, 28, 2, 58), (2, 116, 14, 2, 58), (2, 58, 9, 2, 29), (1, 63, 12, 3, 21), (1, 45, 16, 5, 7),
    (2, 96, 11, 4, 48), (1, 33, 13, 3, 1), (1, 99, 10, 3, 98), (2, 2048, 1, 2, 1024), (1, 4096, 1, 4, 1000),
    (3, 232, 3, 8, 116),
])
def test_shuffle_units_equal_ort(n: int, c: int, hw: int, g: int, cut: int) -> None:
    m = _shuffle_unit(n, c, hw, g, cut)
    _check(m, {"x": _f32(n, 4, hw, hw)}, runs=3)


def test_shuffle_two_models_two_threads() -> None:
    """Two models (other geometries) run from two threads each, arenas reused run after run."""
    ms = [_shuffle_unit(1, 116, 14, 2, 58), _shuffle_unit(2, 58, 14, 2, 29)]
    feeds = [{"x": _f32(1, 4, 14, 14)}, {"x": _f32(2, 4, 14, 14)}]
    wants = [run_ort(m, f)[0] for m, f in zip(ms, feeds)]
    lms = [LoadedModel.from_compiled(compile_model(m)) for m in ms]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(10):
                np.testing.assert_allclose(lms[i % 2].run_dict(feeds[i % 2])[0], wants[i % 2], rtol=1e-4, atol=1e-4)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    _in_threads(work, 4, errors)
    del lms[0]  # one model gone, the other's plan still runs
    np.testing.assert_allclose(lms[0].run_dict(feeds[1])[0], wants[1], rtol=1e-4, atol=1e-4)


# --- ConcatPrefixReuse and precision options ----------------------------------------------------


@pytest.mark.parametrize("opts", [
    {"customize_dtypes": {"cat1": {"inputs": [10, 10], "outputs": [10]}}},
    {"precision_mode": "allow_mix_precision", "modify_mixlist": {"white-list": {"to-add": ["Concat"]}},
     "keep_dtype": ["cat2"]},
], ids=["customize_dtypes", "mixlist_keep_dtype"])
def test_float16_concat_does_not_feed_a_float32_one(opts: dict) -> None:  # type: ignore[type-arg]
    """cat1 = Concat(a, b) runs in float16 by request; cat2 = Concat(a, b, d) is float32 and must copy
    a and b exactly (it read cat1's float16-rounded copy when the pass ran before PrecisionMode)."""
    from pycann.ge.compile.options import CompileOptions

    c, hw = 8, 6
    nodes = [helper.make_node("Mul", ["x", "k"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["t"], axis=1, name="cat1"),
             helper.make_node("Conv", ["t", "W"], ["d"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b", "d"], ["y"], axis=1, name="cat2")]
    m = _model(nodes, [("x", [1, c, hw, hw])], ["y"], [const("W", _f32(c, 2 * c, 3, 3) * 0.1),
                                                       const("k", np.float32(1.0001))])
    x = _f32(1, c, hw, hw) * 3
    want = run_ort(m, {"x": x})[0]
    got = LoadedModel.from_compiled(compile_model(m, CompileOptions(**opts))).run_dict({"x": x})[0]
    np.testing.assert_array_equal(got[:, :2 * c], want[:, :2 * c])  # Concat copies exactly


def _dyn_shuffle_unit(c: int, hw: int, g: int, cut: int) -> onnx.ModelProto:
    """``_shuffle_unit`` with a run-time batch (-1 in the Reshape targets); the shuffle's first part
    is a graph output too."""
    m = _shuffle_unit(1, c, hw, g, cut)
    for init in m.graph.initializer:
        if init.name in ("s1", "s2"):
            v = onnx.numpy_helper.to_array(init).copy()
            v[0] = -1
            init.CopyFrom(onnx.numpy_helper.from_array(v, init.name))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    m.graph.output.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    return m


def test_shuffle_dynamic_batch_with_plan_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches 1..5 and back with at most two plans kept: evicted plans' reorders, new arenas at old
    addresses, an output of the shuffle kept by the caller across runs."""
    monkeypatch.setenv("PYCANN_PLAN_CACHE_PLANS", "2")
    m = _dyn_shuffle_unit(116, 12, 2, 58)
    lm = LoadedModel.from_compiled(compile_model(m))
    kept = []
    for n in [1, 2, 3, 1, 4, 5, 2, 1, 3]:
        feeds = {"x": _f32(n, 4, 12, 12)}
        got = lm.run_dict(feeds)
        want = run_ort(m, feeds)
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)
        kept.append((got, want))
    for got, want in kept:  # what a run returned is not overwritten by later runs
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tail", ["div_zero_relu", "mul_zero_relu", "clip_5_10", "sub_right_relu", "runtime_operand_relu",
                                  "sigmoid_relu", "mul_inf_relu"])
@pytest.mark.parametrize("poison", [np.nan, np.inf, -np.inf])
def test_chain_variants_at_20k_elements(tail: str, poison: float) -> None:
    c, hw = 100, 14  # 19600 elements: a chain of 2+ steps on oneDNN now
    sc = _f32(1, c, 1, 1)
    op_nodes = {
        "div_zero_relu": [helper.make_node("Div", ["a", "k0"], ["m"]), helper.make_node("Add", ["m", "bi"], ["s"]),
                          helper.make_node("Relu", ["s"], ["r"])],
        "mul_zero_relu": [helper.make_node("Mul", ["a", "k0"], ["m"]), helper.make_node("Add", ["m", "bi"], ["s"]),
                          helper.make_node("Relu", ["s"], ["r"])],
        "clip_5_10": [helper.make_node("Mul", ["a", "sc"], ["m"]), helper.make_node("Add", ["m", "bi"], ["s"]),
                      helper.make_node("Clip", ["s", "lo", "hi"], ["r"])],
        "sub_right_relu": [helper.make_node("Sub", ["bi", "a"], ["m"]), helper.make_node("Mul", ["m", "sc"], ["s"]),
                           helper.make_node("Relu", ["s"], ["r"])],
        "runtime_operand_relu": [helper.make_node("Mul", ["a", "x"], ["m"]), helper.make_node("Add", ["m", "bi"], ["s"]),
                                 helper.make_node("Relu", ["s"], ["r"])],
        "sigmoid_relu": [helper.make_node("Mul", ["a", "sc"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]),
                         helper.make_node("Relu", ["s"], ["r"])],
        "mul_inf_relu": [helper.make_node("Mul", ["a", "kinf"], ["m"]), helper.make_node("Add", ["m", "bi"], ["s"]),
                         helper.make_node("Relu", ["s"], ["r"])],
    }[tail]
    k0 = sc.copy()
    k0[0, 7] = 0.0  # (a zero scale folds: W * 0 times an inf / NaN input is NaN too)
    kinf = sc.copy()
    kinf[0, 3] = np.inf
    nodes = [helper.make_node("Conv", ["x", "W0"], ["a"], pads=[1, 1, 1, 1]), *op_nodes,
             helper.make_node("Conv", ["r", "W1"], ["y"])]
    inits = [const("W0", _f32(c, c, 3, 3) * 0.05), const("sc", sc), const("bi", _f32(1, c, 1, 1)),
             const("k0", k0), const("kinf", kinf), const("lo", np.float32(5.0)), const("hi", np.float32(10.0)),
             const("W1", _f32(4, c, 1, 1) * 0.1)]
    m = float_model(nodes, [("x", [1, c, hw, hw])], "y", inits)
    m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    xs = [_f32(1, c, hw, hw)]
    xs.append(xs[0].copy())
    xs[1][0, 9, 3, 4] = poison
    lm = LoadedModel.from_compiled(compile_model(m))
    for x in [xs[0], xs[1], xs[0], xs[1]]:  # clean and poisoned runs alternate (recorded bounds)
        want = run_ort(m, {"x": x})
        for g_, w_ in zip(lm.run_dict({"x": x}), want):
            np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scale", [np.inf, -np.inf, np.nan, 1e30])
def test_conv_scale_fold_keeps_non_finite_scales_out(scale: float) -> None:
    """conv(x) * s with an inf / NaN s, or an s that overflows the folded weights: ConvScaleBiasFold
    folded W * s (inf * a zero input gave NaN where ORT gives +-inf / the finite product)."""
    c, hw = 8, 5
    s = np.ones((1, c, 1, 1), np.float32)
    s[0, 2] = scale
    w = _f32(c, c, 3, 3)
    w[2] *= 1e10
    x = _f32(1, c, hw, hw) * np.float32(1e-20)  # conv(x) * 1e30 finite, W * 1e30 not
    x[0, :, 0, :] = 0.0  # zero inputs under the kernel
    m = float_model([helper.make_node("Conv", ["x", "W"], ["a"], pads=[1, 1, 1, 1]),
                     helper.make_node("Mul", ["a", "s"], ["y"])], [("x", [1, c, hw, hw])], "y",
                    [const("W", w), const("s", s)])
    want = run_ort(m, {"x": x})[0]
    got = LoadedModel.from_compiled(compile_model(m)).run_dict({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-24)


def test_prefix_concat_of_a_kv_cache_append() -> None:
    """present = Concat(past, new) (a graph output fed back: the generic plan's CacheAppend) and
    Concat(past, new, other), which now reads present; 12 decode steps with a growing past."""
    nodes = [helper.make_node("Relu", ["x"], ["new"]), helper.make_node("Neg", ["x"], ["other"]),
             helper.make_node("Concat", ["past", "new"], ["present"], axis=2),
             helper.make_node("Concat", ["past", "new", "other"], ["y0"], axis=2),
             helper.make_node("ReduceSum", ["y0", "ax"], ["y"], keepdims=1)]
    m = _model(nodes, [("past", [1, 2, "P", 4]), ("x", [1, 2, 1, 4])], ["present", "y"],
               [const("ax", np.array([2], np.int64))])
    lm = LoadedModel.from_compiled(compile_model(m))
    past = _f32(1, 2, 3, 4)
    past_ort = past.copy()
    seen = []
    for _ in range(12):
        x = _f32(1, 2, 1, 4)
        got, want = lm.run_dict({"past": past, "x": x}), run_ort(m, {"past": past_ort, "x": x})
        seen.append((got, want))
        past, past_ort = got[0], want[0]
    for got, want in seen:  # (earlier results are not overwritten by later appends)
        for g_, w_ in zip(got, want):
            np.testing.assert_allclose(g_, w_, rtol=1e-5, atol=1e-5)


def test_shuffle_dynamic_batches_from_two_threads() -> None:
    m = _dyn_shuffle_unit(116, 10, 2, 58)
    lm = LoadedModel.from_compiled(compile_model(m))
    feeds = [{"x": _f32(n, 4, 10, 10)} for n in (1, 2, 3)]
    wants = [run_ort(m, f) for f in feeds]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for k in range(12):
                j = (i + k) % 3
                for g_, w_ in zip(lm.run_dict(feeds[j]), wants[j]):
                    np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    _in_threads(work, 2, errors)
