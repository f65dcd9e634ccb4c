"""Arguments that torch's CPU kernels read as if contiguous, made contiguous before the npu runs them.

torch's CPU inference batch-norm backward (``native_batch_norm_backward`` with ``train=False``)
ignores the strides of its per-channel tensors: ``batch_norm(x, base[::2], var, w, b)``'s gradients
read the statistics at the wrong places (CPU torch gave a weight gradient of -1e7 where the
contiguous copy gives 2.17; found by the torch op fuzzer). The npu's host provider ran that kernel
on the tensors' own strides, so it inherited the wrong gradients; the arguments named here are
copied to contiguous ones first (a few channels' values: cheap).
"""

from __future__ import annotations

from typing import Any

import torch

# ATen op -> indices of the arguments to make contiguous
ARGS: dict[str, tuple[int, ...]] = {
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)
    "aten::native_batch_norm_backward": (2, 3, 4, 5, 6),
}


def fix(name: str, cargs: list[Any]) -> None:
    """Replace the non-contiguous tensors among op ``name``'s listed arguments by contiguous copies."""
    for i in ARGS[name]:
        t = cargs[i] if i < len(cargs) else None
        if isinstance(t, torch.Tensor) and not t.is_contiguous():
            cargs[i] = t.contiguous()
