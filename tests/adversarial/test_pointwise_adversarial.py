"""Adversarial inputs for the run-time-dims pointwise convs and patch ConvTransposes
(``kernels/providers/onednn_pointwise.py``) and the no-jit memo of ``onednn_conv_plan._own_kernels``:
weights whose transpose is already contiguous (one output or input channel, Fortran order, 1x1
deconv kernels) must not be kept alive by a plan, and one convolution without a jit kernel must
not take the jit kernels away from every later conv of the same weight shape. Skipped when
libdnnl v3 is not installed."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from pycann.kernels.providers import numpy_blas as nb
from pycann.kernels.providers import onednn, onednn_conv_plan
from pycann.ops.nn.conv import conv_transpose_geometry, conv_window

pytestmark = pytest.mark.skipif(not onednn.available(), reason="libdnnl.so.3 (onednn-cpu-gomp) not available")

from pycann.kernels.providers import onednn_pointwise as pw  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4


def _weight(shape: tuple[int, ...], order: str = "C") -> np.ndarray:
    w = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    return np.asfortranarray(w) if order == "F" else w


@pytest.mark.parametrize("ws,order", [((1, 16, 1, 1), "C"), ((8, 1, 1, 1), "C"), ((8, 16, 1, 1), "F"),
                                      ((1, 5, 1), "C"), ((6, 16, 1, 1), "C")])
def test_pointwise_plan_never_keeps_the_weight(ws: tuple[int, ...], order: str) -> None:
    w = _weight(ws, order)
    x = np.random.default_rng(1).standard_normal((2, ws[1], *([5] * (len(ws) - 2)))).astype(np.float32)
    win = conv_window(x.shape, w.shape, {})
    before = set(pw._plans)
    y = onednn.conv_nhwc(x, w, None, 1, win)
    new = set(pw._plans) - before
    assert len(new) == 1
    (k,) = (pw._plans[key] for key in new)
    assert k is not None and not np.shares_memory(k.wt, w)
    ref = nb.conv_im2col_gemm(x.astype(np.float64), w.astype(np.float64), None, 1, win)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    del w, k
    gc.collect()
    assert not new & set(pw._plans)  # the weight went, and its plan with it


@pytest.mark.parametrize("ws", [(4, 3, 1, 1), (1, 1, 2, 2), (1, 1, 1, 3), (6, 5, 2, 2)])
def test_patch_plan_never_keeps_the_weight(ws: tuple[int, ...]) -> None:
    w = _weight(ws)
    x = np.random.default_rng(2).standard_normal((2, ws[0], 3, 4)).astype(np.float32)
    win, outs = conv_transpose_geometry(x.shape[2:], ws[2:], {"strides": list(ws[2:])})
    before = set(pw._patch_plans)
    y = onednn.conv_transpose_nhwc(x, w, None, 1, win, outs)
    new = set(pw._patch_plans) - before
    assert len(new) == 1
    (k,) = (pw._patch_plans[key] for key in new)
    assert k is not None and not np.shares_memory(k.rows, w)
    ref = nb.conv_transpose(x.astype(np.float64), w.astype(np.float64), None, 1, win, outs)
    np.testing.assert_allclose(y, ref, rtol=RTOL, atol=ATOL)
    del w, k
    gc.collect()
    assert not new & set(pw._patch_plans)


def _impl(w: np.ndarray, size: int, pads: int) -> str:
    xs = (1, w.shape[1], size, size)
    win = conv_window(xs, w.shape, {"pads": [pads] * 4})
    return onednn_conv_plan._Plan(xs, w, False, 1, win, tuple(win.out), False, None, False).impl


def test_conv_without_jit_kernel_does_not_strip_other_geometries() -> None:
    """A 3x3 conv with pads of 3 has no jit kernel on AVX-512 (brgconv only); remembering that by
    weight shape and stride alone sent every later size of every 16x16x3x3 pad-1 conv to brgconv
    and its never-freed kernel store."""
    rng = np.random.default_rng(0)
    odd = rng.random((16, 16, 3, 3), dtype=np.float32)
    _impl(odd, 8, 3)  # the weight's first primitive: keeps oneDNN's first choice
    _impl(odd, 9, 3)  # a later shape: walks for a jit kernel (none on some ISAs)
    w = rng.random((16, 16, 3, 3), dtype=np.float32)
    first = _impl(w, 8, 1)
    later = [_impl(w, s, 1) for s in (9, 10)]
    if first.startswith(onednn_conv_plan._GLOBAL_KERNELS):  # (else nothing to move off)
        assert all(not i.startswith(onednn_conv_plan._GLOBAL_KERNELS) for i in later), later
    assert not any(k[0] is False for k in onednn_conv_plan._no_jit)  # only deconvolutions are remembered


@pytest.mark.parametrize("kind", ["pointwise", "3x3", "patch_deconv"])
def test_read_only_out_buffer_is_never_written(kind: str) -> None:
    """A read-only ``out`` (e.g. a mapped file) must not reach oneDNN as a destination pointer."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 8, 6, 7)).astype(np.float32)
    if kind == "patch_deconv":
        w = rng.standard_normal((8, 4, 2, 2)).astype(np.float32)
        win, outs = conv_transpose_geometry((6, 7), (2, 2), {"strides": [2, 2]})
        ref = onednn.conv_transpose_nhwc(x, w, None, 1, win, outs)
        out = onednn.empty_channels_last(ref.shape)
        out[...] = 0
        out.flags.writeable = False
        y = onednn.conv_transpose_nhwc(x, w, None, 1, win, outs, out)
    else:
        k = 1 if kind == "pointwise" else 3
        w = rng.standard_normal((4, 8, k, k)).astype(np.float32)
        win = conv_window(x.shape, w.shape, {"pads": [k // 2] * 4})
        ref = onednn.conv_nhwc(x, w, None, 1, win)
        out = onednn.empty_channels_last(ref.shape)
        out[...] = 0
        out.flags.writeable = False
        y = onednn.conv_nhwc(x, w, None, 1, win, out)
    assert y is not out and not np.shares_memory(y, out) and not out.any()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
