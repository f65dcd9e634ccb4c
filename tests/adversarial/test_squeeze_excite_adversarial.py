"""Adversarial tests of SqueezeExciteFusion (ge/compile/passes/fuse_squeeze_excite.py), pycann.SqueezeExcite
(ops/squeeze_excite.py) and its bound kernel (kernels/squeeze_excite.py), against ONNX Runtime on the
original model.

Found: the bound kernel took the channel means as ``sum(x * (1/(H*W)))``; ONNX Runtime, the
unfused pycann graph and the reference kernel sum first and divide, so activations whose sum
overflows float32 (1e37) gave ORT an inf mean (a NaN gate after a conv of mixed-sign weights) and
the fused graph a finite one. The rest documents what was checked and holds: batch N > 1, C = 1,
H * W = 1, X / the Mul's output as graph outputs, the means / hidden / gate as graph outputs (no
fusion), X read elsewhere, chained blocks, conv attributes (explicit zeros, auto_pad; strides,
dilations, groups, post-affines, residuals are not fused), float16 models, every precision mode,
gears and shape ranges (no fusion, right values), four threads on one plan (one arena each).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.dtypes import TensorDesc
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import squeeze_excite as se_kernel
from pycann.ops.squeeze_excite import _k_squeeze_excite
from tests.adversarial.threads import mismatches_from_threads
from tests.ge.onnx_graphs import append_if, const, to_float16
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(4711)


@pytest.fixture(autouse=True, params=["se", "se_project"])
def _projection(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case twice: the block alone (SqueezeExcite's kernel) and, where a 1x1 conv reads it, taken with
    that conv into SqueezeExciteProject (whose kernel gates the conv's weights instead of X)."""
    from pycann.ge.compile.passes import fuse_se_project

    if request.param == "se":
        monkeypatch.setattr(fuse_se_project, "MIN_PIXELS_PER_OUTPUT", 1 << 30)
SMALL = {"c": 16, "h": 20, "w": 20, "r": 4}  # numpy's Mul
BIG = {"c": 32, "h": 48, "w": 48, "r": 8}  # oneDNN's binary Mul (C*H*W >= 64K)
FC = {"c": 512, "h": 8, "w": 8, "r": 160}  # oneDNN's matmul for the 1x1 convs (C*R >= 64K)


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _se(src: str, tag: str, c: int, r: int, act1: str = "Relu", gate: str = "Sigmoid", bias: bool = True,
        c1: dict | None = None, c2: dict | None = None, w1: np.ndarray | None = None,
        w2: np.ndarray | None = None) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """GlobalAveragePool(src) -> Conv -> act1 -> Conv -> gate -> Mul(src, gate) = ``m{tag}``."""
    w1 = _f32(r, c, 1, 1, scale=0.3) if w1 is None else w1
    w2 = _f32(c, r, 1, 1, scale=0.3) if w2 is None else w2
    inits = [const(f"W1{tag}", w1), const(f"W2{tag}", w2)]
    b1, b2 = ([f"B1{tag}"], [f"B2{tag}"]) if bias else ([], [])
    if bias:
        inits += [const(f"B1{tag}", _f32(w1.shape[0])), const(f"B2{tag}", _f32(w2.shape[0]))]
    nodes = [helper.make_node("GlobalAveragePool", [src], [f"s{tag}"]),
             helper.make_node("Conv", [f"s{tag}", f"W1{tag}", *b1], [f"z0{tag}"], **(c1 or {})),
             helper.make_node(act1 or "Identity", [f"z0{tag}"], [f"z{tag}"]),
             helper.make_node("Conv", [f"z{tag}", f"W2{tag}", *b2], [f"g0{tag}"], **(c2 or {})),
             helper.make_node(gate, [f"g0{tag}"], [f"g{tag}"]),
             helper.make_node("Mul", [src, f"g{tag}"], [f"m{tag}"])]
    return nodes, inits


def _model(n: int = 1, c: int = 16, h: int = 20, w: int = 20, r: int = 4, chain: bool = True,
           outputs: tuple[str, ...] = ("y",), extra: tuple[onnx.NodeProto, ...] = (),
           extra_inits: tuple[onnx.TensorProto, ...] = (), **se: object) -> onnx.ModelProto:
    """[x -> 3x3 Conv -> Relu =] x1 -> SE -> m -> 1x1 Conv = y; ``chain=False``: x1 is the graph input."""
    nodes, inits = _se("x1", "", c, r, **se)  # type: ignore[arg-type]
    if chain:
        inits.append(const("Wa", _f32(c, 3, 3, 3, scale=0.3)))
        nodes = [helper.make_node("Conv", ["x", "Wa"], ["a"], pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["a"], ["x1"]), *nodes]
        ins = [("x", [n, 3, h, w])]
    else:
        ins = [("x1", [n, c, h, w])]
    inits.append(const("Wb", _f32(8, c, 1, 1, scale=0.3)))
    nodes.append(helper.make_node("Conv", ["m", "Wb"], ["y"]))
    g = helper.make_graph([*nodes, *extra], "g",
                          [helper.make_tensor_value_info(a, TensorProto.FLOAT, s) for a, s in ins],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [*inits, *extra_inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _feeds(m: onnx.ModelProto, scale: float = 1.0) -> dict[str, np.ndarray]:
    i = m.graph.input[0]
    return {i.name: _f32(*[d.dim_value for d in i.type.tensor_type.shape.dim], scale=scale)}


def _count(cm: object) -> int:
    # (SqueezeExciteProjectFusion may take the block and the 1x1 conv after it into one op: either is the block)
    return sum(n.op_type in ("SqueezeExcite", "SqueezeExciteProject") for n in cm.graph.nodes)  # type: ignore[attr-defined]


def _check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], blocks: int, options: CompileOptions | None = None,
           tol: float = 1e-4, runs: int = 2, atol: float | None = None) -> None:
    """Compile, count the fused blocks, run ``runs`` times (the arena views again) and compare
    every output with ORT, NaNs where ORT has them."""
    cm = compile_model(m, options) if options is not None else compile_model(m)
    assert _count(cm) == blocks
    lm = LoadedModel.from_compiled(cm)
    want = run_ort(m, feeds)
    for _ in range(runs):
        for got, ref in zip(lm.run_dict(feeds), want):
            np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 0.1 if atol is None else atol)


# ------------------------------------------------------------------------------ the bug: a sum that overflows
@pytest.mark.parametrize("size", [SMALL, BIG], ids=["numpy_mul", "onednn_mul"])
@pytest.mark.parametrize("chain", [False, True], ids=["nchw_input", "nhwc_chain"])
def test_mean_overflows_as_ort_does(size: dict, chain: bool) -> None:
    """Positive activations of 1e37: the float32 sum over H*W overflows to inf in ORT's GlobalAveragePool
    (the mean itself is finite); the gate after a conv of mixed-sign weights is then NaN, and so is Y."""
    m = _model(chain=chain, **size)
    feeds = {k: (np.abs(v) + 1) * np.float32(1e37) for k, v in _feeds(m).items()}
    want = run_ort(m, feeds)[0]
    assert np.isnan(want).any()  # (the case is the overflow)
    _check(m, feeds, 1, runs=1)  # (assert_allclose: NaN where ORT has NaN)


@pytest.mark.parametrize("layout", ["", "NHWC"])
@pytest.mark.parametrize("size", [SMALL, BIG, dict(FC, h=24, w=24)], ids=["numpy", "onednn_mul", "onednn_fc"])
def test_bound_kernel_sums_then_divides_as_the_reference(layout: str, size: dict) -> None:
    """Channels of 1e36 (their sum over 400+ pixels overflows) and of 5e35 (some do not)."""
    n, c, h, w, r = 2, size["c"], size["h"], size["w"], size["r"]
    x = np.full((n, c, h, w), 1e36, np.float32) * np.where(RNG.random((n, c, 1, 1)) < 0.5, 1, 0.5).astype(np.float32)
    x[1] = _f32(c, h, w)  # batch 1 finite: its gate must stay finite
    if layout:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    w1, w2 = _f32(r, c, 1, 1, scale=0.3), _f32(c, r, 1, 1, scale=0.3)
    attrs = {"act1": "Relu", "act2": "Sigmoid", **({"_layout": layout} if layout else {})}
    desc = TensorDesc(1, (n, c, h, w))
    k = se_kernel.prepare_squeeze_excite(attrs, [desc, None, None, None, None], [None, w1, None, w2, None], [desc])
    assert k is not None
    with np.errstate(all="ignore"):
        want = _k_squeeze_excite([np.ascontiguousarray(x), w1, None, w2, None], attrs)[0]
        got = k.run([x, w1, None, w2, None], attrs)[0]
    assert np.isnan(want[0]).any() and not np.isnan(want[1]).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # NaN exactly where the reference has them


# ------------------------------------------------------------------------------ shapes and graph outputs
@pytest.mark.parametrize("shape", [dict(n=3), dict(n=2, **BIG), dict(n=2, **FC), dict(c=1, r=1),
                                   dict(n=2, c=1, r=1, h=300, w=300), dict(h=1, w=1), dict(n=4, c=512, r=128, h=1, w=1),
                                   dict(h=1, w=37, c=32), dict(h=37, w=1, c=32)],
                         ids=["n3", "n2_big", "n2_fc", "c1", "c1_big", "hw1", "hw1_fc", "h1", "w1"])
@pytest.mark.parametrize("chain", [True, False], ids=["nhwc_chain", "nchw_input"])
def test_shapes(shape: dict, chain: bool) -> None:
    m = _model(chain=chain, **shape)
    _check(m, _feeds(m), 1)


@pytest.mark.parametrize("outputs,blocks", [(("m",), 1), (("y", "m"), 1), (("y", "x1"), 1), (("y", "s"), 0),
                                            (("y", "z"), 0), (("y", "g"), 0)])
def test_graph_outputs(outputs: tuple[str, ...], blocks: int) -> None:
    m = _model(outputs=outputs, **BIG)
    _check(m, _feeds(m), blocks)


def test_x_read_elsewhere_and_chained_blocks() -> None:
    c, r = BIG["c"], BIG["r"]
    n2, i2 = _se("m", "b", c, r)  # a block on the first block's output
    n3, i3 = _se("x1", "c", c, r)  # a second block on the same X
    # (their outputs meet in a Concat: a block whose Mul feeds an elementwise op stays unfused, see below)
    extra = (*n2, *n3, helper.make_node("Concat", ["mb", "mc", "x1"], ["u"], axis=1))
    m = _model(outputs=("y", "u"), extra=extra, extra_inits=(*i2, *i3), n=2, **BIG)
    _check(m, _feeds(m), 3)
    # the same blocks added together (x * g + ...): ElementwiseChainFusion takes those Muls
    extra = (*n2, *n3, helper.make_node("Add", ["mb", "mc"], ["t"]), helper.make_node("Add", ["t", "x1"], ["u"]))
    m = _model(outputs=("y", "u"), extra=extra, extra_inits=(*i2, *i3), n=2, **BIG)
    _check(m, _feeds(m), 1)
    m = _model(outputs=("y", "m2"), extra=(helper.make_node("Mul", ["x1", "g"], ["m2"]),), **BIG)  # two Muls
    _check(m, _feeds(m), 0)


# ------------------------------------------------------------------------------ conv attributes
ONE_BY_ONE = dict(pads=[0, 0, 0, 0], strides=[1, 1], dilations=[1, 1], kernel_shape=[1, 1], group=1)


@pytest.mark.parametrize("c1,c2,blocks", [
    (ONE_BY_ONE, ONE_BY_ONE, 1),
    (dict(auto_pad="SAME_UPPER"), dict(auto_pad="SAME_LOWER"), 1),
    (dict(auto_pad="VALID"), {}, 1),
    (dict(strides=[2, 2]), {}, 0),
    (dict(dilations=[2, 2]), {}, 0),
], ids=["explicit", "same", "valid", "strides2", "dilations2"])
def test_conv_attributes(c1: dict, c2: dict, blocks: int) -> None:
    m = _model(c1=c1, c2=c2)
    _check(m, _feeds(m), blocks)


@pytest.mark.parametrize("case", ["group_c1", "group_c2", "depthwise", "one_channel_gate"])
def test_grouped_and_broadcast_gates_stay(case: str) -> None:
    kw: dict = {}
    if case == "group_c1":
        kw = dict(c1=dict(group=4), w1=_f32(4, 4, 1, 1))
    elif case == "group_c2":
        kw = dict(c2=dict(group=4), w2=_f32(16, 1, 1, 1))
    elif case == "depthwise":
        kw = dict(r=16, c1=dict(group=16), c2=dict(group=16), w1=_f32(16, 1, 1, 1), w2=_f32(16, 1, 1, 1))
    else:  # a gate of one channel, broadcast over C by the Mul
        kw = dict(w2=_f32(1, 4, 1, 1), bias=False)
    m = _model(**kw)
    _check(m, _feeds(m), 0)


@pytest.mark.parametrize("act1", ["LeakyRelu", "HardSwish", "Tanh", "Sigmoid", "", "Elu"])
@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid", "Relu", "Tanh", "HardSwish", "Clip"])
def test_activations(act1: str, gate: str) -> None:
    m = _model(act1=act1, gate=gate)
    _check(m, _feeds(m), 0 if act1 == "Elu" else 1)  # (Elu is no FusedConv activation)


@pytest.mark.parametrize("case", ["post_scale", "post_shift", "residual", "residual_means"])
def test_what_conv_fusion_adds_is_not_fused(case: str) -> None:
    m = _model(r=16 if case == "residual_means" else 4)
    g, feeds = m.graph, _feeds(m)
    if case in ("post_scale", "post_shift"):  # the gate * 2 (+ 2): FusedConv's post_scale (post_shift)
        mul = next(n for n in g.node if n.output[0] == "m")
        mul.input[1] = "g2"
        g.node.insert(len(g.node) - 2, helper.make_node("Mul" if case == "post_scale" else "Add", ["g", "two"], ["g2"]))
        g.initializer.append(const("two", np.array(2.0, np.float32)))
    elif case == "residual":  # Conv(z) + t: FusedConv's residual input
        i = next(i for i, n in enumerate(g.node) if n.op_type == "Sigmoid")
        g.node[i].input[0] = "g0r"
        g.node.insert(i, helper.make_node("Add", ["g0", "t"], ["g0r"]))
        g.input.append(helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 16, 1, 1]))
        feeds["t"] = _f32(1, 16, 1, 1)
    else:  # Conv(s) + s: the means read twice
        i = next(i for i, n in enumerate(g.node) if n.op_type == "Relu" and n.input[0] == "z0")
        g.node[i].input[0] = "z0r"
        g.node.insert(i, helper.make_node("Add", ["z0", "s"], ["z0r"]))
    _check(m, feeds, 0)


# ------------------------------------------------------------------------------ dtypes, precision, dynamic shapes
def test_float16_model_keeps_the_ops() -> None:
    m = _model(chain=False)
    to_float16(m)
    feeds = {"x1": _f32(1, 16, 20, 20).astype(np.float16)}
    _check(m, feeds, 0, tol=1e-2)


@pytest.mark.parametrize("mode", ["force_fp16", "allow_fp32_to_fp16", "allow_fp32_to_bf16", "allow_mix_precision",
                                  "allow_mix_precision_bf16", "force_fp32", "must_keep_origin_dtype"])
@pytest.mark.parametrize("chain", [True, False], ids=["nhwc_chain", "nchw_input"])
def test_precision_modes_compile_and_run(mode: str, chain: bool) -> None:
    m = _model(chain=chain, **BIG)
    # (a mode that changes dtypes keeps the block's ops apart: PrecisionMode chooses per op)
    fused = 1 if mode in ("must_keep_origin_dtype",) else 0
    _check(m, _feeds(m), fused, CompileOptions(precision_mode=mode, soc_version="CPU"), tol=3e-2, atol=3e-2)


def test_gears_and_ranges_keep_the_ops() -> None:
    m = _model()
    for d, name in ((0, "n"), (2, "h"), (3, "w")):
        m.graph.input[0].type.tensor_type.shape.dim[d].dim_param = name
    for opts, shapes in [
        (CompileOptions(input_shape={"x": [-1, 3, 20, 20]}, dynamic_batch_size=[1, 3]), [(1, 3, 20, 20), (3, 3, 20, 20)]),
        (CompileOptions(input_shape={"x": [1, 3, -1, -1]}, dynamic_image_size=[[20, 20], [1, 1], [7, 9]]),
         [(1, 3, 20, 20), (1, 3, 1, 1), (1, 3, 7, 9)]),
        (CompileOptions(input_shape={"x": [1, 3, "8~32", "8~32"]}), [(1, 3, 8, 8), (1, 3, 32, 17)]),
    ]:
        cm = compile_model(m, opts)
        assert _count(cm) == 0
        lm = LoadedModel.from_compiled(cm)
        for s in shapes:
            if opts.dynamic_batch_size:
                lm.set_dynamic_batch_size(s[0])
            elif opts.dynamic_image_size:
                lm.set_dynamic_hw_size(s[2], s[3])
            x = _f32(*s)
            np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------ threads
@pytest.mark.parametrize("size", [BIG, FC], ids=["onednn_mul", "onednn_fc"])
@pytest.mark.parametrize("chain", [True, False], ids=["nhwc_chain", "nchw_input"])
def test_one_plan_from_four_threads(size: dict, chain: bool) -> None:
    m = _model(n=2, chain=chain, **size)
    lm = LoadedModel.from_compiled(compile_model(m))
    assert mismatches_from_threads(lm, m, [_feeds(m) for _ in range(6)]) == [0] * 4


# ------------------------------------------------------------------------------ other spellings and producers
@pytest.mark.parametrize("case", ["b1_only", "b2_only", "relu6_clip", "clip_gate"])
def test_biases_and_clip_bounds(case: str) -> None:
    m = _model(chain=case != "b2_only", **BIG)
    g = m.graph
    if case in ("b1_only", "b2_only"):
        conv = next(n for n in g.node if n.op_type == "Conv" and n.input[0] == ("z" if case == "b1_only" else "s"))
        del conv.input[2]
    else:  # Clip(min, max) as inputs: ReLU6 after the first conv, Clip(0, 1) as the gate
        act = next(n for n in g.node if n.input and n.input[0] == ("z0" if case == "relu6_clip" else "g0"))
        act.op_type = "Clip"
        act.input.extend(["lo", "hi"])
        g.initializer.extend([const("lo", np.array(0.0, np.float32)),
                              const("hi", np.array(6.0 if case == "relu6_clip" else 1.0, np.float32))])
    _check(m, _feeds(m), 1)


@pytest.mark.parametrize("size", [BIG, FC], ids=["onednn_mul", "onednn_fc"])
def test_transposed_input_runs_the_reference_layout(size: dict) -> None:
    """X a Transpose of an NHWC graph input (a strided view, another layout than bound), the result
    transposed back."""
    m = _model(chain=False, n=2, **size)
    g = m.graph
    c, h, w = size["c"], size["h"], size["w"]
    g.input[0].name = "t"
    for d, v in zip(g.input[0].type.tensor_type.shape.dim[1:], (h, w, c)):
        d.dim_value = v
    g.node.insert(0, helper.make_node("Transpose", ["t"], ["x1"], perm=[0, 3, 1, 2]))
    g.node.append(helper.make_node("Transpose", ["y"], ["yt"], perm=[0, 2, 3, 1]))
    g.output[0].name = "yt"
    _check(m, {"t": _f32(2, h, w, c)}, 1)


def test_static_model_with_an_if_on_a_control_input() -> None:
    """An If on a bool input: the compiled graph (SqueezeExcite in it) is re-optimised per signature."""
    m = _model(n=2, outputs=("o",), **BIG)
    append_if(m, helper.make_node("Relu", ["y"], ["t_out"]), helper.make_node("Neg", ["y"], ["e_out"]), "o")
    cm = compile_model(m)
    assert _count(cm) == 1
    lm = LoadedModel.from_compiled(cm)
    for flag in (True, False, True):
        feeds = {**_feeds(m), "flag": np.array(flag)}
        np.testing.assert_allclose(lm.run_dict(feeds)[0], run_ort(m, feeds)[0], rtol=1e-4, atol=1e-5)
