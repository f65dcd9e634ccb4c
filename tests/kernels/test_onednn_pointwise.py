"""Pointwise convs and patch-scattering ConvTransposes of any size on one oneDNN matmul with run-time
dims (``kernels/providers/onednn_pointwise.py``) against ONNX Runtime: several input sizes (and
batches, layouts, spatial ranks) on one primitive per weight, bias / residual / activations, the
out buffer, operand errors, the geometries that keep the per-shape primitive, and a model with
symbolic H and W on the shape-generic plan. Skipped when libdnnl v3 is not installed."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.errors import OperandError
from pycann.kernels.providers import onednn
from pycann.ops.nn.conv import conv_transpose_geometry, conv_window
from tests.kernels.test_onednn_provider import ACTS, ATOL, RTOL, _cl, _data, _is_cl, _ort_conv
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

from pycann.kernels.providers import onednn_pointwise as pw  # noqa: E402

SIZES = [(1, 7, 9), (2, 5, 3), (1, 1, 1), (3, 16, 17), (1, 40, 48)]  # (N, H, W) fed in turn


def _new_plans(before: set[Any], table: dict[Any, Any]) -> list[Any]:
    return [table[k] for k in set(table) - before]


@pytest.mark.parametrize("bias", [True, False])
def test_pointwise_conv_every_size_on_one_primitive(bias: bool) -> None:
    _, w, b = _data((1, 32, 1, 1), (48, 32, 1, 1), bias)
    before = set(pw._plans)
    for i, (n, h, wd) in enumerate(SIZES):
        x = np.random.default_rng(i).standard_normal((n, 32, h, wd)).astype(np.float32)
        ref = _ort_conv(x, w, b, {}, 1)
        for xin in (x, _cl(x)):
            y = onednn.conv_nhwc(xin, w, b, 1, conv_window(x.shape, w.shape, {}))
            assert y.shape == ref.shape and _is_cl(y)
            np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    made = _new_plans(before, pw._plans)
    assert len(made) == 1 and made[0] is not None and made[0].impl.startswith("gemm")  # not one per size


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act", ["Relu", "HardSwish", "Sigmoid", "Clip"])
def test_pointwise_post_ops(act: str, residual: bool) -> None:
    x, w, b = _data((2, 24, 6, 11), (40, 24, 1, 1), True, seed=1)
    rng = np.random.default_rng(2)
    r = rng.standard_normal((2, 40, 6, 11)).astype(np.float32) if residual else None
    alpha, beta, fn = ACTS[act]
    ref = fn(_ort_conv(x, w, b, {}, 1, residual=r).astype(np.float64), alpha, beta)
    unary = onednn.onednn_unary(act, alpha, beta)
    for rin in (r, None if r is None else _cl(r), None if r is None else r[:1, :, :1, :1].astype(np.float64)):
        want = ref if rin is None or rin.shape == (2, 40, 6, 11) else \
            fn(_ort_conv(x, w, b, {}, 1).astype(np.float64) + rin, alpha, beta)
        y = onednn.conv_nhwc(x, w, b, 1, conv_window(x.shape, w.shape, {}), residual=rin, unary=unary)
        assert _is_cl(y)
        np.testing.assert_allclose(y, want, rtol=RTOL, atol=ATOL)


def test_pointwise_conv1d_conv3d_and_out_buffer() -> None:
    for xs, ws in (((2, 8, 17), (12, 8, 1)), ((1, 4, 3, 5, 6), (6, 4, 1, 1, 1))):
        x, w, b = _data(xs, ws, True, seed=3)
        win = conv_window(x.shape, w.shape, {})
        ref = _ort_conv(x, w, b, {}, 1)
        y = onednn.conv_nhwc(x, w, b, 1, win)
        np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
        out = onednn.empty_channels_last(ref.shape)
        assert onednn.conv_nhwc(x, w, b, 1, win, out) is out
        np.testing.assert_allclose(out, ref, rtol=RTOL, atol=ATOL)
        flat = np.empty(ref.size, np.float32)  # another layout: written through _deliver's copy
        y = onednn.conv_nhwc(x, w, b, 1, win, flat)
        assert np.shares_memory(y, flat)
        np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_pointwise_plan_dropped_with_weight() -> None:
    x, w, b = _data((1, 16, 5, 5), (8, 16, 1, 1), True)
    before = set(pw._plans)
    onednn.conv_nhwc(x, w, b, 1, conv_window(x.shape, w.shape, {}))
    new = set(pw._plans) - before
    assert len(new) == 1
    del w
    gc.collect()
    assert not new & set(pw._plans)


def test_pointwise_operand_errors() -> None:
    _, w, b = _data((1, 16, 1, 1), (8, 16, 1, 1), True)
    k = pw.plan(w, True, None, True)
    assert k is not None
    x = np.zeros((1, 16, 4, 4), np.float32)
    with pytest.raises(OperandError, match="16 input channels"):
        k.run(np.zeros((1, 15, 4, 4), np.float32), b, np.zeros((1, 8, 4, 4), np.float32))
    with pytest.raises(OperandError, match="residual"):
        k.run(x, b, None)
    with pytest.raises(OperandError, match="does not broadcast"):
        k.run(x, b, np.zeros((1, 8, 3, 4), np.float32))
    with pytest.raises(OperandError, match="bias"):
        k.run(x, np.zeros(7, np.float32), np.zeros((1, 8, 4, 4), np.float32))
    with pytest.raises(OperandError, match="bias"):
        k.run(x, None, np.zeros((1, 8, 4, 4), np.float32))


@pytest.mark.parametrize("attrs", [{"strides": [1, 1]}, {"pads": [0, 0, 0, 1]}, {"strides": [2, 2]}])
def test_strided_or_padded_1x1_keeps_the_per_shape_primitive(attrs: dict[str, Any]) -> None:
    x, w, b = _data((1, 8, 6, 7), (4, 8, 1, 1), True)
    win = conv_window(x.shape, w.shape, attrs)
    assert pw.pointwise(w, 1, win) == (attrs == {"strides": [1, 1]})
    np.testing.assert_allclose(onednn.conv_nhwc(x, w, b, 1, win), _ort_conv(x, w, b, attrs, 1), rtol=RTOL, atol=ATOL)


# wide patch rows (kw * M > NARROW_COLUMNS: oneDNN's batched product) and narrow ones (numpy's dense
# product: one channel of 2x2 as a DB head, an odd row of 3 floats, two channels)
PATCHES = [((96, 24, 2, 2), [2, 2]), ((8, 5, 3, 2), [3, 2]), ((4, 6, 1, 1), [1, 1]), ((6, 3, 4, 4), [4, 4]),
           ((24, 1, 2, 2), [2, 2]), ((5, 1, 3, 3), [3, 3]), ((7, 2, 2, 2), [2, 2])]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("ws,strides", PATCHES, ids=[f"{p[0][2]}x{p[0][3]}" for p in PATCHES])
def test_patch_deconv_every_size(ws: tuple[int, ...], strides: list[int], bias: bool) -> None:
    c, m = ws[0], ws[1]
    w = (np.random.default_rng(0).standard_normal(ws) / np.sqrt(c)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(m).astype(np.float32) if bias else None
    attrs = {"strides": strides}
    before = set(pw._patch_plans)
    for i, (n, h, wd) in enumerate(SIZES):
        x = np.random.default_rng(i).standard_normal((n, c, h, wd)).astype(np.float32)
        ref = np.maximum(_ort_conv(x, w, b, attrs, 1, transpose=True), 0)
        win, outs = conv_transpose_geometry(x.shape[2:], ws[2:], attrs)
        assert pw.patch_deconv(w, 1, win, x.shape, outs)
        for xin in (x, _cl(x)):
            y = onednn.conv_transpose_nhwc(xin, w, b, 1, win, outs, unary=onednn.RELU)
            assert y.shape == ref.shape and _is_cl(y)
            np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    made = _new_plans(before, pw._patch_plans)
    assert len(made) == 1 and made[0] is not None


@pytest.mark.parametrize("attrs,group", [({"strides": [2, 2], "pads": [1, 1, 0, 0]}, 1),
                                         ({"strides": [2, 2], "output_padding": [1, 1]}, 1),
                                         ({"strides": [2, 2]}, 2),
                                         ({"strides": [2, 2], "dilations": [2, 2]}, 1),
                                         ({"strides": [1, 2]}, 1)])
def test_overlapping_or_offset_deconvs_keep_the_per_shape_primitive(attrs: dict[str, Any], group: int) -> None:
    x, w, _ = _data((1, 8, 5, 6), (8, 4 // group, 2, 2), False)
    b = np.random.default_rng(3).standard_normal(w.shape[1] * group).astype(np.float32)
    win, outs = conv_transpose_geometry(x.shape[2:], w.shape[2:], attrs)
    assert not pw.patch_deconv(w, group, win, x.shape, outs)
    y = onednn.conv_transpose_nhwc(x, w, b, group, win, outs)
    np.testing.assert_allclose(y, _ort_conv(x, w, b, attrs, group, transpose=True), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("act", ["Sigmoid", "Relu", "HardSigmoid", None])
def test_narrow_patch_deconv_activations_nan_and_inf(act: str | None) -> None:
    """The dense numpy form (a DB head's 24 -> 1 channel 2x2 deconv) against ORT's ConvTranspose and
    activation, NaN and +-inf inputs included (NaN stays NaN, as in ORT)."""
    from tests.kernels.test_onednn_provider import ACTS

    x, w, _ = _data((2, 24, 6, 9), (24, 1, 2, 2), False)
    b = np.array([0.3], np.float32)  # (M,)
    assert w.shape[1] * w.shape[3] <= pw.NARROW_COLUMNS
    x[0, 3, 2, 4], x[1, 0, 5, 8], x[1, 7, 0, 0] = np.nan, np.inf, -np.inf
    attrs = {"strides": [2, 2]}
    win, outs = conv_transpose_geometry(x.shape[2:], w.shape[2:], attrs)
    unary = onednn.onednn_unary(act, *ACTS[act][:2]) if act else None
    with np.errstate(invalid="ignore"):
        ref = _ort_conv(x, w, b, attrs, 1, transpose=True)
        if act:
            ref = ACTS[act][2](ref, *ACTS[act][:2]).astype(np.float32)
        y = onednn.conv_transpose_nhwc(x, w, b, 1, win, outs, unary=unary)
    assert _is_cl(y)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_patch_deconv_operand_errors_and_out_buffer() -> None:
    w = np.ones((4, 3, 2, 2), np.float32)
    k = pw.patch_plan(w, True, None)
    assert k is not None
    with pytest.raises(OperandError, match="4 input channels"):
        k.run(np.zeros((1, 5, 2, 2), np.float32), np.zeros(3, np.float32))
    with pytest.raises(OperandError, match="bias"):
        k.run(np.zeros((1, 4, 2, 2), np.float32), np.zeros(4, np.float32))
    with pytest.raises(OperandError, match="bias"):
        k.run(np.zeros((1, 4, 2, 2), np.float32), None)
    x = np.random.default_rng(0).standard_normal((1, 4, 3, 5)).astype(np.float32)
    out = onednn.empty_channels_last((1, 3, 6, 10))
    b = np.arange(3, dtype=np.float32)
    assert k.run(x, b, out) is out
    win, outs = conv_transpose_geometry((3, 5), (2, 2), {"strides": [2, 2]})
    np.testing.assert_allclose(out, _ort_conv(x, w, b, {"strides": [2, 2]}, 1, transpose=True), rtol=RTOL, atol=ATOL)


def _db_head_model() -> onnx.ModelProto:
    """A DB-style head with symbolic H and W: pointwise conv + HardSwish, a 3x3 conv with a pointwise
    residual branch, and a kernel-2 stride-2 ConvTranspose + Relu, then Sigmoid."""
    rng = np.random.default_rng(7)

    def t(name: str, *shape: int) -> onnx.TensorProto:
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.2).astype(np.float32), name)

    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"]),
             helper.make_node("HardSwish", ["c1"], ["a1"]),
             helper.make_node("Conv", ["a1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a1", "w3"], ["c3"]),
             helper.make_node("Add", ["c2", "c3"], ["s"]),
             helper.make_node("ConvTranspose", ["s", "w4", "b4"], ["d"], strides=[2, 2]),
             helper.make_node("Relu", ["d"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "db_head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [t("w1", 64, 32, 1, 1), t("b1", 64), t("w2", 64, 64, 3, 3), t("b2", 64), t("w3", 64, 64, 1, 1),
                               t("w4", 64, 16, 2, 2), t("b4", 16)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("policy", ["generic", "auto"])
def test_model_with_symbolic_sizes_matches_ort(policy: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from pycann.ge.run.model import LoadedModel

    monkeypatch.setenv("PYCANN_PLAN_POLICY", policy)
    model = _db_head_model()
    onnx.save(model, str(tmp_path / "db_head.onnx"))
    before, before_patch = set(pw._plans), set(pw._patch_plans)  # (the load makes the pointwise convs' plans)
    m = LoadedModel.from_file(tmp_path / "db_head.onnx")
    rng = np.random.default_rng(0)
    for h, wd in ((32, 40), (20, 28), (48, 12), (32, 40), (1, 1), (20, 28)):
        x = rng.standard_normal((1, 32, h, wd)).astype(np.float32)
        (y,) = m.run([x])
        np.testing.assert_allclose(y, run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)
    if policy == "generic":  # every size ran on the shape-generic plan: its pointwise convs and deconv
        assert len(_new_plans(before, pw._plans)) >= 1 and len(_new_plans(before_patch, pw._patch_plans)) == 1


def test_loading_a_model_with_symbolic_sizes_warms_the_shared_gemm(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from pycann.ge.run.model import LoadedModel

    monkeypatch.setattr(pw, "_warmed", False)
    monkeypatch.setenv("PYCANN_PLAN_POLICY", "auto")
    onnx.save(_db_head_model(), str(tmp_path / "db_head.onnx"))
    LoadedModel.from_file(tmp_path / "db_head.onnx")
    assert pw._warmed  # at load (the background-build interim plan was prepared), not in the first call


def test_loading_a_static_model_with_a_conv_transpose_warms_the_shared_gemm(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Any) -> None:
    """A static plan's ConvTransposes run unbound on PatchDeconv's GEMMs: their shared kernels are
    compiled at load (on the packing thread), not in the first run; values as ORT's."""
    from pycann.ge.compile.compiler import compile_model
    from pycann.ge.compile.options import CompileOptions
    from pycann.ge.run.model import LoadedModel

    monkeypatch.setattr(pw, "_warmed", False)
    model = _db_head_model()
    cm = compile_model(model, CompileOptions(input_shape={"x": [1, 32, 24, 20]}))
    m = LoadedModel.from_compiled(cm)
    assert pw._warmed  # at load
    x = np.random.default_rng(3).standard_normal((1, 32, 24, 20)).astype(np.float32)
    np.testing.assert_allclose(m.run([x])[0], run_ort(model, {"x": x})[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("act", ["Sigmoid", "Relu"])
def test_fused_deconv_in_numpy_form_reads_no_input_for_the_guard(act: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """FusedConvTranspose whose PatchDeconv takes the dense numpy form applies its activation in numpy
    (NaN kept): the NaN guard's read of the whole input is skipped, and NaN/inf inputs still give
    ORT's values. A wide one (oneDNN's product, the activation a post-op) is still guarded."""
    from pycann.kernels import conv as kconv
    from pycann.kernels.algorithm import ONEDNN_CONV_TRANSPOSE_NHWC
    from pycann.kernels.providers import nan_guard
    from tests.kernels.test_onednn_provider import ACTS

    calls: list[int] = []
    real = nan_guard.safe
    monkeypatch.setattr(nan_guard, "safe", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, w, _ = _data((1, 24, 8, 10), (24, 1, 2, 2), False)
    b = np.array([-0.2], np.float32)
    x[0, 2, 3, 4], x[0, 5, 7, 9], x[0, 9, 0, 0] = np.nan, np.inf, -np.inf
    attrs = {"strides": [2, 2], "_algo": ONEDNN_CONV_TRANSPOSE_NHWC}
    with np.errstate(invalid="ignore", over="ignore"):
        y, applied = kconv.conv_transpose_act([x, w, b], attrs, (act, *ACTS[act][:2]))
        ref = ACTS[act][2](_ort_conv(x, w, b, {"strides": [2, 2]}, 1, transpose=True), *ACTS[act][:2])
    assert applied and not calls
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    wide = np.ones((24, 8, 2, 2), np.float32)  # kw * M = 16 > NARROW_COLUMNS
    kconv.conv_transpose_act([np.abs(x[:, :, :2, :2]) * 0 + 1, wide, None], attrs, (act, *ACTS[act][:2]))
    assert calls
