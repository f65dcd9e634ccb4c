"""Max-pool backward on the npu for windows that read only padding.

torch's CPU max pool (which the host provider runs) gives a window that covers no input element
(a dilated window under ``ceil_mode``: ``max_pool2d(x[2, 1, 5], (3, 1), (3, 2), (1, 0), (2, 1),
ceil_mode=True)`` reads rows -1, 1 and 3 of a 1-row image) the value -inf and an index one past
the plane's end, and its backward then adds the window's gradient at that index: past the end of
the gradient's memory, which corrupted the heap ("free(): invalid size", the process aborted;
found by the torch op fuzzer). Such a window has no input element to send its gradient to: when an
index lies outside its plane, the backward here scatters only the in-range ones; otherwise torch's
kernel runs as before.
"""

from __future__ import annotations

import math
from typing import Any

import torch

# (autograd calls the ``.grad_input`` overload on the npu: the functional one is structured, an
# empty result and the out= form)
OPS = {"aten::max_pool2d_with_indices_backward": 2, "aten::max_pool3d_with_indices_backward": 3,
       "aten::max_pool2d_with_indices_backward.grad_input": 2, "aten::max_pool3d_with_indices_backward.grad_input": 3}


def run(op: Any, nd: int, cargs: list[Any], ckw: dict[str, Any]) -> Any:
    """``max_pool{nd}d_with_indices_backward(grad_output, self, kernel, stride, padding, dilation,
    ceil_mode, indices[, grad_input=])`` on CPU tensors, safe for out-of-plane indices."""
    grad_out, x = cargs[0], cargs[1]
    indices = cargs[7] if len(cargs) > 7 else ckw.get("indices")
    if not (isinstance(grad_out, torch.Tensor) and isinstance(x, torch.Tensor)
            and isinstance(indices, torch.Tensor)) or x.dim() < nd or indices.shape != grad_out.shape:
        return op._op(*cargs, **ckw)
    plane = math.prod(x.shape[-nd:])
    if indices.numel() == 0 or (int(indices.min()) >= 0 and int(indices.max()) < plane):
        return op._op(*cargs, **ckw)
    planes = math.prod(x.shape[:-nd])
    idx = indices.reshape(planes, -1)
    valid = (idx >= 0) & (idx < plane)
    g = grad_out.reshape(planes, -1)
    grad = torch.zeros(planes, plane, dtype=grad_out.dtype)
    grad.scatter_add_(1, torch.where(valid, idx, 0), torch.where(valid, g, torch.zeros((), dtype=g.dtype)))
    # (torch's kernel gives the gradient the input's memory format)
    fmt = torch.contiguous_format
    if x.dim() in (4, 5) and not x.is_contiguous():
        cl = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        fmt = cl if x.is_contiguous(memory_format=cl) else fmt
    res = grad.reshape(x.shape).contiguous(memory_format=fmt)
    out = ckw.get("grad_input")
    if not isinstance(out, torch.Tensor):
        return res
    if out.shape != res.shape:
        out.resize_(res.shape)  # (an empty out: host memory _dispatch made resizable)
    return out.copy_(res)
