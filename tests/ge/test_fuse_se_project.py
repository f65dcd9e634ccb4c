"""SqueezeExciteProjectFusion (ge/compile/passes/fuse_se_project.py), pycann.SqueezeExciteProject
(ops/squeeze_excite.py) and its bound kernel (kernels/squeeze_excite_project.py): a squeeze-and-excitation
block and the 1x1 projection conv after it fuse (positive, both exporters' spellings, with the block's
residual), what is not such a pair stays (negative, with the reason at --log=info), and the compiled
graph computes what ONNX Runtime computes on the original model (equivalence)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from pycann.dtypes import TensorDesc
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels import squeeze_excite_project as sep
from pycann.ops.fused import apply_activation
from pycann.ops.squeeze_excite import _out_project, _project
from tests.ge.onnx_graphs import check_compiled, const, conv_pool_head, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(11)
ATTRS = {"act1": "Relu", "act1_alpha": 0.0, "act1_beta": 0.0, "act2": "Sigmoid", "act2_alpha": 0.0, "act2_beta": 0.0}


def _f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _golden(x: np.ndarray, w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray, b2: np.ndarray | None,
            wp: np.ndarray, bp: np.ndarray | None, z: np.ndarray | None) -> np.ndarray:
    """The unfused ops in float64: mean, conv, ReLU, conv, sigmoid, multiply, then the projection."""
    x64 = x.astype(np.float64)
    s = x64.mean(axis=(2, 3))
    h = apply_activation(s @ w1.reshape(w1.shape[0], -1).T + (0 if b1 is None else b1), "Relu", 0, 0)
    g = 1 / (1 + np.exp(-(h @ w2.reshape(w2.shape[0], -1).T + (0 if b2 is None else b2))))
    y = np.einsum("nchw,mc->nmhw", x64 * g[:, :, None, None], wp.reshape(wp.shape[0], -1).astype(np.float64))
    y += 0 if bp is None else bp.reshape(1, -1, 1, 1)
    return (y + (0 if z is None else z)).astype(np.float32)


def _operands(n: int, c: int, r: int, m: int, hw: int, bias: bool, residual: bool) -> list:
    ws = [_f32(r, c, 1, 1, scale=0.3), _f32(r) if bias else None, _f32(c, r, 1, 1, scale=0.3), _f32(c) if bias else None,
          _f32(m, c, 1, 1, scale=0.3), _f32(m) if bias else None]
    return [_f32(n, c, hw, hw), *ws, _f32(n, m, hw, hw) if residual else None]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("residual", [True, False])
def test_reference_kernel_equals_the_ops(layout: str, bias: bool, residual: bool) -> None:
    ins = _operands(2, 12, 3, 5, 6, bias, residual)
    if layout == "nhwc":
        ins[0] = _cl(ins[0])
    want = _golden(*ins)
    got = _project(ins, ATTRS)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got.strides[1] == 4) == (layout == "nhwc")  # laid out like X
    out = _cl(np.full(want.shape, np.nan, np.float32))
    _out_project(ins, ATTRS, [out])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_reference_kernel_names_a_projection_that_does_not_fit() -> None:
    ins = _operands(1, 4, 2, 3, 4, True, False)
    ins[5] = _f32(3, 5, 1, 1)
    with pytest.raises(ValueError, match=r"Wp has shape \[3, 5, 1, 1\]; expected \[M, 4, 1, 1\]"):
        _project(ins, ATTRS)


needs_onednn = pytest.mark.skipif(not providers.available("onednn"), reason="oneDNN not installed")


def _descs(ins: list, m: int) -> tuple[list, list]:
    x = ins[0]
    n, c, h, w = x.shape
    d = [TensorDesc(1, a.shape) if a is not None else None for a in ins]
    return d, [TensorDesc(1, (n, m, h, w))]


@needs_onednn
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("residual", [True, False])
def test_bound_kernel_equals_the_reference(n: int, bias: bool, residual: bool) -> None:
    ins = _operands(n, 24, 6, 8, 20, bias, residual)
    ins[0] = _cl(ins[0])
    if residual:
        ins[7] = _cl(ins[7])  # the chain's layout; a C-contiguous one is checked below
    in_d, out_d = _descs(ins, 8)
    consts = [None, *ins[1:7], None]
    k = sep.prepare_squeeze_excite_project({**ATTRS, "_layout": "NHWC"}, in_d, consts, out_d)
    assert k is not None
    want = _project(ins, ATTRS)[0]
    got = k.run(ins, ATTRS)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    arena = _cl(np.full(want.shape, np.nan, np.float32))
    assert k.run(ins, ATTRS, [arena])[0] is arena
    np.testing.assert_allclose(arena, want, rtol=1e-5, atol=1e-5)
    if residual:  # a residual in another layout is read right too
        ins[7] = np.ascontiguousarray(ins[7])
        np.testing.assert_allclose(k.run(ins, ATTRS)[0], want, rtol=1e-5, atol=1e-5)
        over = _cl(ins[7])  # the arena view over the residual itself: not written while the product reads it
        got = k.run(ins[:7] + [over], ATTRS, [over])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # X laid out C-contiguous (not the bound layout): the reference computes it
    ins[0] = np.ascontiguousarray(ins[0])
    np.testing.assert_allclose(k.run(ins, ATTRS)[0], want, rtol=1e-5, atol=1e-5)


@needs_onednn
def test_prepare_declines_what_it_cannot_bind() -> None:
    ins = _operands(1, 8, 2, 4, 8, True, False)
    in_d, out_d = _descs(ins, 4)
    consts = [None, *ins[1:7], None]
    assert sep.prepare_squeeze_excite_project(ATTRS, in_d, consts, out_d) is None  # not channels-last
    nhwc = {**ATTRS, "_layout": "NHWC"}
    assert sep.prepare_squeeze_excite_project(nhwc, in_d, consts, out_d) is not None
    runtime_wp = list(consts)
    runtime_wp[5] = None
    assert sep.prepare_squeeze_excite_project(nhwc, in_d, runtime_wp, out_d) is None
    dyn = [TensorDesc(1, (1, 8, "h", 8)), *in_d[1:]]
    assert sep.prepare_squeeze_excite_project(nhwc, dyn, consts, out_d) is None


# ------------------------------------------------------------------------------------------------ the pass
def _block(c: int = 16, hw: int = 20, m: int = 8, n: int = 1, spelling: str = "torchscript", residual: bool = False,
           case: str = "") -> onnx.ModelProto:
    """conv -> squeeze-and-excitation -> 1x1 projection [+ residual], as the exporters write it (dynamo:
    ReduceMean, SiLU as Sigmoid * x); ``case`` breaks one condition of the pattern."""
    r = 4
    inits = [const("Wa", _f32(c, 3, 3, 3, scale=0.3)), const("W1", _f32(r, c, 1, 1, scale=0.3)),
             const("B1", _f32(r)), const("W2", _f32(c, r, 1, 1, scale=0.3)), const("B2", _f32(c)),
             const("Wp", _f32(m, c, 1, 1, scale=0.3)), const("Bp", _f32(m))]
    nodes, head_inits = conv_pool_head(spelling)
    inits += head_inits
    nodes.append(helper.make_node("Conv", ["s", "W1", "B1"], ["z0"]))
    if spelling == "dynamo":
        nodes += [helper.make_node("Sigmoid", ["z0"], ["zs"]), helper.make_node("Mul", ["z0", "zs"], ["z"])]
    else:
        nodes.append(helper.make_node("Relu", ["z0"], ["z"]))
    nodes += [helper.make_node("Conv", ["z", "W2", "B2"], ["g0"]), helper.make_node("Sigmoid", ["g0"], ["g"]),
              helper.make_node("Mul", ["x1", "g"], ["y"])]
    strides = [2, 2] if case == "stride" else [1, 1]
    nodes.append(helper.make_node("Conv", ["y", "Wp", "Bp"], ["p"], strides=strides))
    out = "p"
    if residual:  # the inverted residual block's shortcut: a tensor of the projection's shape
        inits.append(const("Wr", _f32(m, 3, 1, 1, scale=0.3)))
        nodes += [helper.make_node("Conv", ["x", "Wr"], ["sc"]), helper.make_node("Add", ["p", "sc"], ["q"])]
        out = "q"
    if case == "relu":  # RegNetY: a ReLU after the projection (and its residual)
        nodes.append(helper.make_node("Relu", [out], ["q2"]))
        out = "q2"
    if case == "y_read_twice":
        inits.append(const("Wc", _f32(m, c, 1, 1, scale=0.3)))
        nodes += [helper.make_node("Conv", ["y", "Wc"], ["yc"]), helper.make_node("Add", [out, "yc"], ["q3"])]
        out = "q3"
    return float_model(nodes, [("x", [n, 3, hw, hw])], out, inits, opset=18 if spelling == "dynamo" else 17)


@pytest.mark.parametrize("spelling", ["torchscript", "dynamo"])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("n", [1, 2])
def test_block_and_projection_fuse_and_equal_ort(spelling: str, residual: bool, n: int) -> None:
    m = _block(spelling=spelling, residual=residual, n=n)
    x = _f32(n, 3, 20, 20)
    ops = check_compiled(m, {"x": x}, {"SqueezeExciteProject": 1}, absent=("SqueezeExcite", "GlobalAveragePool"),
                         rtol=1e-4, atol=1e-5)
    assert ops.count("FusedConv") + ops.count("Conv") == 1 + residual  # the first conv (and the shortcut) stay
    cm = compile_model(m)
    fused = next(nd for nd in cm.graph.nodes if nd.op_type == "SqueezeExciteProject")
    assert fused.attrs.get("_layout") == "NHWC"  # in the convs' channels-last chain
    lm = LoadedModel.from_compiled(cm)
    plan, _ = lm.executor.plan_for([x])
    step = next(st for st in plan.steps if st.node.op_type == "SqueezeExciteProject")
    if providers.available("onednn"):
        assert step.bound is not None and ("brg" in step.bound.impl or "gemm" in step.bound.impl)
    for _ in range(2):  # the arena views again on the second run
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("case", "why"), [
    ("relu", "an activation or affine after the projection (Relu)"),
    ("stride", "not a 1x1 / stride-1 / unpadded / group-1 conv"),
    ("small_image", "8 outputs for H*W = 16 pixels (< 4 per output"),
])
def test_what_is_not_a_projection_stays_and_says_why(case: str, why: str) -> None:
    m = _block(case=case, hw=4 if case == "small_image" else 20, residual=case == "relu")
    lines: list[str] = []
    cm = compile_model(m, log=lines.append)
    ops = [nd.op_type for nd in cm.graph.nodes]
    assert ops.count("SqueezeExcite") == 1 and "SqueezeExciteProject" not in ops, ops
    assert any("SqueezeExciteProjectFusion" in ln and why in ln for ln in lines), lines
    x = _f32(1, 3, 4 if case == "small_image" else 20, 4 if case == "small_image" else 20)
    np.testing.assert_allclose(LoadedModel.from_compiled(cm).run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_a_block_read_by_two_convs_keeps_its_mul() -> None:
    ops = check_compiled(_block(case="y_read_twice"), {"x": _f32(1, 3, 20, 20)}, {"SqueezeExcite": 1},
                         absent=("SqueezeExciteProject",), rtol=1e-4, atol=1e-5)
    assert ops


def test_the_pass_can_be_switched_off() -> None:
    cm = compile_model(_block(), CompileOptions(disabled_passes=["SqueezeExciteProjectFusion"]))
    ops = [nd.op_type for nd in cm.graph.nodes]
    assert ops.count("SqueezeExcite") == 1 and "SqueezeExciteProject" not in ops


def test_large_values_as_ort() -> None:
    """Activations of 1e18 with gates near 1 and weights of 0.3: (x g) w and x (w g) both stay finite and
    agree with ORT within float32 rounding; infinities in X reach the output as in ORT."""
    m = _block(residual=True)
    x = _f32(1, 3, 20, 20) * np.float32(1e18)
    check_compiled(m, {"x": x}, {"SqueezeExciteProject": 1}, rtol=1e-4, atol=1e12)
    x[0, 0, 3, 4] = np.inf
    got = LoadedModel.from_compiled(compile_model(m)).run([x])[0]
    want = run_ort(m, {"x": x})[0]
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
