"""``torch.accelerator`` for the npu: its memory functions, ``synchronize`` and
``get_device_capability``.

PyTorch's device-generic API reaches the device through C++ (``torch._C._accelerator_*``): the
memory functions ask the device's ``c10::DeviceAllocator`` (pycann allocates through torch's CPU
allocator, so every one of them failed with "INTERNAL ASSERT FAILED ... Allocator for npu is not
a DeviceAllocator"), ``synchronize`` and ``get_device_capability`` the device guard's C++ methods
that the Python guard cannot provide ("Backend doesn't support synchronizing all streams on
device"). ``torch.accelerator``'s Python functions look these up on ``torch._C`` at each call, so
``install()`` wraps them: while the current accelerator is the npu they answer with
``torch.npu``'s functions (the same numbers as ``torch.npu.memory_stats`` & co.), otherwise the
original runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

BACKEND = "npu"

_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
           torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)


def _npu_current() -> bool:
    acc = torch._C._accelerator_getAccelerator()
    return acc is not None and acc.type == BACKEND


def _allocator_initialized() -> bool:
    return True


def _device_stats(index: int) -> dict[str, Any]:
    from pycann.torch import npu

    return npu.memory_stats_as_nested_dict(index)


def _empty_cache() -> None:
    from pycann.torch import npu

    npu.empty_cache()


def _reset_accumulated(index: int) -> None:
    from pycann.torch import npu

    npu.reset_accumulated_memory_stats(index)


def _reset_peak(index: int) -> None:
    from pycann.torch import npu

    npu.reset_peak_memory_stats(index)


def _memory_info(index: int) -> tuple[int, int]:
    from pycann.torch import npu

    return npu.mem_get_info(index)


def _synchronize(index: int) -> None:
    from pycann.torch import npu

    npu.synchronize(index)


def _capability(index: int) -> dict[str, Any]:
    return {"supported_dtypes": set(_DTYPES)}


_IMPLS: dict[str, Callable[..., Any]] = {
    "_accelerator_isAllocatorInitialized": _allocator_initialized,
    "_accelerator_getDeviceStats": _device_stats,
    "_accelerator_emptyCache": _empty_cache,
    "_accelerator_resetAccumulatedStats": _reset_accumulated,
    "_accelerator_resetPeakStats": _reset_peak,
    "_accelerator_getMemoryInfo": _memory_info,
    "_accelerator_synchronizeDevice": _synchronize,
    "_accelerator_getDeviceCapability": _capability,
}


def _wrap(orig: Callable[..., Any], impl: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any) -> Any:
        return impl(*args) if _npu_current() else orig(*args)

    wrapper.__name__ = getattr(orig, "__name__", impl.__name__)
    wrapper.__doc__ = orig.__doc__
    wrapper._pycann_orig = orig  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Wrap the ``torch._C._accelerator_*`` functions above (once; absent ones are skipped)."""
    for name, impl in _IMPLS.items():
        orig = getattr(torch._C, name, None)
        if orig is None or hasattr(orig, "_pycann_orig"):
            continue
        setattr(torch._C, name, _wrap(orig, impl))
