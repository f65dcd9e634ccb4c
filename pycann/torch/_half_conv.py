"""float16 / bfloat16 convolutions on the npu, computed in float32 and rounded once.

The host provider ran torch's own CPU kernel for a half convolution (``aten::convolution`` and
its backward), and that kernel (oneDNN's half convolutions, AMX / AVX-512 BF16 on this class of
CPU) is wrong for some small geometries and crashes on others, where the float32 kernel is right:

* bfloat16: a grouped 3x3 stride-2 conv on a 7x3 image with pads (2, 0), a 3-D conv with strides
  (3, 1, 3) and dilation 2, a channels-last 2-D conv with stride (1, 3) and dilation (1, 2) gave
  values off by the output's own size, NaN or 1e32 (uninitialised memory);
* float16 and bfloat16: convs whose windows read only padding (a width-1 image, stride 3, pad 2)
  end the process with SIGSEGV.

(found by the torch op fuzzer, tests/fuzz/test_torch_ops_fuzz.py; a sweep of 300 random small
geometries per rank found 5 wrong bfloat16 results and a crash in 40-130 tries for each half
dtype of 2-D and 3-D.) An Ascend NPU's cube unit accumulates half products in float32 and rounds
the result once; so does this: the half arguments are widened, torch's float32 conv runs, and
its results are rounded back to the call's dtype, in their memory format.
"""

from __future__ import annotations

from typing import Any

import torch

HALF = (torch.float16, torch.bfloat16)
OPS = frozenset({"aten::convolution", "aten::_convolution", "aten::convolution_overrideable",
                 "aten::convolution_backward", "aten::convolution_backward_overrideable"})


def half_dtype(args: Any) -> torch.dtype | None:
    """The half dtype of a convolution's tensor arguments (grad_output, input, weight, bias), if any."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.dtype in HALF:
            return a.dtype
    return None


def _widen(a: Any) -> Any:
    return a.float() if isinstance(a, torch.Tensor) and a.dtype in HALF else a


def _narrow(a: Any, dtype: torch.dtype) -> Any:
    if isinstance(a, torch.Tensor):
        return a.to(dtype) if a.dtype == torch.float32 else a
    if isinstance(a, (tuple, list)):
        return type(a)(_narrow(e, dtype) for e in a)
    return a


def run(op: Any, dtype: torch.dtype, cargs: list[Any], ckw: dict[str, Any]) -> Any:
    """``op`` (a convolution overload) on CPU tensors ``cargs`` in float32, its results in ``dtype``.
    The tensors must share one dtype, as ATen's conv requires: a mixed call keeps ATen's error
    (widening only the half ones would make it agree)."""
    dts = {a.dtype for a in cargs if isinstance(a, torch.Tensor)}
    if dts != {dtype}:
        return op._op(*cargs, **ckw)
    return _narrow(op._op(*[_widen(a) for a in cargs], **{k: _widen(v) for k, v in ckw.items()}), dtype)
