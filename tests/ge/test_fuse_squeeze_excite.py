"""SqueezeExciteFusion (ge/compile/passes/fuse_squeeze_excite.py), pycann.SqueezeExcite (ops/squeeze_excite.py)
and its bound kernel (kernels/squeeze_excite.py): the spellings of the blocks fuse (positive), what is not a
squeeze-and-excitation block stays (negative), and every compiled graph computes what ONNX Runtime computes
on the original model (equivalence), channels-last chains included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from pycann.dtypes import TensorDesc
from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.run.model import LoadedModel
from pycann.kernels import squeeze_excite as se_kernel
from pycann.ops.fused import apply_activation
from pycann.ops.squeeze_excite import _k_squeeze_excite, _out_squeeze_excite
from tests.ge.onnx_graphs import check_compiled, const, conv_pool_head, float_model
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(5)
# A fused block is one of these: SqueezeExciteProjectFusion (tests/ge/test_fuse_se_project.py) takes a block
# whose output only a 1x1 projection conv reads into the second
BLOCK_OPS = ("SqueezeExcite", "SqueezeExciteProject")
NO_PROJECT = CompileOptions(disabled_passes=["SqueezeExciteProjectFusion"])


def _blocks(cm: object) -> int:
    return sum(n.op_type in BLOCK_OPS for n in cm.graph.nodes)  # type: ignore[attr-defined]


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _cl(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def _numpy_se(x: np.ndarray, w1: np.ndarray, b1: np.ndarray | None, w2: np.ndarray, b2: np.ndarray | None,
              act1: tuple[str, float, float], act2: tuple[str, float, float]) -> np.ndarray:
    """The block op by op in float64 (the golden): mean, 1x1 conv, activation, 1x1 conv, gate, multiply."""
    s = x.astype(np.float64).mean(axis=(2, 3))
    z = s @ w1.reshape(w1.shape[0], -1).T.astype(np.float64) + (0 if b1 is None else b1)
    z = apply_activation(z, *act1)
    g = z @ w2.reshape(w2.shape[0], -1).T.astype(np.float64) + (0 if b2 is None else b2)
    g = apply_activation(g, *act2)
    return (x * g[:, :, None, None]).astype(np.float32)


def _attrs(act1: tuple[str, float, float], act2: tuple[str, float, float], layout: str = "") -> dict[str, object]:
    a: dict[str, object] = {"act1": act1[0], "act1_alpha": act1[1], "act1_beta": act1[2],
                            "act2": act2[0], "act2_alpha": act2[1], "act2_beta": act2[2]}
    if layout:
        a["_layout"] = layout
    return a


ACTS = [(("Relu", 0.0, 0.0), ("Sigmoid", 0.0, 0.0)), (("Swish", 1.0, 0.0), ("Sigmoid", 0.0, 0.0)),
        (("Relu", 0.0, 0.0), ("HardSigmoid", 1 / 6, 0.5)), (("", 0.0, 0.0), ("", 0.0, 0.0))]


@pytest.mark.parametrize("acts", ACTS)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("bias", [True, False])
def test_reference_kernel_equals_the_ops(acts: tuple, layout: str, bias: bool) -> None:
    n, c, r, h, w = 2, 12, 3, 5, 7
    x = _f32(n, c, h, w)
    x = _cl(x) if layout == "nhwc" else x
    w1, w2 = _f32(r, c, 1, 1), _f32(c, r, 1, 1)
    b1, b2 = (_f32(r), _f32(c)) if bias else (None, None)
    want = _numpy_se(x, w1, b1, w2, b2, *acts)
    got = _k_squeeze_excite([x, w1, b1, w2, b2], _attrs(*acts))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert (got.strides[1] == 4) == (layout == "nhwc")  # laid out like X
    out = _cl(np.full(want.shape, np.nan, np.float32))  # an arena view, channels-last
    _out_squeeze_excite([x, w1, b1, w2, b2], _attrs(*acts), [out])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("inputs,why", [
    (lambda: [_f32(1, 4, 3, 3), _f32(2, 5, 1, 1), None, _f32(4, 2, 1, 1), None], "W1 has shape"),
    (lambda: [_f32(1, 4, 3, 3), _f32(2, 4, 1, 1), None, _f32(4, 3, 1, 1), None], "W2 has shape"),
    (lambda: [_f32(1, 4, 3, 3), _f32(2, 4, 1, 1), _f32(3), _f32(4, 2, 1, 1), None], "B1 has shape"),
    (lambda: [_f32(4, 3, 3), _f32(2, 4, 1, 1), None, _f32(4, 2, 1, 1), None], "rank 4"),
])
def test_reference_kernel_names_the_operand_that_does_not_fit(inputs, why: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=why):
        _k_squeeze_excite(inputs(), _attrs(*ACTS[0]))


# (C, H, R): the oneDNN binary Mul (C*H*W >= 64K) and numpy's; numpy's 1x1 convs and oneDNN's matmul (C*R >= 64K)
@pytest.mark.parametrize("c,hw,r", [(32, 48, 8), (24, 5, 6), (512, 4, 128)])
@pytest.mark.parametrize("layout", ["NHWC", ""])
@pytest.mark.parametrize("n", [1, 2])
def test_bound_kernel_equals_the_reference(c: int, hw: int, r: int, layout: str, n: int) -> None:
    acts = ACTS[1]
    x = _f32(n, c, hw, hw)
    x = _cl(x) if layout else x
    w1, w2, b1, b2 = _f32(r, c, 1, 1) * 0.3, _f32(c, r, 1, 1) * 0.3, _f32(r), _f32(c)
    attrs = _attrs(*acts, layout=layout)
    desc = TensorDesc(1, (n, c, hw, hw))
    k = se_kernel.prepare_squeeze_excite(attrs, [desc, None, None, None, None], [None, w1, b1, w2, b2], [desc])
    assert k is not None
    want = _numpy_se(x, w1, b1, w2, b2, *acts)
    ins = [x, w1, b1, w2, b2]
    np.testing.assert_allclose(k.run(ins, attrs)[0], want, rtol=1e-4, atol=1e-5)
    out = _cl(np.full(want.shape, np.nan, np.float32)) if layout else np.full(want.shape, np.nan, np.float32)
    for _ in range(2):  # the same arena view again
        assert k.run(ins, attrs, [out])[0] is out
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    other = np.ascontiguousarray(x) if layout else _cl(x)  # another layout than bound: the reference runs
    np.testing.assert_allclose(k.run([other, w1, b1, w2, b2], attrs)[0], want, rtol=1e-4, atol=1e-5)


def test_bound_kernel_propagates_nan_and_inf() -> None:
    c, hw, r = 32, 48, 8
    x = _cl(_f32(1, c, hw, hw))
    x[0, 3, 2, 2] = np.nan  # channel 3's mean is NaN: its gate and the whole channel too (and every gate
    x[0, 5, 1, 1] = np.inf  # through the first conv); an inf mean likewise
    w1, w2 = _f32(r, c, 1, 1), _f32(c, r, 1, 1)
    attrs = _attrs(*ACTS[0], layout="NHWC")
    desc = TensorDesc(1, (1, c, hw, hw))
    k = se_kernel.prepare_squeeze_excite(attrs, [desc, None, None, None, None], [None, w1, None, w2, None], [desc])
    assert k is not None
    got = k.run([x, w1, None, w2, None], attrs)[0]
    want = _k_squeeze_excite([np.ascontiguousarray(x), w1, None, w2, None], _attrs(*ACTS[0]))[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).any()


def test_prepare_declines_what_it_cannot_bind() -> None:
    w1, w2 = _f32(2, 4, 1, 1), _f32(4, 2, 1, 1)
    attrs = _attrs(*ACTS[0])
    static, dynamic = TensorDesc(1, (1, 4, 3, 3)), TensorDesc(1, ("n", 4, 3, 3))
    none = [None] * 5
    assert se_kernel.prepare_squeeze_excite(attrs, [dynamic], [None, w1, None, w2, None], [dynamic]) is None
    assert se_kernel.prepare_squeeze_excite(attrs, [static], [None, None, None, w2, None], [static]) is None
    # a bias given but computed at run time
    assert se_kernel.prepare_squeeze_excite(attrs, [static, None, static], [None, w1, None, w2, None], none) is None
    assert se_kernel.prepare_squeeze_excite(attrs, [static], [None, w1.astype(np.float64), None, w2, None],
                                            [static]) is None


# ------------------------------------------------------------------------------------------------ the pass
def _block(c: int = 16, hw: int = 20, r: int = 4, spelling: str = "torchscript", gate: str = "Sigmoid",
           swap: bool = False, bias: bool = True, case: str = "") -> onnx.ModelProto:
    """conv -> squeeze-and-excitation -> conv, as the exporters write it (dynamo: ReduceMean; SiLU as
    Sigmoid * x); ``case`` breaks one condition of the pattern."""
    inits = [const("Wa", _f32(c, 3, 3, 3) * 0.3), const("W1", _f32(r, c, 1, 1) * 0.3),
             const("W2", _f32(c, r, 1, 1) * 0.3), const("Wb", _f32(8, c, 1, 1) * 0.3)]
    if bias:
        inits += [const("B1", _f32(r)), const("B2", _f32(c))]
    nodes, head_inits = conv_pool_head(spelling)
    inits += head_inits
    k1 = [1, 1] if case != "3x3" else [3, 3]
    if case == "3x3":
        inits[1] = const("W1", _f32(r, c, 3, 3) * 0.3)
    nodes.append(helper.make_node("Conv", ["s", "W1", "B1"] if bias else ["s", "W1"], ["z0"], kernel_shape=k1,
                                  pads=[1, 1, 1, 1] if case == "3x3" else [0, 0, 0, 0]))
    if spelling == "dynamo":  # SiLU spelled out
        nodes += [helper.make_node("Sigmoid", ["z0"], ["zs"]), helper.make_node("Mul", ["z0", "zs"], ["z"])]
    else:
        nodes.append(helper.make_node("Relu", ["z0"], ["z"]))
    nodes.append(helper.make_node("Conv", ["z", "W2", "B2"] if bias else ["z", "W2"], ["g0"]))
    if gate == "HardSigmoid":
        nodes.append(helper.make_node("HardSigmoid", ["g0"], ["g"], alpha=1 / 6, beta=0.5))
    else:
        nodes.append(helper.make_node("Sigmoid", ["g0"], ["g"]))
    other = "x1" if case != "other_tensor" else "a2"
    if case == "other_tensor":
        nodes.append(helper.make_node("Neg", ["x1"], ["a2"]))
    nodes.append(helper.make_node("Mul", ["g", other] if swap else [other, "g"], ["m"]))
    if case == "residual":  # PP-OCR det's x * se(x) + x: the chain takes the Mul
        nodes[-1].output[0] = "m0"
        nodes.append(helper.make_node("Add", ["m0", other], ["m"]))
    nodes.append(helper.make_node("Conv", ["m", "Wb"], ["y0"]))
    out = "y0"
    if case == "pool_reader":  # the pooled means read elsewhere too
        inits.append(const("Wc", _f32(8, c, 1, 1) * 0.3))
        nodes += [helper.make_node("Conv", ["s", "Wc"], ["sc"]), helper.make_node("Add", ["y0", "sc"], ["y"])]
        out = "y"
    return float_model(nodes, [("x", [1, 3, hw, hw])], out, inits, opset=18 if spelling == "dynamo" else 17)


@pytest.mark.parametrize("spelling", ["torchscript", "dynamo"])
@pytest.mark.parametrize("gate", ["Sigmoid", "HardSigmoid"])
@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_block_fuses_and_equals_ort(spelling: str, gate: str, swap: bool, bias: bool) -> None:
    m = _block(spelling=spelling, gate=gate, swap=swap, bias=bias)
    check_compiled(m, {"x": _f32(1, 3, 20, 20)}, {"SqueezeExciteProject": 1},
                   absent=("GlobalAveragePool", "ReduceMean", "SqueezeExcite"), rtol=1e-4, atol=1e-5)


def test_fused_block_runs_channels_last_on_its_bound_kernel() -> None:
    m = _block(c=32, hw=48, r=8)
    cm = compile_model(m, NO_PROJECT)
    se = next(n for n in cm.graph.nodes if n.op_type == "SqueezeExcite")
    assert se.attrs.get("_layout") == "NHWC"  # inside the convs' channels-last chain
    assert se.attrs["act1"] == "Relu" and se.attrs["act2"] == "Sigmoid"
    x = _f32(1, 3, 48, 48)
    lm = LoadedModel.from_compiled(cm)
    for _ in range(2):  # arena views reused on the second run
        np.testing.assert_allclose(lm.run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    plan, _ = lm.executor.plan_for([x])
    step = next(i for i, st in enumerate(plan.steps) if st.node.op_type == "SqueezeExcite")
    assert plan.overwritten.get(step) == 0  # X dies here: the gate is written over it, in place


def test_binary_mul_writes_over_its_first_source() -> None:
    """onednn_binary's bound Mul takes ``out`` that is its first input itself (dst == src0)."""
    from pycann.kernels.providers import available, onednn_binary

    if not available("onednn"):
        pytest.skip("oneDNN is not installed")
    x, g = _cl(_f32(1, 32, 48, 48)), _f32(1, 32, 1, 1)
    k = onednn_binary.bound_chain([("Mul", 1, False)], [x.shape, g.shape], True)
    assert k is not None
    want = x * g
    assert k.run([x, g], x) is x
    np.testing.assert_array_equal(x, want)
    other = _cl(_f32(1, 32, 48, 48))
    y = k.run([other, g], x[:, :, :, :])  # a different view of x's memory than the source: written there
    np.testing.assert_array_equal(y, other * g)


@pytest.mark.parametrize("case", ["3x3", "other_tensor", "pool_reader", "residual"])
def test_what_is_not_a_block_stays(case: str) -> None:
    m = _block(case=case)
    ops = check_compiled(m, {"x": _f32(1, 3, 20, 20)}, rtol=1e-4, atol=1e-5)
    assert not set(BLOCK_OPS) & set(ops), ops


def test_dynamic_shapes_keep_the_separate_ops() -> None:
    m = _block()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "h"
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "w"
    lines: list[str] = []
    cm = compile_model(m, log=lines.append)
    assert _blocks(cm) == 0
    assert any("SqueezeExciteFusion" in ln and "not applied" in ln and "has dynamic dims" in ln for ln in lines), lines
    x = _f32(1, 3, 12, 16)
    np.testing.assert_allclose(LoadedModel.from_compiled(cm).run([x])[0], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-5)
    static = compile_model(m, CompileOptions(input_shape={"x": [1, 3, 12, 16]}))
    assert _blocks(static) == 1


def test_the_pass_can_be_switched_off() -> None:
    cm = compile_model(_block(), CompileOptions(disabled_passes=["SqueezeExciteFusion"]))
    assert _blocks(cm) == 0


def test_missed_block_names_the_value_with_other_readers() -> None:
    """With ConvActivationFusion off the dynamo SiLU (Sigmoid * z) reads the first conv's output twice: the
    reason names that value and its readers (it said "the pooled value has other readers")."""
    lines: list[str] = []
    compile_model(_block(spelling="dynamo"), CompileOptions(disabled_passes=["ConvActivationFusion"]), log=lines.append)
    missed = [ln for ln in lines if "SqueezeExciteFusion" in ln and "not applied" in ln]
    # first the switch that left the activations apart, then the block's own reason
    assert len(missed) == 2 and "ConvActivationFusion is off" in missed[0], lines
    assert "second conv: the first conv's output z0 has 2 readers (" in missed[1], lines
    assert "pooled value" not in missed[1]


ZOO_BLOCKS = {"tv_efficientnet_b0": 16, "tv_mobilenet_v3_large": 8, "tv_regnet_y_800mf": 14}


@pytest.mark.models
@pytest.mark.parametrize("name", sorted(ZOO_BLOCKS))
@pytest.mark.parametrize("exporter", ["", "_dynamo"])
def test_torchvision_blocks_fuse_from_both_exporters(name: str, exporter: str, tmp_path: Path) -> None:
    from scripts.model_zoo import ZOO

    s = ZOO[name + exporter]
    if not s.path.is_file():
        pytest.skip(f"{name + exporter} is not exported (python scripts/export_torch_models.py --zoo)")
    feeds = s.test_inputs(0)
    cm = compile_model(str(s.path), CompileOptions(input_shape={k: list(v.shape) for k, v in feeds.items()}))
    assert _blocks(cm) == ZOO_BLOCKS[name]
    s.assert_close(LoadedModel.from_compiled(cm).run_dict(feeds), run_ort(onnx.load(str(s.path)), feeds))
