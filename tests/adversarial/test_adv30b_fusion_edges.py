"""Adversarial near-misses of GE's compile-time rewrites (session adv30b): a fused pattern's
intermediate that is also a graph output or read by another node, non-finite BatchNormalization
scales, NaN Clip bounds; compared with ONNX Runtime on the unfused model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(30)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], inits: list[onnx.TensorProto],
           outputs: list[str], opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
                                       for k, v in feeds.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compare(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[str]:
    cm = compile_model(m)
    got = LoadedModel.from_compiled(cm).run_dict(feeds)
    want = run_ort(m, feeds)
    assert len(got) == len(want)
    for g_, w_ in zip(got, want):
        g_ = np.asarray(g_)
        assert g_.shape == w_.shape and g_.dtype == w_.dtype, (g_.shape, g_.dtype, w_.shape, w_.dtype)
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(w_))
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-5)
    return [n.op_type for n in cm.graph.nodes]


def _layernorm() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]), helper.make_node("Sub", ["x", "m"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]), helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
             helper.make_node("Div", ["d", "s"], ["n"]), helper.make_node("Mul", ["n", "gam"], ["nm"]),
             helper.make_node("Add", ["nm", "bet"], ["y"])]
    return nodes, [const("eps", np.float32(1e-5)), const("two", np.float32(2)), const("gam", _f32(8)),
                   const("bet", _f32(8))]


@pytest.mark.parametrize("value", ["m", "d", "s"])
@pytest.mark.parametrize("use", ["output", "reader"])
def test_layernorm_intermediate_read_outside_the_pattern(value: str, use: str) -> None:
    """The mean, x - mean or the std of a decomposed layer norm that is also a graph output (or
    read by another node) was fused away: the output came back as None, the reader failed with
    'NoneType' object has no attribute 'dtype'."""
    nodes, inits = _layernorm()
    outs = ["y", value]
    if use == "reader":
        nodes.append(helper.make_node("Neg", [value], ["z"]))
        outs = ["y", "z"]
    _compare(_model(nodes, {"x": _f32(2, 5, 8)}, inits, outs), {"x": _f32(2, 5, 8)})


def _gelu_tanh(src: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Pow", [src, "three"], ["p"]), helper.make_node("Mul", ["p", "c1"], ["p2"]),
             helper.make_node("Add", [src, "p2"], ["p3"]), helper.make_node("Mul", ["p3", "c2"], ["p4"]),
             helper.make_node("Tanh", ["p4"], ["p5"]), helper.make_node("Add", ["p5", "one"], ["p6"]),
             helper.make_node("Mul", [src, "half"], ["p7"]), helper.make_node("Mul", ["p7", "p6"], ["y"])]
    return nodes, [const("three", np.float32(3)), const("c1", np.float32(0.044715)),
                   const("c2", np.float32(0.7978845608)), const("one", np.float32(1)), const("half", np.float32(0.5))]


@pytest.mark.parametrize("value", ["p", "p2"])
@pytest.mark.parametrize("use", ["output", "reader"])
def test_gelu_tanh_cube_read_outside_the_pattern(value: str, use: str) -> None:
    """x^3 (or 0.044715 x^3) of a tanh-form GELU that is also a graph output or read elsewhere
    was fused away into the Gelu (the value came back as None)."""
    nodes, inits = _gelu_tanh("x")
    outs = ["y", value]
    if use == "reader":
        nodes.append(helper.make_node("Neg", [value], ["z"]))
        outs = ["y", "z"]
    feeds = {"x": _f32(3, 4, 6)}
    _compare(_model(nodes, feeds, inits, outs, opset=20), feeds)


@pytest.mark.parametrize("case", ["gamma_inf", "var_plus_eps_zero"])
@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_conv_batchnorm_with_an_infinite_scale_is_not_folded(case: str, op: str) -> None:
    """gamma / sqrt(var + eps) = inf for one channel: ORT's BatchNormalization gives +-inf there;
    the folded conv's inf weights summed inf - inf (and inf * 0) into NaN."""
    gamma, var, eps = _f32(4), np.abs(_f32(4)) + 0.1, 1e-5
    if case == "gamma_inf":
        gamma[1] = np.inf
    else:
        var[1], eps = 0.0, 0.0
    w = _f32(4, 3, 3, 3) if op == "Conv" else _f32(3, 4, 3, 3)
    nodes = [helper.make_node(op, ["x", "W", "B"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["y"], epsilon=eps)]
    inits = [const("W", w), const("B", _f32(4)), const("g", gamma), const("b", _f32(4)), const("mu", _f32(4)),
             const("var", var)]
    feeds = {"x": _f32(2, 3, 6, 6)}
    _compare(_model(nodes, feeds, inits, ["y"]), feeds)


@pytest.mark.parametrize("bounds", [(0.0, np.nan), (np.nan, 6.0), (np.nan, np.nan)])
@pytest.mark.parametrize("before", ["", "Conv", "MatMul", "Mul"])
def test_clip_with_a_nan_bound_bounds_nothing(bounds: tuple[float, float], before: str) -> None:
    """Clip(x, 0, NaN): ORT leaves that side unbounded (+inf stays +inf, NaN stays NaN); the Clip
    kernel, FusedConv / FusedMatMul's Clip post-op and the elementwise chain returned NaN everywhere."""
    x = _f32(2, 3, 6, 6) * 4
    if before in ("", "Mul"):  # (the convs' numpy reference warns on inf inputs)
        x.flat[:4] = [np.nan, np.inf, -np.inf, 3e38]
    nodes, inits, src = [], [const("lo", np.float32(bounds[0])), const("hi", np.float32(bounds[1]))], "x"
    if before == "Conv":
        nodes, src = [helper.make_node("Conv", ["x", "W", "B"], ["c"])], "c"
        inits += [const("W", _f32(4, 3, 3, 3)), const("B", _f32(4))]
    elif before == "MatMul":
        nodes, src = [helper.make_node("MatMul", ["x", "W"], ["c0"]), helper.make_node("Add", ["c0", "B"], ["c"])], "c"
        inits += [const("W", _f32(6, 5)), const("B", _f32(5))]
    elif before == "Mul":
        nodes, src = [helper.make_node("Mul", ["x", "k"], ["c"])], "c"
        inits += [const("k", np.float32(2.0))]
    nodes.append(helper.make_node("Clip", [src, "lo", "hi"], ["y"]))
    _compare(_model(nodes, {"x": x}, inits, ["y"], opset=13), {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_tanh_op_of_a_value_above_half_the_dtype_max(dtype: type) -> None:
    """Gelu-20 approximate="tanh" of 3e38 (float32; 1.7e308 float64): ORT returns x; the op's kernel
    formed x * (1 + tanh(..)) first, which overflowed to inf."""
    big = 3e38 if dtype == np.float32 else 1.7e308
    x = np.array([big, -big, 1.0, np.inf, -np.inf, np.nan, 3.0], dtype)
    et = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], "g",
                          [helper.make_tensor_value_info("x", et, [7])], [helper.make_tensor_value_info("y", et, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    _compare(m, {"x": x})


def test_a_pass_that_drops_a_graph_output_fails_the_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite that removes a value a graph output (or another node) still needs used to compile
    and run with that value None; the pipeline now verifies the graph once at its end."""
    from pycann.errors import ModelError
    from pycann.ge.compile import pipelines
    from pycann.ge.compile.passes.base import PassResult

    def drop_relu(graph, ctx):  # noqa: ANN001, ANN202  (a deliberately wrong pass)
        graph.nodes = [n for n in graph.nodes if n.op_type != "Relu"]
        return PassResult(graph, True, "dropped", [])

    monkeypatch.setattr(pipelines, "COMPILE_PIPELINE", [*pipelines.COMPILE_PIPELINE[:1], ("Broken", drop_relu)])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    with pytest.raises(ModelError, match="pass pipeline left an invalid graph.*'r'"):
        compile_model(_model(nodes, {"x": _f32(2, 3)}, [], ["y"]))


def test_integer_mul_add_clip_is_not_a_hard_sigmoid() -> None:
    """Clip(Add(Mul(x, 2), 1), 0, 1) on int32 was canonicalised to HardSigmoid, which takes floats
    only: the compile failed with 'input 0 has dtype INT32' on a valid model."""
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    inits = [const("a", np.int32(2)), const("b", np.int32(1)), const("lo", np.int32(0)), const("hi", np.int32(1))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.INT32, [3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    got = LoadedModel.from_compiled(compile_model(m)).run_dict({"x": x})[0]
    np.testing.assert_array_equal(got, run_ort(m, {"x": x})[0])


def test_float16_conv_batchnorm_whose_folded_weights_overflow_is_not_folded() -> None:
    """A float16 conv + BN with scale 1e5 (gamma 1000, var 1e-4): the folded weights overflowed
    float16 to +-inf and the conv summed them into NaN where ORT's BN output is +-inf."""
    h = np.float16
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["y"])]
    inits = [const("W", (_f32(4, 3, 3, 3) * 100).astype(h)), const("B", _f32(4).astype(h)),
             const("g", np.full(4, 1000, h)), const("b", _f32(4).astype(h)), const("mu", _f32(4).astype(h)),
             const("var", np.full(4, 1e-4, h))]
    x = _f32(2, 3, 5, 5).astype(h)
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 3, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    got = np.asarray(LoadedModel.from_compiled(compile_model(m)).run_dict({"x": x})[0])
    want = run_ort(m, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def _typed_model(nodes: list[onnx.NodeProto], feeds: dict[str, np.ndarray], inits: list[onnx.TensorProto],
                 et: int, opset: int = 13) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(k, et, list(v.shape)) for k, v in feeds.items()],
                          [helper.make_tensor_value_info("y", et, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_gemm_alpha_times_b_overflowing_is_not_folded(dtype: type) -> None:
    """GemmToMatMul folded alpha into B: alpha * B overflowed the dtype to inf (float16: 1000 * 100),
    and A @ inf gave NaN where ORT's alpha * (A @ B) of a small A is finite."""
    big, small = (1000.0, 1e-3) if dtype == np.float16 else (1e30, 1e-30)
    w = 100.0 if dtype == np.float16 else 1e10
    a = (_f32(4, 6) * small).astype(dtype)
    nodes = [helper.make_node("Gemm", ["a", "B", "C"], ["y"], alpha=big)]
    inits = [const("B", (_f32(6, 5) * w).astype(dtype)), const("C", _f32(5).astype(dtype))]
    m = _typed_model(nodes, {"a": a}, inits, TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT)
    got = np.asarray(LoadedModel.from_compiled(compile_model(m)).run_dict({"a": a})[0])
    want = run_ort(m, {"a": a})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("n", [2, 3])
def test_float16_sum_and_mean_accumulate_in_float32(op: str, n: int) -> None:
    """ORT sums float16 Sum / Mean inputs in float32: 60000 + 60000 - 60000 is 60000 and the mean
    of 60000 and 60000 is 60000; the kernels (and the Add chain Canonicalize made) summed in
    float16 and returned inf."""
    h = np.float16
    vals = [np.array([60000, 1.0, 0.1, 3.3], h), np.array([60000, 2.0, 0.2, 1.1], h),
            np.array([-60000, 0.3, 0.3, 0.7], h)][:n]
    feeds = {f"a{i}": v for i, v in enumerate(vals)}
    m = _typed_model([helper.make_node(op, list(feeds), ["y"])], feeds, [], TensorProto.FLOAT16)
    got = np.asarray(LoadedModel.from_compiled(compile_model(m)).run_dict(feeds)[0])
    want = run_ort(m, feeds)[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("opset", [7, 9, 13])
@pytest.mark.parametrize("read", [("y",), ("y", "rm", "rv"), ("y", "sm", "sv"), ("rm",)])
def test_batchnorm_before_opset_14_with_its_training_outputs(opset: int, read: tuple[str, ...]) -> None:
    """BatchNormalization-7..13 naming mean / var / saved_mean / saved_var is the spec's training
    form, which ORT runs with the batch statistics; the importer dropped those outputs and ran the
    inference form: Y differed and a read running mean came back None."""
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "b", "mu", "var"], ["y", "rm", "rv", "sm", "sv"],
                              momentum=0.7, epsilon=1e-3)]
    inits = [const("g", _f32(4)), const("b", _f32(4)), const("mu", _f32(4)), const("var", np.abs(_f32(4)) + 0.1)]
    feeds = {"x": _f32(2, 4, 3, 3)}
    _compare(_model(nodes, feeds, inits, list(read), opset=opset), feeds)
