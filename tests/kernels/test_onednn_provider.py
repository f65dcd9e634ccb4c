"""The onednn provider (oneDNN's C API through ctypes, no torch) against ONNX Runtime: convs of
ResNet-50 / MobileNet / PP-OCR shapes (scaled down) with and without bias, residual and each
fused activation, channels-last and NCHW inputs, ConvTranspose, the bound plan kernel, the
weight cache and the enum checks. Skipped when libdnnl v3 is not installed."""

from __future__ import annotations

import gc
import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.kernels.providers import onednn, onednn_conv_plan
from pycann.ops.nn.conv import conv_transpose_geometry, conv_window
from tests.ops.oracle import run_ort

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

from pycann.kernels.providers import onednn_capi as capi  # noqa: E402
from pycann.kernels.providers import onednn_capi_ops as capi_ops  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4

# (name, x shape, w shape, attrs, group)
CONVS = [
    ("r50_stem_7x7_s2", (1, 3, 48, 48), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, 1),
    ("r50_1x1", (1, 64, 14, 14), (128, 64, 1, 1), {}, 1),
    ("r50_1x1_s2", (2, 64, 14, 14), (96, 64, 1, 1), {"strides": [2, 2]}, 1),
    ("r50_3x3_p1", (1, 64, 14, 14), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}, 1),
    ("r50_3x3_s2", (1, 32, 15, 15), (48, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 1),
    ("dw_3x3", (1, 32, 20, 20), (32, 1, 3, 3), {"pads": [1, 1, 1, 1]}, 32),
    ("dw_5x5_s2", (1, 48, 21, 21), (48, 1, 5, 5), {"strides": [2, 2], "pads": [2, 2, 2, 2]}, 48),
    ("grouped", (1, 32, 12, 12), (64, 8, 3, 3), {"pads": [1, 1, 1, 1]}, 4),
    ("dilated", (1, 16, 15, 15), (24, 16, 3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}, 1),
    ("asym_pads", (1, 8, 11, 11), (16, 8, 3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}, 1),
    ("same_upper", (1, 8, 10, 10), (8, 8, 4, 4), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, 1),
    ("odd_groups", (1, 6, 9, 9), (9, 2, 3, 3), {"pads": [1, 1, 1, 1]}, 3),
    ("conv1d", (1, 8, 17), (12, 8, 3), {"pads": [1, 1]}, 1),
    ("conv3d", (1, 4, 6, 6, 6), (8, 4, 3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1], "strides": [1, 2, 1]}, 1),
]


def _sig(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


_erf = np.frompyfunc(math.erf, 1, 1)

# ONNX activation (name, alpha, beta) -> float64 reference formula
ACTS: dict[str, tuple[float, float, Any]] = {
    "Relu": (0.0, 0.0, lambda v, a, b: np.maximum(v, 0)),
    "Sigmoid": (0.0, 0.0, lambda v, a, b: _sig(v)),
    "Tanh": (0.0, 0.0, lambda v, a, b: np.tanh(v)),
    "HardSwish": (0.0, 0.0, lambda v, a, b: v * np.clip(v / 6 + 0.5, 0, 1)),
    "HardSigmoid": (0.3, 0.4, lambda v, a, b: np.clip(a * v + b, 0, 1)),
    "LeakyRelu": (0.1, 0.0, lambda v, a, b: np.where(v > 0, v, a * v)),
    "Clip": (-0.5, 1.5, lambda v, a, b: np.clip(v, a, b)),
    "Elu": (0.7, 0.0, lambda v, a, b: np.where(v > 0, v, a * np.expm1(np.minimum(v, 0)))),
    "Swish": (1.5, 0.0, lambda v, a, b: v * _sig(a * v)),
    "Gelu": (0.0, 0.0, lambda v, a, b: 0.5 * v * (1 + _erf(v / math.sqrt(2)).astype(np.float64))),
}


def _ort_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any],
              group: int, transpose: bool = False, residual: np.ndarray | None = None) -> np.ndarray:
    """ONNX Runtime's Conv / ConvTranspose (+ Add residual) on NCHW copies of the inputs."""
    feeds = {"x": np.ascontiguousarray(x)}
    inits = [onnx.numpy_helper.from_array(w, "w")] + ([onnx.numpy_helper.from_array(b, "b")] if b is not None else [])
    nodes = [helper.make_node("ConvTranspose" if transpose else "Conv", ["x", "w"] + (["b"] if b is not None else []),
                              ["c"], group=group, **attrs)]
    out = "c"
    g_in = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    if residual is not None:
        feeds["r"] = np.ascontiguousarray(residual)
        g_in.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, residual.shape))
        nodes.append(helper.make_node("Add", ["c", "r"], ["y"]))
        out = "y"
    graph = helper.make_graph(nodes, "t", g_in, [helper.make_empty_tensor_value_info(out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return run_ort(model, feeds)[0]


def _data(xs: tuple[int, ...], ws: tuple[int, ...], bias: bool, seed: int = 0) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    fan = int(np.prod(ws[1:]))
    w = (rng.standard_normal(ws) / math.sqrt(fan)).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    return x, w, b


def _cl(a: np.ndarray) -> np.ndarray:
    """A channels-last copy of ``a`` (same values, NHWC strides)."""
    y = onednn.empty_channels_last(a.shape)
    y[...] = a
    return y


def _is_cl(y: np.ndarray) -> bool:
    return y.strides[1] == y.itemsize and y.strides == onednn.empty_channels_last(y.shape).strides


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name,xs,ws,attrs,group", CONVS, ids=[c[0] for c in CONVS])
def test_conv_values(name: str, xs: Any, ws: Any, attrs: dict[str, Any], group: int, bias: bool,
                     layout: str) -> None:
    x, w, b = _data(xs, ws, bias)
    ref = _ort_conv(x, w, b, attrs, group)
    xin = _cl(x) if layout == "nhwc" else x
    y = onednn.conv_nhwc(xin, w, b, group, conv_window(x.shape, w.shape, attrs))
    assert y.shape == ref.shape and y.dtype == np.float32 and _is_cl(y)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("act", sorted(ACTS))
@pytest.mark.parametrize("name", ["r50_1x1", "r50_3x3_s2", "dw_3x3", "grouped"])
def test_conv_post_ops(name: str, act: str, residual: bool) -> None:
    _, xs, ws, attrs, group = next(c for c in CONVS if c[0] == name)
    x, w, b = _data(xs, ws, True, seed=1)
    win = conv_window(x.shape, w.shape, attrs)
    r = np.random.default_rng(2).standard_normal((xs[0], ws[0]) + win.out).astype(np.float32) if residual else None
    alpha, beta, fn = ACTS[act]
    ref = fn(_ort_conv(x, w, b, attrs, group, residual=r).astype(np.float64), alpha, beta)
    unary = onednn.onednn_unary(act, alpha, beta)
    assert unary is not None
    y = onednn.conv_nhwc(_cl(x), w, b, group, win, residual=None if r is None else _cl(r), unary=unary)
    assert _is_cl(y)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_residual_layouts_and_broadcast() -> None:
    _, xs, ws, attrs, group = CONVS[3]
    x, w, b = _data(xs, ws, True)
    win = conv_window(x.shape, w.shape, attrs)
    rng = np.random.default_rng(3)
    for r in (rng.standard_normal((1, ws[0]) + win.out).astype(np.float32),  # NCHW residual
              rng.standard_normal((ws[0], 1, 1)).astype(np.float32),  # broadcast
              rng.standard_normal((1, ws[0]) + win.out)):  # float64
        ref = np.maximum(_ort_conv(x, w, b, attrs, group) + r, 0)
        y = onednn.conv_nhwc(x, w, b, group, win, residual=r, relu=True)
        assert _is_cl(y)
        np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_out_buffer_and_fallback() -> None:
    _, xs, ws, attrs, group = CONVS[4]
    x, w, b = _data(xs, ws, True)
    win = conv_window(x.shape, w.shape, attrs)
    ref = _ort_conv(x, w, b, attrs, group)
    out = np.empty(ref.size, np.float32)
    y = onednn.conv_nhwc(x, w, b, group, win, out)
    assert np.shares_memory(y, out)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    out_cl = onednn.empty_channels_last(ref.shape)
    y = onednn.conv_nhwc(x, w, b, group, win, out_cl)
    assert y is out_cl
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    res = _cl(np.ones_like(ref))
    y = onednn.conv_nhwc(x, w, b, group, win, res, residual=res)  # in-place residual add
    np.testing.assert_allclose(y, ref + 1, rtol=RTOL, atol=ATOL)
    y64 = onednn.conv_nhwc(x.astype(np.float64), w.astype(np.float64), b, group, win, relu=True)  # numpy provider
    np.testing.assert_allclose(y64, np.maximum(ref, 0), rtol=RTOL, atol=ATOL)


TRANSPOSES = [
    ("det_2x2_s2", (1, 24, 20, 20), (24, 24, 2, 2), {"strides": [2, 2]}, 1),
    ("3x3_s2_p1_op1", (1, 16, 9, 9), (16, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1],
                                                     "output_padding": [1, 1]}, 1),
    ("grouped_3x3_s2", (1, 16, 9, 9), (16, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, 2),
    ("dilated_asym", (1, 8, 5, 5), (8, 4, 3, 3), {"strides": [3, 3], "dilations": [2, 2], "pads": [0, 1, 2, 0]}, 1),
]


@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name,xs,ws,attrs,group", TRANSPOSES, ids=[c[0] for c in TRANSPOSES])
def test_conv_transpose_values(name: str, xs: Any, ws: Any, attrs: dict[str, Any], group: int, bias: bool,
                               layout: str) -> None:
    x, w, _ = _data(xs, ws, False)
    b = np.random.default_rng(5).standard_normal(ws[1] * group).astype(np.float32) if bias else None
    ref = _ort_conv(x, w, b, attrs, group, transpose=True)
    win, outs = conv_transpose_geometry(x.shape[2:], ws[2:], attrs)
    y = onednn.conv_transpose_nhwc(_cl(x) if layout == "nhwc" else x, w, b, group, win, outs)
    assert y.shape == ref.shape and _is_cl(y)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("residual", [False, True])
def test_bound_kernel(residual: bool) -> None:
    _, xs, ws, attrs, group = CONVS[3]
    x, w, b = _data(xs, ws, True)
    win = conv_window(x.shape, w.shape, attrs)
    act = ("HardSigmoid", 0.2, 0.5)
    k = onednn.bound_conv_nhwc(w, b, group, win, x.shape, onednn.onednn_unary(*act), residual)
    r = np.random.default_rng(4).standard_normal((1, ws[0]) + win.out).astype(np.float32)
    ref = ACTS["HardSigmoid"][2](_ort_conv(x, w, b, attrs, group, residual=r if residual else None), 0.2, 0.5)
    for xin, rin in ((_cl(x), _cl(r)), (x, r)):  # fast path, then the converting path
        (y,) = k([xin, w, b] + ([rin] if residual else []), {})
        assert _is_cl(y)
        np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)


def test_weight_cache_dropped_with_weight() -> None:
    _, xs, ws, attrs, group = CONVS[3]  # (a 3x3: pointwise convs have their own cache, test_onednn_pointwise)
    x, w, b = _data(xs, ws, True)
    win = conv_window(x.shape, w.shape, attrs)
    before = set(onednn._plans)
    onednn.conv_nhwc(x, w, b, group, win)
    onednn.conv_nhwc(_cl(x), w, b, group, win)
    new = set(onednn._plans) - before
    assert len(new) == 1  # one plan for both input layouts
    del w
    gc.collect()  # (other tests' plans may go too: only this one is checked)
    assert not new & set(onednn._plans)


def test_unary_mapping() -> None:
    E = capi.ELTWISE
    assert onednn.onednn_unary("HardSwish", 0, 0) == (E["hardswish"], 1 / 6, 0.5)
    assert onednn.onednn_unary("Clip", 0.0, math.inf) == onednn.RELU
    assert onednn.onednn_unary("Clip", -math.inf, 6.0) is None
    assert onednn.onednn_unary("Clip", 2.0, 1.0) is None
    assert onednn.onednn_unary("Softplus", 0, 0) is None


def test_capi_enums_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert capi.version()[0] == 3
    md = capi.MemoryDesc.strided((2, 3, 4), (12, 1, 3))
    assert (md.ndims(), md.dims(), md.data_type(), md.size()) == (3, (2, 3, 4), capi.F32, 96)
    with pytest.raises(capi.DnnlError, match="dnnl_memory_desc_create_with_strides"):
        capi.MemoryDesc.strided((2, 3), (-1, 1))
    bad = capi.MemoryDesc.strided((1, 4, 5, 5), (100, 25, 5, 1))
    with pytest.raises(capi.DnnlError, match="dnnl_convolution_forward_primitive_desc_create"):
        capi_ops.convolution_pd(bad, capi.MemoryDesc.any((8, 3, 3, 3)), None, bad, (1, 1), (0, 0), (1, 1), (1, 1),
                            capi_ops.Attr())
    monkeypatch.setenv("PYCANN_DNNL_LIB", "/nonexistent/libdnnl.so.3")
    assert capi.library_candidates()[0] == "/nonexistent/libdnnl.so.3"


def test_sum_post_op_when_binary_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = capi_ops.Attr

    def no_binary(ops: Any = ()) -> Any:
        if any(op[0] == "binary_add" for op in ops):
            raise capi.DnnlError("dnnl_post_ops_append_binary", 3)
        return real(ops)

    monkeypatch.setattr(capi_ops, "Attr", no_binary)
    _, xs, ws, attrs, group = CONVS[5]
    x, w, b = _data(xs, ws, True)
    win = conv_window(x.shape, w.shape, attrs)
    r = np.random.default_rng(6).standard_normal((1, ws[0]) + win.out).astype(np.float32)
    y = onednn.conv_nhwc(_cl(x), w, b, group, win, residual=r, unary=onednn.onednn_unary("Tanh", 0, 0))
    np.testing.assert_allclose(y, np.tanh(_ort_conv(x, w, b, attrs, group, residual=r)), rtol=RTOL, atol=ATOL)
    assert any(p.mode == "sum" for p in onednn._plans.values())
    # the plan-time bound kernel takes the residual through the same "sum" form
    k = onednn.bound_conv_nhwc(w, b, group, win, x.shape, onednn.onednn_unary("Tanh", 0, 0), True)
    assert k is not None
    got = k([_cl(x), w, b, _cl(r)], {})[0]
    np.testing.assert_allclose(got, np.tanh(_ort_conv(x, w, b, attrs, group, residual=r)), rtol=RTOL, atol=ATOL)


def test_reference_only_shapes_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A conv oneDNN would run only in its reference loops goes to the numpy provider."""
    monkeypatch.setattr(capi.PrimitiveDesc, "impl_info", lambda self: "ref:any")
    _, xs, ws, attrs, group = CONVS[1]
    x, w, b = _data(xs, ws, True)
    win = conv_window(x.shape, w.shape, attrs)
    y = onednn.conv_nhwc(x, w, b, group, win, unary=onednn.onednn_unary("Sigmoid", 0, 0))
    np.testing.assert_allclose(y, _sig(_ort_conv(x, w, b, attrs, group).astype(np.float64)), rtol=RTOL, atol=ATOL)
    assert onednn.bound_conv_nhwc(w, b, group, win, x.shape, None, False) is None


@pytest.mark.parametrize("view", ["nchw", "strided", "sliced_channels"])
def test_inputs_of_any_layout_are_reordered_by_onednn(view: str) -> None:
    """Inputs that are not channels-last (an NCHW image, a strided view, a channel slice) are
    converted by a cached oneDNN reorder; values equal numpy's conv on the same data."""
    from pycann.kernels.providers import numpy_blas as nb

    rng = np.random.default_rng(5)
    base = rng.standard_normal((1, 6, 20, 18)).astype(np.float32)
    x = {"nchw": base, "strided": base[:, :, ::2, :], "sliced_channels": base[:, 1:4]}[view]
    w = rng.standard_normal((8, x.shape[1], 3, 3)).astype(np.float32)
    win = conv_window(x.shape, w.shape, {"pads": [1, 1, 1, 1]})
    want = nb.conv_im2col_gemm(np.ascontiguousarray(x), w, None, 1, win, None)
    for _ in range(2):  # the second call reuses the cached reorder
        got = onednn.conv_nhwc(x, w, None, 1, win)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert got.strides[1] == 4


def test_an_image_stem_makes_its_nchw_input_reorder_when_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bound conv on a 3-channel image makes the reorder of a C-order (NCHW) input at bind time,
    so the first run creates none; values equal numpy's conv. Wider inputs make none up front."""
    from pycann.kernels.providers import numpy_blas as nb

    made: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = onednn_conv_plan._Plan.input_reorder

    def spy(self: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
        made.append((shape, strides))
        return real(self, shape, strides)

    monkeypatch.setattr(onednn_conv_plan._Plan, "input_reorder", spy)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 3, 32, 30)).astype(np.float32)
    w = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
    win = conv_window(x.shape, w.shape, {"pads": [1, 1, 1, 1], "strides": [2, 2]})
    k = onednn.bound_conv_nhwc(w, None, 1, win, x.shape, None, False)
    assert made == [(x.shape, x.strides)]
    for _ in range(2):
        (y,) = k([x, w, None], {})
        np.testing.assert_allclose(y, nb.conv_im2col_gemm(x, w, None, 1, win, None), rtol=1e-4, atol=1e-4)
    assert made == [(x.shape, x.strides)] * 3  # the runs found it (no new reorder: same key)
    made.clear()
    x8 = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    w8 = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    assert onednn.bound_conv_nhwc(w8, None, 1, conv_window(x8.shape, w8.shape, {"pads": [1] * 4}), x8.shape, None,
                                  False) is not None
    assert made == []
