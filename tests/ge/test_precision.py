"""PrecisionMode pass (docs/precision.md): each mode's rounding is predictable to the bit.

Expected values are built with numpy casts: float16 operands widened to float32, a float32
product, and the result rounded to float16 where the mode stores float16.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.errors import OptionError
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import fuse_elementwise, precision
from pycann.ge.compile.pipelines import COMPILE_PIPELINE, REQUIRED_PASSES
from pycann.ge.compile.precision_config import resolve_mode
from pycann.ge.run.model import LoadedModel
from pycann.ops import fused, fused_chain

RNG = np.random.default_rng(7)
F16, F32 = np.float16, np.float32


def r16(a: np.ndarray) -> np.ndarray:
    """Round to float16, back to float32."""
    return a.astype(F16).astype(F32)


def rbf(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).astype(F32)


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: list[str],
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _run(m: onnx.ModelProto, feeds: dict[str, np.ndarray], **opts: object) -> list[np.ndarray]:
    opts.setdefault("soc_version", "CPU")
    cm = compile_model(m, CompileOptions(**opts))  # type: ignore[arg-type]
    return LoadedModel.from_compiled(cm).run_dict(feeds)


@pytest.fixture(scope="module")
def mm_sum() -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    """y = MatMul(x, W) (white list) -> s = ReduceSum(y) (black list); the sum leaves float16's range."""
    x = (RNG.uniform(10, 20, (4, 64))).astype(F32)
    w = (RNG.uniform(10, 20, (64, 32))).astype(F32)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm"),
                helper.make_node("ReduceSum", ["y"], ["s"], name="sum", keepdims=0)],
               {"x": [4, 64]}, ["y", "s"], {"W": w})
    return m, {"x": x}, w


def test_default_mode_keeps_dtypes(mm_sum) -> None:
    m, feeds, w = mm_sum
    y, s = _run(m, feeds)
    np.testing.assert_array_equal(y, feeds["x"] @ w)
    assert s.dtype == F32 and np.isfinite(s).all()


def test_force_fp16_rounds_operands_and_result_and_overflows(mm_sum) -> None:
    m, feeds, w = mm_sum
    y, s = _run(m, feeds, precision_mode="force_fp16")
    want_y = r16(r16(feeds["x"]) @ r16(w))  # float16 operands, float32 accumulation, float16 result
    np.testing.assert_array_equal(y, want_y)
    assert y.dtype == F32  # graph outputs keep their dtype
    assert np.isinf(s).all()  # 128 values of ~14400: the float16 sum overflows (65504)


def test_mixed_precision_keeps_the_reduction_fp32(mm_sum) -> None:
    m, feeds, w = mm_sum
    y, s = _run(m, feeds, precision_mode="allow_mix_precision")
    want_y = r16(r16(feeds["x"]) @ r16(w))
    np.testing.assert_array_equal(y, want_y)  # MatMul: white list
    np.testing.assert_allclose(s, want_y.sum(dtype=F32), rtol=1e-6)  # ReduceSum: black list, float32
    assert np.isfinite(s).all()


def test_modify_mixlist_moves_ops_between_lists(mm_sum) -> None:
    m, feeds, w = mm_sum
    # ReduceSum onto the white list: it now runs in float16 and overflows
    _, s = _run(m, feeds, precision_mode_v2="mixed_float16",
                modify_mixlist={"white-list": {"to-add": ["ReduceSumD"]}})  # CANN's IR name works too
    assert np.isinf(s).all()
    # MatMul off the white list (to gray: no low-precision producer before it) -> float32 everywhere
    y, s = _run(m, feeds, precision_mode="allow_mix_precision", modify_mixlist={"white-list": {"to-remove": ["MatMul"]}})
    np.testing.assert_array_equal(y, feeds["x"] @ w)
    y, _ = _run(m, feeds, precision_mode="allow_mix_precision", modify_mixlist={"black-list": {"to-add": ["MatMulV2"]}})
    np.testing.assert_array_equal(y, feeds["x"] @ w)


def test_keep_dtype_keeps_a_node_fp32(mm_sum) -> None:
    m, feeds, w = mm_sum
    y, s = _run(m, feeds, precision_mode="force_fp16", keep_dtype=["mm"])
    np.testing.assert_array_equal(y, feeds["x"] @ w)
    assert np.isinf(s).all()  # the ReduceSum still runs in float16
    y, s = _run(m, feeds, precision_mode="force_fp16", keep_dtype=["OpType::ReduceSum"])
    np.testing.assert_array_equal(y, r16(r16(feeds["x"]) @ r16(w)))
    assert np.isfinite(s).all()


def test_force_fp32_rounds_matrix_operands_only(mm_sum) -> None:
    m, feeds, w = mm_sum
    y, _ = _run(m, feeds, precision_mode="cube_fp16in_fp32out")
    np.testing.assert_array_equal(y, r16(feeds["x"]) @ r16(w))  # float16 in, float32 out (not rounded)
    assert not np.array_equal(y, r16(y))


def test_allow_fp32_to_fp16_rounds_matrix_ops_only() -> None:
    x, w = RNG.standard_normal((3, 8)).astype(F32), RNG.standard_normal((8, 5)).astype(F32)
    b = RNG.standard_normal((5,)).astype(F32) * np.float32(1e-3)
    # (Sin: not an activation the MatMul fusion absorbs; fused post-ops run before the rounding)
    m = _model([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Sin", ["h"], ["t"]),
                helper.make_node("Mul", ["t", "B"], ["y"])], {"x": [3, 8]}, ["y"], {"W": w, "B": b})
    (y,) = _run(m, {"x": x}, precision_mode="allow_fp32_to_fp16")
    np.testing.assert_array_equal(y, np.sin(r16(r16(x) @ r16(w))) * b)  # vector ops stay float32
    (y16,) = _run(m, {"x": x}, precision_mode="force_fp16")
    np.testing.assert_array_equal(y16, r16(r16(np.sin(r16(r16(x) @ r16(w)))) * r16(b)))


def test_force_fp16_input_overflows_to_inf() -> None:
    m = _model([helper.make_node("Relu", ["x"], ["y"])], {"x": [4]}, ["y"])
    x = np.array([1.0, 65504.0, 65519.0, 1e5], F32)
    (y,) = _run(m, {"x": x}, precision_mode="force_fp16")
    np.testing.assert_array_equal(y, [1.0, 65504.0, 65504.0, np.inf])  # IEEE: >= 65520 rounds to inf


def test_weights_are_clipped_to_fp16_range_unless_told_not_to() -> None:
    m = _model([helper.make_node("Mul", ["x", "W"], ["y"])], {"x": [2]}, ["y"], {"W": np.array([1e5, -1e6], F32)})
    x = np.array([0.5, 0.5], F32)
    np.testing.assert_array_equal(_run(m, {"x": x}, precision_mode="force_fp16")[0], [32752.0, -32752.0])
    np.testing.assert_array_equal(_run(m, {"x": x}, precision_mode="force_fp16", is_weight_clip=False)[0],
                                  [np.inf, -np.inf])


def test_bf16_modes_round_to_bfloat16_and_need_a_bf16_chip(mm_sum) -> None:
    m, feeds, w = mm_sum
    y, s = _run(m, feeds, precision_mode="allow_mix_precision_bf16", soc_version="Ascend910B2")
    np.testing.assert_array_equal(y, rbf(rbf(feeds["x"]) @ rbf(w)))
    assert np.isfinite(s).all()  # bfloat16 has float32's range; and ReduceSum stays float32 anyway
    # allow_fp32_to_bf16: the matrix ops (no float32 kernel on the cube unit) run in bfloat16,
    # everything else keeps float32
    y, s2 = _run(m, feeds, precision_mode="allow_fp32_to_bf16", soc_version="Ascend910B2")
    want = rbf(rbf(feeds["x"]) @ rbf(w))
    np.testing.assert_allclose(y, want, rtol=2**-7, atol=0)
    assert not np.array_equal(y, feeds["x"] @ w)
    with pytest.raises(OptionError, match="bfloat16 is not supported by soc_version Ascend310P3"):
        compile_model(m, CompileOptions(precision_mode="allow_mix_precision_bf16", soc_version="Ascend310P3"))


def test_input_fp16_nodes_and_output_type(mm_sum) -> None:
    m, feeds, w = mm_sum
    x16 = feeds["x"].astype(F16)
    cm = compile_model(m, CompileOptions(input_fp16_nodes=["x"], precision_mode="force_fp16", output_type={"": 10},
                                         soc_version="CPU"))
    assert cm.graph.descs["x"].dtype == 10
    lm = LoadedModel.from_compiled(cm)
    y, s = lm.run_dict({"x": x16})
    assert y.dtype == F16 and s.dtype == F16
    np.testing.assert_array_equal(y, (x16.astype(F32) @ r16(w)).astype(F16))
    # the float16 result reaches the output without a float32 round trip
    casts = [n for n in cm.graph.nodes if n.op_type == "Cast"]
    assert len(casts) <= 2, [(n.inputs, n.attrs) for n in casts]
    # default mode: the float16 input is widened for the float32 graph
    (y, _) = _run(m, {"x": x16}, input_fp16_nodes=["x"])
    np.testing.assert_array_equal(y, x16.astype(F32) @ w)


def test_output_type_per_output_with_a_precision_mode(mm_sum) -> None:
    m, feeds, w = mm_sum
    cm = compile_model(m, CompileOptions(precision_mode="force_fp16", output_type={"mm:0": 10}, soc_version="CPU"))
    assert cm.graph.outputs[0] == "y" and cm.graph.descs["y"].dtype == 10  # the name stays, float16 result
    assert cm.graph.descs[cm.graph.outputs[1]].dtype == 1
    y, s = LoadedModel.from_compiled(cm).run_dict(feeds)
    assert y.dtype == F16 and s.dtype == F32
    np.testing.assert_array_equal(y, (r16(feeds["x"]) @ r16(w)).astype(F16))
    assert [n.op_type for n in cm.graph.nodes].count("Cast") == 2  # x to float16, s back to float32


def test_customize_dtypes_sets_one_node() -> None:
    x = RNG.standard_normal((6,)).astype(F32)
    m = _model([helper.make_node("Sigmoid", ["x"], ["h"], name="sig"), helper.make_node("Neg", ["h"], ["y"])],
               {"x": [6]}, ["y"])
    (y,) = _run(m, {"x": x}, customize_dtypes={"sig": {"inputs": [10], "outputs": [10]}})
    np.testing.assert_array_equal(y, -(1 / (1 + np.exp(-r16(x).astype(F16)))).astype(F16).astype(F32))


def test_if_branches_are_rewritten_too() -> None:
    w = RNG.standard_normal((4, 4)).astype(F32)
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                           helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [numpy_helper.from_array(w, "W")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((2, 4)).astype(F32)
    (y,) = _run(m, {"x": x, "c": np.array(True)}, precision_mode="force_fp16")
    np.testing.assert_array_equal(y, r16(r16(x) @ r16(w)))


def test_fused_attention_fp16_rounds_probabilities() -> None:
    q, kt, v = (RNG.standard_normal(s).astype(F16) for s in ((2, 3, 8), (2, 8, 3), (2, 3, 8)))
    got = fused._k_attention([q, kt, v], {"scale": 0.5})[0]
    s = (q.astype(F32) @ kt.astype(F32)) * F32(0.5)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = (r16(p) @ v.astype(F32)).astype(F16)
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(F32), want.astype(F32), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("mode", ["allow_fp32_to_bf16", "allow_fp32_to_fp16"])
def test_fused_attention_keeps_the_float32_mask_where_only_matrix_ops_are_reduced(mode: str) -> None:
    # A finfo(float32).min mask (Hugging Face's) with every key of a row masked: float32 (ONNX
    # Runtime) and the unfused graph in these modes (Add and Softmax stay float32) give a finite
    # row; the fused node once narrowed the mask to -inf and returned NaN rows. A position bias
    # added as the mask keeps its float32 bits too.
    b, h, s, d = 1, 2, 4, 8
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), helper.make_node("MatMul", ["q", "kt"], ["sc"]),
             helper.make_node("Mul", ["sc", "scale"], ["ss"]), helper.make_node("Add", ["ss", "m"], ["sm"]),
             helper.make_node("Softmax", ["sm"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    m = _model(nodes, {"q": [b, h, s, d], "k": [b, h, s, d], "v": [b, h, s, d], "m": [b, h, s, s]}, ["y"],
               {"scale": np.array(d ** -0.5, F32)})
    feeds = {n: RNG.standard_normal((b, h, s, d)).astype(F32) for n in ("q", "k", "v")}
    mask = RNG.standard_normal((b, h, s, s)).astype(F32)  # a position bias ...
    mask[..., 0, :] = np.finfo(F32).min  # ... with row 0: every key masked
    mask[..., 1:, s // 2:] = np.finfo(F32).min
    feeds["m"] = mask
    cm = compile_model(m, CompileOptions(soc_version="CPU", precision_mode=mode))
    fa = [n for n in cm.graph.nodes if n.op_type == "FusedAttention"]
    assert len(fa) == 1
    (got,) = LoadedModel.from_compiled(cm).run_dict(feeds)
    (unfused,) = _run(m, feeds, precision_mode=mode, disabled_passes=["AttentionFusion"])
    assert np.isfinite(got).all() and np.isfinite(unfused).all()
    # (the fused node keeps the scores float32; the unfused MatMul rounds them: an ulp apart)
    np.testing.assert_allclose(got, unfused, atol=2e-2 if mode == "allow_fp32_to_bf16" else 3e-3)
    # the unmasked float32 answer, within the operands' rounding
    sc = np.einsum("bhsd,bhtd->bhst", feeds["q"], feeds["k"]) * F32(d ** -0.5) + mask
    p = np.exp(sc - sc.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ feeds["v"]
    np.testing.assert_allclose(got, want, atol=0.1 if mode == "allow_fp32_to_bf16" else 0.02)


def test_fp16_elementwise_chain_rounds_each_step_like_unfused_ops() -> None:
    x = np.array([-12.0, -3.0, 0.5, 9.0], F16)
    steps = [["Sigmoid", -1, 0, 0.0, 0.0], ["Mul", 1, 0, 0.0, 0.0]]
    two = np.array(3.0, F16)
    got = fused_chain._k_chain([x, two], {"steps": steps})[0]
    sig = (1 / (1 + np.exp(-x.astype(F32)))).astype(F16)  # a float16 Sigmoid: float32 inside, rounded
    assert got.dtype == F16 and got[0] > 0  # no float16 overflow of exp(12) midway
    np.testing.assert_array_equal(got, (sig.astype(F32) * F32(3)).astype(F16))


def test_pass_is_in_the_pipeline_and_cannot_be_switched_off() -> None:
    names = [n for n, _ in COMPILE_PIPELINE]
    assert names.index(precision.name) > names.index(fuse_elementwise.name)  # dtypes chosen after fusion
    assert precision.name in REQUIRED_PASSES


@pytest.mark.parametrize(("v1", "v2", "want"), [
    ("", "", "must_keep_origin_dtype"), ("cube_fp16in_fp32out", "", "force_fp32"),
    ("allow_mix_precision", "", "allow_mix_precision_fp16"), ("", "fp16", "force_fp16"),
    ("", "origin", "must_keep_origin_dtype"), ("", "mixed_float16", "allow_mix_precision_fp16"),
])
def test_mode_names_resolve(v1: str, v2: str, want: str) -> None:
    assert resolve_mode(v1, v2, "Ascend310P3") == want


@pytest.mark.parametrize(("v1", "v2", "code"), [
    ("force_fp16", "fp16", "E10056"), ("fp17", "", "E10001"), ("", "mixed_hif8", "E10001"),
])
def test_bad_mode_options(v1: str, v2: str, code: str) -> None:
    with pytest.raises(OptionError) as e:
        resolve_mode(v1, v2, "Ascend310P3")
    assert e.value.code == code


def test_modify_mixlist_needs_a_mixed_mode(mm_sum) -> None:
    with pytest.raises(OptionError, match="Modify_mixlist is set"):
        compile_model(mm_sum[0], CompileOptions(precision_mode="force_fp16", modify_mixlist={"black-list": {}}))


def test_simplify_casts_folds_exact_widening() -> None:
    m = _model([helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT16),
                helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT),
                helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT16)], {"x": [3]}, ["y"])
    cm = compile_model(m)
    g = cm.graph
    precision.simplify_casts(g)
    assert [n.op_type for n in g.nodes].count("Cast") == 2
    x = np.array([1.0001, 7e4, -3.3], F32)
    np.testing.assert_array_equal(LoadedModel.from_compiled(cm).run([x])[0], np.array([1.0, np.inf, -3.30078125], F16))


def test_allow_fp32_to_bf16_conv_relu_residual_in_bfloat16() -> None:
    """Conv + residual Add + Relu (fused) under allow_fp32_to_bf16: bfloat16 operands, float32
    accumulation, bfloat16 storage — compared with a numpy golden on bf16-rounded values."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 4, 3, 3)).astype(F32)
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "W2"], ["d"]),
             helper.make_node("Add", ["d", "c"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    w2 = rng.standard_normal((8, 8, 1, 1)).astype(F32)
    m = _model(nodes, {"x": [1, 4, 9, 9]}, ["y"], {"W": w, "W2": w2})
    x = rng.standard_normal((1, 4, 9, 9)).astype(F32)
    (y,) = _run(m, {"x": x}, precision_mode="allow_fp32_to_bf16", soc_version="Ascend910B2")
    import torch

    c = rbf(torch.nn.functional.conv2d(torch.from_numpy(rbf(x)), torch.from_numpy(rbf(w)), padding=1).numpy())
    d = rbf(np.einsum("oi,nihw->nohw", rbf(w2)[:, :, 0, 0], c))
    want = np.maximum(rbf(d + c), 0)
    # bfloat16 has 8 significant bits; accumulation order differs from the golden's, so allow a
    # couple of ulps of the values' scale (max |y| ~ 16 here)
    np.testing.assert_allclose(y, want, rtol=2**-5, atol=0.05)
    assert np.all(rbf(y) == y), "outputs carry bfloat16 precision"
