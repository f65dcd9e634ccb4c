"""Prepared (plan-time bound) kernels equal the generic kernels they specialise (kernels/bind.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.kernels.algorithm import BY_KEY
from pycann.kernels.bind import PREPARE
from pycann.kernels.bound import bound as _bound_kernel
from pycann.ops.registry import lookup

RNG = np.random.default_rng(3)


def _desc(a: np.ndarray) -> TensorDesc:
    return TensorDesc(1 if a.dtype == np.float32 else 7, a.shape)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [
    ([0, 2, 0, 3], None),                      # 2-D: pad the last axis (Silero VAD's STFT reflect pad)
    ([1, 2, 2, 1], None),
    ([1, 1], [0]),                             # axes input
    ([0, 0, 0, 0], None),                      # nothing to pad
])
def test_prepared_pad_equals_generic(mode: str, pads: list[int], axes: list[int] | None) -> None:
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    op = lookup("Pad", "", 19)
    a = op.with_defaults({"mode": mode})
    p = np.array(pads, np.int64)
    cv = np.array(1.5, np.float32)
    ins = [x, p, cv] + ([np.array(axes, np.int64)] if axes is not None else [])
    want = op.kernel(ins, a)[0]
    descs = [_desc(v) for v in ins]
    kernel = PREPARE[("", "Pad")](a, descs, [None, *ins[1:]], [TensorDesc(1, want.shape)])
    assert kernel is not None
    got = kernel([x, *ins[1:]], a)[0]
    np.testing.assert_array_equal(got, want)
    assert not np.shares_memory(got, x)


def test_prepared_pad_declines_what_it_cannot_bind() -> None:
    op = lookup("Pad", "", 19)
    a = op.with_defaults({"mode": "constant"})
    x = np.zeros((2, 3), np.float32)
    neg = np.array([0, -1, 0, 1], np.int64)  # cropping pads: the generic kernel handles them
    assert PREPARE[("", "Pad")](a, [_desc(x), _desc(neg)], [None, neg], [TensorDesc(1, (2, 3))]) is None
    pads = np.array([0, 1, 0, 1], np.int64)
    assert PREPARE[("", "Pad")](a, [_desc(x), _desc(pads)], [None, None], [TensorDesc(1, (2, 5))]) is None  # runtime pads
    cv = np.array(2.0, np.float32)  # a value computed at run time
    assert PREPARE[("", "Pad")](a, [_desc(x), _desc(pads), _desc(cv)], [None, pads, None],
                                [TensorDesc(1, (2, 5))]) is None


@pytest.mark.parametrize("seq,batch,bias,init", [(1, 1, True, True), (5, 3, True, False), (4, 2, False, True),
                                                 (0, 2, True, True)])
def test_prepared_lstm_equals_generic(seq: int, batch: int, bias: bool, init: bool) -> None:
    hidden, inp = 6, 5
    x = RNG.standard_normal((seq, batch, inp)).astype(np.float32)
    w = RNG.standard_normal((1, 4 * hidden, inp)).astype(np.float32)
    r = RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    b = RNG.standard_normal((1, 8 * hidden)).astype(np.float32) if bias else None
    h0 = RNG.standard_normal((1, batch, hidden)).astype(np.float32) if init else None
    c0 = RNG.standard_normal((1, batch, hidden)).astype(np.float32) if init else None
    ins = [x, w, r, b, None, h0, c0]
    op = lookup("LSTM", "", 14)
    a = op.with_defaults({"hidden_size": hidden})
    want = op.kernel(ins, a)
    descs = [None if v is None else _desc(v) for v in ins]
    kernel = PREPARE[("", "LSTM")](a, descs, [None, w, r, b, None, None, None], [None, None, None])
    assert kernel is not None
    got = kernel(ins, a)
    for g, wv in zip(got, want):
        assert g.shape == wv.shape and g.dtype == wv.dtype
        np.testing.assert_allclose(g, wv, rtol=1e-5, atol=1e-6)


def test_prepared_lstm_declines_other_variants() -> None:
    op = lookup("LSTM", "", 14)
    x = np.zeros((2, 1, 3), np.float32)
    w, r = np.zeros((1, 8, 3), np.float32), np.zeros((1, 8, 2), np.float32)
    descs = [_desc(x), _desc(w), _desc(r)]
    for attrs in ({"direction": "reverse"}, {"layout": 1}, {"clip": 1.0}, {"input_forget": 1},
                  {"activations": ["Tanh", "Tanh", "Tanh"]}):
        a = op.with_defaults({"hidden_size": 2, **attrs})
        assert PREPARE[("", "LSTM")](a, descs, [None, w, r], [None]) is None, attrs
    a = op.with_defaults({"hidden_size": 2})
    assert PREPARE[("", "LSTM")](a, descs, [None, None, r], [None]) is None  # weights computed at run time


def _fused_matmul_case(act: str) -> tuple[Any, dict[str, Any], list[np.ndarray]]:
    op = lookup("FusedMatMul", "pycann", 1)
    a = op.with_defaults({"activation": act, "_algo": BY_KEY["onednn:matmul"]})
    x = RNG.standard_normal((1, 64, 128)).astype(np.float32)  # 2 MFLOP: above onednn_matmul.SMALL_FLOPS
    w = (RNG.standard_normal((128, 128)) / 11).astype(np.float32)
    b = RNG.standard_normal((128,)).astype(np.float32)
    r = RNG.standard_normal((1, 64, 128)).astype(np.float32)
    return op, a, [x, w, b, r]


@pytest.mark.parametrize("act", ["", "Relu", "Gelu"])
def test_prepared_fused_matmul_residual_equals_generic(act: str) -> None:
    """FusedMatMul [A, B, bias, residual] bound to oneDNN (residual as a binary-add post-op, then the
    activation) equals the generic kernel: act(A @ B + bias + residual)."""
    from pycann.kernels.providers import onednn

    if not onednn.available():
        pytest.skip("libdnnl.so.3 not available")
    op, a, ins = _fused_matmul_case(act)
    want = op.kernel(ins, a)[0]
    descs = [_desc(v) for v in ins]
    kernel = PREPARE[("pycann", "FusedMatMul")](a, descs, [None, ins[1], ins[2], None], [TensorDesc(1, want.shape)])
    assert kernel is not None and _typed(kernel).writes_out
    out = np.full(want.shape, np.nan, np.float32)
    kernel(ins, a, [out])  # the executor's arena view; it ignores the return value
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    r2 = RNG.standard_normal(want.shape).astype(np.float32)  # another call, another residual buffer
    np.testing.assert_allclose(kernel([*ins[:3], r2], a)[0], op.kernel([*ins[:3], r2], a)[0], rtol=1e-5, atol=1e-5)


def test_prepared_fused_matmul_declines_a_broadcasting_residual() -> None:
    op, a, ins = _fused_matmul_case("")
    out = [TensorDesc(1, (1, 64, 128))]
    consts = [None, ins[1], ins[2], None]
    row = np.zeros((1, 1, 128), np.float32)
    assert PREPARE[("pycann", "FusedMatMul")](a, [*map(_desc, ins[:3]), _desc(row)], consts, out) is None
    wide = TensorDesc(11, (1, 64, 128))  # float64 residual on a float32 product
    assert PREPARE[("pycann", "FusedMatMul")](a, [*map(_desc, ins[:3]), wide], consts, out) is None


def test_fused_matmul_out_kernel_residual_in_the_output_buffer() -> None:
    """The generic out-kernel writes the product into outs[0] first: a residual living there is
    read before it is overwritten."""
    op, a, ins = _fused_matmul_case("Relu")
    a = op.with_defaults({"activation": "Relu"})  # numpy provider
    want = op.kernel(ins, a)[0]
    buf = ins[3].copy()
    op.out_kernel([*ins[:3], buf], a, [buf])
    np.testing.assert_allclose(buf, want, rtol=1e-5, atol=1e-5)


def _typed(k: object) -> Any:
    """A binder's result as a ``BoundKernel`` (plain functions: one without arena or OpenMP)."""
    return _bound_kernel(k)  # type: ignore[arg-type]


@pytest.mark.parametrize(("k", "s", "h"), [(3, 3, 1), (4, 3, 2)])
def test_aten_max_pool_leaves_a_window_wider_than_the_input_to_numpy(k: int, s: int, h: int) -> None:
    """ORT sizes such a window by truncation (one output); ATen refuses it ('Output size is too small'),
    so the ATen binding declines and the numpy kernel, which takes ORT's sizes, runs it."""
    pytest.importorskip("torch")
    from pycann.kernels import bind
    from pycann.kernels.providers import torch_onednn
    from pycann.ops.nn.pool import _k_max_pool

    torch_onednn.load()
    x = RNG.standard_normal((1, 8, h, h)).astype(np.float32)
    a = {"kernel_shape": [k, k], "strides": [s, s], "_layout": "NHWC"}
    want = _k_max_pool([x], a)[0]
    assert want.shape == (1, 8, 1, 1) and np.array_equal(want, x.max(axis=(2, 3), keepdims=True))
    assert bind._max_pool(a, [_desc(x)], [None], [TensorDesc(1, want.shape)]) is None
    b = {**a, "kernel_shape": [1, 1], "strides": [1, 1]}  # a window that fits still binds ATen's
    assert bind._max_pool(b, [_desc(x)], [None], [TensorDesc(1, x.shape)]) is not None
