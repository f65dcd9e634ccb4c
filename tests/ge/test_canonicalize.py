"""Canonicalize (ge/compile/passes/canonicalize*.py): each rewrite fires on its spelling (positive), keeps
what does not qualify (negative) and computes what ONNX Runtime computes on the original model
(equivalence). Spellings come from two exporters: hand-written ONNX in the forms other exporters
write (Caffe2/MXNet-style Sum residuals, Keras/TF Relu6 hard activations) and PyTorch's exporter."""

from __future__ import annotations

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.passes import canonicalize
from pycann.ge.compile.passes.infer_shapes import infer_graph
from pycann.ge.run.model import LoadedModel
from tests.ge.onnx_graphs import canonicalized as _canon
from tests.ge.onnx_graphs import check_compiled, const, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(7)


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


_c, _model, _compile_check = const, float_model, check_compiled



# ------------------------------------------------------------------------------ Sum / Mean residuals


def test_sum_residual_then_relu_fuses_into_conv() -> None:
    """A ResNet block as Caffe2-style exporters write it: Sum(conv, identity) then Relu."""
    w = _f32(8, 8, 3, 3) * 0.2
    m = _model([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1]),
                helper.make_node("Sum", ["c", "x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
               [("x", [1, 8, 10, 10])], "y", [_c("W", w)])
    ops = _compile_check(m, {"x": _f32(1, 8, 10, 10)}, {"FusedConv": 1}, absent=("Sum", "Relu", "Add"))
    assert ops == ["FusedConv"]


@pytest.mark.parametrize("op,n", [("Sum", 1), ("Sum", 3), ("Max", 3), ("Min", 4), ("Mean", 2), ("Mean", 3)])
def test_variadic_ops_become_binary(op: str, n: int) -> None:
    names = [f"x{i}" for i in range(n)]
    m = _model([helper.make_node(op, names, ["y"])], [(x, [2, 5]) for x in names], "y")
    g, counts, _ = _canon(m)
    assert counts.get("VariadicToBinary") == 1
    ops = [nd.op_type for nd in g.nodes]
    want = {"Sum": "Add", "Mean": "Add"}.get(op, op)
    assert ops.count(want) == n - 1 and all(len(nd.inputs) <= 2 for nd in g.nodes), ops
    feeds = {x: _f32(2, 5) for x in names}
    _compile_check(m, feeds, rtol=1e-6, atol=1e-6)


def test_binary_max_is_left_alone() -> None:
    m = _model([helper.make_node("Max", ["a", "b"], ["y"])], [("a", [3]), ("b", [3])], "y")
    _, counts, _ = _canon(m)
    assert "VariadicToBinary" not in counts


def test_sum_with_broadcast_keeps_values() -> None:
    m = _model([helper.make_node("Sum", ["a", "b", "c"], ["y"])], [("a", [2, 1, 4]), ("b", [3, 1]), ("c", [4])], "y")
    _compile_check(m, {"a": _f32(2, 1, 4), "b": _f32(3, 1), "c": _f32(4)})


# ------------------------------------------------------------------------------ Div by a constant


def test_div_by_constant_becomes_mul_and_folds_into_conv() -> None:
    w = _f32(4, 3, 3, 3)
    m = _model([helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Div", ["c", "k"], ["y"])],
               [("x", [1, 3, 7, 7])], "y", [_c("W", w), _c("k", np.full((1, 4, 1, 1), 4.0, np.float32))])
    ops = _compile_check(m, {"x": _f32(1, 3, 7, 7)}, absent=("Div", "Mul"))
    assert ops in (["Conv"], ["FusedConv"]), ops


def test_div_by_zero_or_variable_is_kept() -> None:
    m = _model([helper.make_node("Div", ["x", "z"], ["y"])], [("x", [3])], "y", [_c("z", np.zeros(3, np.float32))])
    g, counts, missed = _canon(m)
    assert "DivByConstant" not in counts and any("constant has 0" in r for r in missed)
    m2 = _model([helper.make_node("Div", ["x", "d"], ["y"])], [("x", [3]), ("d", [3])], "y")
    assert "DivByConstant" not in _canon(m2)[1]


def test_integer_div_is_kept() -> None:
    g = helper.make_graph([helper.make_node("Div", ["x", "k"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.INT64, [3])], [_c("k", np.int64(2))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    assert "DivByConstant" not in _canon(m)[1]
    cm = compile_model(m)
    np.testing.assert_array_equal(LoadedModel.from_compiled(cm).run([np.array([7, -7, 4])])[0], [3, -3, 2])


def test_div_nan_and_inf_propagate_like_ort() -> None:
    m = _model([helper.make_node("Div", ["x", "k"], ["y"])], [("x", [5])], "y", [_c("k", np.float32(3.0))])
    x = np.array([np.nan, np.inf, -np.inf, 1e38, 3.0], np.float32)
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-6)


# ------------------------------------------------------------------------------ Gemm


@pytest.mark.parametrize("trans_b,alpha,beta,with_c", [(1, 1.0, 1.0, True), (0, 1.0, 1.0, True),
                                                       (1, 0.5, 2.0, True), (1, 1.0, 1.0, False)])
def test_gemm_becomes_matmul_and_fuses_with_relu(trans_b: int, alpha: float, beta: float, with_c: bool) -> None:
    b = _f32(6, 5) if trans_b else _f32(5, 6)
    ins = ["a", "B", "C"] if with_c else ["a", "B"]
    m = _model([helper.make_node("Gemm", ins, ["g"], transB=trans_b, alpha=alpha, beta=beta),
                helper.make_node("Relu", ["g"], ["y"])], [("a", [4, 5])], "y", [_c("B", b), _c("C", _f32(6))])
    _compile_check(m, {"a": _f32(4, 5)}, {"FusedMatMul": 1}, absent=("Gemm", "Relu"))


def test_gemm_with_trans_a_or_variable_b_is_kept() -> None:
    m = _model([helper.make_node("Gemm", ["a", "B"], ["y"], transA=1)], [("a", [5, 4])], "y", [_c("B", _f32(5, 6))])
    g, counts, missed = _canon(m)
    assert "GemmToMatMul" not in counts and any("transA" in r for r in missed)
    m2 = _model([helper.make_node("Gemm", ["a", "b"], ["y"])], [("a", [4, 5]), ("b", [5, 6])], "y")
    assert "GemmToMatMul" not in _canon(m2)[1]
    _compile_check(m, {"a": _f32(5, 4)})


# ------------------------------------------------------------------------------ Flatten


@pytest.mark.parametrize("axis,shape", [(1, [2, 3, 4, 5]), (2, [2, 3, 4, 5]), (0, [2, 3]), (-1, [2, 3, 4])])
def test_flatten_becomes_reshape(axis: int, shape: list[int]) -> None:
    m = _model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], [("x", shape)], "y")
    g, counts, _ = _canon(m)
    assert counts.get("FlattenToReshape") == 1
    _compile_check(m, {"x": _f32(*shape)})


def test_flatten_symbolic_batch_uses_copy_dim() -> None:
    m = _model([helper.make_node("Flatten", ["x"], ["y"], axis=1)], [("x", ["N", 3, 4])], "y")
    g, counts, _ = _canon(m)
    assert counts.get("FlattenToReshape") == 1
    reshape = next(n for n in g.nodes if n.op_type == "Reshape")
    assert list(g.initializers[reshape.inputs[1]]) == [0, 12]
    cm = compile_model(m)
    for n in (1, 3, 0):
        x = _f32(n, 3, 4)
        np.testing.assert_array_equal(LoadedModel.from_compiled(cm).run([x])[0], x.reshape(n, 12))


def test_flatten_with_unknown_trailing_dims_is_kept() -> None:
    m = _model([helper.make_node("Flatten", ["x"], ["y"], axis=1)], [("x", [2, "H", 4])], "y")
    _, counts, missed = _canon(m)
    assert "FlattenToReshape" not in counts and any("not known" in r for r in missed)


# ------------------------------------------------------------------------------ Pad into Conv


def _pad_conv(pads, mode="constant", value=None, conv_pads=(0, 0, 0, 0), w_in=3):
    inits = [_c("W", _f32(4, w_in, 3, 3)), _c("pads", np.array(pads, np.int64))]
    pad_ins = ["x", "pads"]
    if value is not None:
        inits.append(_c("v", np.float32(value)))
        pad_ins.append("v")
    return _model([helper.make_node("Pad", pad_ins, ["p"], mode=mode),
                   helper.make_node("Conv", ["p", "W"], ["y"], pads=list(conv_pads))], [("x", [1, 3, 8, 8])], "y", inits)


def test_zero_pad_folds_into_conv() -> None:
    m = _pad_conv([0, 0, 1, 2, 0, 0, 2, 1], conv_pads=(1, 1, 1, 1))
    ops = _compile_check(m, {"x": _f32(1, 3, 8, 8)}, absent=("Pad",))
    assert len(ops) == 1


@pytest.mark.parametrize("case", ["reflect", "value", "channel", "negative"])
def test_pad_that_is_not_a_conv_pad_is_kept(case: str) -> None:
    m = {"reflect": lambda: _pad_conv([0, 0, 1, 1, 0, 0, 1, 1], mode="reflect"),
         "value": lambda: _pad_conv([0, 0, 1, 1, 0, 0, 1, 1], value=1.5),
         "channel": lambda: _pad_conv([0, 1, 1, 1, 0, 0, 1, 1], w_in=4),
         "negative": lambda: _pad_conv([0, 0, -1, 0, 0, 0, 1, 1])}[case]()
    _, counts, missed = _canon(m)
    assert "PadIntoConv" not in counts and missed
    _compile_check(m, {"x": _f32(1, 3, 8, 8)}, present={"Pad": 1})


# ------------------------------------------------------------------------------ activation spellings


def _relu6_hard(final: str):
    """Keras/TF's hard_sigmoid/hard_swish: Relu6(x + 3) / 6 (times x), Relu6 as Clip(0, 6)."""
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"]), helper.make_node("Add", ["c", "three"], ["a"]),
             helper.make_node("Clip", ["a", "zero", "six"], ["r"]), helper.make_node("Div", ["r", "six"], ["hs"])]
    out = "hs"
    if final == "swish":
        nodes.append(helper.make_node("Mul", ["c", "hs"], ["y"]))
        out = "y"
    inits = [_c("W", _f32(4, 3, 1, 1)), _c("three", np.float32(3)), _c("zero", np.float32(0)), _c("six", np.float32(6))]
    return _model(nodes, [("x", [1, 3, 6, 6])], out, inits)


@pytest.mark.parametrize("final,op", [("sigmoid", "HardSigmoid"), ("swish", "HardSwish")])
def test_relu6_spellings_become_one_activation_fused_into_conv(final: str, op: str) -> None:
    m = _relu6_hard(final)
    g, counts, _ = _canon(m)
    assert op in [n.op_type for n in g.nodes]
    _compile_check(m, {"x": _f32(1, 3, 6, 6) * 3}, {"FusedConv": 1}, absent=("Clip", "Div", "Mul", "Add"))


def test_paddle_hardswish_order_becomes_hardswish() -> None:
    # Paddle: Mul(x, Clip(x + 3, 0, 6)) then / 6
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "six"], ["r"]),
             helper.make_node("Mul", ["x", "r"], ["m"]), helper.make_node("Div", ["m", "six"], ["y"])]
    m = _model(nodes, [("x", [2, 8])], "y", [_c("three", np.float32(3)), _c("zero", np.float32(0)), _c("six", np.float32(6))])
    assert _canon(m)[1].get("HardSwishSpelling") == 1
    _compile_check(m, {"x": _f32(2, 8) * 4}, {"HardSwish": 1})


def test_linear_clip_becomes_hardsigmoid() -> None:
    nodes = [helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Add", ["m", "b"], ["s"]),
             helper.make_node("Clip", ["s", "zero", "one"], ["y"])]
    m = _model(nodes, [("x", [16])], "y", [_c("a", np.float32(0.2)), _c("b", np.float32(0.5)),
                                          _c("zero", np.float32(0)), _c("one", np.float32(1))])
    assert _canon(m)[1].get("HardSigmoidSpelling") == 1
    x = np.linspace(-5, 5, 16).astype(np.float32)
    x[3] = np.nan
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-6, atol=1e-7)


def test_clip_with_other_bounds_is_not_hardsigmoid() -> None:
    nodes = [helper.make_node("Add", ["x", "three"], ["a"]), helper.make_node("Clip", ["a", "zero", "five"], ["r"]),
             helper.make_node("Mul", ["r", "sixth"], ["y"])]
    m = _model(nodes, [("x", [4])], "y", [_c("three", np.float32(3)), _c("zero", np.float32(0)),
                                         _c("five", np.float32(5)), _c("sixth", np.float32(1 / 6))])
    assert "HardSigmoidSpelling" not in _canon(m)[1]


def test_mish_spelling_becomes_mish() -> None:
    nodes = [helper.make_node("Softplus", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Mul", ["x", "t"], ["y"])]
    m = _model(nodes, [("x", [3, 7])], "y", opset=18)
    assert _canon(m)[1].get("MishSpelling") == 1
    _compile_check(m, {"x": _f32(3, 7) * 3}, {"Mish": 1}, absent=("Tanh", "Softplus"))


def test_mish_of_other_value_is_kept() -> None:
    nodes = [helper.make_node("Softplus", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Mul", ["z", "t"], ["y"])]
    m = _model(nodes, [("x", [3]), ("z", [3])], "y", opset=18)
    assert "MishSpelling" not in _canon(m)[1]


# ------------------------------------------------------------------------------ second exporter: PyTorch


def _torch_export(module, args, opset: int = 13) -> onnx.ModelProto:
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, buf, opset_version=opset, dynamo=False)
    return onnx.load_from_string(buf.getvalue())


def test_torch_exported_block_canonicalises_and_fuses() -> None:
    torch = pytest.importorskip("torch")

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(8, 8, 3, padding=0)
            self.fc = torch.nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            p = torch.nn.functional.pad(x, (1, 1, 1, 1))  # an explicit zero Pad before the conv
            c = self.conv(p) / 2.0
            h = c * torch.nn.functional.relu6(c + 3) / 6  # hard-swish written out
            return torch.relu(self.fc(torch.flatten(h + x, 1)))

    torch.manual_seed(0)
    m = _torch_export(Block(), (torch.randn(1, 8, 8, 8),), opset=11)
    spelled = {n.op_type for n in m.graph.node}
    assert {"Pad", "Div", "Gemm", "Flatten"} <= spelled, spelled
    ops = _compile_check(m, {"x": _f32(1, 8, 8, 8)}, rtol=1e-4, atol=1e-5)
    for gone in ("Pad", "Div", "Gemm", "Flatten", "Clip"):
        assert gone not in ops, ops
    assert "FusedMatMul" in ops and ("FusedConv" in ops or "Conv" in ops), ops


def test_atc_log_names_the_rewrites() -> None:
    lines: list[str] = []
    m = _model([helper.make_node("Sum", ["a", "b"], ["y"])], [("a", [3]), ("b", [3])], "y")
    compile_model(m, log=lines.append)
    assert any("[Canonicalize]" in ln and "VariadicToBinary x1" in ln for ln in lines), lines


def test_report_names_the_rewrites() -> None:
    from pycann.ge.compile.passes.base import PassContext

    m = _model([helper.make_node("Sum", ["a", "b"], ["s"]), helper.make_node("Div", ["s", "k"], ["y"])],
               [("a", [3]), ("b", [3])], "y", [_c("k", np.float32(2))])
    from pycann.ge.compile.importers.onnx import import_model

    g = import_model(m)
    infer_graph(g)
    res = canonicalize.run(g, PassContext())
    assert res.changed and "VariadicToBinary x1" in res.report and "DivByConstant x1" in res.report


def test_rewrites_table_is_explicit() -> None:
    names = [r.name for r in canonicalize.REWRITES]
    assert len(names) == len(set(names)) and "GemmToMatMul" in names and "PadIntoConv" in names
    assert all(isinstance(r.anchors, tuple) and r.anchors for r in canonicalize.REWRITES)


# ------------------------------------------------------------------------------ computed weights fold (item 2)


def _bn_from_computed_weights() -> onnx.ModelProto:
    """Conv -> BatchNormalization whose scale is ConstantOfShape(4) = 1, bias Range(0, 4) * 0.1 and
    mean Expand(0.5, [4]): weights an exporter computes instead of storing."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    nodes = [helper.make_node("ConstantOfShape", ["c4"], ["scale"], value=one),
             helper.make_node("Range", ["r0", "r4", "r1"], ["ramp"]),
             helper.make_node("Mul", ["ramp", "tenth"], ["bias"]),
             helper.make_node("Expand", ["half", "c4"], ["mean"]),
             helper.make_node("Tile", ["var1", "c4"], ["var"]),
             helper.make_node("Conv", ["x", "W"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"])]
    inits = [_c("c4", np.array([4], np.int64)), _c("r0", np.float32(0)), _c("r4", np.float32(4)),
             _c("r1", np.float32(1)), _c("tenth", np.float32(0.1)), _c("half", np.array([0.5], np.float32)),
             _c("var1", np.array([2.0], np.float32)), _c("W", _f32(4, 3, 3, 3))]
    return _model(nodes, [("x", [1, 3, 6, 6])], "y", inits)


def test_computed_weights_fold_and_batchnorm_folds_into_conv() -> None:
    m = _bn_from_computed_weights()
    ops = _compile_check(m, {"x": _f32(1, 3, 6, 6)})
    assert ops in (["Conv"], ["FusedConv"]), ops


def test_fold_limit_keeps_large_results_as_nodes() -> None:
    from pycann.ge.compile.options import CompileOptions

    one = helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])
    m = _model([helper.make_node("ConstantOfShape", ["shape"], ["big"], value=one),
                helper.make_node("Add", ["x", "big"], ["y"])], [("x", [256, 256])], "y",
               [_c("shape", np.array([256, 256], np.int64))])
    small = compile_model(m, CompileOptions(fold_max_bytes=1024))
    assert "ConstantOfShape" in [n.op_type for n in small.graph.nodes]
    folded = compile_model(m)  # the default limit (128 MiB) folds the 256 KiB constant
    assert "ConstantOfShape" not in [n.op_type for n in folded.graph.nodes]
    x = _f32(256, 256)
    for cm in (small, folded):
        np.testing.assert_array_equal(LoadedModel.from_compiled(cm).run([x])[0], x + 1)


def test_scalar_constants_keep_rank_zero() -> None:
    """Div by a 0-d constant gives a 0-d Mul constant (a (1,) one broadcast a scalar result to (1,))."""
    m = _model([helper.make_node("Div", ["x", "k"], ["y"])], [("x", [])], "y", [_c("k", np.float32(255.0))])
    g, counts, _ = _canon(m)
    mul = next(n for n in g.nodes if n.op_type == "Mul")
    assert counts.get("DivByConstant") == 1 and g.initializers[mul.inputs[1]].shape == ()
    got = LoadedModel.from_compiled(compile_model(m)).run([np.array(510.0, np.float32)])[0]
    assert got.shape == () and got == 2.0


def test_unnamed_variadic_nodes_get_distinct_intermediate_names() -> None:
    """Two unnamed 3-input Means (onnx's test_mean_example has one): every new value is defined once."""
    from pycann.ge.ir import verify

    m = _model([helper.make_node("Mean", ["a", "b", "c"], ["s"]), helper.make_node("Mean", ["s", "b", "c"], ["y"])],
               [("a", [3]), ("b", [3]), ("c", [3])], "y")
    g, counts, _ = _canon(m)
    assert counts.get("VariadicToBinary") == 2
    outs = [o for n in g.nodes for o in n.outputs]
    assert len(outs) == len(set(outs)), outs
    verify(g)
    _compile_check(m, {k: _f32(3) for k in "abc"})
