"""Kernel providers (pycann.kernels.providers): every algorithm against ONNX Runtime on the real
models' conv shapes (scaled down), the fallback when torch is missing, the selection table,
the KernelSelection pass and its record in the .om."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pycann.config import ConfigError
from pycann.ge.compile.passes import select_kernels
from pycann.ge.compile.passes.base import PassContext
from pycann.ge.ir import Graph, Node
from pycann.ge.om import dumps_om, loads_om
from pycann.kernels import providers
from pycann.kernels.algorithm import BY_KEY, parse
from pycann.kernels.providers import ConvSpec, GemmSpec, choice_table, numpy_blas, thread_pools
from pycann.kernels.table import into_kernel, run_kernel
from pycann.ops.registry import lookup
from tests.ops.oracle import run_ort, single_node_model

RTOL, ATOL = 1e-4, 1e-4


def _has_torch() -> bool:
    providers.reset()
    return providers.available("torch")


needs_torch = pytest.mark.skipif(not _has_torch(), reason="torch (optional provider) not installed")


pytestmark = pytest.mark.usefixtures("default_providers")  # tests/conftest.py


def _r(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


# (x shape, w shape, attrs, bias): ResNet-50 (7x7 s2, 1x1, strided 1x1, 3x3, 3x3 s2) and
# PP-OCRv4 det (depthwise 3x3/5x5, strided depthwise, pointwise narrow/wide) at reduced sizes,
# plus groups, dilations, asymmetric pads, auto_pad, batch 2, 1-D and 3-D.
CONV_CASES = [
    ((1, 3, 32, 32), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, True),
    ((2, 16, 14, 14), (32, 16, 1, 1), {}, True),
    ((1, 32, 14, 14), (64, 32, 1, 1), {"strides": [2, 2]}, True),
    ((2, 16, 14, 14), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}, True),
    ((1, 16, 15, 15), (24, 16, 3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}, False),
    ((1, 16, 20, 20), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]}, True),
    ((2, 16, 20, 20), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1], "strides": [2, 2]}, True),
    ((1, 24, 10, 10), (24, 1, 5, 5), {"group": 24, "pads": [2, 2, 2, 2]}, True),
    ((1, 12, 40, 40), (96, 12, 1, 1), {}, False),
    ((1, 384, 4, 4), (384, 384, 1, 1), {}, True),  # weight-bound: prepacked path
    ((1, 64, 7, 7), (128, 64, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # weight-bound 3x3
    ((2, 8, 9, 9), (12, 4, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    ((1, 6, 5, 5), (12, 1, 3, 3), {"group": 6}, True),  # channel multiplier 2
    ((1, 4, 11, 10), (6, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 1, 2, 1]}, True),
    ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 1]}, True),  # end pads > begin
    ((1, 3, 9, 8), (4, 3, 3, 3), {"pads": [2, 1, 0, 0]}, False),  # begin pads > end
    ((1, 3, 9, 8), (4, 3, 4, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, True),
    ((2, 3, 12), (4, 3, 3), {"strides": [2], "pads": [1, 1]}, True),
    ((1, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 1, 1, 0], "strides": [1, 2, 1]}, True),
]

TRANSPOSE_CASES = [
    ((1, 8, 5, 5), (8, 4, 2, 2), {"strides": [2, 2]}, True),  # PP-OCR det upsampling
    ((1, 4, 6, 6), (4, 1, 2, 2), {"strides": [2, 2]}, False),
    ((1, 4, 5, 5), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}, True),
    ((2, 4, 5, 5), (4, 3, 3, 3), {"group": 2, "strides": [2, 2]}, True),
    ((1, 3, 5, 5), (3, 2, 3, 3), {"pads": [0, 1, 2, 0], "strides": [2, 2]}, True),  # numpy delegate
    ((1, 3, 5, 5), (3, 2, 3, 3), {"strides": [2, 2], "output_shape": [10, 11]}, True),
    ((1, 3, 7), (3, 2, 3), {"strides": [3], "dilations": [2]}, True),
]


def _conv_inputs(xs: tuple, ws: tuple, bias: bool) -> list[np.ndarray]:
    ins = [_r(*xs), _r(*ws, seed=1)]
    if bias:
        ins.append(_r(ws[0], seed=2))
    return ins


def _ort(op: str, ins: list[np.ndarray], attrs: dict, opset: int = 17) -> np.ndarray:
    model, feeds = single_node_model(op, ins, attrs, 1, opset)
    return run_ort(model, feeds)[0]


def _algos(op: str, spec: Any) -> list[str]:
    return [a.key for a in providers.candidates(spec) if a.op_type == op]


def _run_kernel(op: str, ins: list[np.ndarray], attrs: dict, algo: str, arena: bool) -> np.ndarray:
    opdef = lookup(op, "", 17)
    a = opdef.with_defaults({**attrs, "_algo": parse(algo)})  # (an unknown name: None, the static choice)
    if not arena:
        return run_kernel(opdef)(ins, a)[0]  # type: ignore[no-any-return]
    want = run_kernel(opdef)(ins, opdef.with_defaults(attrs))[0]
    out = np.full(want.shape, np.nan, want.dtype)
    into = into_kernel(opdef)
    assert into is not None
    into(ins, a, [out])
    return out


@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES)
@pytest.mark.parametrize("arena", [False, True])
def test_conv_algorithms_match_ort(xs: tuple, ws: tuple, attrs: dict, bias: bool, arena: bool) -> None:
    ins = _conv_inputs(xs, ws, bias)
    ref = _ort("Conv", ins, attrs)
    spec = providers.conv_spec("Conv", xs, ws, attrs)
    names = _algos("Conv", spec)
    assert "numpy:im2col_gemm" in names
    for name in names:
        got = _run_kernel("Conv", ins, attrs, name, arena)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=name)


@needs_torch
@pytest.mark.parametrize("xs,ws,attrs,bias", CONV_CASES[:8])
def test_torch_conv_epilogue(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    """Residual add and relu applied by torch while copying out equal the numpy epilogue."""
    from pycann.kernels.conv import conv as _conv

    ins = _conv_inputs(xs, ws, bias)
    base = lookup("Conv", "", 17)
    a = base.with_defaults(attrs)
    plain = base.kernel(ins, a)[0]
    z = _r(*plain.shape, seed=5)
    want = np.maximum(plain + z, 0)
    for name in ("torch:conv2d", "torch:conv2d_nhwc", "numpy:im2col_gemm"):
        if len(xs) != 4:
            continue
        for out in (np.empty_like(plain), None):
            got = _conv(ins, {**a, "_algo": BY_KEY[name]}, out, residual=z, relu=True)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)


def _channels_last(a: np.ndarray) -> np.ndarray:
    """The same NCHW values stored NHWC (strides of a channels-last tensor)."""
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)


@needs_torch
@pytest.mark.parametrize("xs,ws,attrs,bias", [c for c in CONV_CASES if len(c[0]) == 4])
def test_conv_nhwc_reads_and_writes_channels_last(xs: tuple, ws: tuple, attrs: dict, bias: bool) -> None:
    """torch:conv2d_nhwc on a channels-last input: ORT's values, result stored channels-last
    (or, for shapes it delegates, C-order), a residual in either layout, broadcasting residual."""
    from pycann.kernels.conv import conv as _conv

    ins = _conv_inputs(xs, ws, bias)
    ref = _ort("Conv", ins, attrs)
    a = lookup("Conv", "", 17).with_defaults({**attrs, "_algo": BY_KEY["torch:conv2d_nhwc"]})
    got = _conv([_channels_last(ins[0]), *ins[1:]], a)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    spec = providers.conv_spec("Conv", xs, ws, attrs)
    if spec.win.pads_begin == spec.win.pads_end and ref.shape[1] > 1:
        assert not got.flags.c_contiguous and got.strides[1] == 4  # channels innermost
    z = _r(*ref.shape, seed=3)
    for zz in (z, _channels_last(z), z[:, :, :1, :1].copy()):
        got = _conv([_channels_last(ins[0]), *ins[1:]], a, residual=zz, relu=True)
        np.testing.assert_allclose(got, np.maximum(ref + zz, 0), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("xs,ws,attrs,bias", TRANSPOSE_CASES)
@pytest.mark.parametrize("arena", [False, True])
def test_conv_transpose_algorithms_match_ort(xs: tuple, ws: tuple, attrs: dict, bias: bool, arena: bool) -> None:
    ins = [_r(*xs), _r(*ws, seed=1)]
    if bias:
        ins.append(_r(ws[1] * int(attrs.get("group", 1)), seed=2))
    ref = _ort("ConvTranspose", ins, attrs)
    spec = providers.conv_spec("ConvTranspose", xs, ws, attrs)
    names = set(_algos("ConvTranspose", spec)) | {"torch:conv_transpose"}  # total even when unsupported
    for name in sorted(names):
        got = _run_kernel("ConvTranspose", ins, attrs, name, arena)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=name)


GEMM_CASES = [
    ("MatMul", (64, 96), (96, 48), {}),
    ("MatMul", (3, 1, 8, 16), (2, 16, 5), {}),  # batch broadcast
    ("MatMul", (16,), (16, 4), {}),  # 1-D operand
    ("Gemm", (1, 64), (32, 64), {"transB": 1}),  # ResNet-50 fc shape (scaled)
    ("Gemm", (16, 8), (16, 12), {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ("Gemm", (8, 16), (16, 12), {"beta": 0.0}),
]


@pytest.mark.parametrize("op,a_s,b_s,attrs", GEMM_CASES)
@pytest.mark.parametrize("arena", [False, True])
def test_gemm_algorithms_match_ort(op: str, a_s: tuple, b_s: tuple, attrs: dict, arena: bool) -> None:
    ins = [_r(*a_s), _r(*b_s, seed=1)]
    if op == "Gemm":
        n = b_s[0] if attrs.get("transB") else b_s[1]
        ins.append(_r(n, seed=2))
    ref = _ort(op, ins, attrs)
    spec = providers.make_spec(op, [a_s, b_s], attrs)
    for name in _algos(op, spec) + [f"{op.lower()}:unknown"]:
        got = _run_kernel(op, ins, attrs, name, arena)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL, err_msg=name)


# ---------------------------------------------------------------- fallback


def test_fallback_when_torch_is_unavailable(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A model recorded with torch kernels runs with numpy when torch cannot be imported."""
    from pycann.kernels.providers import torch_onednn

    def broken() -> bool:
        raise ImportError("No module named 'torch'")

    monkeypatch.setattr(torch_onednn, "available", broken)
    providers.reset()
    assert not providers.available("torch")
    assert providers.algorithm("torch:conv2d") is None
    xs, ws, attrs, bias = CONV_CASES[3]
    ins = _conv_inputs(xs, ws, bias)
    ref = _ort("Conv", ins, attrs)
    with caplog.at_level(logging.INFO, logger="pycann.kernels.providers"):
        for _ in range(3):
            got = _run_kernel("Conv", ins, attrs, "torch:conv2d", arena=False)
            np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)
    assert sum("torch:conv2d" in r.getMessage() for r in caplog.records) == 1  # logged once
    # the static default without torch: oneDNN's C API where its wheel is installed, else numpy
    want = "onednn:conv_nhwc" if providers.available("onednn") else "numpy:im2col_gemm"
    assert providers.choose("Conv", [xs, ws], attrs).key == want


def test_providers_env_restricts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    assert providers.available("numpy") and not providers.available("torch")
    assert not providers.available("no-such-provider")
    spec = providers.conv_spec("Conv", (1, 16, 20, 20), (16, 1, 3, 3), {"group": 16, "pads": [1, 1, 1, 1]})
    assert providers.select(spec).key == "numpy:depthwise"



def test_providers_env_with_an_unknown_name_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A misspelt provider (``PYCANN_PROVIDERS=onedn``) allowed numpy alone, silently: every conv and
    matmul ran numpy's kernels, many times slower. Refused as the other PYCANN_ settings are."""
    from pycann.config import ConfigError

    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy,onedn")
    providers.reset()
    with pytest.raises(ConfigError, match=r"PYCANN_PROVIDERS='numpy,onedn': unknown provider 'onedn'.*numpy, onednn, torch"):
        providers.available("onednn")
    monkeypatch.setenv("PYCANN_PROVIDERS", " onednn , numpy ")
    providers.reset()
    assert providers.available("numpy") and not providers.available("torch")


def test_kernel_selection_env_with_an_unknown_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PYCANN_KERNEL_SELECTION=measur`` compiled with the static table, silently."""
    from pycann import config

    monkeypatch.setenv("PYCANN_KERNEL_SELECTION", "measur")
    with pytest.raises(config.ConfigError, match=r"PYCANN_KERNEL_SELECTION='measur'.*static, measure, off"):
        config.kernel_selection()
    monkeypatch.setenv("PYCANN_KERNEL_SELECTION", "measure")
    assert config.kernel_selection() == "measure"

def test_provider_and_selection_env_ignore_case_as_the_other_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PYCANN_PROVIDERS=oneDNN`` (the library's own spelling) and ``PYCANN_KERNEL_SELECTION=Measure``
    raised ConfigError, while every other PYCANN_ enum knob (PLAN_POLICY, OMP_WAIT_POLICY, ...) is
    read case-insensitively."""
    from pycann import config

    monkeypatch.setenv("PYCANN_PROVIDERS", "oneDNN,NumPy")
    assert config.providers_allowed() == {"onednn", "numpy"}
    monkeypatch.setenv("PYCANN_KERNEL_SELECTION", "Measure")
    assert config.kernel_selection() == "measure"


# ---------------------------------------------------------------- selection table


def _spec(xs: tuple, ws: tuple, attrs: dict | None = None) -> ConvSpec:
    return providers.conv_spec("Conv", xs, ws, attrs or {})


def test_shape_classes() -> None:
    assert providers.shape_class(_spec((1, 16, 20, 20), (16, 1, 3, 3), {"group": 16})) == "tiny"
    assert providers.shape_class(_spec((1, 96, 80, 80), (96, 1, 3, 3), {"group": 96})) == "depthwise"
    assert providers.shape_class(_spec((1, 8, 9, 9), (12, 4, 3, 3), {"group": 2})) == "tiny"
    assert providers.shape_class(_spec((1, 64, 40, 40), (64, 32, 3, 3), {"group": 2})) == "grouped"
    assert providers.shape_class(_spec((1, 64, 56, 56), (256, 64, 1, 1))) == "pointwise"
    assert providers.shape_class(_spec((1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1] * 4})) == "regular"
    assert providers.shape_class(_spec((1, 512, 7, 7), (512, 512, 3, 3), {"pads": [1] * 4})) == "weight_bound"
    assert providers.shape_class(_spec((1, 1024, 14, 14), (256, 1024, 1, 1))) == "pointwise"  # input outweighs
    assert providers.shape_class(_spec((1, 96, 1, 1), (24, 96, 1, 1))) == "tiny"  # dispatch-bound: numpy
    # 2-D convs leave numpy from TINY_FLOPS_2D (PP-OCR cls's depthwise 5x5 on 3x96: 1.3 MFLOP)...
    assert providers.shape_class(_spec((1, 88, 3, 96), (88, 1, 5, 5), {"group": 88, "pads": [2] * 4})) == "depthwise"
    assert providers.shape_class(_spec((1, 32, 2, 96), (200, 32, 1, 1))) == "pointwise"
    # ... 1-D ones only from TINY_FLOPS (Silero VAD's encoder convs stay on numpy's prepared im2col)
    assert providers.shape_class(_spec((1, 64, 64), (64, 64, 3), {"pads": [1, 1]})) == "tiny"
    assert providers.TINY_FLOPS_2D < _spec((1, 64, 64), (64, 64, 3), {"pads": [1, 1]}).flops < providers.TINY_FLOPS
    assert providers.shape_class(GemmSpec("MatMul", (4, 8), (8, 2))) == "tiny"  # numpy first: libdnnl stays unloaded
    assert providers.shape_class(GemmSpec("MatMul", (128, 384), (384, 384))) == "any"


def test_static_choice_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy")
    providers.reset()
    assert providers.choose("Conv", [(1, 16, 20, 20), (16, 1, 3, 3)], {"group": 16}).key == "numpy:depthwise"
    assert providers.choose("Conv", [(1, 64, 56, 56), (256, 64, 1, 1)], {}).key == "numpy:gemm_1x1"
    assert providers.choose("Conv", [(1, 3, 224, 224), (64, 3, 7, 7)], {"pads": [3] * 4}).key == "numpy:im2col_gemm"
    assert providers.choose("ConvTranspose", [(1, 8, 5, 5), (8, 4, 2, 2)], {"strides": [2, 2]}).key == "numpy:col2im"


@needs_torch
def test_static_choice_with_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy,torch")
    providers.reset()
    assert providers.choose("Conv", [(1, 16, 20, 20), (16, 1, 3, 3)], {"group": 16}).key == "numpy:depthwise"  # tiny
    assert providers.choose("Conv", [(1, 96, 80, 80), (96, 1, 3, 3)], {"group": 96}).key == "torch:conv2d_nhwc"
    assert providers.choose("Conv", [(1, 64, 56, 56), (256, 64, 1, 1)], {}).key == "torch:conv2d_nhwc"
    assert providers.choose("Conv", [(1, 3, 224, 224), (64, 3, 7, 7)], {"pads": [3] * 4}).key == "torch:conv2d_nhwc"
    # asymmetric pads: the channels-last prepacked call cannot express them
    assert providers.choose("Conv", [(1, 3, 64, 64), (16, 3, 3, 3)], {"pads": [0, 0, 1, 1]}).key == "torch:conv2d"
    assert providers.choose("Conv", [(1, 512, 7, 7), (512, 512, 3, 3)], {"pads": [1] * 4}).provider == "torch"
    assert providers.choose("Conv", [(1, 3, 9, 8), (4, 3, 3, 3)], {}, dtype="float64").key == "numpy:im2col_gemm"
    assert providers.choose("Conv", [(1, 3, 90, 80), (8, 3, 3, 3)], {}, dtype="float16").key == "torch:conv2d_nhwc"
    assert providers.choose("ConvTranspose", [(1, 8, 5, 5), (8, 4, 2, 2)], {"strides": [2, 2]}).key == \
        "torch:conv_transpose_nhwc"
    assert providers.choose("ConvTranspose", [(1, 8, 5), (8, 4, 2)], {"strides": [2]}).key == "torch:conv_transpose"


@pytest.mark.parametrize("op,shapes,attrs", [
    ("MatMul", [(128, 768), (768, 3072)], {}), ("MatMul", [(12, 128, 64), (12, 64, 128)], {}),
    ("Gemm", [(1, 2048), (1000, 2048)], {"transB": 1}), ("MatMul", [(4, 8), (8, 2)], {}),
])
def test_gemm_static_choice(op: str, shapes: list, attrs: dict) -> None:
    """float32 MatMul/Gemm go to oneDNN's matmul when libdnnl is there, else to numpy; products
    under GEMM_TINY_FLOPS always to numpy (oneDNN would hand them over anyway)."""
    tiny = providers.make_spec(op, [tuple(s) for s in shapes], attrs).flops < choice_table.GEMM_TINY_FLOPS
    want = "onednn" if providers.available("onednn") and not tiny else "numpy"
    assert providers.choose(op, shapes, attrs).provider == want
    assert providers.choose(op, shapes, attrs, dtype="float64").provider == "numpy"


def test_measured_mode_picks_a_candidate_and_caches() -> None:
    spec = _spec((1, 8, 12, 12), (8, 1, 3, 3), {"group": 8, "pads": [1] * 4})
    cands = providers.candidates(spec)
    best, times = providers.measure(spec, cands, budget_s=0.001)
    # fastest first (by time alone: two candidates may tie, and an Algorithm has no order)
    assert best in cands and [t for t, _ in times] == sorted(t for t, _ in times)
    assert {n for _, n in times} == {a.algo for a in cands} and best.algo == times[0][1]
    assert providers.measure(spec, cands)[1] is times  # cached per spec
    assert providers.choose("Conv", [spec.x_shape, spec.w_shape], {"group": 8, "pads": [1] * 4}, mode="measure")


def test_numpy_algorithms_are_total() -> None:
    """A specialised numpy algorithm handed a shape it was not made for still computes it."""
    xs, ws, attrs, _ = CONV_CASES[3]
    ins = _conv_inputs(xs, ws, False)
    ref = _ort("Conv", ins, attrs)
    spec = _spec(xs, ws, attrs)
    for fn in (numpy_blas.conv_gemm_1x1, numpy_blas.conv_dw):
        np.testing.assert_allclose(fn(ins[0], ins[1], None, 1, spec.win), ref, rtol=RTOL, atol=ATOL)


def test_thread_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.kernels.providers import torch_onednn

    monkeypatch.setenv("PYCANN_NUM_THREADS", "3")
    assert torch_onednn.thread_budget() == 3
    monkeypatch.delenv("PYCANN_NUM_THREADS")
    assert 1 <= torch_onednn.thread_budget()


# ---------------------------------------------------------------- the GE pass and the .om


def _tiny_conv_model(dynamic: bool = False) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
    fc = rng.standard_normal((8 * 6 * 6, 10)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=8, pads=[1, 1, 1, 1], strides=[2, 2], name="dw"),
        helper.make_node("Flatten", ["c2"], ["f"], name="flat"),
        helper.make_node("MatMul", ["f", "fc"], ["y"], name="fc"),
    ]
    dims: list[Any] = ["n", 3, 12, 12] if dynamic else [1, 3, 12, 12]
    g = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (fc, "fc"))],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_pass_records_algo_in_om(tmp_path: Any) -> None:
    import pycann

    model = _tiny_conv_model()
    cm = pycann.compile_model(model)
    if not any(n.attrs.get("_algo") for n in cm.graph.nodes):  # until the pipeline runs KernelSelection
        res = select_kernels.run(cm.graph, PassContext())
        assert res.changed and "Conv" in res.report
    algos = {n.name: n.attrs["_algo"] for n in cm.graph.nodes if "_algo" in n.attrs}
    assert len(algos) >= 3  # two convs (possibly fused) and the MatMul
    assert len({a.provider for a in algos.values()}) == 1  # one thread pool
    back = loads_om(dumps_om(cm.graph, cm.manifest)).graph
    assert {n.name: n.attrs["_algo"] for n in back.nodes if "_algo" in n.attrs} == algos
    path = tmp_path / "tiny.om"
    cm.save(path)
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    ref = run_ort(model, {"x": x})[0]
    got = pycann.InferSession(0, str(path)).infer([x])[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_pass_skips_unknown_shapes_and_off_mode() -> None:
    import pycann

    cm = pycann.compile_model(_tiny_conv_model(dynamic=True))
    res = select_kernels.run(cm.graph, PassContext())
    assert "shapes unknown" in res.report
    res = select_kernels.run(cm.graph, PassContext(options={"kernel_selection": "off"}))
    assert not res.changed and res.report == "off"
    with pytest.raises(ConfigError, match="kernel_selection option 'mesure': expected one of static, measure, off"):
        select_kernels.run(cm.graph, PassContext(options={"kernel_selection": "mesure"}))


def test_pass_does_not_mutate_shared_attrs() -> None:
    attrs = {"pads": [1, 1, 1, 1]}
    g = Graph(nodes=[Node("Conv", ["x", "w"], ["y"], attrs, name="c")], inputs=["x"], outputs=["y"],
              initializers={"w": np.zeros((4, 3, 3, 3), np.float32)})
    from pycann.dtypes import TensorDesc

    g.descs["x"] = TensorDesc(1, (1, 3, 8, 8))
    choices, _, _, changed = select_kernels.select_graph(g)
    assert changed == 1 and "_algo" not in attrs and g.nodes[0].attrs["_algo"] == choices[0][3].algo


@needs_torch
def test_one_pool_rule_moves_the_minority(monkeypatch: pytest.MonkeyPatch) -> None:
    from pycann.dtypes import TensorDesc

    monkeypatch.setenv("PYCANN_PROVIDERS", "numpy,torch")
    providers.reset()
    g = Graph(
        nodes=[Node("Conv", ["x", "w"], ["c"], {"pads": [1, 1, 1, 1]}, name="conv"),
               Node("Flatten", ["c"], ["f"], name="flat"),
               Node("Gemm", ["f", "b"], ["y"], {"transB": 1}, name="fc")],
        inputs=["x"], outputs=["y"],
        initializers={"w": np.zeros((64, 64, 3, 3), np.float32), "b": np.zeros((10, 64 * 28 * 28), np.float32)},
    )
    g.descs.update({"x": TensorDesc(1, (1, 64, 28, 28)), "f": TensorDesc(1, (1, 64 * 28 * 28))})
    choices, _, moved, _ = select_kernels.select_graph(g)
    assert moved == 1 and {c[3].provider for c in choices} == {"torch"}
    choices, _, moved, _ = select_kernels.select_graph(g, single_pool=False)
    assert moved == 0 and {c[3].key for c in choices} == {"torch:conv2d_nhwc", "numpy:gemm"}
    assert "Gemm x1: numpy:gemm 1" in select_kernels.summarize(choices, select_kernels.Counter())


@needs_torch
def test_arena_ok() -> None:
    assert not providers.arena_ok(BY_KEY["torch:conv2d"])
    assert providers.arena_ok(BY_KEY["numpy:im2col_gemm"]) and providers.arena_ok(None) and providers.arena_ok(parse("x:y"))


def test_blas_single_thread_limits_openblas_inside_the_context() -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    info = [i for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    if not info:
        pytest.skip("no BLAS library visible to threadpoolctl")
    with thread_pools.blas_single_thread():
        # numpy's own OpenBLAS (the one the context exists for); other BLAS copies that later tests
        # load (scipy's, OpenCV's) are outside its scope
        inside = [i["num_threads"] for i in threadpoolctl.threadpool_info()
                  if i["user_api"] == "blas" and "numpy" in str(i.get("filepath", ""))]
    assert inside and all(n == 1 for n in inside)
    assert thread_pools.uses_torch([BY_KEY["numpy:matmul"], None, BY_KEY["torch:conv2d"]])
    assert not thread_pools.uses_torch([BY_KEY["numpy:matmul"], None])


@pytest.mark.parametrize("direct", [True, False])
def test_blas_single_thread_restores_the_count_direct_and_through_threadpoolctl(
        direct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy's wheel OpenBLAS is set directly (no library scan); without one (monkeypatched away),
    threadpoolctl does it. Either way: one thread inside, nested uses too, the count restored after."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from pycann.kernels.providers import blas_threads

    def numpy_blas() -> list[int]:
        return [i["num_threads"] for i in threadpoolctl.threadpool_info()
                if i["user_api"] == "blas" and "numpy" in str(i.get("filepath", ""))]

    if not numpy_blas():
        pytest.skip("no numpy BLAS visible to threadpoolctl")
    if direct and blas_threads.numpy_wheel_openblas() is None:
        pytest.skip("numpy was not installed from a wheel with its own OpenBLAS")
    if not direct:
        monkeypatch.setattr(blas_threads, "numpy_wheel_openblas", lambda: None)
    monkeypatch.setattr(thread_pools, "_blas_limit", None)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        before = numpy_blas()
        with thread_pools.blas_single_thread():
            with thread_pools.blas_single_thread():
                assert all(n == 1 for n in numpy_blas())
            assert all(n == 1 for n in numpy_blas())
        assert numpy_blas() == before == [2] * len(before)
    monkeypatch.setattr(thread_pools, "_blas_limit", None)  # (the next user finds its own again)


@needs_torch
@pytest.mark.parametrize("act,alpha,beta", [
    ("Relu", 0.0, 0.0), ("Sigmoid", 0.0, 0.0), ("Tanh", 0.0, 0.0), ("HardSwish", 0.0, 0.0),
    ("HardSigmoid", 1 / 6, 0.5), ("HardSigmoid", 0.2, 0.5), ("LeakyRelu", 0.1, 0.0), ("Clip", 0.0, 6.0),
    ("Clip", float("-inf"), 1.0), ("Swish", 1.0, 0.0), ("Gelu", 0.0, 0.0),
])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_conv_activation_post_ops_match_numpy(act: str, alpha: float, beta: float, residual: bool) -> None:
    """FusedConv on torch:conv2d_nhwc runs the activation as a oneDNN post-op where one computes it
    (ONNX's formula; HardSigmoid only with torch's fixed 1/6 slope) and in numpy otherwise."""
    from pycann.kernels.providers import torch_onednn

    fused = lookup("FusedConv", "pycann", 1)
    x, w, b = _r(1, 16, 12, 12), _r(24, 16, 3, 3) * 0.3, _r(24)
    z = _r(1, 24, 12, 12, seed=9) if residual else None
    attrs = {"pads": [1, 1, 1, 1], "activation": act, "act_alpha": alpha, "act_beta": beta}
    ins = [x, w, b] + ([z] if residual else [])
    want = run_kernel(fused)(ins, fused.with_defaults({**attrs, "_algo": BY_KEY["numpy:im2col_gemm"]}))[0]
    got = run_kernel(fused)(ins, fused.with_defaults({**attrs, "_algo": BY_KEY["torch:conv2d_nhwc"]}))[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    mapped = torch_onednn.onednn_unary(act, alpha, beta)
    assert (mapped is None) == ((act, alpha) == ("HardSigmoid", 0.2) or (act, alpha) == ("Clip", float("-inf")))



def _has_onednn() -> bool:
    providers.reset()
    return providers.available("onednn")


@pytest.mark.skipif(not _has_onednn(), reason="onednn-cpu-gomp (optional provider) not installed")
def test_static_choice_prefers_onednn_and_keeps_torch_unloaded() -> None:
    """With libdnnl present, convs go to the oneDNN C API (no torch import: ~14 MB, not ~180)."""
    assert providers.choose("Conv", [(1, 96, 80, 80), (96, 1, 3, 3)], {"group": 96}).key == "onednn:conv_nhwc"
    assert providers.choose("Conv", [(1, 3, 64, 64), (16, 3, 3, 3)], {"pads": [0, 0, 1, 1]}).key == "onednn:conv_nhwc"
    assert providers.choose("Conv", [(1, 16, 20, 20), (16, 1, 3, 3)], {"group": 16}).key == "numpy:depthwise"  # tiny
    assert providers.choose("ConvTranspose", [(1, 8, 5, 5), (8, 4, 2, 2)], {"strides": [2, 2]}).key == \
        "onednn:conv_transpose_nhwc"
    assert providers.choose("MatMul", [(128, 768), (768, 768)], {}).key == "onednn:matmul"
    assert providers.choose("Gemm", [(1, 2048), (1000, 2048)], {"transB": 1}).key == "onednn:gemm"
    assert thread_pools.uses_openmp([BY_KEY["onednn:conv_nhwc"]]) and not thread_pools.uses_openmp([BY_KEY["numpy:gemm"], None])


@pytest.mark.parametrize("avx512, want", [(False, "skinny"), (True, "any")])
def test_skinny_gemm_class_depends_on_avx512(monkeypatch: pytest.MonkeyPatch, avx512: bool, want: str) -> None:
    """2-64 rows against a 2-D weight take numpy's BLAS first on a CPU without AVX-512 (oneDNN's jit
    gemm there is slower than OpenBLAS at a few rows); one row (a GEMV) and batched B stay 'any'."""
    monkeypatch.setattr(choice_table, "has_avx512", lambda: avx512)
    assert providers.shape_class(GemmSpec("MatMul", (4, 1, 768), (768, 3072))) == want
    assert providers.shape_class(GemmSpec("MatMul", (64, 768), (768, 768))) == want
    assert providers.shape_class(GemmSpec("MatMul", (1, 1, 768), (768, 3072))) == "any"  # a GEMV
    assert providers.shape_class(GemmSpec("MatMul", (65, 768), (768, 768))) == "any"
    assert providers.shape_class(GemmSpec("MatMul", (12, 4, 64), (12, 64, 512))) == "any"  # B is batched
    spec = GemmSpec("MatMul", (4, 1, 768), (768, 3072))
    assert providers.select(spec).key == ("numpy:matmul" if not avx512 else
                                           "onednn:matmul" if providers.available("onednn") else "numpy:matmul")


def test_runtime_openmp() -> None:
    """A shape-generic plan's matmuls pick a provider per call: OpenMP when oneDNN is there."""
    assert thread_pools.runtime_openmp(["Add", "MatMul"]) == (providers.available("onednn") or providers.available("torch"))
    assert not thread_pools.runtime_openmp(["Add", "Relu"])


@pytest.mark.parametrize("with_out", [False, True])
def test_numpy_matmul_folds_batched_a_against_a_big_weight(monkeypatch: pytest.MonkeyPatch, with_out: bool) -> None:
    """A batched A against a 2-D B of FOLD_BYTES or more is one (rows, K) product: same values
    as np.matmul, the result's shape, and ``out`` filled when given (decode steps at batch > 1)."""
    from pycann.kernels.providers import numpy_blas as nb

    monkeypatch.setattr(nb, "FOLD_BYTES", 1024)  # the real bound is 16 MiB: keep the test small
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 3, 32)).astype(np.float32)
    b = rng.standard_normal((32, 40)).astype(np.float32)  # 5 KiB >= the patched bound
    out = np.full((4, 3, 40), np.nan, np.float32) if with_out else None
    y = nb.matmul(a, b, out)
    np.testing.assert_allclose(y, np.matmul(a, b), rtol=1e-5, atol=1e-5)
    assert y.shape == (4, 3, 40) and (y is out if with_out else True)
    t = a.transpose(1, 0, 2)  # not C-contiguous: numpy's own loop, same values
    np.testing.assert_allclose(nb.matmul(t, b), np.matmul(t, b), rtol=1e-5, atol=1e-5)
    small = rng.standard_normal((4, 4)).astype(np.float32)  # under the bound: unchanged path
    np.testing.assert_allclose(nb.matmul(a[..., :4], small), np.matmul(a[..., :4], small), rtol=1e-5, atol=1e-5)


def test_the_providers_env_names_are_the_provider_table() -> None:
    from pycann import config

    assert tuple(providers.PROVIDERS) == config.PROVIDER_NAMES
