"""npu convolutions with string padding against torch's CPU: ``padding="valid"`` reaches
``aten::convolution`` with one padding value (``[0]``), which ATen expands to every spatial dim;
pycann's Conv attributes must do the same (it raised "attribute pads has 2 values")."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import pycann.torch  # noqa: F401 (registers the npu device)


@pytest.mark.parametrize("padding", ["valid", "same"])
def test_conv2d_string_padding(padding: str) -> None:
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 8, 11, 13), torch.randn(16, 8, 3, 3) * 0.1, torch.randn(16)
    want = F.conv2d(x, w, b, padding=padding)
    xn, wn, bn = x.to("npu"), w.to("npu"), b.to("npu")
    for _ in range(3):  # the single-op path, the bound kernel, the fast path
        torch.testing.assert_close(F.conv2d(xn, wn, bn, padding=padding).cpu(), want, rtol=1e-4, atol=1e-4)


def test_conv2d_valid_padding_gradients() -> None:
    torch.manual_seed(1)
    x, w = torch.randn(2, 8, 11, 13), torch.randn(16, 8, 3, 3) * 0.1
    xc, wc = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.conv2d(xc, wc, padding="valid").square().sum().backward()
    xn, wn = x.to("npu").requires_grad_(), w.to("npu").requires_grad_()
    F.conv2d(xn, wn, padding="valid").square().sum().backward()
    assert xn.grad is not None and wn.grad is not None and xc.grad is not None and wc.grad is not None
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(wn.grad.cpu(), wc.grad, rtol=1e-3, atol=1e-3)
