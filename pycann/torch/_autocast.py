"""``torch.autocast("npu")``: PyTorch's autocast key for PrivateUse1, filled in from Python.

PyTorch registers autocast kernels for CPU/CUDA/XPU/MPS in C++; for PrivateUse1 the backend must
(torch_npu does in C++). Here: a fallthrough for every op (run in the input dtypes) and, for the
ops of torch's CUDA "lower precision" list that matter (matmuls, linear, convolutions), a kernel
that casts floating npu tensors to the autocast dtype and redispatches below the autocast key.
"""

from __future__ import annotations

from typing import Any

import torch

LOWER_PRECISION_OPS = ("mm", "bmm", "matmul", "addmm", "addbmm", "baddbmm", "linear", "conv1d", "conv2d",
                       "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
                       "_convolution", "convolution")
_KEY = torch._C.DispatchKey.AutocastPrivateUse1  # type: ignore[attr-defined]
_libraries: list[torch.library.Library] = []


def _cast(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "npu" and x.dtype != dtype:
        return x.to(dtype)
    return x


def _kernel(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        dtype = torch.get_autocast_dtype("npu")
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
            args = tuple(_cast(a, dtype) for a in args)
            kwargs = {k: _cast(v, dtype) for k, v in kwargs.items()}
            return op(*args, **kwargs)

    return kernel


def install() -> None:
    """Register the fallthrough and the lower-precision kernels (once)."""
    if _libraries:
        return
    lib = torch.library.Library("_", "IMPL")  # noqa: TOR901 - autocast fallback, not an op library
    lib.fallback(torch.library.fallthrough_kernel, dispatch_key="AutocastPrivateUse1")
    aten = torch.library.Library("aten", "IMPL")  # noqa: TOR901
    for name in LOWER_PRECISION_OPS:
        packet = getattr(torch.ops.aten, name)
        for overload in packet.overloads():
            op = getattr(packet, overload)
            qual = name if overload == "default" else f"{name}.{overload}"
            aten.impl(qual, _kernel(op), "AutocastPrivateUse1")
    _libraries.extend([lib, aten])
