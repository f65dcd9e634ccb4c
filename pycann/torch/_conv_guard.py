"""Host convolutions torch's own float16 kernel would crash on, computed in float32 instead.

Why: an npu convolution pycann's op does not take (float16, bfloat16, another layout) runs ATen's
CPU kernel on the host views (``_dispatch``'s host path). torch 2.13's float16 CPU convolution
kills the process (SIGSEGV in its oneDNN) where an output window reads only padding: a 1x1 kernel
with dilation 2 on a width-1 input, stride 2, pad 1 (found by a torch op fuzz run; a sweep of 288
small 2-D geometries crashed on 3, all of that kind, and 1-D / 3-D convs of the same kind crash
too). torch_npu computes such a conv on the NPU, whose cube unit accumulates float16 products in
float32; here the conv runs on float32 copies and the result is rounded to float16 once, which is
that accumulation. Only the geometries whose windows miss the input take this path
(``torch_onednn.windows_read_input``, the same rule that keeps float32 off torch's prepacked path);
every other float16 conv stays on torch's kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from pycann.kernels.providers.torch_onednn import windows_read_input
from pycann.ops.nn.spatial import window_of, window_params

__all__ = ["convolution_in_float32"]

CONVOLUTION = "aten::convolution"


def _spatial(values: Sequence[Any], n: int) -> list[int]:
    out = [int(v) for v in values]
    return out * n if len(out) == 1 else out


def _misses_input(x: torch.Tensor, w: torch.Tensor, stride: Sequence[Any], padding: Sequence[Any],
                  dilation: Sequence[Any]) -> bool:
    """Whether some output window of this (not transposed) conv reads only padding."""
    n = w.dim() - 2
    if n < 1 or x.dim() != n + 2:
        return False
    pads = _spatial(padding, n)
    attrs = {"strides": _spatial(stride, n), "dilations": _spatial(dilation, n), "pads": pads + pads}
    try:
        win = window_of(tuple(int(d) for d in x.shape[2:]), window_params(n, tuple(int(k) for k in w.shape[2:]), attrs))
    except (ValueError, TypeError):
        return False  # (torch's kernel raises its own error for the geometry)
    if any(o <= 0 for o in win.out):
        return False
    return not windows_read_input(tuple(int(d) for d in x.shape[2:]), win)


def convolution_in_float32(name: str, args: Sequence[Any]) -> torch.Tensor | None:
    """``aten::convolution(input, weight, bias, stride, padding, dilation, transposed,
    output_padding, groups)`` on host tensors computed on float32 copies and rounded back to
    float16, where torch's float16 kernel would crash (module doc); None for every other call
    (the caller runs torch's kernel)."""
    if name != CONVOLUTION or len(args) < 9 or args[6]:
        return None
    x, w, b = args[0], args[1], args[2]
    if not (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor)) or x.dtype != torch.float16 \
            or w.dtype != torch.float16 or (b is not None and (not isinstance(b, torch.Tensor) or b.dtype != torch.float16)):
        return None
    if not _misses_input(x, w, args[3], args[4], args[5]):
        return None
    y = torch.ops.aten.convolution(x.float(), w.float(), None if b is None else b.float(), *args[3:9])
    return y.to(torch.float16)
