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


_PADDING_ONLY = r"""
import torch, torch.nn.functional as F
import pycann.torch  # noqa: F401
for n, c, h, w, s, p in ((2, 1, 6, 1, 2, 1), (2, 3, 6, 1, 3, 2), (1, 1, 2, 1, 2, 1)):
    torch.manual_seed(0)
    x, wt, b = torch.randn(n, c, h, w), torch.randn(2, c, 1, 1), torch.randn(2)
    want = F.conv2d(x, wt, b, s, p, 2)
    for _ in range(3):  # the single-op path, the bound kernel, the fast path
        torch.testing.assert_close(F.conv2d(x.npu(), wt.npu(), b.npu(), s, p, 2).cpu(), want)
print("ok")
"""


def test_a_conv_whose_windows_read_only_padding_does_not_crash() -> None:
    """A 1x1 kernel with dilation 2 on a width-1 input, stride 2 and pad 1: torch's oneDNN crashed the process
    (SIGSEGV) on its prepacked-weight path (found by a torch op fuzz run); such convs take the unpacked path.
    In a child process, so a crash fails this test instead of ending the run."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _PADDING_ONLY], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stderr[-2000:])


def test_windows_read_input_rule() -> None:
    """Leading or trailing windows in the padding, and dilated taps straddling a narrow input, are found; a
    window with one tap inside is not flagged."""
    from pycann.kernels.providers.torch_onednn import windows_read_input
    from pycann.ops.nn.spatial import window_of, window_params

    def win(sizes: tuple[int, ...], k: int, s: int, p: int, d: int) -> object:
        attrs = {"kernel_shape": [k, k], "strides": [s, s], "pads": [p] * 4, "dilations": [d, d]}
        return window_of(sizes, window_params(2, (k, k), attrs))

    assert not windows_read_input((6, 1), win((6, 1), 1, 2, 1, 2))  # the crash: column 0 is all padding
    assert not windows_read_input((5, 5), win((5, 5), 3, 1, 3, 1))  # pad 3 > extent - 1 = 2
    assert not windows_read_input((2, 2), win((2, 2), 2, 1, 1, 3))  # the taps at -1 and 2 straddle [0, 1]
    assert windows_read_input((5, 5), win((5, 5), 3, 2, 1, 1))
    assert windows_read_input((1, 1), win((1, 1), 3, 1, 1, 1))

