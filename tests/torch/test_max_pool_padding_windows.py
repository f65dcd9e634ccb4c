"""Max pooling on the npu with a window that reads only padding (a dilated window under ceil_mode):
torch's CPU forward gives it -inf and an index past its plane, and torch's CPU backward, which the
npu ran, wrote that window's gradient past the plane (into the next plane, or past the gradient's
memory: the heap was corrupted and the process aborted; found by the torch op fuzzer). The golden
is torch's CPU pool over an input padded with -inf explicitly (no padding argument), whose windows
all read elements, sliced to the output ``ceil_mode`` gives. In a child process: a regression would
abort it."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = r"""
import torch, torch.nn.functional as F
import pycann.torch  # noqa: F401

def golden(x, k, s, p, d, n):
    # -inf padding, generous on the right for ceil_mode's last window; then the output ceil_mode gives
    pads = [q for i in reversed(range(n)) for q in (p[i], p[i] + s[i] * k[i] * d[i])]
    xp = F.pad(x, pads, value=float("-inf"))
    y = (F.max_pool2d if n == 2 else F.max_pool3d)(xp, k, s, 0, d)
    want = (F.max_pool2d if n == 2 else F.max_pool3d)(x.detach(), k, s, p, d, ceil_mode=True)
    return y[(...,) + tuple(slice(0, m) for m in want.shape[-n:])]

torch.manual_seed(0)
for dt in (torch.float32, torch.float16, torch.bfloat16):
    for shape, k, s, p, d in (((2, 1, 5), (3, 1), (3, 2), (1, 0), (2, 1)),
                              ((2, 3, 1, 6), (3, 2), (3, 2), (1, 1), (2, 1)),
                              ((1, 2, 1, 1, 4), (3, 1, 2), (3, 1, 2), (1, 0, 1), (2, 1, 1))):
        n = len(k)
        x = torch.randn(shape).to(dt)
        if len(shape) == 4 and dt == torch.float32:
            x = x.contiguous(memory_format=torch.channels_last)  # (the gradient keeps the input's format)
        xc = x.float().clone().requires_grad_()
        want = golden(xc, k, s, p, d, n)
        gout = torch.randn(want.shape)
        want.backward(gout)
        xn = x.npu().requires_grad_()
        got = (F.max_pool2d if n == 2 else F.max_pool3d)(xn, k, s, p, d, ceil_mode=True)
        got.backward(gout.to(dt).npu())
        torch.testing.assert_close(got.float().cpu(), want.detach().to(dt).float())
        torch.testing.assert_close(xn.grad.float().cpu(), xc.grad.to(dt).float())
print("ok")
"""


def test_max_pool_windows_reading_only_padding_backward() -> None:
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.returncode, r.stdout[-500:], r.stderr[-2000:])
