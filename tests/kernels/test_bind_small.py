"""Prepared kernels for tiny static signatures (ops/bind_small.py, Cast in kernels/bind.py)
give bit-identical results to the generic kernels, or to the prepared kernels they replaced."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from pycann.dtypes import TensorDesc
from pycann.kernels.algorithm import BY_KEY
from pycann.kernels.bind import PREPARE
from pycann.ops import fused
from pycann.ops.nn.conv import conv_window
from pycann.ops.nn.rnn import _sigmoid
from pycann.ops.registry import lookup

RNG = np.random.default_rng(11)
_CODE = {np.dtype(np.float32): 1, np.dtype(np.float64): 11, np.dtype(np.int64): 7, np.dtype(np.float16): 10,
         np.dtype(np.int32): 6}


def _desc(a: np.ndarray | None) -> TensorDesc | None:
    return None if a is None else TensorDesc(_CODE[a.dtype], a.shape)


def _bits(a: np.ndarray) -> np.ndarray:
    """The raw bits (so -0.0 != 0.0), with every NaN made one value (NaN payloads are not compared)."""
    a = np.ascontiguousarray(a)
    b = a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint64).copy()
    b[np.isnan(a)] = 1
    return b


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _specials(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    x = RNG.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    for i, v in enumerate([np.nan, -0.0, 0.0, np.inf, -np.inf, 1e30, -1e30][: flat.size // 3]):
        flat[(7 * i) % flat.size] = v
    return x


# ----------------------------------------------------------------------------------- Cast


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_cast_to_own_type_passes_the_array_on(dtype: Any) -> None:
    x = _specials((3, 4), np.float64).astype(dtype) if dtype != np.int64 else np.arange(12).reshape(3, 4)
    op = lookup("Cast", "", 21)
    a = op.with_defaults({"to": _CODE[np.dtype(dtype)]})
    kernel = PREPARE[("", "Cast")](a, [_desc(x)], [None], [_desc(x)])
    assert kernel is not None
    for v in (x, x.T, x[:, ::2]):  # non-contiguous inputs too
        got = kernel([v], a)[0]
        want = op.kernel([v], a)[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    other = op.with_defaults({"to": 11 if dtype != np.float64 else 1})
    k2 = PREPARE[("", "Cast")](other, [_desc(x)], [None], [None])
    if k2 is not None:  # a real conversion still converts
        assert k2([x], other)[0].dtype != x.dtype


# ----------------------------------------------------------------------------------- ReduceMean / ReduceSum


@pytest.mark.parametrize("op_type", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("shape,axes,keepdims", [
    ((1, 1), [1], 0),              # Silero VAD's final mean
    ((3, 5, 7), [-1], 1),
    ((3, 5, 7), [1, 2], 0),
    ((2, 3, 40), [2], 0),          # rows longer than einsum's unroll
    ((4, 6), None, 0),             # no axes: all of them
    ((4, 6), None, 1),
    ((5,), [0], 0),
    ((2, 3), [0, 1], 1),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prepared_reduce_equals_generic(op_type: str, shape: tuple[int, ...], axes: list[int] | None,
                                        keepdims: int, dtype: Any) -> None:
    op = lookup(op_type, "", 18)
    a = op.with_defaults({"keepdims": keepdims})
    x = _specials(shape, dtype)
    ax = None if axes is None else np.array(axes, np.int64)
    ins = [x] + ([ax] if ax is not None else [])
    want = op.kernel(ins, a)[0]
    kernel = PREPARE[("", op_type)](a, [_desc(v) for v in ins], [None, *ins[1:]], [_desc(want)])
    assert kernel is not None
    _same(kernel(ins, a)[0], want)
    clean = RNG.standard_normal(shape).astype(dtype)  # finite values: the sums must match bit for bit
    _same(kernel([clean, *ins[1:]], a)[0], op.kernel([clean, *ins[1:]], a)[0])
    if x.ndim >= 2:  # a strided input of the same shape: the generic kernel's own summation
        wide = RNG.standard_normal(shape[:-1] + (2 * shape[-1],)).astype(dtype)[..., ::2]
        _same(kernel([wide, *ins[1:]], a)[0], op.kernel([wide, *ins[1:]], a)[0])


def test_prepared_reduce_identity_and_declines() -> None:
    op = lookup("ReduceMean", "", 18)
    x = _specials((3, 4))
    empty = np.zeros((0,), np.int64)
    a = op.with_defaults({"noop_with_empty_axes": 1})
    kernel = PREPARE[("", "ReduceMean")](a, [_desc(x), _desc(empty)], [None, empty], [_desc(x)])
    assert kernel is not None
    _same(kernel([x, empty], a)[0], op.kernel([x, empty], a)[0])
    a = op.with_defaults({})
    lead = np.array([0], np.int64)  # a leading axis: np.sum in the generic kernel
    assert PREPARE[("", "ReduceMean")](a, [_desc(x), _desc(lead)], [None, lead], [None]) is None
    assert PREPARE[("", "ReduceMean")](a, [_desc(x), _desc(lead)], [None, None], [None]) is None  # run-time axes
    z = np.zeros((0, 3), np.float32)
    assert PREPARE[("", "ReduceMean")](a, [_desc(z)], [None], [None]) is None  # zero-size
    h = np.zeros((2, 3), np.float16)
    assert PREPARE[("", "ReduceMean")](a, [_desc(h)], [None], [None]) is None  # float16 accumulates in float32
    bad = np.array([5], np.int64)
    assert PREPARE[("", "ReduceMean")](a, [_desc(x), _desc(bad)], [None, bad], [None]) is None


# ----------------------------------------------------------------------------------- Pow / ElementwiseChain


@pytest.mark.parametrize("xs,es", [((1, 129, 4), ()), ((3, 4), (4,)), ((2, 3), (2, 3)), ((), ()), ((0, 3), ())])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prepared_pow_equals_generic(xs: tuple[int, ...], es: tuple[int, ...], dtype: Any) -> None:
    op = lookup("Pow", "", 15)
    a = op.with_defaults({})
    x = (RNG.standard_normal(xs) * 3).astype(dtype)
    if x.size:
        x.reshape(-1)[0] = np.nan
    e = np.asarray(RNG.choice([2.0, 0.5, -1.0, 3.0], es), dtype=dtype)
    kernel = PREPARE[("", "Pow")](a, [_desc(x), _desc(e)], [None, None], [None])
    assert kernel is not None
    want = op.kernel([x, e], a)[0]
    _same(kernel([x, e], a)[0], want)
    i = np.array(2, np.int64)
    assert PREPARE[("", "Pow")](a, [_desc(x), _desc(i)], [None, None], [None]) is None  # mixed dtypes


def _chain_case(steps: list[list[Any]], ins: Sequence[np.ndarray]) -> None:
    op = lookup("ElementwiseChain", "pycann", 1)
    a = op.with_defaults({"steps": steps})
    kernel = PREPARE[("pycann", "ElementwiseChain")](a, [_desc(v) for v in ins], [None] * len(ins), [None])
    assert kernel is not None
    keep = [v.copy() for v in ins]
    want = op.kernel(list(ins), a)[0]
    got = kernel(list(ins), a)[0]
    _same(got, want)
    for v, k in zip(ins, keep):  # inputs are never written
        _same(v, k)
    assert not np.shares_memory(got, ins[0])


@pytest.mark.parametrize("steps,shapes", [
    ([["Pow", 1, 0, 0.0, 0.0], ["Add", 2, 0, 0.0, 0.0], ["Sqrt", -1, 0, 0.0, 0.0]], [(1, 129, 4), (), (1, 129, 4)]),
    ([["Relu", -1, 0, 0.0, 0.0], ["Mul", 1, 0, 0.0, 0.0]], [(3, 4), (4,)]),              # unary first
    ([["Add", 1, 0, 0.0, 0.0], ["Sub", 2, 1, 0.0, 0.0], ["Tanh", -1, 0, 0.0, 0.0]], [(3, 1), (3, 4), (4,)]),
    ([["Mul", 1, 1, 0.0, 0.0], ["Div", 1, 0, 0.0, 0.0], ["Clip", -1, 0, -0.5, 0.5]], [(2, 3), (4, 2, 3)]),  # widening
    ([["Sigmoid", -1, 0, 0.0, 0.0], ["Max", 1, 0, 0.0, 0.0]], [(), ()]),                  # 0-d
    ([["Exp", -1, 0, 0.0, 0.0], ["Add", 1, 0, 0.0, 0.0]], [(0, 3), (3,)]),                # zero-size
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_prepared_chain_equals_generic(steps: list[list[Any]], shapes: list[tuple[int, ...]], dtype: Any) -> None:
    ins = [_specials(s, dtype) if int(np.prod(s)) >= 3 else RNG.standard_normal(s).astype(dtype) for s in shapes]
    _chain_case(steps, ins)
    if ins[0].ndim == 2 and ins[0].shape[0] > 1:  # a non-contiguous chain input of the same shape
        _chain_case(steps, [np.asfortranarray(ins[0])[:, :], *ins[1:]])


def test_prepared_chain_declines() -> None:
    op = lookup("ElementwiseChain", "pycann", 1)
    a = op.with_defaults({"steps": [["Add", 1, 0, 0.0, 0.0]]})
    x, y = np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float64)
    assert PREPARE[("pycann", "ElementwiseChain")](a, [_desc(x), _desc(y)], [None, None], [None]) is None
    h = np.zeros((2, 3), np.float16)
    assert PREPARE[("pycann", "ElementwiseChain")](a, [_desc(h), _desc(h)], [None, None], [None]) is None
    bad = np.zeros((4,), np.float32)
    assert PREPARE[("pycann", "ElementwiseChain")](a, [_desc(x), _desc(bad)], [None, None], [None]) is None


# ----------------------------------------------------------------------------------- LSTM


def _old_lstm(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None, h0: np.ndarray | None,
              c0: np.ndarray | None) -> list[np.ndarray]:
    """The prepared LSTM this module replaced (its operations, in its order)."""
    seq, batch, _ = x.shape
    hidden = r.shape[2]
    wt, rt = np.ascontiguousarray(w[0].T), np.ascontiguousarray(r[0].T)
    bias = None if b is None else b[0, :4 * hidden] + b[0, 4 * hidden:]
    xw = (x.reshape(-1, x.shape[2]) @ wt).reshape(seq, batch, 4 * hidden)
    if bias is not None:
        xw += bias
    h = h0[0] if h0 is not None else np.zeros((batch, hidden), np.float32)
    c = c0[0] if c0 is not None else np.zeros((batch, hidden), np.float32)
    y = np.empty((seq, 1, batch, hidden), np.float32)
    for t in range(seq):
        gates = h @ rt
        gates += xw[t]
        iof = _sigmoid(gates[:, :3 * hidden])
        ct = np.tanh(gates[:, 3 * hidden:])
        c = iof[:, 2 * hidden:] * c
        c += iof[:, :hidden] * ct
        h = iof[:, hidden:2 * hidden] * np.tanh(c)
        y[t, 0] = h
    return [y, h[None], c[None]]


@pytest.mark.parametrize("seq,batch,hidden,bias,init", [
    (1, 1, 128, True, True),   # Silero VAD's decoder
    (1, 1, 6, True, True), (5, 3, 6, True, False), (4, 2, 16, False, True), (3, 1, 20, True, False),
    (0, 2, 6, True, True),
])
def test_prepared_lstm_bit_identical(seq: int, batch: int, hidden: int, bias: bool, init: bool) -> None:
    inp = 5
    x = (RNG.standard_normal((seq, batch, inp)) * 4).astype(np.float32)
    w = RNG.standard_normal((1, 4 * hidden, inp)).astype(np.float32)
    r = RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    b = RNG.standard_normal((1, 8 * hidden)).astype(np.float32) if bias else None
    h0 = RNG.standard_normal((1, batch, hidden)).astype(np.float32) if init else None
    c0 = RNG.standard_normal((1, batch, hidden)).astype(np.float32) if init else None
    if init and seq:
        c0[0, 0, 0] = np.nan  # propagates like the reference
        c0[0, -1, -1] = -0.0
    ins = [x, w, r, b, None, h0, c0]
    op = lookup("LSTM", "", 14)
    a = op.with_defaults({"hidden_size": hidden})
    kernel = PREPARE[("", "LSTM")](a, [_desc(v) for v in ins], [None, w, r, b, None, None, None], [None] * 3)
    assert kernel is not None
    keep = [None if v is None else v.copy() for v in ins]
    got = kernel(ins, a)
    for g, want in zip(got, _old_lstm(x, w, r, b, h0, c0)):
        _same(g, want)
    for g, want in zip(got, op.kernel(ins, a)):  # and close to the generic kernel
        assert g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    for v, k in zip(ins, keep):
        if v is not None:
            _same(v, k)
    if h0 is not None:  # outputs never alias the state inputs
        assert not any(np.shares_memory(g, h0) or np.shares_memory(g, c0) for g in got)


# ----------------------------------------------------------------------------------- small im2col convs


def _old_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any],
              res: np.ndarray | None) -> np.ndarray:
    """The prepared im2col conv this module replaced (its operations, in its order)."""
    win = conv_window(x.shape, w.shape, attrs)
    group = int(attrs.get("group", 1))
    n, c = x.shape[:2]
    m = w.shape[0]
    kdim = (c // group) * int(np.prod(win.kernel))
    l_out = int(np.prod(win.out))
    wg = np.ascontiguousarray(w.reshape(group, m // group, kdim))
    padded = x.shape[:2] + tuple(s + pb + pe for s, pb, pe in zip(x.shape[2:], win.pads_begin, win.pads_end))
    inner = (slice(None), slice(None)) + tuple(slice(pb, pb + s) for pb, s in zip(win.pads_begin, x.shape[2:]))
    if win.padded:
        buf = np.zeros(padded, np.float32)
        buf[inner] = x
    else:
        buf = np.ascontiguousarray(x)
    st = [4]
    for d in reversed(padded[1:]):
        st.insert(0, st[0] * d)
    k_st = tuple(st[2 + i] * win.dilations[i] for i in range(len(win.kernel)))
    o_st = tuple(st[2 + i] * win.strides[i] for i in range(len(win.kernel)))
    view = np.ndarray(padded[:2] + tuple(win.kernel) + tuple(win.out), np.float32, buffer=buf,
                      strides=tuple(st[:2]) + k_st + o_st)
    y = np.matmul(wg, view.reshape(n, group, kdim, l_out))
    if b is not None:
        y += b.reshape(1, group, m // group, 1)
    y = y.reshape((n, m) + tuple(win.out))
    if res is not None:
        y += res
    act, al, be = fused._act(attrs)
    if act:
        fused.apply_activation(y, act, al, be)
    return y


_SILERO = [
    ((1, 1, 640), (258, 1, 256), {"strides": [128]}, False, ""),                       # STFT
    ((1, 129, 4), (128, 129, 3), {"pads": [1, 1]}, True, "Relu"),                      # encoder/0
    ((1, 128, 4), (64, 128, 3), {"pads": [1, 1], "strides": [2]}, True, "Relu"),       # encoder/1
    ((1, 64, 1), (128, 64, 3), {"pads": [1, 1]}, True, "Relu"),                        # encoder/3
    ((1, 128, 1), (1, 128, 1), {}, True, "Sigmoid"),                                   # decoder
]
_OTHER = [
    ((2, 4, 7, 6), (6, 2, 3, 3), {"pads": [1, 0, 2, 1], "group": 2, "dilations": [2, 1]}, True, "Relu"),
    ((2, 3, 5, 5), (4, 3, 1, 1), {}, False, "Relu"),                                    # 1x1, batch 2
    ((1, 3, 5, 5), (4, 3, 1, 1), {"strides": [2, 2]}, True, ""),                        # strided 1x1: a view
    ((1, 3, 6, 5), (5, 3, 2, 2), {"strides": [2, 1]}, True, "Tanh"),
    ((1, 2, 3), (3, 2, 3), {"pads": [2, 2]}, False, "LeakyRelu"),
    ((1, 8, 1), (4, 8, 3), {"pads": [1, 1]}, True, ""),                                # padded, in place
    # PP-OCR cls depthwise: patch matrices over TAKE_MAX_ELEMENTS are copied, not gathered
    ((1, 200, 2, 96), (200, 1, 3, 3), {"pads": [1, 1, 1, 1], "group": 200}, True, "HardSwish"),
    ((1, 16, 6, 40), (16, 16, 3, 3), {}, False, "Relu"),                               # unpadded copy
]


@pytest.mark.parametrize("xs,ws,extra,bias,act", _SILERO + _OTHER)
@pytest.mark.parametrize("residual", [False, True])
def test_prepared_small_conv_bit_identical(xs: tuple[int, ...], ws: tuple[int, ...], extra: dict[str, Any],
                                           bias: bool, act: str, residual: bool) -> None:
    op = lookup("FusedConv", "pycann", 1)
    spatial = len(xs) - 2
    attrs = op.with_defaults({"kernel_shape": list(ws[2:]), "pads": [0] * 2 * spatial, "strides": [1] * spatial,
                              "dilations": [1] * spatial, "group": 1, "activation": act,
                              "act_alpha": 0.1 if act == "LeakyRelu" else 0.0, "_algo": BY_KEY["numpy:im2col_gemm"], **extra})
    x = _specials(xs)
    w = RNG.standard_normal(ws).astype(np.float32)
    b = RNG.standard_normal(ws[0]).astype(np.float32) if bias else None
    win = conv_window(xs, ws, attrs)
    out = (xs[0], ws[0]) + tuple(win.out)
    res = RNG.standard_normal(out).astype(np.float32) if residual else None
    ins = [x, w, b, res]
    kernel = PREPARE[("pycann", "FusedConv")](attrs, [_desc(v) for v in ins], [None, w, b, None], [_desc(res)])
    assert kernel is not None
    keep = x.copy()
    for v in (x, np.asfortranarray(x), RNG.standard_normal(xs).astype(np.float32)):  # again: pooled buffers are reused
        got = kernel([v, w, b, res], attrs)[0]
        _same(got, _old_conv(v, w, b, attrs, res))
        clean = np.nan_to_num(v, nan=0.0, posinf=1.0, neginf=-1.0)
        generic = op.kernel([clean, w, b, res], attrs)[0]
        np.testing.assert_allclose(kernel([clean, w, b, res], attrs)[0], generic, rtol=1e-4, atol=1e-4)
    _same(x, keep)


def test_prepared_small_conv_concurrent_runs() -> None:
    """Runs in several threads each take their own padded buffer."""
    xs, ws = (1, 129, 4), (128, 129, 3)
    op = lookup("FusedConv", "pycann", 1)
    attrs = op.with_defaults({"kernel_shape": [3], "pads": [1, 1], "strides": [1], "dilations": [1],
                              "activation": "Relu", "_algo": BY_KEY["numpy:im2col_gemm"]})
    w = RNG.standard_normal(ws).astype(np.float32)
    kernel = PREPARE[("pycann", "FusedConv")](attrs, [_desc(np.zeros(xs, np.float32)), _desc(w)], [None, w],
                                              [None])
    assert kernel is not None
    inputs = [RNG.standard_normal(xs).astype(np.float32) for _ in range(4)]
    wants = [_old_conv(v, w, None, attrs, None) for v in inputs]
    bad: list[int] = []

    def work(i: int) -> None:
        for _ in range(200):
            if not np.array_equal(kernel([inputs[i], w], attrs)[0], wants[i]):
                bad.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
