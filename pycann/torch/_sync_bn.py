"""npu kernels of the batch-norm statistics ops ``nn.SyncBatchNorm`` calls.

``torch.nn.SyncBatchNorm`` (``torch/nn/modules/_functions.py``: ``SyncBatchNorm``) computes its
per-rank statistics, combines them across ranks and normalizes with five ops that have CUDA
kernels only: ``batch_norm_stats``, ``batch_norm_gather_stats_with_counts``, ``batch_norm_elemt``,
``batch_norm_backward_reduce`` and ``batch_norm_backward_elemt``. On the npu the CPU fallback found
no CPU kernel ("Could not run 'aten::batch_norm_stats' with arguments from the 'CPU' backend"), so
every ``convert_sync_batchnorm`` model failed in its first forward. These kernels compute them
with torch's CPU ops on host views, with CUDA's formulas (``aten/src/ATen/native/cuda/Normalization.cu``):
statistics in float32 for float16/bfloat16 inputs (float64 stays float64), the running variance
updated with the unbiased variance over every rank's elements.
"""

from __future__ import annotations

from typing import Any

import torch

from pycann.torch._alias import to_cpu, to_npu


def _acc(dtype: torch.dtype) -> torch.dtype:
    """CUDA's accumulation type: float32 for the half types, the dtype itself otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _dev(x: torch.Tensor | None, index: int) -> torch.Tensor | None:
    return None if x is None else to_npu(x.contiguous(), index)


def _channels(x: torch.Tensor) -> tuple[torch.Tensor, list[int], list[int]]:
    """``x`` as a host tensor in its accumulation dtype, the dims to reduce (all but 1) and the
    shape that broadcasts a per-channel vector over it."""
    if x.dim() < 2:
        raise RuntimeError(f"SyncBatchNorm: expected an input with at least 2 dims (N, C, ...), got shape "
                           f"{tuple(x.shape)}")
    h = to_cpu(x).to(_acc(x.dtype))
    return h, [d for d in range(h.dim()) if d != 1], [1, h.shape[1]] + [1] * (h.dim() - 2)


def stats(op: Any, input: torch.Tensor, eps: float) -> Any:
    """``(mean, invstd)`` per channel: the biased variance, as CUDA's Welford kernel."""
    h, dims, _ = _channels(input)
    var, mean = torch.var_mean(h, dim=dims, correction=0)
    index = input.get_device()
    return _dev(mean, index), _dev((var + eps).rsqrt(), index)


def gather_stats_with_counts(op: Any, input: torch.Tensor, mean: torch.Tensor, invstd: torch.Tensor,
                             running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                             momentum: float, eps: float, counts: torch.Tensor) -> Any:
    """The global ``(mean, invstd)`` from every rank's ``mean``/``invstd`` ([world, C]) and element
    count ([world]); updates ``running_mean`` / ``running_var`` in place (unbiased variance)."""
    m, s = to_cpu(mean).to(torch.float64), to_cpu(invstd).to(torch.float64)
    c = to_cpu(counts).to(torch.float64).reshape(-1, 1)
    n = c.sum()
    gmean = (c * m).sum(0) / n
    var_i = 1.0 / (s * s) - eps  # each rank's biased variance
    m2 = (c * (var_i + (m - gmean) ** 2)).sum(0)  # the sum of squared deviations over all ranks
    index = mean.get_device()
    out_mean = gmean.to(mean.dtype)
    out_invstd = (m2 / n + eps).rsqrt().to(invstd.dtype)
    if running_mean is not None:
        rm = to_cpu(running_mean)
        rm.copy_((1 - momentum) * rm.to(torch.float64) + momentum * gmean)
    if running_var is not None:
        rv = to_cpu(running_var)
        unbiased = m2 / (n - 1) if n > 1 else torch.full_like(m2, float("nan"))
        rv.copy_((1 - momentum) * rv.to(torch.float64) + momentum * unbiased)
    return _dev(out_mean, index), _dev(out_invstd, index)


def elemt(op: Any, input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
          mean: torch.Tensor, invstd: torch.Tensor, eps: float) -> Any:
    """``(input - mean) * invstd * weight + bias``, in ``input``'s dtype and memory format."""
    h, _, shape = _channels(input)
    y = (h - to_cpu(mean).to(h.dtype).view(shape)) * to_cpu(invstd).to(h.dtype).view(shape)
    if weight is not None:
        y = y * to_cpu(weight).to(h.dtype).view(shape)
    if bias is not None:
        y = y + to_cpu(bias).to(h.dtype).view(shape)
    out = torch.empty_like(to_cpu(input))  # keeps the input's layout (channels-last stays so)
    out.copy_(y)
    return to_npu(out, input.get_device())


def backward_reduce(op: Any, grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                    invstd: torch.Tensor, weight: torch.Tensor | None, input_g: bool, weight_g: bool,
                    bias_g: bool) -> Any:
    """``(sum_dy, sum_dy_xmu, grad_weight, grad_bias)`` per channel (the last two undefined unless
    asked for; the first two only when ``input_g``, as CUDA)."""
    h, dims, shape = _channels(input)
    dy = to_cpu(grad_out).to(h.dtype)
    xmu = h - to_cpu(mean).to(h.dtype).view(shape)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * xmu).sum(dims)
    index = input.get_device()
    wdtype = weight.dtype if weight is not None else mean.dtype
    gw = (sum_dy_xmu * to_cpu(invstd).to(h.dtype)).to(wdtype) if weight_g else None
    gb = sum_dy.to(wdtype) if bias_g else None
    if not input_g:
        return None, None, _dev(gw, index), _dev(gb, index)
    return (_dev(sum_dy.to(mean.dtype), index), _dev(sum_dy_xmu.to(mean.dtype), index), _dev(gw, index),
            _dev(gb, index))


def backward_elemt(op: Any, grad_out: torch.Tensor, input: torch.Tensor, mean: torch.Tensor,
                   invstd: torch.Tensor, weight: torch.Tensor | None, sum_dy: torch.Tensor,
                   sum_dy_xmu: torch.Tensor, count: torch.Tensor) -> Any:
    """The input gradient from the all-reduced ``sum_dy`` / ``sum_dy_xmu`` and every rank's count."""
    h, _, shape = _channels(input)
    n = float(to_cpu(count).to(torch.float64).sum())
    dy = to_cpu(grad_out).to(h.dtype)
    s = to_cpu(invstd).to(h.dtype).view(shape)
    mean_dy = (to_cpu(sum_dy).to(h.dtype) / n).view(shape)
    mean_dy_xmu = (to_cpu(sum_dy_xmu).to(h.dtype) / n).view(shape)
    xmu = h - to_cpu(mean).to(h.dtype).view(shape)
    g = (dy - mean_dy - xmu * s * s * mean_dy_xmu) * s
    if weight is not None:
        g = g * to_cpu(weight).to(h.dtype).view(shape)
    out = torch.empty_like(to_cpu(input))
    out.copy_(g)
    return to_npu(out, input.get_device())


KERNELS = {
    "aten::batch_norm_stats": stats,
    "aten::batch_norm_gather_stats_with_counts": gather_stats_with_counts,
    "aten::batch_norm_elemt": elemt,
    "aten::batch_norm_backward_reduce": backward_reduce,
    "aten::batch_norm_backward_elemt": backward_elemt,
}
