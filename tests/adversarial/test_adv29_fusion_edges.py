"""Adversarial near-misses of GE's fusion passes (session adv29): graphs one detail away from a
pattern a pass fuses, compared with ONNX Runtime on the unfused model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import const
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(29)


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list[int], int]], inits: list[onnx.TensorProto],
           opset: int = 13, out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, s, t in inputs],
                          [helper.make_tensor_value_info("y", out_type, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _compare(m: onnx.ModelProto, feeds: dict[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> list[str]:
    cm = compile_model(m)
    got = LoadedModel.from_compiled(cm).run_dict(feeds)
    want = run_ort(m, feeds)
    for g_, w_ in zip(got, want):
        g_ = np.asarray(g_)
        assert g_.shape == w_.shape and g_.dtype == w_.dtype, (g_.shape, g_.dtype, w_.shape, w_.dtype)
        np.testing.assert_array_equal(np.isnan(g_), np.isnan(w_))
        np.testing.assert_allclose(g_, w_, rtol=rtol, atol=atol)
    return [n.op_type for n in cm.graph.nodes]


def _attention(qs: tuple[int, ...], scale: tuple[str, np.ndarray] | None, mask: tuple[np.ndarray, np.ndarray] | None,
               dtype: type = np.float32) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """softmax(Q @ K [scale] [Where(cond, ., fill)]) @ V with Q, K^T and V all of shape ``qs``."""
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    nodes = [helper.make_node("MatMul", ["q", "k"], ["s"])]
    inits: list[onnx.TensorProto] = []
    inputs = [("q", list(qs), t), ("k", list(qs[:-2]) + [qs[-1], qs[-2]], t), ("v", list(qs), t)]
    feeds = {"q": RNG.standard_normal(qs).astype(dtype), "v": RNG.standard_normal(qs).astype(dtype),
             "k": RNG.standard_normal(qs[:-2] + (qs[-1], qs[-2])).astype(dtype)}
    cur = "s"
    if scale is not None:
        inits.append(const("c", scale[1].astype(dtype)))
        nodes.append(helper.make_node(scale[0], [cur, "c"], ["s2"]))
        cur = "s2"
    if mask is not None:
        cond, fill = mask
        inputs.append(("cond", list(cond.shape), TensorProto.BOOL))
        feeds["cond"] = cond
        inits.append(const("fill", fill.astype(dtype)))
        nodes.append(helper.make_node("Where", ["cond", cur, "fill"], ["s3"]))
        cur = "s3"
    nodes += [helper.make_node("Softmax", [cur], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    return _model(nodes, inputs, inits, out_type=t), feeds


def test_attention_scores_divided_by_zero() -> None:
    """Div(scores, 0) gives +-inf scores (ORT: NaN rows); AttentionFusion raised ZeroDivisionError."""
    m, feeds = _attention((2, 3, 5, 8), ("Div", np.array(0.0)), None)
    ops = _compare(m, feeds)
    assert "FusedAttention" not in ops


def test_attention_scale_of_higher_rank_than_the_scores() -> None:
    """A [1, 1, 1] scale of rank-2 scores makes every later value rank 3; the fused op dropped the
    dim (output (5, 8) against ORT's (1, 5, 8))."""
    m, feeds = _attention((5, 8), ("Mul", np.full((1, 1, 1), 0.3)), None)
    _compare(m, feeds)


def test_attention_where_mask_float16() -> None:
    """A float16 attention masked by Where(cond, s, -inf): the additive mask Where(cond, 0, fill)
    had a float32 zero beside the float16 fill (ShapeError at compile)."""
    cond = RNG.random((2, 1, 5, 5)) > 0.4
    cond[..., 0] = True
    m, feeds = _attention((2, 3, 5, 8), ("Mul", np.array(0.35)), (cond, np.array(-np.inf)), np.float16)
    ops = _compare(m, feeds, rtol=1e-2, atol=2e-3)
    assert "FusedAttention" in ops


# ------------------------------------------- one-element constants of a higher rank than their operand

_S3 = (1, 1, 1)


def _f(v: float, shape: tuple[int, ...] = ()) -> np.ndarray:
    return np.full(shape, v, np.float32)


def _gelu_erf(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    vals = {"r2": 2 ** 0.5, "one": 1.0, "half": 0.5}
    return nodes, [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


def _gelu_tanh(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Pow", ["x", "three"], ["p"]), helper.make_node("Mul", ["p", "c"], ["cb"]),
             helper.make_node("Add", ["x", "cb"], ["a"]), helper.make_node("Mul", ["a", "k"], ["m"]),
             helper.make_node("Tanh", ["m"], ["t"]), helper.make_node("Add", ["t", "one"], ["o"]),
             helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "o"], ["y"])]
    vals = {"three": 3.0, "c": 0.044715, "k": (2 / np.pi) ** 0.5, "one": 1.0, "half": 0.5}
    return nodes, [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


def _hard_sigmoid(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
             helper.make_node("Mul", ["c", "sixth"], ["y"])]
    vals = {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1 / 6}
    return nodes, [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


def _hard_swish(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["c"]),
             helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Mul", ["m", "sixth"], ["y"])]
    vals = {"three": 3.0, "zero": 0.0, "six": 6.0, "sixth": 1 / 6}
    return nodes, [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


def _hard_sigmoid_affine(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Mul", ["x", "alpha"], ["m"]), helper.make_node("Add", ["m", "beta"], ["a"]),
             helper.make_node("Clip", ["a", "zero", "one"], ["y"])]
    vals = {"alpha": 0.3, "beta": 0.4, "zero": 0.0, "one": 1.0}
    return nodes, [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


def _layer_norm(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("ReduceMean", ["x", "ax"], ["mu"]), helper.make_node("Sub", ["x", "mu"], ["d"]),
             helper.make_node("Pow", ["d", "two"], ["p"]), helper.make_node("ReduceMean", ["p", "ax"], ["v"]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["y"])]
    vals = {"two": 2.0, "eps": 1e-5}
    return nodes, [const("ax", np.array([-1], np.int64))] + [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


def _rms_norm(big: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"]), helper.make_node("ReduceMean", ["p", "ax"], ["v"]),
             helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["one", "sd"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["y"])]
    vals = {"two": 2.0, "eps": 1e-5, "one": 1.0}
    return nodes, [const("ax", np.array([-1], np.int64))] + [const(k, _f(v, _S3 if k == big else ())) for k, v in vals.items()]


_SPELLINGS = {"gelu_erf": (_gelu_erf, "Gelu", ["r2", "one", "half"]),
              "gelu_tanh": (_gelu_tanh, "Gelu", ["three", "c", "k", "one", "half"]),
              "hard_sigmoid": (_hard_sigmoid, "HardSigmoid", ["three", "sixth"]),
              "hard_swish": (_hard_swish, "HardSwish", ["three", "sixth"]),
              "hard_sigmoid_affine": (_hard_sigmoid_affine, "HardSigmoid", ["alpha", "beta"]),
              "layer_norm": (_layer_norm, "LayerNormalization", ["two", "eps"]),
              "rms_norm": (_rms_norm, "RMSNormalization", ["two", "eps", "one"])}


@pytest.mark.parametrize("case,big", [(c, b) for c, (_, _, bigs) in _SPELLINGS.items() for b in ["", *bigs]])
def test_rank_raising_one_element_constant_is_not_a_scalar(case: str, big: str) -> None:
    """A one-element constant of shape [1, 1, 1] in a rank-2 spelling of an activation or norm
    broadcasts the result to rank 3; the rewrites took it as a scalar and the op they made
    returned rank 2 (ORT (1, 4, 6), pycann (4, 6)). With every constant 0-d the spelling still
    becomes its op."""
    build, op, _ = _SPELLINGS[case]
    nodes, inits = build(big)
    m = _model(nodes, [("x", [4, 6], TensorProto.FLOAT)], inits, opset=18)
    x = (RNG.standard_normal((4, 6)) * 3).astype(np.float32)
    cm = compile_model(m)
    got = LoadedModel.from_compiled(cm).run_dict({"x": x})[0]
    want = run_ort(m, {"x": x})[0]
    assert np.asarray(got).shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if not big:
        from pycann.ge.compile.importers.onnx import import_model
        from pycann.ge.compile.passes import canonicalize, fuse_gelu, fuse_layernorm, fuse_rmsnorm
        from pycann.ge.compile.passes.constant_folding import fold_graph
        from pycann.ge.compile.passes.infer_shapes import infer_graph

        g = import_model(m)
        infer_graph(g)
        fold_graph(g)
        infer_graph(g)
        canonicalize.canonicalize(g)
        for p in (fuse_gelu, fuse_layernorm, fuse_rmsnorm):
            p.fuse(g)
            infer_graph(g)
        assert op in [n.op_type for n in g.nodes], [n.op_type for n in g.nodes]


@pytest.mark.parametrize("act", ["", "Relu", "Sigmoid"])
def test_fused_matmul_of_two_vectors(act: str) -> None:
    """MatMul of two 1-D operands is a 0-d value; FusedMatMul's epilogue worked on the numpy scalar
    np.matmul returns: the bias was added to a copy (lost) and an activation raised TypeError."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["z" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["z"], ["y"]))
    inits = [const("w", RNG.standard_normal(8).astype(np.float32)), const("b", np.array(-0.75, np.float32))]
    m = _model(nodes, [("x", [8], TensorProto.FLOAT)], inits)
    ops = _compare(m, {"x": RNG.standard_normal(8).astype(np.float32)})
    assert "FusedMatMul" in ops, ops


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose"])
def test_conv_batchnorm_in_training_mode_is_not_folded(op: str) -> None:
    """BatchNormalization-15 with training_mode=1 normalises by the batch's statistics; the
    Conv+BN fold used the running mean and var (BatchNormToScaleShift already refused it)."""
    c = 6
    w = RNG.standard_normal((c, 3, 1, 1) if op == "Conv" else (3, c, 1, 1)).astype(np.float32)
    inits = [const("w", w), const("sc", (RNG.random(c) + 0.5).astype(np.float32)),
             const("bb", RNG.standard_normal(c).astype(np.float32)), const("mu", RNG.standard_normal(c).astype(np.float32)),
             const("var", (RNG.random(c) + 0.1).astype(np.float32))]
    nodes = [helper.make_node(op, ["x", "w"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "sc", "bb", "mu", "var"], ["y", "rm", "rv"], training_mode=1)]
    m = _model(nodes, [("x", [2, 3, 4, 5], TensorProto.FLOAT)], inits, opset=15)
    _compare(m, {"x": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)})


_CLIP_DTYPES = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


@pytest.mark.parametrize("dtype,where", [(d, "plain") for d in _CLIP_DTYPES] + [(np.float32, "chain"),
                                                                                (np.float32, "conv")])
@pytest.mark.parametrize("bound", ["min", "max", "none"])
def test_clip_with_an_omitted_bound_clips_infinities(dtype: type, where: str, bound: str) -> None:
    """An omitted Clip min (max) is the dtype's lowest (largest) value (ONNX Clip-11+), so ONNX
    Runtime maps -inf (+inf) to it; pycann's Clip kernel, ElementwiseChain and FusedConv kept +-inf."""
    t = _CLIP_DTYPES[dtype]
    ins = {"min": ["a", "lo"], "max": ["a", "", "hi"], "none": ["a"]}[bound]
    inits = [const(n, np.array(v, dtype)) for n, v in (("lo", -0.3), ("hi", 0.3)) if n in ins]
    shape = [2, 24, 19, 23]
    if where == "plain":
        nodes = [helper.make_node("Identity", ["x"], ["a"])]
    elif where == "chain":
        nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Neg", ["n"], ["a"])]
    else:
        shape = [1, 3, 8, 8]
        inits.append(const("w", np.ones((2, 3, 1, 1), dtype)))
        nodes = [helper.make_node("Conv", ["x", "w"], ["a"])]
    nodes.append(helper.make_node("Clip", ins, ["y"]))
    m = _model(nodes, [("x", shape, t)], inits, out_type=t)
    x = RNG.standard_normal(shape).astype(dtype)
    x.reshape(-1)[:4] = [np.inf, -np.inf, np.nan, 3.0]
    x.reshape(-1)[-2:] = [-np.inf, np.inf]
    _compare(m, {"x": x}, rtol=1e-3 if dtype == np.float16 else 1e-4)


@pytest.mark.parametrize("pairs", [2, 3])
def test_back_to_back_identity_transpose_pairs(pairs: int) -> None:
    """NCHW -> NHWC -> NCHW twice in a row: TransposeReshapeCancellation renamed the second pair's
    output to the first pair's output, itself renamed away (the reader then had no input:
    KernelError / ShapeError)."""
    nodes, cur = [], "x"
    for i in range(pairs):
        nodes += [helper.make_node("Transpose", [cur], [f"t{i}"], perm=[0, 2, 3, 1]),
                  helper.make_node("Transpose", [f"t{i}"], [f"u{i}"], perm=[0, 3, 1, 2])]
        cur = f"u{i}"
    nodes.append(helper.make_node("Add", [cur, "x"], ["y"]))
    m = _model(nodes, [("x", [2, 3, 4, 5], TensorProto.FLOAT)], [])
    ops = _compare(m, {"x": RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)})
    assert "Transpose" not in ops, ops


@pytest.mark.parametrize("symbolic", [False, True])
def test_reduce_mean_over_empty_spatial_dims_is_zero(symbolic: bool) -> None:
    """ReduceMean over H, W of an image with H = 0 is 0 in ONNX Runtime; canonicalised to
    GlobalAveragePool it was NaN (numpy's mean of nothing). Static: the rewrite is refused;
    symbolic H (the rewrite happens): GlobalAveragePool of an empty extent gives 0 too."""
    m = _model([helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)],
               [("x", [2, 3, "h" if symbolic else 0, 5], TensorProto.FLOAT)], [])
    _compare(m, {"x": np.zeros((2, 3, 0, 5), np.float32)})


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("batch", [1, 3])
def test_batchnorm7_per_activation(conv: bool, batch: int) -> None:
    """BatchNormalization-7 with spatial=0 (scale, B, mean, var of shape C x H x W): the importer
    dropped ``spatial`` and the op then refused the parameters (ShapeError: must be 1-D)."""
    shp = (3, 4, 5)
    inits = [const("sc", (RNG.random(shp) + 0.5).astype(np.float32)), const("bb", RNG.standard_normal(shp).astype(np.float32)),
             const("mu", RNG.standard_normal(shp).astype(np.float32)), const("var", (RNG.random(shp) + 0.1).astype(np.float32))]
    nodes = [helper.make_node("BatchNormalization", ["c" if conv else "x", "sc", "bb", "mu", "var"], ["y"], spatial=0,
                              epsilon=1e-3)]
    if conv:
        inits.append(const("w", RNG.standard_normal((3, 3, 1, 1)).astype(np.float32)))
        nodes.insert(0, helper.make_node("Conv", ["x", "w"], ["c"]))
    m = _model(nodes, [("x", [batch, 3, 4, 5], TensorProto.FLOAT)], inits, opset=7)
    _compare(m, {"x": RNG.standard_normal((batch, 3, 4, 5)).astype(np.float32)})


@pytest.mark.parametrize("act", ["", "Relu"])
def test_conv_residual_of_unknown_fit_is_not_fused(act: str) -> None:
    """A 3x3 valid conv of a symbolic-H/W input has unknown output dims; a residual input of named
    dims was taken as fitting them (broadcast_shapes reads None beside 'a' as None): at 3x3 the conv
    gives 1x1 and the 4x4 residual enlarges it, which ORT computes and the FusedConv refused
    (ShapeError at run time)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Add", ["c", "r"], ["a" if act else "y"])]
    if act:
        nodes.append(helper.make_node(act, ["a"], ["y"]))
    m = _model(nodes, [("x", ["n", 3, "h", "w"], TensorProto.FLOAT), ("r", ["n", 8, "a", "b"], TensorProto.FLOAT)],
               [const("w", RNG.standard_normal((8, 3, 3, 3)).astype(np.float32))])
    _compare(m, {"x": RNG.standard_normal((2, 3, 3, 3)).astype(np.float32),
                 "r": RNG.standard_normal((2, 8, 4, 4)).astype(np.float32)})


@pytest.mark.parametrize("shape,axis,feed", [((2, 3, 0), 2, (2, 3, 0)), ((3, 0, 4), 2, (3, 0, 4)), ((2, 3, 0), 1, (2, 3, 0)),
                                             (("n", 3, 0), 1, (2, 3, 0)), (("n", 3, 4), 1, (0, 3, 4))])
def test_flatten_of_an_empty_tensor(shape: tuple, axis: int, feed: tuple[int, ...]) -> None:
    """Flatten of a tensor with a 0 dim: FlattenToReshape wrote the 0 into the Reshape's target,
    where it means "copy this dim" (ShapeError: cannot reshape [2, 3, 0] to [6, 0])."""
    m = _model([helper.make_node("Flatten", ["x"], ["f"], axis=axis), helper.make_node("Relu", ["f"], ["y"])],
               [("x", list(shape), TensorProto.FLOAT)], [])
    _compare(m, {"x": np.zeros(feed, np.float32)})


@pytest.mark.parametrize("where", ["plain", "chain", "symbolic"])
@pytest.mark.parametrize("n", [6, 40000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_half_of_minus_infinity(where: str, n: int, dtype: type) -> None:
    """x ** 0.5 with a scalar exponent: numpy takes sqrt, so (-inf) ** 0.5 was NaN where ONNX
    Runtime's std::pow gives +inf (and -0 ** 0.5 is +0, not -0)."""
    t = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    nodes = [helper.make_node("Pow", ["x" if where != "chain" else "n2", "h"], ["p" if where == "chain" else "y"])]
    if where == "chain":
        nodes = [helper.make_node("Neg", ["x"], ["n1"]), helper.make_node("Neg", ["n1"], ["n2"]), *nodes,
                 helper.make_node("Tanh", ["p"], ["y"])]
    m = _model(nodes, [("x", ["n"] if where == "symbolic" else [n], t)], [const("h", np.array(0.5, dtype))], out_type=t)
    x = RNG.standard_normal(n).astype(dtype)
    x[:6] = [-np.inf, np.inf, -0.0, 0.0, np.nan, -4.0]
    got = LoadedModel.from_compiled(compile_model(m)).run_dict({"x": x})[0]
    want = run_ort(m, {"x": x})[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_array_equal(np.signbit(got[:4]), np.signbit(want[:4]))


@pytest.mark.parametrize("exp_dtype", [np.int64, np.int32, np.float64])
@pytest.mark.parametrize("first", [False, True])
def test_pow_in_a_chain_keeps_the_base_dtype(exp_dtype: type, first: bool) -> None:
    """Pow's result has the base's type (ONNX T); in an ElementwiseChain a float32 base with an
    int64 / int32 / float64 exponent promoted the buffer to float64: the model's float32 output
    came back as float64."""
    nodes = [helper.make_node("Pow", ["x" if first else "s", "e"], ["p"]), helper.make_node("Mul", ["p", "c"], ["y"])]
    if not first:
        nodes.insert(0, helper.make_node("Sigmoid", ["x"], ["s"]))
    m = _model(nodes, [("x", [2, 5], TensorProto.FLOAT)],
               [const("e", np.array(2, exp_dtype)), const("c", np.array(3.0, np.float32))])
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    assert "ElementwiseChain" in _compare(m, {"x": x})
