"""npu kernels of ATen's fused RNN cells.

ATen's LSTM and GRU cells (``nn.LSTM``, ``nn.GRU``, ``nn.LSTMCell``, ``nn.GRUCell``) call
``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell`` for CUDA and PrivateUse1 inputs
(``aten/src/ATen/native/RNN.cpp``), ops that have CUDA kernels only: the CPU fallback found no CPU
kernel ("Could not run 'aten::_thnn_fused_lstm_cell' with arguments from the 'CPU' backend"), so
every LSTM and GRU failed on the npu. These kernels compute them, and the backward ops their
autograd formulas call, with torch's CPU ops on host views, keeping CUDA's workspace layout
(LSTM: the activated gates i, f, g, o; GRU: r, z, n, hx and the hidden n pre-activation).
"""

from __future__ import annotations

from typing import Any

import torch

from pycann.torch._alias import to_cpu, to_npu


def _host(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else to_cpu(x)


def _dev(x: torch.Tensor | None, index: int) -> torch.Tensor | None:
    return None if x is None else to_npu(x.contiguous(), index)


def lstm_cell(op: Any, input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
              input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> Any:
    """``(hy, cy, workspace)``."""
    index = input_gates.get_device()
    gates = to_cpu(input_gates) + to_cpu(hidden_gates)
    for b in (input_bias, hidden_bias):
        if b is not None:
            gates = gates + to_cpu(b)
    i, f, g, o = gates.chunk(4, 1)
    i, f, g, o = i.sigmoid(), f.sigmoid(), g.tanh(), o.sigmoid()
    cy = f * to_cpu(cx) + i * g
    hy = o * cy.tanh()
    return _dev(hy, index), _dev(cy, index), _dev(torch.cat([i, f, g, o], 1), index)


def lstm_cell_backward(op: Any, grad_hy: torch.Tensor | None, grad_cy: torch.Tensor | None, cx: torch.Tensor,
                       cy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> Any:
    """``(grad_gates, grad_cx, grad_bias)`` (grad_bias undefined without biases)."""
    index = workspace.get_device()
    i, f, g, o = to_cpu(workspace).chunk(4, 1)
    tanh_cy = to_cpu(cy).tanh()
    ghy, gcy = _host(grad_hy), _host(grad_cy)
    gc = torch.zeros_like(tanh_cy) if gcy is None else gcy
    go = torch.zeros_like(tanh_cy)
    if ghy is not None:
        gc = gc + ghy * o * (1 - tanh_cy * tanh_cy)
        go = ghy * tanh_cy * o * (1 - o)
    grad_gates = torch.cat([gc * g * i * (1 - i), gc * to_cpu(cx) * f * (1 - f), gc * i * (1 - g * g), go], 1)
    grad_bias = grad_gates.sum(0) if has_bias else None
    return _dev(grad_gates, index), _dev(gc * f, index), _dev(grad_bias, index)


def gru_cell(op: Any, input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
             input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> Any:
    """``(hy, workspace)``."""
    index = input_gates.get_device()
    ig, hg = to_cpu(input_gates), to_cpu(hidden_gates)
    if input_bias is not None:
        ig = ig + to_cpu(input_bias)
    if hidden_bias is not None:
        hg = hg + to_cpu(hidden_bias)
    ir, ii, in_ = ig.chunk(3, 1)
    hr, hi, hn = hg.chunk(3, 1)
    r, z = (ir + hr).sigmoid(), (ii + hi).sigmoid()
    n = (in_ + r * hn).tanh()
    h = to_cpu(hx)
    hy = n + z * (h - n)
    return _dev(hy, index), _dev(torch.cat([r, z, n, h, hn], 1), index)


def gru_cell_backward(op: Any, grad_hy: torch.Tensor, workspace: torch.Tensor, has_bias: bool) -> Any:
    """``(grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)``."""
    index = workspace.get_device()
    r, z, n, h, hn = to_cpu(workspace).chunk(5, 1)
    go = to_cpu(grad_hy)
    g_in = go * (1 - z) * (1 - n * n)
    g_z = go * (h - n) * (1 - z) * z
    g_r = g_in * hn * (1 - r) * r
    grad_input = torch.cat([g_r, g_z, g_in], 1)
    grad_hidden = torch.cat([g_r, g_z, g_in * r], 1)
    bi, bh = (grad_input.sum(0), grad_hidden.sum(0)) if has_bias else (None, None)
    return (_dev(grad_input, index), _dev(grad_hidden, index), _dev(go * z, index), _dev(bi, index),
            _dev(bh, index))


KERNELS = {
    "aten::_thnn_fused_lstm_cell": lstm_cell,
    "aten::_thnn_fused_lstm_cell_backward_impl": lstm_cell_backward,
    "aten::_thnn_fused_gru_cell": gru_cell,
    "aten::_thnn_fused_gru_cell_backward": gru_cell_backward,
}
