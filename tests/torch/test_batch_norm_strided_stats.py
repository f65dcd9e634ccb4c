"""Inference batch norm on the npu with non-contiguous statistics or parameters (views of a bigger
tensor: ``running_mean=base[::2]``): torch's CPU backward ignores their strides (a weight gradient of
-1e7 where 2.17 is right), and the npu ran that kernel (found by the torch op fuzzer). The golden is
CPU torch with contiguous copies of the same values."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pycann.torch  # noqa: F401 (registers the npu device)


@pytest.mark.parametrize("shape", [(3, 4), (2, 4, 5, 3)])
def test_strided_statistics_backward(shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    x, g = torch.randn(shape), torch.randn(shape)
    mean, var = torch.randn(8), torch.rand(8) + 0.5
    w, b = torch.randn(8), torch.randn(8)
    grads = []
    for dev, strided in (("cpu", False), ("npu", True)):
        xx = x.detach().to(dev).requires_grad_()
        ww, bb = w.to(dev)[::2].clone().requires_grad_(), b.to(dev)[::2].clone().requires_grad_()
        m, v = (mean.to(dev)[::2], var.to(dev)[::2]) if strided else (mean[::2].clone(), var[::2].clone())
        y = F.batch_norm(xx, m, v, ww, bb, False, 0.1, 0.1)
        y.backward(g.to(dev))
        grads.append([t.grad.cpu() for t in (xx, ww, bb)])  # type: ignore[union-attr]
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
