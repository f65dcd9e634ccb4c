"""LayoutSelection (NHWC per oneDNN conv chain): which chains turn channels-last and why not,
the record in the .om, equal values with the pass on and off (ONNX Runtime as golden), and the
executor's channels-last arena buffers and C-order outputs; layout-preserving pooling."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from pycann.ge.compile.compiler import compile_model
from pycann.ge.compile.options import CompileOptions
from pycann.ge.compile.passes import select_layout
from pycann.ge.compile.passes.base import PassContext
from pycann.ge.om import dumps_om, loads_om
from pycann.ge.run.model import LoadedModel
from pycann.kernels import providers
from pycann.kernels.algorithm import BY_KEY
from pycann.ops.nn.spatial import empty_like_layout
from pycann.ops.registry import lookup
from tests.ops.oracle import run_ort

RNG = np.random.default_rng(7)
NHWC_CONV = {"torch:conv2d_nhwc", "onednn:conv_nhwc"}


def _has_onednn() -> bool:
    providers.reset()
    if not providers.available("torch"):
        return False
    from pycann.kernels.providers import torch_onednn

    return torch_onednn.packing_supported()


def _has_dnnl() -> bool:
    providers.reset()
    return providers.available("onednn")


needs_onednn = pytest.mark.skipif(not _has_onednn(), reason="torch with oneDNN prepacking not installed")
# the two providers of channels-last convs: oneDNN through torch, and oneDNN's own C API
PROVIDER_SETS = [pytest.param("numpy,torch", marks=needs_onednn),
                 pytest.param("numpy,onednn", marks=pytest.mark.skipif(not _has_dnnl(), reason="libdnnl missing"))]


@pytest.fixture
def conv_provider(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("PYCANN_PROVIDERS", request.param)
    providers.reset()
    return str(request.param)


pytestmark = pytest.mark.usefixtures("default_providers")  # tests/conftest.py


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _model(nodes: list[onnx.NodeProto], x_shape: list[int], outputs: list[str], inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _resnet_block() -> onnx.ModelProto:
    """conv3x3 -> relu -> maxpool -> [conv1x1 -> relu -> depthwise3x3] + residual -> relu -> GAP."""
    c = 96  # every conv above TINY_FLOPS, so oneDNN (not numpy) computes it
    nodes = [
        helper.make_node("Conv", ["x", "W0", "B0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p0", "W1", "B1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p0"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["y"]),
        helper.make_node("GlobalAveragePool", ["y"], ["g"]),
    ]
    inits = {"W0": _f32(c, 8, 3, 3) * 0.2, "B0": _f32(c), "W1": _f32(c, c, 1, 1) * 0.2, "B1": _f32(c),
             "W2": _f32(c, 1, 3, 3) * 0.3}
    return _model(nodes, [1, 8, 80, 80], ["y", "g"], inits)


def _layouts(cm: Any) -> dict[str, str | None]:
    return {n.name or n.outputs[0]: n.attrs.get("_layout") for n in cm.graph.nodes}


@pytest.mark.parametrize("conv_provider", PROVIDER_SETS, indirect=True)
def test_conv_chain_runs_nhwc_and_matches_ort(conv_provider: str) -> None:
    m = _resnet_block()
    x = _f32(1, 8, 80, 80)
    lines: list[str] = []
    cm = compile_model(m, log=lines.append)
    convs = [n for n in cm.graph.nodes if "Conv" in n.op_type]
    assert convs and all(n.attrs.get("_layout") == "NHWC" and str(n.attrs["_algo"]) in NHWC_CONV for n in convs)
    pool = next(n for n in cm.graph.nodes if n.op_type == "MaxPool")
    assert pool.attrs.get("_layout") == "NHWC"  # the chain runs through the pooling
    gap = next(n for n in cm.graph.nodes if n.op_type == "GlobalAveragePool")
    assert "_layout" not in gap.attrs  # layout-sensitive consumer: a chain boundary
    assert any("[LayoutSelection]" in ln and "1/1 conv chains NHWC" in ln for ln in lines), lines
    got = LoadedModel.from_compiled(cm).run_dict({"x": x})
    want = run_ort(m, {"x": x})
    for g_, w_ in zip(got, want):
        assert g_.flags.c_contiguous  # callers get C-order arrays, as from ORT
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


@needs_onednn
def test_layout_is_recorded_in_the_om_and_off_switch_gives_same_values() -> None:
    m = _resnet_block()
    x = _f32(1, 8, 80, 80)
    cm = compile_model(m)
    back = loads_om(dumps_om(cm.graph, cm.manifest))
    assert _layouts(back) == _layouts(cm)
    off = compile_model(m, CompileOptions(disabled_passes=["LayoutSelection"]))
    assert not any(_layouts(off).values())
    a = LoadedModel.from_compiled(cm).run_dict({"x": x})
    b = LoadedModel.from_compiled(off).run_dict({"x": x})
    for u, v in zip(a, b):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv_provider", PROVIDER_SETS, indirect=True)
def test_executor_lays_out_nhwc_arena_buffers_channels_last(conv_provider: str) -> None:
    from pycann.ge.planning.memory import plan_memory
    from pycann.ge.run.executor import Plan

    c = 32
    nodes = [helper.make_node("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c0", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sub", ["c1", "c0"], ["s"]),  # not fusable into a conv: an arena op in the chain
             helper.make_node("GlobalAveragePool", ["s"], ["y"])]
    m = _model(nodes, [1, 16, 32, 32], ["y"], {"W0": _f32(c, 16, 3, 3), "W1": _f32(c, c, 3, 3)})
    cm = compile_model(m)
    plan = Plan(cm.graph, memory=plan_memory(cm.graph))
    flagged = [spec for outs in plan.arena_layout for spec in outs if spec[3]]
    assert flagged, "the chain's pooling/elementwise outputs should get channels-last arena views"
    conv_kinds = {st.kind.value for n, st in zip(plan.nodes, plan.steps) if "Conv" in n.op_type}
    # oneDNN's C API writes straight into the (channels-last) arena; torch returns its own tensor
    assert conv_kinds == ({2} if conv_provider == "numpy,onednn" else {0}), conv_kinds
    arena = plan._take_arena()
    assert arena is not None
    for outs, views in zip(plan.arena_layout, arena.views):
        for spec, v in zip(outs, views):
            assert v.shape == spec[2]
            if spec[3]:
                assert v.strides[1] == v.itemsize  # channels innermost
    x = _f32(1, 16, 32, 32)
    np.testing.assert_allclose(LoadedModel.from_compiled(cm).run_dict({"x": x})[0], run_ort(m, {"x": x})[0],
                               rtol=1e-4, atol=1e-4)


@needs_onednn
def test_chain_with_too_many_boundaries_stays_nchw(monkeypatch: pytest.MonkeyPatch) -> None:
    """One conv whose output is read by three layout-sensitive ops: 1 entry + 3 boundaries > 2 x 1
    (the torch provider, which has an NCHW algorithm to fall back to)."""
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy,torch")
    providers.reset()
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1])]  # 9.4 MFLOP: oneDNN
    outs = []
    for i in range(3):
        nodes.append(helper.make_node("Flatten", ["c"], [f"f{i}"], axis=1 + i))
        outs.append(f"f{i}")
    m = _model(nodes, [1, 16, 32, 32], outs, {"W": _f32(32, 16, 3, 3)})
    lines: list[str] = []
    cm = compile_model(m, log=lines.append)
    conv = next(n for n in cm.graph.nodes if n.op_type == "Conv")
    assert "_layout" not in conv.attrs and str(conv.attrs["_algo"]) == "torch:conv2d_packed"
    text = "\n".join(ln for ln in lines if "[LayoutSelection]" in ln)
    assert "0/1 conv chains NHWC" in text
    assert "not applied: chain of 1 convs stays NCHW: 1 entries + 3 boundaries > 2 x 1 convs" in text
    x = _f32(1, 16, 32, 32)
    for g_, w_ in zip(LoadedModel.from_compiled(cm).run_dict({"x": x}), run_ort(m, {"x": x})):
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


def test_without_onednn_there_are_no_chains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    m = _resnet_block()
    cm = compile_model(m)
    assert not any(_layouts(cm).values())
    assert "no oneDNN conv chains" in select_layout.run(cm.graph, PassContext()).report
    x = _f32(1, 8, 80, 80)
    for g_, w_ in zip(LoadedModel.from_compiled(cm).run_dict({"x": x}), run_ort(m, {"x": x})):
        np.testing.assert_allclose(g_, w_, rtol=1e-4, atol=1e-4)


def _channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


def test_empty_like_layout_follows_the_input_axis_order() -> None:
    x = _channels_last(_f32(2, 5, 6, 7))
    y = empty_like_layout(x, (2, 5, 8, 9))
    assert y.shape == (2, 5, 8, 9) and y.strides == (8 * 9 * 5 * 4, 4, 9 * 5 * 4, 5 * 4)
    c = empty_like_layout(np.zeros((2, 3, 4, 4), np.float32), (2, 3, 5, 5), np.float64)
    assert c.flags.c_contiguous and c.dtype == np.float64


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "ceil_mode": 1, "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 0}),
])
def test_pooling_on_channels_last_input_keeps_layout_and_values(op: str, attrs: dict) -> None:
    x = _f32(1, 6, 11, 11)
    opdef = lookup(op, "", 17)
    a = opdef.with_defaults({**attrs, "_n_outputs": 1})
    want = opdef.kernel([x], a)[0]
    got = opdef.kernel([_channels_last(x)], a)[0]
    np.testing.assert_array_equal(got, want)
    assert got.strides[1] == got.itemsize  # still channels-last
    if opdef.out_kernel is not None:
        out = _channels_last(np.full(want.shape, np.nan, np.float32))
        opdef.out_kernel([_channels_last(x)], a, [out])
        np.testing.assert_array_equal(out, want)


def test_concat_and_nearest_resize_keep_channels_last() -> None:
    from pycann.dtypes import TensorDesc
    from pycann.kernels.bind import PREPARE

    xs = [_f32(1, c, 6, 5) for c in (3, 4)]
    desc = [TensorDesc(1, x.shape) for x in xs]
    kernel = PREPARE[("", "Concat")]({"axis": 1}, desc, [None, None], [TensorDesc(1, (1, 7, 6, 5))])
    assert kernel is not None
    got = kernel([_channels_last(x) for x in xs], {})[0]
    np.testing.assert_array_equal(got, np.concatenate(xs, axis=1))
    assert got.strides[1] == got.itemsize
    mixed = kernel([xs[0], _channels_last(xs[1])], {})[0]
    np.testing.assert_array_equal(mixed, np.concatenate(xs, axis=1))

    resize = lookup("Resize", "", 13)
    for mode, coord, nearest in [("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_ceil"),
                                 ("linear", "half_pixel", "round_prefer_floor")]:
        a = resize.with_defaults({"mode": mode, "coordinate_transformation_mode": coord, "nearest_mode": nearest})
        for scales in ([1, 1, 2, 2], [1, 1, 0.5, 1.5]):
            sc = np.array(scales, np.float32)
            want = resize.kernel([xs[1], None, sc], a)[0]
            got = resize.kernel([_channels_last(xs[1]), None, sc], a)[0]
            np.testing.assert_array_equal(got, want)
            if mode == "nearest":
                assert got.strides[1] == got.itemsize


@pytest.mark.parametrize("conv_provider", PROVIDER_SETS, indirect=True)
def test_fpn_head_runs_nhwc_through_resize_concat_and_conv_transpose(conv_provider: str) -> None:
    """PP-OCR det's neck/head shape: conv -> nearest x2 -> concat -> conv -> ConvTranspose."""
    c = 32
    nodes = [
        helper.make_node("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c0", "W1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["c1", "", "sc"], ["u1"], mode="nearest"),
        helper.make_node("Concat", ["c0", "u1"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "W2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("ConvTranspose", ["r2", "WT"], ["y"], strides=[2, 2]),
    ]
    inits = {"W0": _f32(c, 8, 3, 3) * 0.2, "W1": _f32(c, c, 3, 3) * 0.1, "sc": np.array([1, 1, 2, 2], np.float32),
             "W2": _f32(c, 2 * c, 3, 3) * 0.1, "WT": _f32(c, 4, 2, 2)}
    m = _model(nodes, [1, 8, 48, 48], ["y"], inits)
    cm = compile_model(m)
    lay = {n.op_type: n.attrs.get("_layout") for n in cm.graph.nodes}
    assert lay["Resize"] == lay["Concat"] == lay["ConvTranspose"] == "NHWC", lay
    x = _f32(1, 8, 48, 48)
    got = LoadedModel.from_compiled(cm).run_dict({"x": x})[0]
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


@needs_onednn
@pytest.mark.parametrize("act,residual", [("", False), ("Relu", False), ("Relu", True), ("HardSwish", False),
                                          ("HardSwish", True), ("HardSigmoid", False)])
def test_prepared_onednn_conv_equals_the_generic_kernel(act: str, residual: bool) -> None:
    """The plan-time bound oneDNN conv (kernels/bind.py) computes what FusedConv's kernel does;
    activations oneDNN cannot run (HardSigmoid with ONNX's 0.2 slope) keep the generic kernel."""
    from pycann.dtypes import TensorDesc
    from pycann.kernels.bind import PREPARE

    x, w, b = _f32(1, 16, 20, 20), _f32(32, 16, 3, 3) * 0.2, _f32(32)
    z = _f32(1, 32, 20, 20)
    attrs = lookup("FusedConv", "pycann", 1).with_defaults(
        {"pads": [1, 1, 1, 1], "activation": act, "act_alpha": 0.2 if act == "HardSigmoid" else 0.0,
         "act_beta": 0.5 if act == "HardSigmoid" else 0.0, "_algo": BY_KEY["torch:conv2d_nhwc"]})
    descs = [TensorDesc(1, x.shape), TensorDesc(1, w.shape), TensorDesc(1, b.shape)] + \
        ([TensorDesc(1, z.shape)] if residual else [])
    consts = [None, w, b] + ([None] if residual else [])
    kernel = PREPARE[("pycann", "FusedConv")](attrs, descs, consts, [TensorDesc(1, (1, 32, 20, 20))])
    if act == "HardSigmoid":
        assert kernel is None
        return
    assert kernel is not None
    ins = [_channels_last(x), w, b] + ([z] if residual else [])
    want = lookup("FusedConv", "pycann", 1).kernel([x, w, b] + ([z] if residual else []), attrs)[0]
    got = kernel(ins, attrs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [2, 2], "strides": [2, 2]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1]},
])
@pytest.mark.parametrize("nan", [False, True])
def test_prepared_max_pool_in_nhwc_chain_matches_numpy(attrs: dict, nan: bool) -> None:
    """oneDNN's (or ATen's) pooling inside an NHWC chain equals the numpy kernel, NaN rules
    included (ORT skips a NaN unless the whole window is NaN; ATen propagates it and oneDNN
    turns an all-NaN window into -3.4e38, so such results are recomputed)."""
    from pycann.dtypes import TensorDesc
    from pycann.kernels.bind import PREPARE

    x = _f32(2, 8, 11, 11)
    if nan:
        x[0, 1, 3, 4] = np.nan
    op = lookup("MaxPool", "", 12)
    a = op.with_defaults({**attrs, "_layout": "NHWC", "_n_outputs": 1})
    want = op.kernel([x], a)[0]
    kernel = PREPARE[("", "MaxPool")](a, [TensorDesc(1, x.shape)], [None], [TensorDesc(1, want.shape)])
    assert kernel is not None
    got = kernel([_channels_last(x)], a)[0]
    np.testing.assert_array_equal(got, want)
    nchw = PREPARE[("", "MaxPool")]({**a, "_layout": None}, [TensorDesc(1, x.shape)], [None],
                                    [TensorDesc(1, want.shape)])
    if nchw is not None:  # outside a chain: oneDNN's NCHW pooling (or numpy), NCHW result
        got = nchw([x], a)[0]
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


def test_bf16_mode_chain_runs_through_its_casts() -> None:
    """``allow_fp32_to_bf16`` puts Casts between the bf16 convs and the float32 vector ops (a DB
    neck: conv -> nearest x2 -> Add -> conv); the chain runs channels-last through them, with the
    values of the same model compiled without LayoutSelection."""
    from pycann.kernels.providers import onednn_bf16

    if not onednn_bf16.native():
        pytest.skip("no avx512_bf16/amx_bf16 CPU or no libdnnl.so.3")
    c = 32
    nodes = [
        helper.make_node("Conv", ["x", "W0"], ["c0"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c0", "W1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["c1", "", "sc"], ["u1"], mode="nearest"),
        helper.make_node("Add", ["c0", "u1"], ["s"]),
        helper.make_node("Conv", ["s", "W2"], ["y"], pads=[1, 1, 1, 1]),
    ]
    inits = {"W0": _f32(c, 8, 3, 3) * 0.2, "W1": _f32(c, c, 3, 3) * 0.1, "sc": np.array([1, 1, 2, 2], np.float32),
             "W2": _f32(c, c, 3, 3) * 0.1}
    m = _model(nodes, [1, 8, 40, 48], ["y"], inits)
    opts = {"precision_mode": "allow_fp32_to_bf16", "soc_version": "Ascend910B2"}
    cm = compile_model(m, CompileOptions(**opts))
    casts = [n for n in cm.graph.nodes if n.op_type == "Cast"]
    assert len(casts) >= 3 and all(n.attrs.get("_layout") == "NHWC" for n in casts[1:]), \
        [(n.outputs, n.attrs.get("_layout")) for n in casts]  # (the first casts the NCHW graph input)
    assert all(n.attrs.get("_layout") == "NHWC" for n in cm.graph.nodes if n.op_type in ("Resize", "Add",
                                                                                             "ElementwiseChain"))
    off = compile_model(m, CompileOptions(**opts, disabled_passes=["LayoutSelection"]))
    x = _f32(1, 8, 40, 48)
    got = LoadedModel.from_compiled(cm).run_dict({"x": x})[0]
    want = LoadedModel.from_compiled(off).run_dict({"x": x})[0]
    assert got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    ref = run_ort(m, {"x": x})[0]  # float32: three bf16 convs stay within a few % of its scale
    assert np.abs(got - ref).max() <= 0.1 * np.abs(ref).max() and np.abs(got - ref).mean() <= 0.01 * np.abs(ref).mean()
