"""The torch provider's elementwise kernels the eager adaptor uses for ReLU, residual Adds and
inference batch norms (``pycann/kernels/providers/torch_eltwise.py``): values as numpy computes the
ONNX ops (NaN kept), layouts kept, in-place forms, and the eager ops that reach them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pycann.torch  # noqa: F401 - registers the npu device
from pycann.kernels.providers import torch_eltwise

RNG = np.random.default_rng(23)


def _nhwc(n: int, c: int, h: int, w: int) -> np.ndarray:
    """A float32 (n, c, h, w) view of channels-last memory, with a NaN, an inf and a -inf."""
    a = RNG.standard_normal((n, h, w, c)).astype(np.float32).transpose(0, 3, 1, 2)
    a[0, 1, 2, 3], a[0, 2, 3, 4], a[0, 3, 4, 5] = np.nan, np.inf, -np.inf
    return a


def test_relu_into_matches_numpy_keeps_nan_and_layout() -> None:
    x = _nhwc(1, 32, 24, 24)
    want = np.maximum(x, np.float32(0))
    y = np.empty_like(x)
    torch_eltwise.relu_into(x, y)
    assert y.strides == x.strides
    np.testing.assert_array_equal(y, want)  # (array_equal treats NaN == NaN)
    torch_eltwise.relu_into(x, x)  # relu_: over its own input
    np.testing.assert_array_equal(x, want)


def test_add_into_matches_numpy_including_in_place() -> None:
    a, b = _nhwc(2, 16, 20, 20), _nhwc(2, 16, 20, 20)
    want = a + b
    y = np.empty_like(a)
    torch_eltwise.add_into(a, b, y)
    np.testing.assert_array_equal(y, want)
    torch_eltwise.add_into(a, b, a)
    np.testing.assert_array_equal(a, want)


def test_affine_matches_the_folded_batch_norm_steps() -> None:
    x = _nhwc(1, 64, 16, 16)
    s = RNG.standard_normal((64, 1, 1)).astype(np.float32)
    t = RNG.standard_normal((64, 1, 1)).astype(np.float32)
    y = torch_eltwise.bound_affine(s, t, x.shape)(x)
    assert y.strides == x.strides and y.dtype == np.float32
    want = x * s + t  # the folded graph's Mul then Add, each rounded in float32
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(y[fin], want[fin], rtol=2e-7, atol=1e-7)
    np.testing.assert_array_equal(y[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])


def test_batch_norm_of_a_contiguous_input_equals_torch_cpu() -> None:
    """A contiguous (NCHW) input's batch norm runs ATen's kernel: torch CPU's values exactly, contiguous."""
    x = np.ascontiguousarray(_nhwc(2, 32, 9, 9))
    c = 32
    w, b, m = (RNG.standard_normal(c).astype(np.float32) for _ in range(3))
    v = RNG.uniform(0.5, 2.0, c).astype(np.float32)
    y = torch_eltwise.bound_batch_norm(w, b, m, v, 1e-3, x.shape)(x)
    want = torch.nn.functional.batch_norm(torch.from_numpy(x), *(torch.from_numpy(a) for a in (m, v, w, b)),
                                          training=False, eps=1e-3).numpy()
    assert y.flags.c_contiguous and y.dtype == np.float32
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("call", [
    lambda: torch_eltwise.bound_batch_norm(*(np.ones(4, np.float32) for _ in range(3)), np.ones(4, np.float64),
                                           1e-5, (1, 4, 2, 2)),
    lambda: torch_eltwise.bound_batch_norm(*(np.ones(4, np.float32) for _ in range(4)), 1e-5,
                                           (1, 4, 2, 2))(np.zeros((1, 4, 3, 3), np.float32)),
    lambda: torch_eltwise.relu_into(np.zeros(4, np.float64), np.zeros(4, np.float64)),
    lambda: torch_eltwise.add_into(np.zeros(4, np.float32), np.zeros(5, np.float32), np.zeros(4, np.float32)),
    lambda: torch_eltwise.bound_affine(np.zeros((4, 1), np.float32), np.zeros((4, 1), np.float32), (2, 3)),
    # bound for one input shape: another one is refused at the call
    lambda: torch_eltwise.bound_affine(np.ones((4, 1, 1), np.float32), np.ones((4, 1, 1), np.float32),
                                       (1, 4, 2, 2))(np.zeros((1, 4, 3, 3), np.float32)),
])
def test_other_dtypes_and_shapes_are_refused(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


def test_eager_conv_bn_relu_residual_on_npu_equals_cpu() -> None:
    """The eager ops that now run on the torch provider (batch norm, relu_, the residual add_),
    between channels-last convolutions, against the same module on torch's CPU."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)
    bn = torch.nn.BatchNorm2d(32)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    m = torch.nn.Sequential(conv, bn).eval()
    x = torch.randn(1, 32, 40, 40)
    x[0, 3, 5, 7] = float("nan")
    with torch.no_grad():
        want = m(x)
        want = (want + x).relu_()
        mn = m.npu()
        xn = x.npu()
        got = mn(xn)
        got += xn
        got.relu_()
        got = got.cpu()
    assert torch.equal(torch.isnan(got), torch.isnan(want))
    torch.testing.assert_close(got.nan_to_num(), want.nan_to_num(), rtol=1e-4, atol=1e-4)
